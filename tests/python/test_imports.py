"""The tide package's import graph (scripts/pyimports.py): no circle among python/tide's
modules, and no private name of one module imported by another (issue 32). The checker itself
is tested on small packages written here, so a checker that finds nothing fails too."""

import os
import subprocess
import sys
import textwrap

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "pyimports.py")


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=60)


def _package(tmp_path, files):
    root = tmp_path / "pkg"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return str(root)


def test_tide_has_no_import_circle_and_imports_no_private_name():
    r = _run(os.path.join(ROOT, "python", "tide"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert " 0 circles, 0 private names imported" in r.stdout


def test_the_graph_sees_the_subpackages():
    r = _run("--graph", os.path.join(ROOT, "python", "tide"))
    edges = set(r.stdout.splitlines())
    assert "tide.vllm.connector -> tide.vllm.arguments" in edges
    assert "tide.mooncake.client -> tide.mooncake.tensor" in edges
    assert "tide.errors -> tide._lib" in edges


def test_a_circle_is_found_even_through_a_late_or_type_checking_import(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from . import b\n",
        "b.py": "def f():\n    from . import a  # late\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import D\n",
        "d.py": "from .c import C\n",
        "e.py": "import pkg.a\n",
    })
    r = _run(root)
    assert r.returncode == 1
    assert "circle: pkg.a <-> pkg.b" in r.stdout
    assert "circle: pkg.c <-> pkg.d" in r.stdout
    assert " 2 circles," in r.stdout


def test_a_private_name_across_modules_is_found(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "_impl.py": "def helper():\n    pass\n\ndef _secret():\n    pass\n",
        "sub/__init__.py": "",
        "sub/m.py": textwrap.dedent("""\
            from .. import _impl              # a private module: allowed
            from .._impl import helper as _h  # a public name, private alias: allowed
            from .._impl import _secret       # found
            _impl._secret()                   # found
            _impl.helper()
        """),
    })
    r = _run(root)
    assert r.returncode == 1
    found = [line for line in r.stdout.splitlines() if line.startswith("private: ")]
    assert len(found) == 2, r.stdout
    assert "pkg.sub.m imports private name '_secret' from pkg._impl" in found[0]
    assert "pkg.sub.m uses private name '_secret' of pkg._impl" in found[1]


def test_a_private_attribute_of_another_modules_class_is_found(tmp_path):
    """``obj._enter()`` on an object of another module's class is found; a module's own
    private names, ctypes' sunder names and other libraries' private names are not."""
    root = _package(tmp_path, {
        "__init__.py": "",
        "store.py": textwrap.dedent("""\
            import ctypes
            class Store:
                def _enter(self):
                    self._active = 1
                def _leave(self):
                    pass
            class Info(ctypes.Structure):
                _fields_ = [("n", ctypes.c_int)]
        """),
        "user.py": textwrap.dedent("""\
            import sys
            from .store import Info
            class Conn:
                def __init__(self, store):
                    self._store = store
                def create(self):
                    h = self._store._enter()      # found: Store's private method
                    n = self._store._active       # found: Store's private attribute
                    self._store.close()
                    f = sys._getframe()           # another library's: not found
                    return Info._fields_, h, n, f  # a ctypes protocol name: not found
        """),
    })
    r = _run(root)
    assert r.returncode == 1
    found = [line for line in r.stdout.splitlines() if line.startswith("private: ")]
    assert len(found) == 2, r.stdout
    assert any("pkg.user uses private attribute '_enter' defined in pkg.store" in f
               for f in found), r.stdout
    assert any("pkg.user uses private attribute '_active' defined in pkg.store" in f
               for f in found), r.stdout


def test_a_clean_package_passes_and_a_wrong_directory_is_refused(tmp_path):
    root = _package(tmp_path, {"__init__.py": "from . import a\n", "a.py": "import os\n"})
    r = _run(root)
    assert r.returncode == 0 and " 0 circles, 0 private" in r.stdout, r.stdout
    r = _run(str(tmp_path / "nowhere"))
    assert r.returncode == 2 and "not a package directory" in r.stderr
