"""tide: Python binding for libtide, a KV-cache store for LLM serving.

    import tide
    with tide.Store("mem://?capacity=256MiB") as s:
        s.put("k", b"value")
        assert s.get("k") == b"value"

The binding is ctypes over libtide.so (found through $TIDE_LIB, the source tree's
build/libtide.so, or an installed libtide.so.MAJOR; see tide._lib) and needs only the
standard library; ``pip install ./python`` installs it (python/pyproject.toml). What is
exported here:

- ``Store``: the store handle (tide/store.py), with the rule for when batch calls raise;
- ``Error`` and its subclasses, and the error codes ``ENOTFOUND`` ... (tide/errors.py);
- ``prefix_hashes``, ``block_hash``, ``hash_hex``, ``size_parse``, ``version``
  (tide/hashing.py); ``__version__`` is ``version()``, the loaded library's;
- ``KEY_MAX``, ``BATCH_MAX``, ``HASH_BYTES``: limits from include/tide.h.

Submodules imported on their own: ``tide.vllm`` (vLLM's KV connector,
``TideStoreConnector``) and ``tide.mooncake`` (a MooncakeDistributedStore-compatible class).
"""

from . import errors
from ._lib import BATCH_MAX, HASH_BYTES, KEY_MAX, LibraryNotFound
from .errors import (
    CODES,
    error_class,
    make_error,
    errname,
    strerror,
    OK,
    ERRBASE,
    ENOTFOUND,
    EKEYEMPTY,
    EKEYLONG,
    EVALEMPTY,
    EVALBIG,
    EBUFSMALL,
    ESCHEME,
    EOPTION,
    ESIZE,
    ENOSPACE,
    ECHECKSUM,
    EURL,
    EPROTO,
    EAUTH,
    ECONFIG,
    EUNSUPPORTED,
    EBUSY,
    ELIMIT,
    ECLOSED,
    ESERVER,
    EPARSE,
    EPARTIALTAIL,
    EDEVICE,
    ERRLAST,
    Error,
    NotFound,
    InvalidArgument,
    InvalidKey,
    InvalidValue,
    InvalidBuffer,
    BufferTooSmall,
    ConfigError,
    PartialTailError,
    DeviceError,
    NoSpace,
    ChecksumError,
    ProtocolError,
    AuthError,
    UnsupportedError,
    Busy,
    LimitExceeded,
    ClosedError,
    ServerError,
    TransportError,
    OutOfMemory,
)
from .hashing import block_hash, hash_hex, prefix_hashes, size_parse, version
from .store import Store


def __getattr__(name: str) -> str:
    """``tide.__version__``: the loaded libtide's ``tide_version()``, asked on first use
    (``import tide`` never loads the library; this raises LibraryNotFound when it cannot
    be loaded). The package's own version, pip's, is ``tide._version.VERSION``."""
    if name == "__version__":
        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Store",
    "LibraryNotFound",
    "prefix_hashes",
    "block_hash",
    "hash_hex",
    "size_parse",
    "version",
    "KEY_MAX",
    "BATCH_MAX",
    "HASH_BYTES",
]
__all__ += errors.__all__
