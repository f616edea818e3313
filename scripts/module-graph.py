#!/usr/bin/env python3
"""module-graph.py — the module graph of src/, and a check that it has no circle.

A module is a .c file of src/ named by its path without the ending ("store/tier").
Module A depends on module B when A's .c names a function or a variable that B's .c
defines and exports (not static). Arrows come from what a file uses, not from the headers
it includes: a module's internal header is often shared by a family of files (every
connector file includes connector/connector.h, every cluster file client/cluster.h), so
include lines would both hide circles (the connector's, all through one header) and show
false ones (a file that takes only a type from a header named after another file).
--edges lists, beside each arrow, the first name that makes it.

The script reads the sources only (no build needed), prints each cycle it finds and exits
1 when there is one, leaving out only the arrows named in KNOWN below. Usage:

    scripts/module-graph.py [--src DIR] [--edges] [--dot]
"""

import argparse
import os
import re
import sys

from graphcycles import components

# Arrows of a cycle that is being removed, each named (no blanket allowance): the graph is
# checked without them. An arrow listed here that no longer exists fails the check too
# ("stale"), so the list shrinks as the fixes land. Empty: src/ has no circle.
KNOWN: set[tuple[str, str]] = set()

# A function definition in this tree's style: the return type at column 0, the name, the
# parameters, and the opening brace at the end of the (possibly continued) declaration.
FUNC_DEF = re.compile(
    r"^(?!static\b)(?!typedef\b)(?:TIDE_API\s+)?[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)"
    r"\s*\(([^;{}]*?)\)"
    r"\s*(?:__attribute__\s*\(\(.*?\)\)\s*)?\{",
    re.M | re.S,
)
# An exported variable: a definition at column 0 with an initializer or a plain ';' (not a
# forward declaration of a struct, union or enum).
VAR_DEF = re.compile(
    r"^(?!static\b)(?!extern\b)(?!typedef\b)(?!return\b)(?!(?:struct|union|enum)\s+\w+\s*;)"
    r"[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)"
    r"\s*(?:\[[^\]]*\]\s*)*(?:=|;)",
    re.M,
)
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "else", "do"}


def strip_c(text: str) -> str:
    """The text with comments, string and character literals blanked out."""
    out = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out = re.sub(r"//[^\n]*", "", out)
    out = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', out)
    return re.sub(r"'(?:\\.|[^'\\\n])*'", "''", out)


def load(src: str) -> dict:
    """{module: {"c": text}} for every .c file under src, without comments and literals."""
    mods: dict = {}
    for root, _dirs, files in os.walk(src):
        for f in sorted(files):
            stem, ext = os.path.splitext(f)
            if ext != ".c":
                continue
            path = os.path.join(root, f)
            name = os.path.relpath(os.path.join(root, stem), src).replace(os.sep, "/")
            with open(path, encoding="utf-8", errors="replace") as fh:
                mods[name] = {"c": strip_c(fh.read())}
    return mods


def graph(src: str) -> dict:
    """{module: {module it depends on: the first name it uses of it}}."""
    files = load(src)
    mods = set(files)
    defined: dict = {}  # exported name -> (module, how it is used)
    statics: dict = {}  # module -> its static names
    for m in sorted(mods):
        text = files[m]["c"]
        for fm in FUNC_DEF.finditer(text):
            if fm.group(1) not in KEYWORDS:
                defined.setdefault(fm.group(1), (m, "calls {}()"))
        for fm in VAR_DEF.finditer(text):
            defined.setdefault(fm.group(1), (m, "uses {}"))
        statics[m] = set(re.findall(r"^static\b[^;{=]*?\b([A-Za-z_]\w*)\s*\(", text, re.M))
    edges: dict = {m: {} for m in mods}
    for m in mods:
        for ident in sorted(set(IDENT.findall(files[m]["c"]))):
            owner, why = defined.get(ident, (None, ""))
            if owner and owner != m and ident not in statics[m]:
                edges[m].setdefault(owner, why.format(ident))
    return edges


def path(edges: dict, a: str, b: str, within: frozenset) -> list:
    """A shortest path a -> ... -> b inside within (breadth first)."""
    prev = {a: None}
    queue = [a]
    while queue:
        v = queue.pop(0)
        if v == b and len(prev) > 1:
            break
        for w in sorted(edges[v]):
            if w in within and w not in prev:
                prev[w] = v
                queue.append(w)
    out, v = [], b
    while v is not None:
        out.append(v)
        v = prev.get(v)
    return out[::-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--src", default=os.path.join(here, "..", "src"))
    ap.add_argument("--edges", action="store_true", help="print every arrow and why")
    ap.add_argument("--dot", action="store_true", help="print the graph for graphviz")
    args = ap.parse_args()
    if not os.path.isdir(args.src):
        print(f"module-graph: no directory {args.src}", file=sys.stderr)
        return 2
    edges = graph(args.src)
    if args.dot:
        print("digraph src {")
        for m in sorted(edges):
            for t in sorted(edges[m]):
                print(f'  "{m}" -> "{t}";')
        print("}")
        return 0
    if args.edges:
        for m in sorted(edges):
            for t in sorted(edges[m]):
                print(f"{m} -> {t}  ({edges[m][t]})")
    bad = 0
    for a, b in sorted(KNOWN):
        if a not in edges or b not in edges:
            continue  # another tree (--src) without these modules
        if b in edges[a]:
            print(f"known: {a} -> {b} ({edges[a][b]}), being removed elsewhere")
        else:
            print(f"stale: the known arrow {a} -> {b} is gone: remove it from KNOWN")
            bad += 1
    checked = {a: {b: w for b, w in t.items() if (a, b) not in KNOWN} for a, t in edges.items()}
    for comp in map(frozenset, components(checked)):
        bad += 1
        print(f"CYCLE: {', '.join(sorted(comp))}")
        head = min(comp)
        for w in sorted(comp - {head}):
            hops = path(checked, head, w, comp) + path(checked, w, head, comp)[1:]
            why = [f"{x} -> {y} ({checked[x][y]})" for x, y in zip(hops, hops[1:])]
            print("    " + "; ".join(why))
    if not bad:
        print(f"module-graph: {len(edges)} modules, no cycle outside the known list")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
