"""The binding against include/tide.h: every TIDE_API function declared with matching
types, every error code mirrored and mapped to its own exception class, and the library
search reporting every place it tried."""

import ctypes
import os
import re
import shutil
import subprocess
import sys

import pytest

import tide
from tide import _lib

from conftest import HEADER, PKG_DIR, ROOT

PKG_PARENT = os.path.dirname(PKG_DIR)  # on PYTHONPATH, it imports the same tide
_NO_CACHE = shutil.ignore_patterns("__pycache__")


def header_text():
    with open(HEADER) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # comments
    return re.sub(r"//[^\n]*", " ", text)


def api_declarations():
    """{name: (return type text, [parameter type texts])} for every TIDE_API function."""
    decls = {}
    for m in re.finditer(r"TIDE_API\s+([^;{]*?)\b(tide_\w+)\s*\(([^)]*)\)\s*;", header_text()):
        ret, name, params = m.group(1).strip(), m.group(2), m.group(3).strip()
        plist = [] if params in ("", "void") else [" ".join(p.split()) for p in params.split(",")]
        decls[name] = (ret, plist)
    return decls


def test_header_parses_to_a_plausible_api():
    decls = api_declarations()
    # Guards the regex: if it silently matched nothing the tests below would pass vacuously.
    assert len(decls) >= 20
    assert decls["tide_get"] == (
        "int",
        [
            "tide_store *s",
            "const void *key",
            "size_t klen",
            "void *buf",
            "size_t cap",
            "size_t *vlen",
        ],
    )
    assert decls["tide_version"] == ("const char *", [])


def test_every_api_function_is_declared_in_the_binding():
    missing = sorted(set(api_declarations()) - set(_lib.SIGNATURES))
    assert not missing, f"TIDE_API functions without a ctypes declaration in _lib.py: {missing}"
    extra = sorted(set(_lib.SIGNATURES) - set(api_declarations()))
    assert not extra, f"_lib.py declares functions include/tide.h does not have: {extra}"


_POINTER_TYPES = (ctypes.c_void_p, ctypes.c_char_p)


def _is_pointer(t):
    return t in _POINTER_TYPES or (isinstance(t, type) and issubclass(t, ctypes._Pointer))


def _expect(ctext):
    """What a C type text requires of its ctypes counterpart: a predicate and a label."""
    ctext = re.sub(r"\b(const|struct)\b", "", ctext).strip()
    if "*" in ctext or "[" in ctext:
        if re.fullmatch(r"char\s*\*", ctext):
            return (lambda t: t is ctypes.c_char_p), "c_char_p"
        return _is_pointer, "a pointer"
    base = ctext.split()[0]
    simple = {
        "int": ctypes.c_int,
        "size_t": ctypes.c_size_t,
        "uint64_t": ctypes.c_uint64,
        "int64_t": ctypes.c_int64,
        "uint32_t": ctypes.c_uint32,
        "uint8_t": ctypes.c_uint8,
        "tide_hash_algo": ctypes.c_int,  # an enum: int-sized
    }
    if base == "void":
        return (lambda t: t is None), "None"
    if base not in simple:
        raise AssertionError(f"the test does not know C type {ctext!r}: teach it")
    want = simple[base]
    return (lambda t: t is want), want.__name__


def _param_type(param):
    """'const uint8_t h[TIDE_HASH_BYTES]' -> 'const uint8_t *'; 'size_t n' -> 'size_t'."""
    param = re.sub(r"\[[^\]]*\]", "*", param)
    return re.sub(r"\s*\b\w+\s*(\*?)$", lambda m: m.group(1) and " *", param).strip() or param


@pytest.mark.parametrize("name", sorted(api_declarations()))
def test_declared_types_match_the_header(name):
    ret, params = api_declarations()[name]
    restype, argtypes = _lib.SIGNATURES[name]
    ok, label = _expect(ret)
    assert ok(restype), f"{name}: returns {ret!r}, binding says {restype} (want {label})"
    assert len(argtypes) == len(params), f"{name}: {len(params)} parameters, binding has {len(argtypes)}"
    for i, (p, t) in enumerate(zip(params, argtypes)):
        ok, label = _expect(_param_type(p))
        assert ok(t), f"{name} parameter {i} ({p!r}): binding has {t}, want {label}"


def test_param_type_helper():
    assert _param_type("const uint8_t h[TIDE_HASH_BYTES]") == "const uint8_t *"
    assert _param_type("size_t n") == "size_t"
    assert _param_type("tide_store **out") == "tide_store **"
    assert _param_type("const void *key") == "const void *"


def test_every_api_function_is_exported_by_the_library():
    L = _lib.lib()
    assert not L.missing, f"{L.path} lacks {L.missing} (declared in include/tide.h)"
    for name in api_declarations():
        assert getattr(L.cdll, name), name


def header_codes():
    return {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"#define\s+(TIDE_\w+)\s+\(?(-?\d+)\)?", header_text())
    }


def error_map():
    """TIDE_ERRNO_MAP of include/tide.h, the one list of tide's codes: [(name, value, text)]
    in its order."""
    lines = header_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#define TIDE_ERRNO_MAP(XX)"))
    body = []
    for line in lines[start + 1 :]:
        body.append(line)
        if not line.rstrip().endswith("\\"):
            break
    rows = re.findall(r'XX\((\w+), (-\d+), "((?:[^"\\]|\\.)*)"\)', "\n".join(body))
    return [(name, int(value), text) for name, value, text in rows]


def test_error_codes_match_the_header():
    rows = error_map()
    assert rows and rows[0][:2] == ("ENOTFOUND", -1001) and len(rows) > 20
    listed = {"TIDE_" + name: value for name, value, _ in rows}
    listed["TIDE_OK"] = 0
    # python/tide/errors.py mirrors the list: the same names with the same values, no
    # more and no fewer, and the same bounds.
    for cname, value in listed.items():
        assert getattr(tide.errors, cname[len("TIDE_") :], None) == value, cname
    assert tide.CODES == listed
    mirrored = {k for k in vars(tide.errors) if re.fullmatch(r"E[A-Z]+", k)}
    assert mirrored - {"ERRBASE", "ERRLAST"} == {name for name, _, _ in rows}
    assert tide.errors.ERRLAST == rows[-1][1]
    assert tide.errors.ERRBASE == header_codes()["TIDE_ERRBASE"]
    assert tide.KEY_MAX == header_codes()["TIDE_KEY_MAX"]
    assert tide.BATCH_MAX == header_codes()["TIDE_BATCH_MAX"]
    assert tide.HASH_BYTES == header_codes()["TIDE_HASH_BYTES"]


def test_libtide_names_and_texts_come_from_the_list():
    for name, value, text in error_map():
        assert tide.errors.errname(value) == "TIDE_" + name
        assert tide.strerror(value) == text


def test_every_code_has_its_own_class_and_libtide_name():
    for name, code in tide.CODES.items():
        if code == tide.OK:
            continue
        cls = tide.error_class(code)
        assert cls is not tide.Error, f"{name} maps to the bare tide.Error"
        e = tide.errors.make_error(code)
        assert isinstance(e, tide.Error) and e.code == code
        assert e.name == name  # tide_errname agrees with the header's spelling
        assert e.message == tide.strerror(code) and e.message != "unknown error"


def test_errno_codes_are_named_and_classified():
    import errno

    e = tide.errors.make_error(-errno.ENOMEM, "x")
    assert isinstance(e, tide.OutOfMemory) and isinstance(e, MemoryError) and e.name == "ENOMEM"
    e = tide.errors.make_error(-errno.ECONNREFUSED, "connect to 127.0.0.1:1")
    assert isinstance(e, tide.TransportError) and isinstance(e, ConnectionError)
    assert str(e) == "connect to 127.0.0.1:1 [ECONNREFUSED]"
    assert type(tide.errors.make_error(-errno.EINVAL)) is tide.InvalidArgument


def test_version_matches_the_header():
    h = header_codes()
    want = f"{h['TIDE_VERSION_MAJOR']}.{h['TIDE_VERSION_MINOR']}.{h['TIDE_VERSION_PATCH']}"
    assert tide.version() == want


def _run(code, env):
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def test_explicit_tide_lib_that_does_not_exist_is_not_silently_replaced(tmp_path):
    env = dict(os.environ, TIDE_LIB=str(tmp_path / "nope" / "libtide.so"))
    env["PYTHONPATH"] = PKG_PARENT
    r = _run("import tide\ntry:\n tide.Store()\nexcept tide.LibraryNotFound as e: print(e)", env)
    assert r.returncode == 0, r.stderr
    assert "$TIDE_LIB" in r.stdout and str(tmp_path / "nope" / "libtide.so") in r.stdout
    assert "no such file" in r.stdout and "source tree" not in r.stdout


def test_a_file_that_is_not_a_library_reports_dlopen_error(tmp_path):
    bad = tmp_path / "libtide.so"
    bad.write_text("not an ELF file\n" * 256)
    env = dict(os.environ, TIDE_LIB=str(bad), PYTHONPATH=PKG_PARENT)
    r = _run("import tide\ntry:\n tide.version()\nexcept tide.LibraryNotFound as e: print(e)", env)
    assert r.returncode == 0, r.stderr
    assert str(bad) in r.stdout and "invalid ELF header" in r.stdout


def test_without_tide_lib_every_place_tried_is_named(tmp_path):
    # A copy of the package outside any source tree, so build/libtide.so is not beside it.
    shutil.copytree(PKG_DIR, tmp_path / "python" / "tide", ignore=_NO_CACHE)
    env = {k: v for k, v in os.environ.items() if k != "TIDE_LIB"}
    env["PYTHONPATH"] = str(tmp_path / "python")
    code = (
        "import ctypes.util, tide\n"
        "try:\n"
        "    tide.version(); print('LOADED', tide._lib.lib().path)\n"
        "except tide.LibraryNotFound as e:\n"
        "    print(e)\n"
    )
    r = _run(code, env)
    assert r.returncode == 0, r.stderr
    if r.stdout.startswith("LOADED"):  # an installed libtide exists on this machine
        assert "tide" in r.stdout
        return
    # Outside a source tree (as pip installs it) there is no build/libtide.so to try.
    assert "source tree" not in r.stdout and "build/libtide.so:" not in r.stdout
    assert f"the dynamic loader: {_lib.SONAME}:" in r.stdout
    assert "find_library('tide'): nothing found" in r.stdout
    assert f"standard path: /usr/local/lib/{_lib.SONAME}: no such file" in r.stdout
    assert "TIDE_LIB" in r.stdout and "make install" in r.stdout  # says how to fix it


def test_a_package_in_a_source_tree_tries_its_build_first(tmp_path):
    # A stand-in source tree: include/tide.h marks it, build/libtide.so is not built.
    shutil.copytree(PKG_DIR, tmp_path / "python" / "tide", ignore=_NO_CACHE)
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "tide.h").write_text("/* stand-in */\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TIDE_LIB", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = str(tmp_path / "python")
    code = "import tide\nprint(tide._lib.candidates())\n"
    r = _run(code, env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"[('source tree', '{tmp_path / 'build' / 'libtide.so'}')")


def test_import_does_not_load_the_library(tmp_path):
    env = dict(os.environ, TIDE_LIB=str(tmp_path / "absent.so"))
    env["PYTHONPATH"] = PKG_PARENT
    r = _run("import tide; print(tide.NotFound.__mro__[1].__name__)", env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Error"


def test_a_symbol_the_library_lacks_raises_unsupported_naming_it():
    stand_in = _lib._Missing("tide_future_call", "/opt/old/libtide.so")
    with pytest.raises(tide.UnsupportedError) as ei:
        stand_in(1, 2)
    assert ei.value.code == tide.EUNSUPPORTED
    assert "tide_future_call" in str(ei.value) and "/opt/old/libtide.so" in str(ei.value)


def test_stats_struct_matches_the_header():
    """The ctypes mirror of tide_stats lists the header's fields in the header's order
    (fields are only ever added at the end, so older ones keep their offsets)."""
    m = re.search(r"typedef struct tide_stats \{(.*?)\} tide_stats;", header_text(), re.S)
    assert m, "tide_stats not found in tide.h"
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    fields = re.findall(r"uint64_t\s+(\w+)\s*;", body)
    assert len(fields) == len(re.findall(r";", body)), "a field that is not a uint64_t"
    assert tuple(fields) == tuple(tide._lib.STATS_FIELDS)
    assert ctypes.sizeof(tide._lib.Stats) == 8 * len(fields)
