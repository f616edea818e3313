"""tide.vllm: vLLM's KV connector interface (KVConnectorBase_V1) over tide's C connector.

Run vLLM with tide as its KV-cache store::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "TideStoreConnector",
        "kv_connector_module_path": "tide.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"url": "tide://127.0.0.1:7474"}}'

Every decision — what a lookup hits, which blocks a step saves or loads, when a finished
request's blocks may be freed, what failed to load — is made by libtide's connector
(``tide_connector_*``, docs/CONNECTOR.md). This module only marshals: it turns vLLM's
objects (requests, block tables, scheduler outputs, paged KV tensors) into the C calls'
arguments and the C results back into what vLLM expects. The scheduler's per-step jobs
travel to the workers as the bytes of ``tide_connector_meta_serialize``.

How vLLM's calls map (scheduler process / each worker process):

==============================  ============================================================
``get_num_new_matched_tokens``  ``tide_connector_lookup`` -> (new tokens, load_async)
``update_state_after_alloc``    ``tide_connector_update_after_alloc`` (the block table)
``build_connector_meta``        ``request_preempted`` / ``request_step`` per request, then
                                ``build_meta`` -> ``TideConnectorMetadata`` (bytes)
``request_finished``            ``tide_connector_request_finished`` (1 = keep the blocks)
``reset_cache``                 ``tide_connector_reset(clear_store=1)``
``register_kv_caches``          ``tide_connector_register_region`` per tensor
``get_finished``                ``meta_parse`` + ``start_jobs``, then ``get_finished``
``get_block_ids_with_...``      ``tide_connector_get_load_errors``
==============================  ============================================================

``start_load_kv``, ``wait_for_layer_load``, ``save_kv_layer`` and ``wait_for_save`` do
nothing (no layer-wise mode, as vLLM's MooncakeStoreConnector): the I/O of a step is queued
in ``get_finished``, after the forward pass, on libtide's background threads. The one
exception is ``load_async: false``: a request then runs in the step its load is planned in,
so ``start_load_kv`` loads before the forward pass and waits.

The class subclasses vLLM's ``KVConnectorBase_V1`` (and ``SupportsHMA``, for hybrid
models) when vLLM can be imported; otherwise a stand-in base with the same method names, so
the module is usable and testable without vLLM. The configuration comes from vLLM's config
objects (see ``config_from_vllm``), or is given as a dict or JSON text in the schema of
docs/CONNECTOR_CONFIG.md.

The store URL is ``kv_connector_extra_config["url"]``, else ``$TIDE_URL``, else
``mem://``. vLLM runs its scheduler and each worker in separate processes, and a mem://
store is private to its process: a deployment needs ``tide://host:port`` or
``unix:///path`` to a tided that every process (and every engine sharing the cache)
reaches. mem:// is for tests that pass one ``tide.Store`` to every connector.

KV caches must be in host memory: libtide reads and writes block pages with the CPU, so a
tensor on a GPU is refused at ``register_kv_caches`` with a message saying so.
"""

import ctypes
import enum
import errno
import json
import logging
import os

from . import _lib, errors

logger = logging.getLogger("tide.vllm")

__all__ = [
    "TideStoreConnector",
    "TideConnectorMetadata",
    "UnsupportedConfiguration",
    "KVConnectorRole",
    "config_from_vllm",
    "HAVE_VLLM",
]

# ---------------------------------------------------------------------------------------
# vLLM's base classes, or stand-ins with the same names and methods
# ---------------------------------------------------------------------------------------

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

    class KVConnectorRole(enum.Enum):
        """Stand-in for vLLM's KVConnectorRole."""

        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:
        """Stand-in for vLLM's KVConnectorMetadata (scheduler -> workers, each step)."""

    class SupportsHMA:
        """Stand-in for vLLM's SupportsHMA marker (hybrid memory allocator support)."""

    class KVConnectorBase_V1:
        """Stand-in for vLLM's KVConnectorBase_V1 when vLLM is not installed: the same
        attributes and the methods vLLM calls, with vLLM's defaults where a connector
        need not override them."""

        def __init__(self, vllm_config, role, kv_cache_config):
            self._connector_metadata = None
            self._vllm_config = vllm_config
            self._kv_transfer_config = getattr(vllm_config, "kv_transfer_config", None)
            self._kv_cache_config = kv_cache_config
            self._role = role

        @property
        def role(self):
            return self._role

        def bind_connector_metadata(self, connector_metadata):
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self):
            self._connector_metadata = None

        def _get_connector_metadata(self):
            assert self._connector_metadata is not None
            return self._connector_metadata

        def has_connector_metadata(self):
            return self._connector_metadata is not None

        def shutdown(self):
            return None

        def get_kv_connector_stats(self):
            return None

        def get_kv_connector_kv_cache_events(self):
            return None

        def build_connector_worker_meta(self):
            return None

        def get_handshake_metadata(self):
            return None

        def on_new_request(self, request):
            return None

        def handle_preemptions(self, kv_connector_metadata):
            return None


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


class UnsupportedConfiguration(errors.UnsupportedError, ValueError):
    """The configuration is one tide's connector does not support (TIDE_EUNSUPPORTED at
    creation). A ``ValueError``, as vLLM's own connector raises, whose text is exactly the
    C message: ``TideStoreConnector does not support: <item>; <item>...``."""

    def __str__(self):
        return self.message


# ---------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------

#: kv_connector_extra_config keys this module reads itself (never passed to C).
PYTHON_EXTRA_KEYS = ("url",)

_SPEC_FIELDS = {
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
}
_MISSING = object()


def _plain(value):
    """A config value as JSON: torch dtypes and enums as their names, tuples as lists."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        v = value.value
        return v if isinstance(v, str) else value.name.lower()
    return str(value)  # torch.bfloat16 -> "torch.bfloat16", which the C side accepts


def _spec_dict(spec):
    """One vLLM KVCacheSpec as the JSON object of docs/CONNECTOR_CONFIG.md. The class name
    is passed as it is: a class tide does not know is reported by the C side."""
    name = type(spec).__name__
    out = {"type": name}
    for field in _SPEC_FIELDS.get(name, ("block_size",)):
        v = getattr(spec, field, None)
        if v is not None:  # None: the schema's default
            out[field] = _plain(v)
    return out


def _copy_attrs(obj, names):
    out = {}
    for n in names:
        v = getattr(obj, n, _MISSING)
        if v is not _MISSING:
            out[n] = _plain(v)
    return out


def _worker_ranks(parallel_config, tp):
    """This worker's TP, PP, PCP and DCP ranks from vLLM's process groups (as vLLM's own
    store connector finds them)."""
    ranks = {}
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


def config_from_vllm(vllm_config, kv_cache_config, role):
    """The connector configuration (docs/CONNECTOR_CONFIG.md) of one engine rank, from
    vLLM's VllmConfig and KVCacheConfig. Returns ``(config dict, url or None)``; the URL is
    taken out of ``kv_connector_extra_config``. The scheduler's ranks are 0; a worker's
    come from vLLM's process groups."""
    mc, cc, pc = vllm_config.model_config, vllm_config.cache_config, vllm_config.parallel_config
    kt = vllm_config.kv_transfer_config
    model = {"model": str(mc.model)}
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
    if _role_value(role) == _lib.CONNECTOR_WORKER:
        parallel.update(_worker_ranks(pc, tp))

    extra = dict(getattr(kt, "kv_connector_extra_config", None) or {})
    url = extra.pop("url", None)
    transfer = {"kv_role": kt.kv_role, "kv_connector_extra_config": _plain_dict(extra)}
    if getattr(kt, "kv_connector", None):
        transfer["kv_connector"] = kt.kv_connector
    if getattr(kt, "kv_load_failure_policy", None):
        transfer["kv_load_failure_policy"] = kt.kv_load_failure_policy

    groups = []
    for g in kv_cache_config.kv_cache_groups:
        group = {"kv_cache_spec": _spec_dict(g.kv_cache_spec),
                 "layer_names": [str(n) for n in g.layer_names]}
        if getattr(g, "is_eagle_group", False):
            group["is_eagle_group"] = True
        groups.append(group)
    kvc = {"kv_cache_groups": groups}
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


def _plain_dict(d):
    return {str(k): (_plain_dict(v) if isinstance(v, dict) else _plain(v)) for k, v in d.items()}


def _split_config(config):
    """A dict or JSON text -> (document for C as bytes, parsed dict or None, url or None).
    JSON that Python cannot parse goes to C unchanged, which names the line and column."""
    if isinstance(config, (bytes, bytearray)):
        config = bytes(config).decode("utf-8")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return config.encode("utf-8"), None, None
    if not isinstance(config, dict):
        raise TypeError(
            f"TideStoreConnector: expected a VllmConfig, a dict or JSON text, got "
            f"{type(config).__name__}"
        )
    config = json.loads(json.dumps(config))  # a private deep copy
    url = None
    extra = config.get("kv_transfer_config", {}).get("kv_connector_extra_config")
    if isinstance(extra, dict):
        for key in PYTHON_EXTRA_KEYS:
            if key in extra:
                value = extra.pop(key)
                if key == "url":
                    url = value
    return json.dumps(config).encode("utf-8"), config, url


def _role_value(role):
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


# ---------------------------------------------------------------------------------------
# Metadata: the scheduler's per-step jobs, as bytes
# ---------------------------------------------------------------------------------------


class TideConnectorMetadata(KVConnectorMetadata):
    """One step's jobs from the scheduler to every worker: the bytes of
    ``tide_connector_meta_serialize``, parsed by each worker. Picklable (vLLM sends it to
    worker processes with the scheduler output)."""

    def __init__(self, data=b""):
        self.data = bytes(data)

    def __repr__(self):
        return f"TideConnectorMetadata({len(self.data)} bytes)"

    def __reduce__(self):
        return (TideConnectorMetadata, (self.data,))

    def describe(self):
        """The jobs and finished ids, read back through libtide: ``{"jobs": [{"kind":
        "load"|"save", "req_id", "start_tokens", "end_tokens", "blocks": [(group,
        block_id, end_token, hash), ...]}], "finished": [ids]}`` (for logs and tests)."""
        L = _lib.lib()
        m = _parse_meta(L, self.data)
        try:
            jobs = []
            for i in range(L.tide_connector_meta_num_jobs(m)):
                job = _lib.ConnectorJob()
                _check_meta(L.tide_connector_meta_job(m, i, ctypes.byref(job)))
                blocks = []
                for k in range(job.nblocks):
                    b = _lib.ConnectorBlock()
                    _check_meta(L.tide_connector_meta_block(m, i, k, ctypes.byref(b)))
                    blocks.append(
                        (b.group, b.block_id, b.end_token, ctypes.string_at(b.hash, b.hash_len))
                    )
                jobs.append(
                    {
                        "kind": "load" if job.kind == _lib.CONNECTOR_LOAD else "save",
                        "req_id": job.req_id.decode("utf-8"),
                        "start_tokens": job.start_tokens,
                        "end_tokens": job.end_tokens,
                        "blocks": blocks,
                    }
                )
            finished = [
                L.tide_connector_meta_finished(m, i).decode("utf-8")
                for i in range(L.tide_connector_meta_num_finished(m))
            ]
            return {"jobs": jobs, "finished": finished}
        finally:
            L.tide_connector_meta_free(m)


def _check_meta(rc):
    if rc < 0:
        raise errors.make_error(rc, errors.last_message(None) or errors.strerror(rc))


def _parse_meta(L, data):
    m = _lib.ConnectorMetaPtr()
    buf = ctypes.create_string_buffer(data, len(data)) if data else None
    rc = L.tide_connector_meta_parse(buf, len(data), ctypes.byref(m))
    if rc < 0:
        raise errors.make_error(rc, errors.last_message(None) or "malformed connector metadata")
    return m


# ---------------------------------------------------------------------------------------
# Marshalling helpers
# ---------------------------------------------------------------------------------------


def _req_id(request_id):
    return request_id.encode("utf-8") if isinstance(request_id, str) else bytes(request_id)


def _hash_bytes(block_hashes):
    """vLLM's request.block_hashes (a list of bytes-like hashes) -> (one byte string,
    count, length of one hash)."""
    hs = [bytes(h) for h in (block_hashes or ())]
    if not hs:
        return None, 0, 0
    hlen = len(hs[0])
    for i, h in enumerate(hs):
        if len(h) != hlen:
            raise errors.InvalidArgument(
                -errno.EINVAL,
                f"TideStoreConnector: block hash {i} has {len(h)} bytes, hash 0 has {hlen}",
            )
    return b"".join(hs), len(hs), hlen


def _groups(blocks):
    """A block table — vLLM's KVCacheBlocks (get_block_ids()), a tuple of per-group lists,
    one flat list (one group), or None — as a list of per-group lists of ints."""
    if blocks is None:
        return []
    if hasattr(blocks, "get_block_ids"):
        blocks = blocks.get_block_ids()
    groups = list(blocks)
    if groups and not isinstance(groups[0], (list, tuple)):
        groups = [groups]  # one group's flat list
    return [[int(b) for b in g] for g in groups]


def _block_table(blocks, ngroups):
    """A block table (see _groups) as (int32 array, size_t counts, groups). vLLM's null
    block (id 0) becomes -1, tide's "no block"; no table at all is ngroups empty lists."""
    groups = _groups(blocks) or [[] for _ in range(ngroups)]
    flat = [(-1 if b == 0 else b) for g in groups for b in g]
    ids = (ctypes.c_int32 * max(1, len(flat)))(*flat)
    counts = (ctypes.c_size_t * max(1, len(groups)))(*[len(g) for g in groups])
    return ids, counts, len(groups)


def _prompt_len(request):
    """Tokens of a request's prompt (vLLM's Request or NewRequestData)."""
    for attr in ("prefill_token_ids", "prompt_token_ids"):
        toks = getattr(request, attr, None)
        if toks is not None:
            return len(toks)
    n = getattr(request, "num_prompt_tokens", None)
    if n is not None:
        return int(n)
    return int(getattr(request, "num_tokens", 0))


class _Region:
    """Where one paged KV tensor lives: base address, bytes from base to the end of its
    storage, shape and strides in elements, element size — read by duck typing from a
    torch tensor (data_ptr(), stride(), element_size(), untyped_storage()) or a numpy array
    (__array_interface__, strides, itemsize)."""

    def __init__(self, name, t, whole_storage=False):
        self.name = name
        if callable(getattr(t, "data_ptr", None)):
            self._from_torch(t)
        elif hasattr(t, "__array_interface__"):
            self._from_numpy(t)
        else:
            raise errors.InvalidBuffer(
                -errno.EINVAL,
                f"TideStoreConnector: KV cache {name!r}: expected a torch tensor or a numpy "
                f"array, got {type(t).__name__}",
            )
        if whole_storage:  # Mamba: every state of a block in one page of the raw storage
            self.base, self.nbytes = self.storage_base, self.storage_end - self.storage_base
            self.shape = self.strides = ()

    def _from_torch(self, t):
        device = getattr(t, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu":
            raise errors.InvalidArgument(
                -errno.EINVAL,
                f"TideStoreConnector: KV cache {self.name!r} is on {device}: libtide moves "
                f"block pages with the CPU, so the KV caches must be in host memory "
                f"(vLLM's CPU backend)",
            )
        self.base = int(t.data_ptr())
        self.elem = int(t.element_size())
        self.shape = tuple(int(s) for s in t.shape)
        self.strides = tuple(int(t.stride(d)) for d in range(len(self.shape)))
        try:
            st = t.untyped_storage()
            self.storage_base, self.storage_end = int(st.data_ptr()), int(st.data_ptr()) + int(
                st.nbytes()
            )
        except AttributeError:
            self.storage_base = self.base
            self.storage_end = self.base + self._span()
        self.nbytes = self.storage_end - self.base

    def _from_numpy(self, a):
        ai = a.__array_interface__
        ptr, readonly = ai["data"]
        if readonly:
            raise errors.InvalidBuffer(
                -errno.EINVAL,
                f"TideStoreConnector: KV cache {self.name!r} is read-only; loads write it",
            )
        self.base = int(ptr)
        self.elem = int(a.itemsize)
        self.shape = tuple(int(s) for s in a.shape)
        strides = a.strides
        for d, s in enumerate(strides):
            if s % self.elem:
                raise errors.InvalidBuffer(
                    -errno.EINVAL,
                    f"TideStoreConnector: KV cache {self.name!r}: stride {s} of dimension {d} "
                    f"is not a whole number of {self.elem}-byte elements",
                )
        self.strides = tuple(int(s) // self.elem for s in strides)
        root = a
        while getattr(root, "base", None) is not None and hasattr(root.base, "__array_interface__"):
            root = root.base
        rptr = int(root.__array_interface__["data"][0])
        rbytes = int(getattr(root, "nbytes", 0))
        if rptr <= self.base < rptr + rbytes:
            self.storage_base, self.storage_end = rptr, rptr + rbytes
        else:  # a base that is not an array (mmap, bytes): the view's own extent
            self.storage_base, self.storage_end = self.base, self.base + self._span()
        self.nbytes = self.storage_end - self.base

    def _span(self):
        if not self.shape:
            return self.elem
        return self.elem * (1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides)))

    def num_blocks_guess(self):
        """The block dimension when the configuration does not say: dimension 1 of a
        (2, num_blocks, ...) K/V layout, else dimension 0."""
        s, st = self.shape, self.strides
        if len(s) >= 2 and s[0] == 2 and st[0] >= s[1] * st[1]:
            return s[1]
        return s[0] if s else 0


# ---------------------------------------------------------------------------------------
# The connector
# ---------------------------------------------------------------------------------------


class TideStoreConnector(KVConnectorBase_V1, SupportsHMA):
    """vLLM's KV connector over tide: scheduler role (lookups, per-step jobs) or worker
    role (paged KV caches, background saves and loads).

    ``TideStoreConnector(vllm_config, role, kv_cache_config)`` is how vLLM builds it.
    Without vLLM, ``vllm_config`` may be the configuration itself (a dict or JSON text,
    docs/CONNECTOR_CONFIG.md) and ``role`` ``"scheduler"``/``"worker"``; ``url`` overrides
    the store URL and ``store`` (a ``tide.Store``) makes the connector use that open store
    instead (borrowed: keep it open until ``shutdown()``).

    Raises ``UnsupportedConfiguration`` (a ``ValueError``) when tide's rules reject the
    configuration, ``tide.ConfigError`` (also a ``ValueError``) when it is malformed, and
    the store's errors when the store cannot be opened.
    """

    def __init__(self, vllm_config, role, kv_cache_config=None, *, url=None, store=None):
        self._h = None
        self._store = store
        role_value = _role_value(role)
        if isinstance(vllm_config, (dict, str, bytes, bytearray)):
            doc, self.config, cfg_url = _split_config(vllm_config)
            if HAVE_VLLM:
                role = KVConnectorRole.SCHEDULER if role_value == 0 else KVConnectorRole.WORKER
            else:
                role = KVConnectorRole(role_value)
            # vLLM's base __init__ wants a VllmConfig; set what it would set.
            self._connector_metadata = None
            self._vllm_config = None
            self._kv_transfer_config = None
            self._kv_cache_config = kv_cache_config
            self._role = role
        else:
            if kv_cache_config is None:
                raise ValueError("TideStoreConnector: kv_cache_config is required")
            super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
            self.config, cfg_url = config_from_vllm(vllm_config, kv_cache_config, role_value)
            doc = json.dumps(self.config).encode("utf-8")
        self.url = url or cfg_url or os.environ.get("TIDE_URL") or "mem://"
        self._lib = _lib.lib()
        self._create(doc, role_value)

        info = _lib.ConnectorInfo()
        self._check(self._lib.tide_connector_get_info(self._h, ctypes.byref(info)))
        self.info = info
        self.ngroups = info.ngroups
        self.load_async = bool(info.load_async)
        # Scheduler bookkeeping: what vLLM's SchedulerOutput does not repeat each step.
        self._requests = {}  # req_id -> the Request (its block_hashes grow as it decodes)
        self._prompts = {}  # req_id -> prompt tokens, for requests C tracks
        self._computed = {}  # req_id -> computed tokens last passed to C
        self._offered = {}  # req_id -> num_computed_tokens of its lookup
        self._armed = {}  # req_id -> (block table, tokens after the load) this step
        self._awaiting_save = set()  # finished, blocks kept until the workers report
        # Worker state.
        self._kv_caches = None
        self._started = None  # (metadata object, kinds already started)

    def _create(self, doc, role_value):
        h = _lib.ConnectorPtr()
        if self._store is not None:
            sh = self._store._enter()
            try:
                rc = self._lib.tide_connector_create_with_store(
                    doc, sh, role_value, ctypes.byref(h)
                )
            finally:
                self._store._leave()
        else:
            if self.url.startswith("mem://") and HAVE_VLLM:
                logger.warning(
                    "TideStoreConnector: store %s is private to this process; vLLM's "
                    "scheduler and workers will not share it (set "
                    "kv_connector_extra_config.url to a tided: tide://host:port)",
                    self.url,
                )
            rc = self._lib.tide_connector_create(
                doc, self.url.encode("utf-8"), role_value, ctypes.byref(h)
            )
        if rc < 0:
            raw = self._lib.tide_connector_errmsg(None)
            msg = raw.decode("utf-8", "replace") if raw else errors.strerror(rc)
            if rc == errors.EUNSUPPORTED:
                raise UnsupportedConfiguration(rc, msg)
            raise errors.make_error(rc, msg)
        self._h = h

    # -- plumbing ------------------------------------------------------------------------

    def _check(self, rc):
        """Raise the tide.Error for a negative return, with the connector's message."""
        if rc < 0:
            raw = self._lib.tide_connector_errmsg(self._h) if self._h else None
            raise errors.make_error(rc, raw.decode("utf-8", "replace") if raw else "")
        return rc

    def _handle(self):
        if not self._h:
            raise errors.ClosedError(errors.ECLOSED, "TideStoreConnector is shut down")
        return self._h

    def shutdown(self):
        """Wait for queued saves and loads, then free the C connector. Idempotent."""
        h, self._h = self._h, None
        if h:
            self._lib.tide_connector_destroy(h)

    def __del__(self):
        try:
            self.shutdown()
        except Exception:  # interpreter shutdown
            pass

    def stats(self):
        """libtide's figures for this connector: per operation (lookup_exists,
        save_exists, save_put, load_get) a dict of calls, keys, bytes, failed_keys,
        errors, ns; and the counters (lookups, saved_objects, load_errors, ...)."""
        s = _lib.ConnectorStats()
        self._check(self._lib.tide_connector_get_stats(self._handle(), ctypes.byref(s)))
        out = {}
        for name, ctype in _lib.ConnectorStats._fields_:
            v = getattr(s, name)
            if ctype is _lib.ConnectorOpStats:
                v = {f: getattr(v, f) for f, _ in _lib.ConnectorOpStats._fields_}
            out[name] = v
        return out

    # -- scheduler role ------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """Tokens beyond ``num_computed_tokens`` the store can supply for this request,
        and whether they load asynchronously: ``(n, load_async)``, or ``(0, False)``.
        Lookups are synchronous: never ``None``."""
        rid = _req_id(request.request_id)
        hashes, nh, hlen = _hash_bytes(request.block_hashes)
        new = ctypes.c_int64(0)
        self._check(
            self._lib.tide_connector_lookup(
                self._handle(), rid, int(request.num_tokens), hashes, nh, hlen,
                int(num_computed_tokens), ctypes.byref(new),
            )
        )
        if new.value <= 0:
            self._offered.pop(request.request_id, None)
            return 0, False
        self._offered[request.request_id] = int(num_computed_tokens)
        return new.value, self.load_async

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        """The blocks vLLM allocated for a request it is about to schedule (or, for an
        asynchronous load, to load into); the load is armed when ``num_external_tokens``
        is what the lookup offered (the C side checks)."""
        rid = request.request_id
        self._requests[rid] = request
        ids, counts, ng = _block_table(blocks, self.ngroups)
        self._check(
            self._lib.tide_connector_update_after_alloc(
                self._handle(), _req_id(rid), ids, counts, ng, int(num_external_tokens)
            )
        )
        offered = self._offered.pop(rid, None)
        if num_external_tokens > 0 and offered is not None:
            self._armed[rid] = (_groups(blocks), offered + int(num_external_tokens))

    def _step(self, rid, prompt, computed, request, blocks, is_new):
        hashes, nh, hlen = _hash_bytes(getattr(request, "block_hashes", None))
        ids, counts, ng = _block_table(blocks, self.ngroups)
        self._check(
            self._lib.tide_connector_request_step(
                self._handle(), _req_id(rid), int(prompt), int(computed), hashes, nh, hlen,
                ids, counts, ng, 1 if is_new else 0,
            )
        )
        self._prompts[rid] = int(prompt)
        self._computed[rid] = int(computed)

    def build_connector_meta(self, scheduler_output):
        """This step's jobs for the workers. Each scheduled request is passed to the C
        side (new and resumed ones with their whole block table, running ones with their
        new blocks), preempted ones are dropped, and a request whose asynchronous load was
        armed but which is not scheduled yet gets its load job."""
        so = scheduler_output
        h = self._handle()
        for rid in getattr(so, "finished_req_ids", None) or ():
            self._forget(rid)
        for rid in getattr(so, "preempted_req_ids", None) or ():
            self._check(self._lib.tide_connector_request_preempted(h, _req_id(rid)))
            self._computed.pop(rid, None)
        num_sched = so.num_scheduled_tokens
        scheduled = set()

        for new in so.scheduled_new_reqs:
            rid = new.req_id
            scheduled.add(rid)
            request = self._requests.get(rid)
            computed = int(new.num_computed_tokens) + int(num_sched.get(rid, 0))
            self._step(rid, _prompt_len(new), computed, request, new.block_ids, True)

        cached = so.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", None) or set()
        for i, rid in enumerate(getattr(cached, "req_ids", ()) or ()):
            scheduled.add(rid)
            request = self._requests.get(rid)
            computed = int(cached.num_computed_tokens[i]) + int(num_sched.get(rid, 0))
            new_blocks = cached.new_block_ids[i]
            if rid in resumed:
                # Resumed after preemption: it re-prefills everything it had, and
                # new_block_ids is its whole table.
                prompt = int(getattr(request, "num_tokens", computed))
                self._step(rid, prompt, computed, request, new_blocks, True)
            elif rid in self._prompts:
                # Running. vLLM's count can go back when speculative tokens are
                # rejected; the hashes cover accepted tokens only, so the C side's
                # monotonic count is kept and nothing unaccepted is ever saved.
                computed = max(computed, self._computed.get(rid, 0))
                self._step(rid, self._prompts[rid], computed, request, new_blocks, False)

        for rid, (blocks, load_to) in self._armed.items():
            if rid in scheduled:
                continue  # loads in this step (load_async false)
            request = self._requests.get(rid)
            self._step(rid, _prompt_len(request), load_to, request, blocks, True)
        self._armed.clear()

        # Partial tails (hybrid, align mode): vLLM hands over, per request, the private
        # blocks holding the Mamba state at the prompt's last hash boundary.
        for rid, entries in (getattr(so, "partial_tail_offloads", None) or {}).items():
            self._partial_tail(rid, entries)

        m = _lib.ConnectorMetaPtr()
        self._check(self._lib.tide_connector_build_meta(h, ctypes.byref(m)))
        try:
            size = ctypes.c_size_t(0)
            self._lib.tide_connector_meta_serialize(m, None, 0, ctypes.byref(size))
            buf = ctypes.create_string_buffer(max(1, size.value))
            self._check(
                self._lib.tide_connector_meta_serialize(m, buf, size.value, ctypes.byref(size))
            )
            return TideConnectorMetadata(buf.raw[: size.value])
        finally:
            self._lib.tide_connector_meta_free(m)

    def _partial_tail(self, rid, entries):
        """(group, block id, boundary tokens) entries: the C side saves them in the next
        metadata; entries naming different boundaries raise tide.PartialTailError (a
        ValueError), with the reference's message."""
        entries = list(entries)
        n = len(entries)
        groups = (ctypes.c_int32 * max(1, n))(*[int(g) for g, _, _ in entries])
        blocks = (ctypes.c_int32 * max(1, n))(*[(-1 if b == 0 else int(b)) for _, b, _ in entries])
        bounds = (ctypes.c_int64 * max(1, n))(*[int(q) for _, _, q in entries])
        rc = self._lib.tide_connector_request_partial_tail(
            self._handle(), _req_id(rid), groups, blocks, bounds, n
        )
        if rc < 0:
            self._check(rc)
        return rc

    def _forget(self, rid):
        for d in (self._requests, self._prompts, self._computed, self._offered, self._armed):
            d.pop(rid, None)

    def update_connector_output(self, connector_output):
        """Requests every worker reported saved (``finished_sending``, which vLLM
        aggregates over the ranks) no longer wait on tide; vLLM frees their blocks."""
        for rid in getattr(connector_output, "finished_sending", None) or ():
            self._awaiting_save.discard(rid)

    def request_finished(self, request, block_ids):
        """``(True, None)`` while saves of the request are queued: vLLM keeps its blocks
        until every worker reports it through ``get_finished``; else ``(False, None)``."""
        rid = request.request_id
        rc = self._check(self._lib.tide_connector_request_finished(self._handle(), _req_id(rid)))
        self._forget(rid)
        if rc == 1:
            self._awaiting_save.add(rid)
            return True, None
        return False, None

    def request_finished_all_groups(self, request, block_ids):
        """``request_finished`` for hybrid models (one block list per group)."""
        return self.request_finished(request, block_ids)

    @property
    def pending_saves(self):
        """Ids that request_finished kept alive and no report has released yet."""
        return frozenset(self._awaiting_save)

    def reset_cache(self):
        """Scheduler: drop every request's state and empty the store (vLLM's prefix-cache
        reset with reset_connector); True on success, False (logged) when the store could
        not be cleared. Worker: None (its queued jobs finish and report as usual)."""
        if _role_value(self._role) != _lib.CONNECTOR_SCHEDULER:
            return None
        for d in (self._requests, self._prompts, self._computed, self._offered, self._armed):
            d.clear()
        try:
            self._check(self._lib.tide_connector_reset(self._handle(), 1))
        except errors.Error as e:
            logger.error("TideStoreConnector: reset_cache failed: %s", e)
            return False
        return True

    def take_events(self):
        """KV-cache events: tide's connector produces none."""
        return ()

    def has_pending_push_work(self):
        """False: tide pushes nothing to other engines. Requests whose saves are pending
        keep the engine stepping through vLLM's own delayed-free accounting."""
        return False

    # -- worker role ---------------------------------------------------------------------

    def _group_of_layers(self):
        groups = (self.config or {}).get("kv_cache_config", {}).get("kv_cache_groups", [])
        out = {}
        for g, group in enumerate(groups):
            for name in group.get("layer_names", []) or []:
                out[name] = g
        return out

    def register_kv_caches(self, kv_caches):
        """Register the paged KV caches: a dict of layer name -> tensor (torch or numpy),
        or -> list of tensors sharing one storage (a Mamba layer's states). Each goes to
        its layer's KV-cache group (the configuration's ``layer_names``; with one group,
        every layer), in the configuration's layer order, so every rank builds the same
        objects. The tensors are kept alive by the connector."""
        h = self._handle()
        kvc = (self.config or {}).get("kv_cache_config", {})
        num_blocks = kvc.get("num_blocks")
        layer_group = self._group_of_layers()
        order = {name: i for i, name in enumerate(layer_group)}
        items, strays = [], []
        for pos, (name, value) in enumerate(kv_caches.items()):
            if isinstance(value, (list, tuple)) and not value:
                continue
            if name in layer_group:
                items.append((layer_group[name], order[name], name, value))
            elif self.ngroups == 1 and not layer_group:
                items.append((0, pos, name, value))
            else:
                strays.append((name, value))
        items.sort(key=lambda it: (it[0], it[1]))
        regions = []
        for g, _, name, value in items:
            if isinstance(value, (list, tuple)):
                regions.append((g, name, _Region(name, value[0], whole_storage=True)))
            else:
                regions.append((g, name, _Region(name, value)))
        # A layer outside every group's layer_names is accepted only when it reuses a
        # registered layer's tensor (vLLM's cross-layer KV sharing lists such layers).
        known = {(r.base, r.nbytes) for _, _, r in regions}
        for name, value in strays:
            r = _Region(name, value[0] if isinstance(value, (list, tuple)) else value,
                        whole_storage=isinstance(value, (list, tuple)))
            if (r.base, r.nbytes) not in known:
                raise errors.InvalidArgument(
                    -errno.EINVAL,
                    f"TideStoreConnector: KV cache layer {name!r} is in no group's "
                    f"layer_names",
                )
        seen = set()
        for g, name, r in regions:
            if (g, r.base, r.nbytes) in seen:
                continue  # layers sharing one tensor: its pages count once
            seen.add((g, r.base, r.nbytes))
            nb = int(num_blocks) if num_blocks else r.num_blocks_guess()
            # As vLLM's store connector: the pages run from the tensor's start to its
            # storage's end (page = that / num_blocks, padding included); the tensor's
            # own extent when the storage's does not split into pages.
            nbytes = r.nbytes
            if nb > 0 and nbytes % nb and r._span() % nb == 0:
                nbytes = r._span()
            if r.shape:
                nd = len(r.shape)
                rc = self._lib.tide_connector_register_region(
                    h, g, r.base, nbytes, nb, nd, (ctypes.c_int64 * nd)(*r.shape),
                    (ctypes.c_int64 * nd)(*r.strides), r.elem,
                )
            else:
                rc = self._lib.tide_connector_register_region(
                    h, g, r.base, nbytes, nb, 0, None, None, 0
                )
            if rc < 0:
                raw = self._lib.tide_connector_errmsg(h)
                msg = raw.decode("utf-8", "replace") if raw else ""
                raise errors.make_error(rc, f"KV cache {name!r}: {msg}")
        self._kv_caches = kv_caches  # libtide holds raw pointers into these

    def _start(self, kinds):
        """Queue this step's jobs of `kinds` that are not queued yet."""
        meta = self._connector_metadata
        if meta is None:
            return 0
        if self._started is None or self._started[0] is not meta:
            self._started = (meta, 0)
        kinds &= ~self._started[1]
        if not kinds:
            return 0
        data = meta.data if isinstance(meta, TideConnectorMetadata) else bytes(meta)
        m = _parse_meta(self._lib, data)
        try:
            n = self._check(self._lib.tide_connector_start_jobs(self._handle(), m, kinds))
        finally:
            self._lib.tide_connector_meta_free(m)
        self._started = (meta, self._started[1] | kinds)
        return n

    def _drain(self, kind):
        out = set()
        cap = 1 << 16
        buf = ctypes.create_string_buffer(cap)
        while True:
            n = self._check(self._lib.tide_connector_get_finished(self._handle(), kind, buf, cap))
            if n <= 0:
                return out
            ids = buf.raw.split(b"\0")[:n]
            out.update(i.decode("utf-8") for i in ids)

    def start_load_kv(self, forward_context=None, **kwargs):
        """Nothing with asynchronous loads (they are queued in get_finished). With
        ``load_async: false`` the requests run in this very step, so their loads are
        queued and waited for here, before the forward pass."""
        if self.load_async or not self._h:
            return
        if self._start(_lib.CONNECTOR_LOAD):
            self._check(self._lib.tide_connector_wait(self._h))
        self._drain(_lib.CONNECTOR_LOAD)  # vLLM expects no recving ids for these

    def wait_for_layer_load(self, layer_name):
        """Nothing: no layer-wise loading."""

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        """Nothing: saves are queued in get_finished, after the forward pass."""

    def wait_for_save(self):
        """Nothing: saves run on libtide's threads; the blocks of a finished request stay
        allocated until its save is reported."""

    def get_finished(self, finished_req_ids):
        """Queue this step's loads and saves (the forward pass has written the pages the
        saves read), then report ``(saved ids, loaded ids)``: finished requests whose saves
        all ran on this rank, and requests whose loads ran; each id once, ``None`` for
        none. Blocks that failed to load are reported by get_block_ids_with_load_errors
        no later than their request."""
        self._start(_lib.CONNECTOR_LOAD | _lib.CONNECTOR_SAVE)
        recving = self._drain(_lib.CONNECTOR_LOAD)
        sending = self._drain(_lib.CONNECTOR_SAVE)
        return (sending or None), (recving or None)

    def get_block_ids_with_load_errors(self):
        """Block ids whose load failed since the last call: vLLM recomputes or fails
        their requests (kv_load_failure_policy)."""
        out = set()
        cap = 4096
        arr = (ctypes.c_int32 * cap)()
        while True:
            n = self._check(self._lib.tide_connector_get_load_errors(self._handle(), arr, cap))
            out.update(arr[i] for i in range(n))
            if n < cap:
                return out

    def wait(self):
        """Block until every queued job has run (tests, shutdown)."""
        self._check(self._lib.tide_connector_wait(self._handle()))
