"""graphcycles.py — the strongly connected components of a directed graph (Tarjan), shared
by scripts/module-graph.py (C modules) and scripts/pyimports.py (Python modules): a
component of more than one node holds every cycle through its nodes."""

from __future__ import annotations

import sys
from typing import Iterable, Mapping


def components(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The components of more than one node, each sorted, the list sorted. Nodes are the
    keys of edges; an edge to a node that is no key is ignored."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)
