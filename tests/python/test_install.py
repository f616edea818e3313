"""The Python package as pip installs it: its version against include/tide.h, its
pyproject.toml, py.typed, no ``import *``, and (under TIDE_TEST_INSTALLED=1, which
scripts/test-install.sh sets) that the package and libtide under test are the installed
ones, not this tree's."""

import ast
import importlib.metadata
import os
import re
import tomllib

import pytest

import tide
from tide import _lib, _version

from conftest import HEADER, INSTALLED, PKG_DIR, ROOT


def header_version():
    with open(HEADER) as f:
        text = f.read()
    parts = {
        k: int(re.search(rf"#define TIDE_VERSION_{k} (\d+)", text).group(1))
        for k in ("MAJOR", "MINOR", "PATCH")
    }
    return parts["MAJOR"], parts["MINOR"], parts["PATCH"]


def test_package_version_is_the_headers():
    major, minor, patch = header_version()
    assert (_version.MAJOR, _version.MINOR, _version.PATCH) == (major, minor, patch), (
        "python/tide/_version.py disagrees with TIDE_VERSION_* in include/tide.h"
    )
    assert _version.VERSION == f"{major}.{minor}.{patch}"
    assert _lib.SONAME == f"libtide.so.{major}"


def test_dunder_version_is_the_loaded_librarys():
    assert tide.__version__ == tide.version() == _version.VERSION
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        tide.no_such_name  # noqa: B018


def test_no_import_star_in_the_package():
    offenders = []
    for dirpath, dirnames, filenames in os.walk(PKG_DIR):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                    offenders.append(f"{os.path.relpath(path, PKG_DIR)}:{node.lineno}")
    assert not offenders, f"import * in {offenders}"


def test_errors_all_lists_every_public_name():
    errors = tide.errors
    public = {
        name
        for name, v in vars(errors).items()
        if (name.isupper() and isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, type) and issubclass(v, errors.Error))
    } | {"CODES", "error_class", "make_error", "errname", "strerror"}
    assert set(errors.__all__) == public
    for name in errors.__all__:
        assert getattr(tide, name) is getattr(errors, name), name
    assert set(tide.__all__) >= public


def test_py_typed_ships_with_the_package():
    assert os.path.isfile(os.path.join(PKG_DIR, "py.typed"))


def test_pyproject_lists_every_package_and_py_typed():
    with open(os.path.join(ROOT, "python", "pyproject.toml"), "rb") as f:
        cfg = tomllib.load(f)
    tool = cfg["tool"]["setuptools"]
    tree = os.path.join(ROOT, "python", "tide")
    want = sorted(
        os.path.relpath(d, os.path.dirname(tree)).replace(os.sep, ".")
        for d, _, files in os.walk(tree)
        if "__init__.py" in files
    )
    assert sorted(tool["packages"]) == want, "a package under python/tide pip would leave out"
    assert "py.typed" in tool["package-data"]["tide"]
    assert tool["dynamic"]["version"] == {"attr": "tide._version.VERSION"}
    assert cfg["project"]["dynamic"] == ["version"]


@pytest.mark.skipif(not INSTALLED, reason="runs under scripts/test-install.sh only")
def test_installed_package_and_library_are_not_the_trees():
    assert not PKG_DIR.startswith(os.path.join(ROOT, "python") + os.sep)
    assert importlib.metadata.version("tide") == _version.VERSION
    assert "TIDE_LIB" not in os.environ, "the installed package must find libtide itself"
    L = _lib.lib()
    assert not L.file.startswith(os.path.join(ROOT, "build") + os.sep), L.file
    assert os.path.basename(L.file) == f"libtide.so.{_version.VERSION}", L.file
    want_dir = os.environ.get("TIDE_TEST_LIBDIR")
    if want_dir:
        assert os.path.dirname(L.file) == os.path.realpath(want_dir), L.file
