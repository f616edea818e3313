"""Loading libtide and declaring its C API for ctypes.

Everything here mirrors include/tide.h. SIGNATURES lists every TIDE_API function with
its return type and argument types; tests/python/test_binding.py parses the header and
fails when a function there has no entry here, or an entry whose types disagree with the
C declaration.

The library is loaded on first use (``lib()``), not at import, so ``import tide`` works
on a machine without libtide and the failure comes with a message naming every place that
was tried. Search order:

1. ``$TIDE_LIB``, when set: that file and nothing else (an explicit choice never falls
   back silently to another copy);
2. ``build/libtide.so`` in the source tree this package sits in (``python/tide/`` is two
   levels below the repository root), only when it does sit in one (the root has
   include/tide.h), not once pip has installed it;
3. an installed copy, by its soname ``libtide.so.MAJOR`` (the ABI this package was written
   for): the dynamic loader's own search ($LD_LIBRARY_PATH, the ldconfig cache, /lib,
   /usr/lib), then ``ctypes.util.find_library("tide")``, then ``lib/`` of the usual prefixes
   (/usr/local first: `make install`'s default) for an install ldconfig has not seen yet.

``lib().file`` is the file the loader actually mapped (resolved through dladdr), which is
how the tests of an installed package check that they did not load the tree's copy.

A symbol the header declares but the loaded library lacks (a library built from older
sources) is not fatal at load time: calling it raises ``UnsupportedError`` naming the
symbol and the library file.
"""

import ctypes
import ctypes.util
import os
import sysconfig
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional

from ._version import MAJOR as _ABI_MAJOR

#: The installed library's soname: the ABI major this binding mirrors.
SONAME = f"libtide.so.{_ABI_MAJOR}"

# ---------------------------------------------------------------------------------------
# C types from include/tide.h
# ---------------------------------------------------------------------------------------

KEY_MAX = 256  # TIDE_KEY_MAX
BATCH_MAX = 65536  # TIDE_BATCH_MAX
HASH_BYTES = 16  # TIDE_HASH_BYTES
HASH_XXH3 = 0  # TIDE_HASH_XXH3
HASH_SHA256 = 1  # TIDE_HASH_SHA256
MEM_HOST = 0  # TIDE_MEM_HOST: a region in host memory
MEM_CUDA = 1  # TIDE_MEM_CUDA: a region in a CUDA device's memory


class StoreHandle(ctypes.Structure):
    """Opaque ``tide_store``; only pointers to it are ever used."""


StorePtr = ctypes.POINTER(StoreHandle)


class Key(ctypes.Structure):
    """``tide_key``: len bytes at data."""

    _fields_ = [("data", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Iov(ctypes.Structure):
    """``tide_iov``: one piece of a scatter-gather list."""

    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


STATS_FIELDS = (
    "capacity_bytes",
    "used_bytes",
    "objects",
    "puts",
    "put_dups",
    "gets",
    "misses",
    "evictions",
    "evicted_bytes",
    "checksum_errors",
    "bytes_in",
    "bytes_out",
    "meta_bytes",
    "pinned",
    "reserved",
    "disk_capacity_bytes",
    "disk_used_bytes",
    "disk_objects",
    "disk_segments",
    "disk_writes",
    "disk_write_bytes",
    "disk_reads",
    "disk_read_bytes",
    "disk_promotions",
    "disk_errors",
    "disk_checksum_errors",
    "disk_dropped",
    "disk_evictions",
    "disk_torn_records",
    "disk_queued_bytes",
)


KEY_MAX = 256  # TIDE_KEY_MAX


class Event(ctypes.Structure):
    """``tide_event``: one departure from the store (tide_events_read)."""

    _fields_ = [
        ("seq", ctypes.c_uint64),
        ("kind", ctypes.c_uint32),
        ("klen", ctypes.c_uint32),
        ("key", ctypes.c_uint8 * KEY_MAX),
    ]


class Stats(ctypes.Structure):
    """``tide_stats``: uint64 figures, in the header's order."""

    _fields_ = [(name, ctypes.c_uint64) for name in STATS_FIELDS]



class ConnectorHandle(ctypes.Structure):
    """Opaque ``tide_connector``."""


class ConnectorMetaHandle(ctypes.Structure):
    """Opaque ``tide_connector_meta``."""


ConnectorPtr = ctypes.POINTER(ConnectorHandle)
ConnectorMetaPtr = ctypes.POINTER(ConnectorMetaHandle)

CONNECTOR_SCHEDULER = 0  # TIDE_CONNECTOR_SCHEDULER
CONNECTOR_WORKER = 1  # TIDE_CONNECTOR_WORKER
CONNECTOR_LOAD = 1  # TIDE_CONNECTOR_LOAD
CONNECTOR_SAVE = 2  # TIDE_CONNECTOR_SAVE


class ConnectorInfo(ctypes.Structure):
    """``tide_connector_info``."""

    _fields_ = [
        ("role", ctypes.c_int),
        ("ngroups", ctypes.c_int),
        ("scheduler_block_size", ctypes.c_int64),
        ("hash_block_size", ctypes.c_int64),
        ("hash_bytes", ctypes.c_int),
        ("load_async", ctypes.c_int),
        ("capacity_only", ctypes.c_int),
        ("saves", ctypes.c_int),
        ("partial_hits", ctypes.c_int),
    ]


class ConnectorJob(ctypes.Structure):
    """``tide_connector_job``."""

    _fields_ = [
        ("kind", ctypes.c_int),
        ("req_id", ctypes.c_char_p),
        ("start_tokens", ctypes.c_int64),
        ("end_tokens", ctypes.c_int64),
        ("nblocks", ctypes.c_size_t),
    ]


class ConnectorBlock(ctypes.Structure):
    """``tide_connector_block``."""

    _fields_ = [
        ("group", ctypes.c_int),
        ("block_id", ctypes.c_int32),
        ("end_token", ctypes.c_int64),
        ("hash", ctypes.POINTER(ctypes.c_uint8)),
        ("hash_len", ctypes.c_size_t),
    ]


class ConnectorOpStats(ctypes.Structure):
    """``tide_connector_op_stats``."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("calls", "keys", "bytes", "failed_keys", "errors", "ns")
    ]


class ConnectorStats(ctypes.Structure):
    """``tide_connector_stats``."""

    _fields_ = [
        ("lookup_exists", ConnectorOpStats),
        ("save_exists", ConnectorOpStats),
        ("save_put", ConnectorOpStats),
        ("load_get", ConnectorOpStats),
        ("lookups", ctypes.c_uint64),
        ("lookup_hit_tokens", ctypes.c_uint64),
        ("save_jobs", ctypes.c_uint64),
        ("saved_objects", ctypes.c_uint64),
        ("dedup_skipped", ctypes.c_uint64),
        ("striped_skipped", ctypes.c_uint64),
        ("pressure_skipped_jobs", ctypes.c_uint64),
        ("pressure_events", ctypes.c_uint64),
        ("pressure_active", ctypes.c_int),
        ("load_jobs", ctypes.c_uint64),
        ("loaded_objects", ctypes.c_uint64),
        ("load_errors", ctypes.c_uint64),
    ]


class ClusterInfo(ctypes.Structure):
    """``tide_cluster_info``: what a cluster handle has seen, in the header's order."""

    _fields_ = [
        ("members", ctypes.c_uint32),
        ("members_down", ctypes.c_uint32),
        ("replicas", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
    ] + [
        (name, ctypes.c_uint64)
        for name in (
            "view_changes",
            "copies_written",
            "puts_degraded",
            "puts_failed",
            "read_failovers",
            "read_fallbacks",
            "node_errors",
            "etcd_errors",
        )
    ]


c_int = ctypes.c_int
c_size_t = ctypes.c_size_t
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
P_size_t = ctypes.POINTER(ctypes.c_size_t)
P_int = ctypes.POINTER(ctypes.c_int)
P_uint8 = ctypes.POINTER(ctypes.c_uint8)
P_uint32 = ctypes.POINTER(ctypes.c_uint32)
P_uint64 = ctypes.POINTER(ctypes.c_uint64)
P_Key = ctypes.POINTER(Key)
P_Iov = ctypes.POINTER(Iov)
c_int64 = ctypes.c_int64
P_int32 = ctypes.POINTER(ctypes.c_int32)
P_int64 = ctypes.POINTER(ctypes.c_int64)

# name: (restype, [argtypes]). Buffers the binding fills from Python buffer-protocol
# objects are c_void_p so that a raw address (an int) can be passed without a copy.
SIGNATURES = {
    "tide_errname": (c_char_p, [c_int]),
    "tide_strerror": (c_char_p, [c_int]),
    "tide_version": (c_char_p, []),
    "tide_redact": (c_size_t, [c_char_p, c_char_p, c_size_t]),
    "tide_open": (c_int, [c_char_p, ctypes.POINTER(StorePtr)]),
    "tide_close": (None, [StorePtr]),
    "tide_errmsg": (c_char_p, [StorePtr]),
    "tide_put": (c_int, [StorePtr, c_void_p, c_size_t, c_void_p, c_size_t]),
    "tide_get": (c_int, [StorePtr, c_void_p, c_size_t, c_void_p, c_size_t, P_size_t]),
    "tide_exists": (c_int, [StorePtr, c_void_p, c_size_t]),
    "tide_remove": (c_int, [StorePtr, c_void_p, c_size_t]),
    "tide_buffer_register": (c_int, [c_void_p, c_size_t]),
    "tide_buffer_unregister": (c_int, [c_void_p, c_size_t]),
    "tide_put_many": (c_int, [StorePtr, P_Key, c_size_t, P_Iov, P_size_t, P_int]),
    "tide_get_many": (c_int, [StorePtr, P_Key, c_size_t, P_Iov, P_size_t, P_int, P_size_t]),
    "tide_exists_many": (c_int, [StorePtr, P_Key, c_size_t, P_uint8]),
    "tide_remove_many": (c_int, [StorePtr, P_Key, c_size_t, P_int]),
    "tide_match_prefix": (c_int, [StorePtr, P_Key, c_size_t]),
    "tide_clear": (c_int, [StorePtr]),
    "tide_events_read": (
        c_int,
        [StorePtr, ctypes.c_uint64, ctypes.POINTER(Event), c_size_t, P_uint64, P_uint64],
    ),
    "tide_stats_get": (c_int, [StorePtr, ctypes.POINTER(Stats), c_size_t]),
    "tide_cluster_info_get": (c_int, [StorePtr, ctypes.POINTER(ClusterInfo), c_size_t]),
    "tide_cluster_members": (c_int, [StorePtr, c_char_p, c_size_t]),
    "tide_size_parse": (c_int, [c_char_p, P_uint64]),
    "tide_block_hash": (c_int, [c_int, P_uint8, c_void_p, c_size_t, c_void_p, c_size_t, P_uint8]),
    "tide_prefix_hashes": (
        c_int,
        [c_int, c_void_p, c_size_t, c_size_t, c_void_p, c_size_t, P_uint8, c_size_t],
    ),
    "tide_hash_hex": (None, [P_uint8, ctypes.c_char_p]),
    # Connector (docs/CONNECTOR.md).
    "tide_connector_create": (c_int, [c_char_p, c_char_p, c_int, ctypes.POINTER(ConnectorPtr)]),
    "tide_connector_create_file": (
        c_int,
        [c_char_p, c_char_p, c_int, ctypes.POINTER(ConnectorPtr)],
    ),
    "tide_connector_create_with_store": (
        c_int,
        [c_char_p, StorePtr, c_int, ctypes.POINTER(ConnectorPtr)],
    ),
    "tide_connector_destroy": (None, [ConnectorPtr]),
    "tide_connector_errmsg": (c_char_p, [ConnectorPtr]),
    "tide_connector_get_info": (c_int, [ConnectorPtr, ctypes.POINTER(ConnectorInfo), c_size_t]),
    "tide_connector_hit_tokens": (
        c_int,
        [ConnectorPtr, c_int64, c_void_p, c_size_t, c_size_t, P_int64],
    ),
    "tide_connector_lookup": (
        c_int,
        [ConnectorPtr, c_char_p, c_int64, c_void_p, c_size_t, c_size_t, c_int64, P_int64],
    ),
    "tide_connector_update_after_alloc": (
        c_int,
        [ConnectorPtr, c_char_p, P_int32, P_size_t, c_size_t, c_int64],
    ),
    "tide_connector_request_step": (
        c_int,
        [
            ConnectorPtr,
            c_char_p,
            c_int64,
            c_int64,
            c_void_p,
            c_size_t,
            c_size_t,
            P_int32,
            P_size_t,
            c_size_t,
            c_int,
        ],
    ),
    "tide_connector_request_partial_tail": (
        c_int,
        [ConnectorPtr, c_char_p, P_int32, P_int32, P_int64, c_size_t],
    ),
    "tide_connector_request_preempted": (c_int, [ConnectorPtr, c_char_p]),
    "tide_connector_request_finished": (c_int, [ConnectorPtr, c_char_p]),
    "tide_connector_build_meta": (c_int, [ConnectorPtr, ctypes.POINTER(ConnectorMetaPtr)]),
    "tide_connector_reset": (c_int, [ConnectorPtr, c_int]),
    "tide_connector_meta_num_jobs": (c_size_t, [ConnectorMetaPtr]),
    "tide_connector_meta_job": (
        c_int,
        [ConnectorMetaPtr, c_size_t, ctypes.POINTER(ConnectorJob)],
    ),
    "tide_connector_meta_block": (
        c_int,
        [ConnectorMetaPtr, c_size_t, c_size_t, ctypes.POINTER(ConnectorBlock)],
    ),
    "tide_connector_meta_num_finished": (c_size_t, [ConnectorMetaPtr]),
    "tide_connector_meta_finished": (c_char_p, [ConnectorMetaPtr, c_size_t]),
    "tide_connector_meta_serialize": (
        c_int,
        [ConnectorMetaPtr, c_void_p, c_size_t, P_size_t],
    ),
    "tide_connector_meta_parse": (
        c_int,
        [c_void_p, c_size_t, ctypes.POINTER(ConnectorMetaPtr)],
    ),
    "tide_connector_meta_free": (None, [ConnectorMetaPtr]),
    "tide_connector_register_region": (
        c_int,
        [ConnectorPtr, c_int, c_void_p, ctypes.c_uint64, c_int64, c_size_t, P_int64, P_int64,
         c_size_t],
    ),
    "tide_connector_register_device_region": (
        c_int,
        [ConnectorPtr, c_int, c_int, c_int, c_void_p, ctypes.c_uint64, c_int64, c_size_t, P_int64,
         P_int64, c_size_t],
    ),
    "tide_connector_start_jobs": (c_int, [ConnectorPtr, ConnectorMetaPtr, c_int]),
    "tide_connector_start_jobs_stream": (
        c_int,
        [ConnectorPtr, ConnectorMetaPtr, c_int, ctypes.c_uint64],
    ),
    "tide_connector_get_finished": (c_int, [ConnectorPtr, c_int, c_char_p, c_size_t]),
    "tide_connector_get_load_errors": (c_int, [ConnectorPtr, P_int32, c_size_t]),
    "tide_connector_wait": (c_int, [ConnectorPtr]),
    "tide_connector_get_stats": (c_int, [ConnectorPtr, ctypes.POINTER(ConnectorStats), c_size_t]),
}

# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------


class LibraryNotFound(OSError):
    """libtide could not be loaded; the message names every place that was tried."""


def _missing_symbol(name: str, path: str, message: str) -> Exception:
    return OSError(message)


# What a call to a symbol the library lacks raises: (symbol, library path, message) ->
# exception. tide.errors, which needs this module to build its exceptions' names and texts
# (so this module cannot import it), sets it at import to make tide.UnsupportedError; the
# package imports errors first, so no call into the library sees this default.
_missing_error: Callable[[str, str, str], Exception] = _missing_symbol


def set_missing_symbol_error(make: Callable[[str, str, str], Exception]) -> None:
    """Set the exception a call to a symbol the library lacks raises (see _Missing)."""
    global _missing_error
    _missing_error = make


class _Missing:
    """Stands in for a symbol the loaded library does not export."""

    def __init__(self, name: str, path: str) -> None:
        self.__name__ = name
        self.path = path

    def __call__(self, *args: Any) -> Any:
        raise _missing_error(
            self.__name__, self.path,
            f"{self.path} does not export {self.__name__}() (built from older sources?)",
        )


def source_root() -> Optional[str]:
    """The source tree this package sits in (python/tide/ two levels below its root), or
    None for an installed copy."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isfile(os.path.join(root, "include", "tide.h")):
        return root
    return None


def _standard_dirs() -> list[str]:
    """lib/ of the usual prefixes, /usr/local first (make install's default PREFIX)."""
    multiarch = sysconfig.get_config_var("MULTIARCH")
    dirs = ["/usr/local/lib"]
    if multiarch:
        dirs += [f"/usr/local/lib/{multiarch}", f"/usr/lib/{multiarch}"]
    dirs += ["/usr/local/lib64", "/usr/lib64", "/usr/lib"]
    return dirs


def candidates() -> list[tuple[str, Optional[str]]]:
    """The places libtide is looked for, in order, as (description, path or None)."""
    env = os.environ.get("TIDE_LIB")
    if env:
        return [("$TIDE_LIB", env)]
    out: list[tuple[str, Optional[str]]] = []
    root = source_root()
    if root is not None:
        out.append(("source tree", os.path.join(root, "build", "libtide.so")))
    out.append(("the dynamic loader", SONAME))
    found = ctypes.util.find_library("tide")
    out.append(("ctypes.util.find_library('tide')", found if found != SONAME else None))
    out += [("standard path", os.path.join(d, SONAME)) for d in _standard_dirs()]
    return out


class _DlInfo(ctypes.Structure):
    """glibc's Dl_info, filled by dladdr."""

    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _mapped_file(cdll: ctypes.CDLL, fallback: str) -> str:
    """The file the loader mapped for cdll (a soname resolves to a path only here)."""
    try:
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        dladdr.restype = ctypes.c_int
        info = _DlInfo()
        addr = ctypes.cast(cdll.tide_version, ctypes.c_void_p).value
        if dladdr(addr, ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(os.fsdecode(info.dli_fname))
    except (AttributeError, OSError):
        pass
    return os.path.realpath(fallback) if os.sep in fallback else fallback


class _Loaded:
    """The CDLL, the path it was loaded by, the file that is mapped, and the symbols it
    lacked. Every name of SIGNATURES is an attribute: the bound C function or a
    _Missing."""

    def __init__(self, cdll: ctypes.CDLL, path: str) -> None:
        self.cdll = cdll
        self.path = path
        self.file = _mapped_file(cdll, path)
        self.missing: list[str] = []
        for name, (restype, argtypes) in SIGNATURES.items():
            try:
                fn = getattr(cdll, name)
            except AttributeError:
                self.missing.append(name)
                setattr(self, name, _Missing(name, path))
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)

    if TYPE_CHECKING:  # the C functions are set in __init__, from SIGNATURES

        def __getattr__(self, name: str) -> Callable[..., Any]: ...


_lock = threading.Lock()
_loaded: Optional[_Loaded] = None


def load(path: str) -> _Loaded:
    """Load libtide from an explicit path, bind it, and return the bound library."""
    return _Loaded(ctypes.CDLL(path), path)


def lib() -> _Loaded:
    """The bound library, loaded on the first call. Raises LibraryNotFound."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        tried = []
        for what, path in candidates():
            if not path:
                tried.append(f"{what}: nothing found")
                continue
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{what}: {path}: no such file")
                continue
            try:
                _loaded = load(path)
                return _loaded
            except OSError as e:
                tried.append(f"{what}: {path}: {e}")
        raise LibraryNotFound(
            "cannot load libtide; tried:\n  "
            + "\n  ".join(tried)
            + "\nBuild it with `make` (build/libtide.so), install it with `make install`"
            + " (then run ldconfig, or add its lib/ to LD_LIBRARY_PATH), or set TIDE_LIB"
            + " to its path."
        )
