#!/usr/bin/env python3
"""pyimports.py — the import graph of a Python package, its circles, and private names
imported across its modules (issue 32: no import circles, no private names across modules).

    scripts/pyimports.py [DIR]          DIR: a package directory (default python/tide)
    scripts/pyimports.py --graph [DIR]  also print every edge, "a -> b"

Every import counts, wherever it is written: at the top, inside a function (a late import
that hides a circle from the interpreter is still a circle), or under ``if TYPE_CHECKING:``.
``from P import n`` is an edge to the module P.n when it is one, else to P. A package's
``__init__`` imports its own submodules; that it is imported first by every submodule is
Python's order, not a dependency, and is no edge.

Private: a name that starts with one underscore and is not a module. ``from m import _x``
or ``m._x`` in a module other than m is a finding; a private *module* (``_lib``) is the
package's own business and may be imported by its siblings. A module re-binding a public
name under a private alias (``from m import x as _x``) imports nothing private.

Private attributes too: ``obj._x`` (a call ``obj._enter()`` or a read) in a module that
does not define ``_x`` itself, where another module of the package does (a ``def _x``, a
``class _x``, or an assignment to ``_x`` or to ``something._x``), is a finding: it reaches
into an object of another module's class. A module that defines a private name of its own
is taken to mean its own, so the check cannot see a use of another class's ``_x`` where the
module also has an ``_x``; it needs no type inference and has no false findings from
names of other libraries (``sys._getframe``), which the package does not define.

Prints one line per circle and per private import; exits 1 when there is any, 0 when none.
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass, field

from graphcycles import components


@dataclass
class Graph:
    """Modules by dotted name, their edges, and the private names they import."""

    modules: dict[str, str] = field(default_factory=dict)  # name -> file path
    edges: dict[str, set[str]] = field(default_factory=dict)
    private: list[str] = field(default_factory=list)  # "file:line: text" findings
    defines: dict[str, set[str]] = field(default_factory=dict)  # module -> private names


def _defined_private_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, and assignment targets
    (plain names and attributes, ``self._x = ...``)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            out.add(node.id if isinstance(node, ast.Name) else node.attr)
    return {n for n in out if _is_private(n)}


def _module_names(root: str) -> dict[str, str]:
    """Every module under the package directory `root`, by dotted name."""
    base = os.path.dirname(os.path.abspath(root))
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if os.path.exists(os.path.join(dirpath, d, "__init__.py")))
        for f in sorted(filenames):
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), base)[:-3]
            parts = rel.split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = os.path.join(dirpath, f)
    return out


def _is_private(name: str) -> bool:
    """One leading underscore; not a dunder, nor a "sunder" protocol name that ends in one
    underscore too (ctypes' ``_fields_``, enum's ``_missing_``): those are public API."""
    return name.startswith("_") and not name.startswith("__") and not name.endswith("_")


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of a relative import written in `module`."""
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([target] if target else []))


def build(root: str) -> Graph:
    """The graph of the package in directory `root`."""
    g = Graph(modules=_module_names(root))
    trees: dict[str, ast.AST] = {}
    for name, path in g.modules.items():
        with open(path, encoding="utf-8") as f:
            trees[name] = ast.parse(f.read(), path)
        g.defines[name] = _defined_private_names(trees[name])
    for name, path in g.modules.items():
        g.edges[name] = set()
        tree = trees[name]
        is_package = path.endswith("__init__.py")
        aliases: dict[str, str] = {}  # local name -> package module it is bound to

        def edge(target: str, line: int, imported: str | None = None) -> None:
            if target in g.modules and target != name:
                # A submodule's import of its own package (``from . import x`` where x
                # is no module) is Python's order, not a dependency.
                if not name.startswith(target + "."):
                    g.edges[name].add(target)
                if imported is not None and _is_private(imported):
                    g.private.append(f"{path}:{line}: {name} imports private name "
                                     f"{imported!r} from {target}")

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    edge(a.name, node.lineno)
                    if a.name in g.modules:
                        aliases[a.asname or a.name] = a.name
            elif isinstance(node, ast.ImportFrom):
                src = _resolve(name, is_package, node.level, node.module)
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    if sub in g.modules:
                        edge(sub, node.lineno)
                        aliases[a.asname or a.name] = sub
                    else:
                        edge(src, node.lineno, a.name)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in aliases:
                target = aliases[node.value.id]
                if f"{target}.{node.attr}" not in g.modules and target != name:
                    g.private.append(f"{path}:{node.lineno}: {name} uses private name "
                                     f"{node.attr!r} of {target}")
                continue
            if node.attr in g.defines[name]:
                continue
            owners = sorted(m for m, names in g.defines.items() if node.attr in names)
            if owners:
                g.private.append(f"{path}:{node.lineno}: {name} uses private attribute "
                                 f"{node.attr!r} defined in {', '.join(owners)}")
    return g


def circles(g: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted, the list
    sorted: every circle of imports lies inside one of them."""
    return components(g.edges)


def main(argv: list[str]) -> int:
    show = "--graph" in argv
    args = [a for a in argv if a != "--graph"]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "python", "tide")
    if not os.path.exists(os.path.join(root, "__init__.py")):
        print(f"pyimports: {root} is not a package directory (no __init__.py)", file=sys.stderr)
        return 2
    g = build(root)
    if show:
        for a in sorted(g.edges):
            for b in sorted(g.edges[a]):
                print(f"{a} -> {b}")
    found = circles(g)
    for c in found:
        print("circle: " + " <-> ".join(c))
    for p in g.private:
        print("private: " + p)
    n = len(g.modules)
    print(f"pyimports: {n} modules, {sum(map(len, g.edges.values()))} imports, "
          f"{len(found)} circles, {len(g.private)} private names imported")
    return 1 if found or g.private else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
