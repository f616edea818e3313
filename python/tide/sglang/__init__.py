"""tide.sglang: SGLang HiCache's L3 storage backend over tide (``TideHiCacheStorage``).

Run SGLang with tide as its HiCache storage::

    python -m sglang.launch_server --model-path MODEL --enable-hierarchical-cache \\
        --hicache-storage-backend dynamic --hicache-storage-backend-extra-config \\
        '{"backend_name": "tide", "module_path": "tide.sglang",
          "class_name": "TideHiCacheStorage", "tide_url": "unix:///run/tide/tide.sock"}'

``tide_url`` is any tide URL a tided serves (``unix://`` for same-host zero-copy,
``tide://host:port``, ``tide://h1,h2?replicas=2`` for a cluster; ``token=`` or
``$TIDE_AUTH_TOKEN`` for an auth token). ``"interface_v1": 1`` in the same config makes
SGLang move KV pages with ``batch_get_v1``/``batch_set_v1`` (pages read and written in
place) instead of flat page copies. docs/SGLANG.md has the rest.

The package's modules: ``layout`` (settings, keys, the value header, the hit arithmetic;
no SGLang needed) and ``backend`` (the HiCacheStorage subclass; imports SGLang and torch).
``import tide.sglang`` works without SGLang; ``tide.sglang.TideHiCacheStorage`` then raises
ImportError saying SGLang is missing.
"""

from typing import Any

from .layout import KNOWN_POOLS, SGLangSetupError


def __getattr__(name: str) -> Any:
    if name in ("TideHiCacheStorage", "SUPPORTED_SGLANG", "TESTED_SGLANG", "HAVE_V2"):
        try:
            from . import backend
        except ImportError as e:
            missing = getattr(e, "name", None) or ""
            if missing.split(".")[0] in ("sglang", "torch"):
                raise ImportError(
                    f"tide.sglang needs SGLang (the `sglang` package, tested with 0.5.23, "
                    f"and torch) in this Python: {e}. scripts/sglang-env.sh makes a "
                    f"virtual environment with it."
                ) from e
            raise
        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["KNOWN_POOLS", "SGLangSetupError", "TideHiCacheStorage"]
