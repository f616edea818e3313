"""The connector configuration (docs/CONNECTOR_CONFIG.md) from vLLM's config objects, a dict
or JSON text; the error for configurations tide's rules reject."""

from __future__ import annotations

import enum
import json
import logging
from typing import Any, Optional

from .. import _lib, errors

logger = logging.getLogger("tide.vllm")

class UnsupportedConfiguration(errors.UnsupportedError, ValueError):
    """The configuration is one tide's connector does not support (TIDE_EUNSUPPORTED at
    creation). A ``ValueError``, as vLLM's own connector raises, whose text is exactly the
    C message: ``TideStoreConnector does not support: <item>; <item>...``."""

    def __str__(self) -> str:
        return self.message


# ---------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------

#: kv_connector_extra_config keys this package reads itself. They are passed to the C parser
#: with the rest: its key table (src/connector/config.c, read by `tide check-config` too)
#: lists them as the binding's, checks their types and ignores their values, so the
#: connector and check-config accept exactly the same keys.
PYTHON_EXTRA_KEYS = ("url", "reconnect_s", "kv_events")

_SPEC_FIELDS: dict[str, tuple[str, ...]] = {
    "FullAttentionSpec": (
        "block_size", "page_size_padded", "num_kv_heads", "head_size", "head_size_v",
        "dtype", "sliding_window", "attention_chunk_size",
    ),
    "SlidingWindowSpec": (
        "block_size", "page_size_padded", "num_kv_heads", "head_size", "head_size_v",
        "dtype", "sliding_window", "extra_retained_tokens",
    ),
    "CrossAttentionSpec": (
        "block_size", "page_size_padded", "num_kv_heads", "head_size", "head_size_v", "dtype",
    ),
    "MLAAttentionSpec": (
        "block_size", "page_size_padded", "num_kv_heads", "head_size", "head_size_v",
        "dtype", "sliding_window", "attention_chunk_size", "cache_dtype_str",
        "compress_ratio",
    ),
    "MambaSpec": (
        "block_size", "page_size_padded", "shapes", "dtypes", "mamba_cache_mode",
        "mamba_type", "num_speculative_blocks",
    ),
    # Kinds whose groups vLLM >= 0.30 does not prefix-cache (tide's rules reject them).
    "SlidingWindowMLASpec": (
        "block_size", "page_size_padded", "num_kv_heads", "head_size", "head_size_v",
        "dtype", "sliding_window", "extra_retained_tokens", "cache_dtype_str",
        "bounded_replay",
    ),
    "CircularBufferSpec": (
        "block_size", "page_size_padded", "num_kv_heads", "head_size", "head_size_v", "dtype",
    ),
    "HiSparseHotSpec": ("block_size", "page_size", "blocks_per_request"),
    "HiSparseResidentSpec": ("block_size", "page_size"),
}
_MISSING = object()


def _plain(value: Any) -> Any:
    """A config value as JSON: torch dtypes and enums as their names, tuples as lists."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        v = value.value
        return v if isinstance(v, str) else value.name.lower()
    return str(value)  # torch.bfloat16 -> "torch.bfloat16", which the C side accepts


def _spec_dict(spec: Any) -> dict[str, Any]:
    """One vLLM KVCacheSpec as the JSON object of docs/CONNECTOR_CONFIG.md. The class name
    is passed as it is: a class tide does not know is reported by the C side."""
    name = type(spec).__name__
    out: dict[str, Any] = {"type": name}
    for field in _SPEC_FIELDS.get(name, ("block_size",)):
        v = getattr(spec, field, None)
        if v is not None:  # None: the schema's default
            out[field] = _plain(v)
    return out


def _copy_attrs(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in names:
        v = getattr(obj, n, _MISSING)
        if v is not _MISSING:
            out[n] = _plain(v)
    return out


def _worker_ranks(parallel_config: Any, tp: int) -> dict[str, int]:
    """This worker's TP, PP, PCP and DCP ranks from vLLM's process groups (as vLLM's own
    store connector finds them)."""
    ranks: dict[str, int] = {}
    try:  # pragma: no cover - needs vLLM's initialised process groups
        from vllm.distributed import (
            get_dcp_group,
            get_pcp_group,
            get_tensor_model_parallel_rank,
        )

        ranks["tp_rank"] = get_tensor_model_parallel_rank()
        pp = getattr(parallel_config, "pipeline_parallel_size", 1) or 1
        ranks["pp_rank"] = (getattr(parallel_config, "rank", 0) // max(1, tp)) % pp
        if get_pcp_group().world_size > 1:
            ranks["pcp_rank"] = get_pcp_group().rank_in_group
        if get_dcp_group().world_size > 1:
            ranks["dcp_rank"] = get_dcp_group().rank_in_group
    except Exception as e:  # not inside an initialised vLLM worker
        logger.debug("tide.vllm: worker ranks default to 0: %s", e)
    return ranks


def config_from_vllm(
    vllm_config: Any, kv_cache_config: Any, role: Any
) -> tuple[dict[str, Any], Optional[str]]:
    """The connector configuration (docs/CONNECTOR_CONFIG.md) of one engine rank, from
    vLLM's VllmConfig and KVCacheConfig. Returns ``(config dict, url or None)``; the URL is
    read from ``kv_connector_extra_config`` (which keeps it). The scheduler's ranks are 0; a worker's
    come from vLLM's process groups."""
    mc, cc, pc = vllm_config.model_config, vllm_config.cache_config, vllm_config.parallel_config
    kt = vllm_config.kv_transfer_config
    model: dict[str, Any] = {"model": str(mc.model)}
    try:
        model["total_num_kv_heads"] = int(mc.get_total_num_kv_heads())
    except Exception:  # attention-free models and the like: factor 1, keys stay correct
        pass
    if getattr(mc, "max_model_len", None) is not None:
        model["max_model_len"] = int(mc.max_model_len)
    if getattr(mc, "dtype", None) is not None:
        model["dtype"] = _plain(mc.dtype)

    cache = _copy_attrs(
        cc,
        (
            "block_size", "cache_dtype", "mamba_cache_mode", "prefix_match_unit",
            "mamba_block_size", "enable_prefix_caching", "prefix_caching_hash_algo",
            "prefix_cache_retention_interval", "use_replayssm",
        ),
    )
    tp = getattr(pc, "tensor_parallel_size", 1) or 1
    parallel = _copy_attrs(
        pc,
        (
            "tensor_parallel_size", "pipeline_parallel_size", "prefill_context_parallel_size",
            "decode_context_parallel_size", "data_parallel_size", "data_parallel_rank",
        ),
    )
    if role_number(role) == _lib.CONNECTOR_WORKER:
        parallel.update(_worker_ranks(pc, tp))

    extra = dict(getattr(kt, "kv_connector_extra_config", None) or {})
    url = extra.get("url")
    transfer: dict[str, Any] = {
        "kv_role": kt.kv_role,
        "kv_connector_extra_config": _plain_dict(extra),
    }
    if getattr(kt, "kv_connector", None):
        transfer["kv_connector"] = kt.kv_connector
    if getattr(kt, "kv_load_failure_policy", None):
        transfer["kv_load_failure_policy"] = kt.kv_load_failure_policy
    if getattr(kt, "kv_connector_module_path", None):
        transfer["kv_connector_module_path"] = str(kt.kv_connector_module_path)

    groups: list[dict[str, Any]] = []
    for g in kv_cache_config.kv_cache_groups:
        group: dict[str, Any] = {"kv_cache_spec": _spec_dict(g.kv_cache_spec),
                 "layer_names": [str(n) for n in g.layer_names]}
        if getattr(g, "is_eagle_group", False):
            group["is_eagle_group"] = True
        if getattr(g, "enable_kv_transfer", True) is False:  # vLLM >= 0.29
            group["enable_kv_transfer"] = False
        groups.append(group)
    # The KV-cache groups are what vLLM's KV-cache manager runs with. In align mode vLLM
    # raises the block size to the Mamba state's page after the scheduler process copied
    # cache_config.mamba_block_size (0.32: block_size 544, mamba_block_size still 32 there,
    # 544 in the workers): the Mamba groups' block size is the one that holds.
    mamba = {g["kv_cache_spec"].get("block_size") for g in groups
             if g["kv_cache_spec"]["type"] == "MambaSpec"}
    if len(mamba) == 1 and cache.get("mamba_cache_mode") == "align" and None not in mamba:
        cache["mamba_block_size"] = mamba.pop()
    kvc: dict[str, Any] = {"kv_cache_groups": groups}
    if getattr(kv_cache_config, "num_blocks", None) is not None:
        kvc["num_blocks"] = int(kv_cache_config.num_blocks)
    if getattr(kv_cache_config, "prefix_cache_retention_interval", None) is not None:
        kvc["prefix_cache_retention_interval"] = int(
            kv_cache_config.prefix_cache_retention_interval
        )
    return (
        {
            "model_config": model,
            "cache_config": cache,
            "parallel_config": parallel,
            "kv_transfer_config": transfer,
            "kv_cache_config": kvc,
        },
        url,
    )


def _plain_dict(d: dict[Any, Any]) -> dict[str, Any]:
    return {str(k): (_plain_dict(v) if isinstance(v, dict) else _plain(v)) for k, v in d.items()}


def split_config(config: object) -> tuple[bytes, Optional[dict[str, Any]], Optional[str]]:
    """A dict or JSON text -> (document for C as bytes, parsed dict or None, url or None).
    JSON that Python cannot parse goes to C unchanged, which names the line and column.
    Anything else raises TypeError."""
    value = config
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8")
    if isinstance(value, str):
        text = value
        try:
            value = json.loads(text)
        except ValueError:
            return text.encode("utf-8"), None, None
    if not isinstance(value, dict):
        raise TypeError(
            f"TideStoreConnector: expected a VllmConfig, a dict or JSON text, got "
            f"{type(value).__name__}"
        )
    doc: dict[str, Any] = json.loads(json.dumps(value))  # a private deep copy
    url = None
    transfer = doc.get("kv_transfer_config")
    extra = transfer.get("kv_connector_extra_config") if isinstance(transfer, dict) else None
    if isinstance(extra, dict) and isinstance(extra.get("url"), str):
        url = extra["url"]
    return json.dumps(doc).encode("utf-8"), doc, url


def python_option(config: Any, key: str, default: Any = None) -> Any:
    """A kv_connector_extra_config key this module reads itself (PYTHON_EXTRA_KEYS), from a
    VllmConfig or a dict/JSON configuration; `default` when absent or unreadable."""
    try:
        if isinstance(config, (str, bytes, bytearray)):
            config = json.loads(config)
        if isinstance(config, dict):
            extra = config.get("kv_transfer_config", {}).get("kv_connector_extra_config")
        else:
            extra = getattr(config.kv_transfer_config, "kv_connector_extra_config", None)
        return (extra or {}).get(key, default)
    except (ValueError, AttributeError, TypeError):
        return default


def role_number(role: Any) -> int:
    """KVConnectorRole (vLLM's or the stand-in), "scheduler"/"worker" or 0/1 -> 0 or 1."""
    name = getattr(role, "name", role)
    if isinstance(name, str):
        if name.lower() == "scheduler":
            return _lib.CONNECTOR_SCHEDULER
        if name.lower() == "worker":
            return _lib.CONNECTOR_WORKER
    if role in (0, 1) and not isinstance(role, bool):
        return int(role)
    raise ValueError(f"TideStoreConnector: unknown role {role!r} (scheduler or worker)")
