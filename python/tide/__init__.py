"""tide: Python binding for libtide, a KV-cache store for LLM serving.

    import tide
    with tide.Store("mem://?capacity=256MiB") as s:
        s.put("k", b"value")
        assert s.get("k") == b"value"

The binding is ctypes over libtide.so (found through $TIDE_LIB, the source tree's
build/libtide.so, or an installed copy; see tide._lib) and needs only the standard
library. What is exported here:

- ``Store``: the store handle (tide/store.py), with the rule for when batch calls raise;
- ``Error`` and its subclasses, and the error codes ``ENOTFOUND`` ... (tide/errors.py);
- ``prefix_hashes``, ``block_hash``, ``hash_hex``, ``size_parse``, ``version``
  (tide/hashing.py);
- ``KEY_MAX``, ``BATCH_MAX``, ``HASH_BYTES``: limits from include/tide.h.

Submodules imported on their own: ``tide.vllm`` (vLLM's KV connector,
``TideStoreConnector``) and ``tide.mooncake`` (a MooncakeDistributedStore-compatible class).
"""

from ._lib import BATCH_MAX, HASH_BYTES, KEY_MAX, LibraryNotFound
from .errors import *  # noqa: F401,F403  (codes and exception classes)
from . import errors
from .hashing import block_hash, hash_hex, prefix_hashes, size_parse, version
from .store import Store

__version__ = "0.1.0"  # the Python package's; tide.version() is the loaded library's

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
    *errors.__all__,
]
