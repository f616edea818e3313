"""TideStoreConnector: vLLM's KVConnectorBase_V1 over libtide's connector, scheduler and
worker roles; every decision is the C side's (docs/CONNECTOR.md)."""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import time
from typing import Any, Iterable, Optional

from ..store import Store

from .. import _lib, errors
from ._base import HAVE_VLLM, KVConnectorBase_V1, KVConnectorRole, SupportsHMA, check_vllm
from .arguments import block_groups, block_table, hash_bytes, prompt_len, req_id_bytes
from .config import (
    UnsupportedConfiguration,
    config_from_vllm,
    python_option,
    role_number,
    split_config,
)
from .departures import open_feed
from .events import StoreEvents
from .metadata import TideConnectorMetadata, parse_meta
from .metrics import TideConnectorStats, TidePromMetrics, delta
from .regions import Region

logger = logging.getLogger("tide.vllm")

#: A C connector handle (a ctypes pointer to tide_connector), or a null one.
Handle = Any

#: Store errors that mean "the store cannot be reached now" (not a wrong configuration):
#: the connector then runs over a placeholder that misses, and retries (see _go_offline).
_UNREACHABLE = (errors.TransportError, errors.ServerError, errors.ProtocolError)
_UNREACHABLE_CODES = (-errno.ENOENT, -errno.ECONNREFUSED, -errno.ETIMEDOUT,
                      -errno.EHOSTUNREACH, -errno.ENETUNREACH, -errno.ECONNRESET)
#: The placeholder store while the real one cannot be reached: private, always empty to
#: lookups, and small, so saves to it cost little (puts beyond it fail, and the saver
#: skips saves until one succeeds).
_PLACEHOLDER_URL = "mem://?capacity=1MiB"
#: Seconds between attempts to reach the store (kv_connector_extra_config.reconnect_s).
RECONNECT_S = 10.0

#: Spec kinds whose blocks vLLM keeps until the request finishes or is preempted; the
#: others (sliding window, Mamba, ...) free blocks while the request runs.
_KEPT_WHILE_RUNNING = ("FullAttentionSpec", "MLAAttentionSpec", "CrossAttentionSpec")


def _hit_source(url: str) -> Any:
    """vLLM's label for where tide's hits come from: host memory for a same-host pool
    (unix://, mem://), vLLM's "external" otherwise (tided over TCP, clusters)."""
    try:
        from vllm.v1.metrics.cache_hit_source import CacheHitSource
    except ImportError:
        return None
    if url.startswith(("unix://", "mem://")):
        return CacheHitSource.HOST
    return CacheHitSource.EXTERNAL_UNSPECIFIED


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

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None, *,
                 url: Optional[str] = None, store: Optional[Store] = None) -> None:
        self._h: Handle = None
        self._store = store
        role_value = role_number(role)
        if isinstance(vllm_config, (dict, str, bytes, bytearray)):
            doc, self.config, cfg_url = split_config(vllm_config)
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
            note = check_vllm()  # raises on an interface tide was not written for
            if note:
                logger.warning("%s", note)
            super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
            self.config, cfg_url = config_from_vllm(vllm_config, kv_cache_config, role_value)
            doc = json.dumps(self.config).encode("utf-8")
        self.url = url or cfg_url or os.environ.get("TIDE_URL") or "mem://"
        self._lib = _lib.lib()
        self._doc, self._role_value = doc, role_value
        self._cache_hit_source = _hit_source(self.url)
        rs = python_option(vllm_config, "reconnect_s", RECONNECT_S)
        # A value that is not a number > 0 is the C parser's to refuse (below, in the words
        # of check-config); until then the default stands.
        ok = isinstance(rs, (int, float)) and not isinstance(rs, bool) and rs > 0
        self.reconnect_s = float(rs) if ok else RECONNECT_S
        self.offline: Optional[str] = None  # why the store cannot be reached, while it cannot
        self._next_try = 0.0
        self._carry: dict[int, set[str]] = {_lib.CONNECTOR_LOAD: set(), _lib.CONNECTOR_SAVE: set()}
        self._carry_errors: set[int] = set()
        # (group, name, region) registered, for a reconnection
        self._regions: list[tuple[int, str, Region]] = []
        if store is None and self.url.startswith("mem://") and self._vllm_config is not None:
            raise errors.ConfigError(
                errors.ECONFIG,
                f"TideStoreConnector: store {self.url} is private to one connector, and "
                f"vLLM builds one in its scheduler and one in every worker, so nothing saved "
                f"would ever be found. Set kv_connector_extra_config.url (or $TIDE_URL) to a "
                f"tided that every vLLM process reaches: unix:///path/tide.sock (same host, "
                f"tided --unix PATH) or tide://host:port",
            )
        try:
            self._h = self._create(doc, role_value, self.url)
        except errors.Error as e:
            if not self._unreachable(e):
                raise
            self._go_offline(e)

        info = _lib.ConnectorInfo()
        self._check(self._lib.tide_connector_get_info(self._h, ctypes.byref(info), ctypes.sizeof(info)))
        self.info = info
        self.ngroups = info.ngroups
        self.load_async = bool(info.load_async)
        # Scheduler bookkeeping: what vLLM's SchedulerOutput does not repeat each step.
        # req_id -> the Request (its block_hashes grow as it decodes)
        self._requests: dict[str, Any] = {}
        self._prompts: dict[str, int] = {}  # req_id -> prompt tokens, for requests C tracks
        self._computed: dict[str, int] = {}  # req_id -> computed tokens last passed to C
        self._offered: dict[str, int] = {}  # req_id -> num_computed_tokens of its lookup
        # req_id -> (block table, tokens after the load) this step
        self._armed: dict[str, tuple[list[list[int]], int]] = {}
        self._awaiting_save: set[str] = set()  # finished, blocks kept until the workers report
        self._fence_next = False  # the last step saved blocks vLLM may free while running
        # groups whose blocks those are (computed once)
        self._freeing_groups: Optional[frozenset[int]] = None
        self._events = self._events_if_enabled(vllm_config)
        # Worker state.
        self._kv_caches: Optional[dict[str, Any]] = None
        # the device of the KV caches when they are CUDA tensors
        self._cuda_device: Optional[int] = None
        self._started: Optional[tuple[Any, int]] = None  # (metadata object, kinds started)
        self._asleep = False  # KV caches unregistered for vLLM's sleep mode (>= 0.33)

    @staticmethod
    def _unreachable(e: errors.Error) -> bool:
        return isinstance(e, _UNREACHABLE) or getattr(e, "code", 0) in _UNREACHABLE_CODES

    def _go_offline(self, e: errors.Error) -> None:
        """The store cannot be reached: warn, and run over the placeholder (every lookup a
        miss, so vLLM computes every prompt) until a retry reaches it."""
        self.offline = str(e)
        self._next_try = time.monotonic() + self.reconnect_s
        logger.warning(
            "TideStoreConnector (%s): store %s cannot be reached (%s); this engine computes "
            "every prompt without the cache and tries again every %g s",
            "scheduler" if self._role_value == _lib.CONNECTOR_SCHEDULER else "worker",
            self.url, e, self.reconnect_s,
        )
        self._h = self._create(self._doc, self._role_value, _PLACEHOLDER_URL)

    def _maybe_reconnect(self) -> None:
        """While offline, every reconnect_s: open the real store; on success the connector
        moves to it (a worker hands over what the placeholder finished and registers its
        KV caches again). Requests already running stay on the placeholder's books."""
        if self.offline is None or time.monotonic() < self._next_try:
            return
        try:
            h = self._create(self._doc, self._role_value, self.url)
        except errors.Error as e:
            self._next_try = time.monotonic() + self.reconnect_s
            logger.debug("TideStoreConnector: store %s still unreachable: %s", self.url, e)
            return
        old, self._h = self._h, h
        if self._role_value == _lib.CONNECTOR_WORKER:
            self._lib.tide_connector_wait(old)
            self._carry[_lib.CONNECTOR_LOAD] |= self._drain(_lib.CONNECTOR_LOAD, old)
            self._carry[_lib.CONNECTOR_SAVE] |= self._drain(_lib.CONNECTOR_SAVE, old)
            self._carry_errors |= self._load_errors(old)
            regions, self._regions = self._regions, []
            for g, name, r in regions:
                self._register(g, name, r)
        else:
            self._prompts.clear()  # running requests are unknown to the new handle
            self._computed.clear()
        self._lib.tide_connector_destroy(old)
        logger.warning("TideStoreConnector: store %s reached; the cache is in use again",
                       self.url)
        self.offline = None

    def _events_if_enabled(self, vllm_config: Any) -> Optional[StoreEvents]:
        """The scheduler's KV-cache events (events.py) when vLLM publishes KV events
        (kv_events_config.enable_kv_cache_events), or kv_connector_extra_config.kv_events
        asks for them; else None."""
        if self._role_value != _lib.CONNECTOR_SCHEDULER:
            return None
        ev = getattr(vllm_config, "kv_events_config", None)
        on = bool(getattr(ev, "enable_kv_cache_events", False))
        if not (on or python_option(vllm_config, "kv_events", False)):
            return None
        groups = (self.config or {}).get("kv_cache_config", {}).get("kv_cache_groups", [])
        sizes = [int(g.get("kv_cache_spec", {}).get("block_size") or self.info.hash_block_size)
                 for g in groups]
        events = StoreEvents(sizes, self.info.hash_block_size)
        events.feed = open_feed(self._store, self.url, self.config or {})
        return events

    def _create(self, doc: bytes, role_value: int, url: str) -> Handle:
        h = _lib.ConnectorPtr()
        if self._store is not None:
            with self._store.borrowed_handle() as sh:
                rc = self._lib.tide_connector_create_with_store(
                    doc, sh, role_value, ctypes.byref(h)
                )
        else:
            rc = self._lib.tide_connector_create(
                doc, url.encode("utf-8"), role_value, ctypes.byref(h)
            )
        if rc < 0:
            raw = self._lib.tide_connector_errmsg(None)
            msg = raw.decode("utf-8", "replace") if raw else errors.strerror(rc)
            if rc == errors.EUNSUPPORTED:
                raise UnsupportedConfiguration(rc, msg)
            raise errors.make_error(rc, msg)
        return h

    # -- plumbing ------------------------------------------------------------------------

    # -- sleep mode (vLLM >= 0.33) ---------------------------------------------------------

    @classmethod
    def supports_sleep_mode(cls, kv_transfer_config: Any = None) -> bool:
        """vLLM >= 0.33 asks before it allows sleep mode: yes. At sleep a worker's
        ``unregister_kv_caches`` waits for its queued I/O and lets go of the C connector,
        and with it every raw pointer into the KV caches; ``restore_kv_caches`` opens the
        connector again and registers the tensors as they are after wake-up, wherever the
        sleep-mode backend put their memory."""
        return True

    def unregister_kv_caches(self) -> None:
        """Before vLLM sleeps (it has drained its transfers): wait for every queued save
        and load, keep what they reported for the next ``get_finished``, and free the C
        worker, so that nothing holds a pointer into memory sleep mode releases.
        Idempotent; nothing to do on the scheduler or before ``register_kv_caches``."""
        if self._role_value != _lib.CONNECTOR_WORKER or self._asleep or not self._h:
            return
        if self._kv_caches is None:
            return
        h = self._h
        self._check(self._lib.tide_connector_wait(h))
        self._carry[_lib.CONNECTOR_LOAD] |= self._drain(_lib.CONNECTOR_LOAD, h)
        self._carry[_lib.CONNECTOR_SAVE] |= self._drain(_lib.CONNECTOR_SAVE, h)
        self._carry_errors |= self._load_errors(h)
        self._h = None
        self._lib.tide_connector_destroy(h)
        self._regions, self._started, self._asleep = [], None, True

    def restore_kv_caches(self) -> None:
        """After vLLM wakes up: a new C worker on the same store, and the KV caches
        registered again from the tensors (their addresses now). Idempotent."""
        if not self._asleep:
            return
        try:
            self._h = self._create(self._doc, self._role_value, self.url)
        except errors.Error as e:
            if not self._unreachable(e):
                raise
            self._go_offline(e)
        self._asleep = False
        self._cuda_device = None
        if self._kv_caches is not None:  # always: only registered caches go to sleep
            self.register_kv_caches(self._kv_caches)

    def _check(self, rc: int) -> int:
        """Raise the tide.Error for a negative return, with the connector's message."""
        if rc < 0:
            raw = self._lib.tide_connector_errmsg(self._h) if self._h else None
            raise errors.make_error(rc, raw.decode("utf-8", "replace") if raw else "")
        return rc

    def _handle(self) -> Handle:
        if not self._h:
            if self._asleep:
                raise errors.ClosedError(
                    errors.ECLOSED,
                    "TideStoreConnector: the KV caches are unregistered (vLLM sleep mode): "
                    "no save or load until restore_kv_caches",
                )
            raise errors.ClosedError(errors.ECLOSED, "TideStoreConnector is shut down")
        return self._h

    def shutdown(self) -> None:
        """Wait for queued saves and loads, then free the C connector. Idempotent."""
        h, self._h = self._h, None
        if h:
            self._lib.tide_connector_destroy(h)

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:  # interpreter shutdown
            pass

    def stats(self) -> dict[str, Any]:
        """libtide's figures for this connector: per operation (lookup_exists,
        save_exists, save_put, load_get) a dict of calls, keys, bytes, failed_keys,
        errors, ns; and the counters (lookups, saved_objects, load_errors, ...)."""
        s = _lib.ConnectorStats()
        self._check(self._lib.tide_connector_get_stats(self._handle(), ctypes.byref(s), ctypes.sizeof(s)))
        out = {}
        for name, ctype in _lib.ConnectorStats._fields_:
            v = getattr(s, name)
            if ctype is _lib.ConnectorOpStats:
                v = {f: getattr(v, f) for f, _ in _lib.ConnectorOpStats._fields_}
            out[name] = v
        return out

    # -- figures -------------------------------------------------------------------------

    def get_kv_connector_stats(self) -> Optional[TideConnectorStats]:
        """This process's connector figures since the last call (vLLM sums them over the
        scheduler and every worker into its log line and /metrics), or None when nothing
        happened."""
        if not self._h:
            return None
        now = self.stats()
        d = delta(now, getattr(self, "_reported", None))
        self._reported = now
        if not d["ops"] and not d["counters"]:
            return None
        return TideConnectorStats(data=d)

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[dict[str, Any]] = None) -> TideConnectorStats:
        return TideConnectorStats(data=dict(data) if data else {})

    @classmethod
    def build_prom_metrics(cls, vllm_config: Any, metric_types: dict[Any, Any],
                           labelnames: list[str], per_engine_labelvalues: Any) -> TidePromMetrics:
        return TidePromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    @property
    def requires_kv_delivery(self) -> bool:
        """False: tide is a best-effort cache. A preempted request need not wait for its
        saves (a save that does not happen is a later miss, never wrong data)."""
        return False

    # -- scheduler role ------------------------------------------------------------------

    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int, bool]:
        """Tokens beyond ``num_computed_tokens`` the store can supply for this request,
        and whether they load asynchronously: ``(n, load_async)``, or ``(0, False)``.
        Lookups are synchronous: never ``None``."""
        rid = req_id_bytes(request.request_id)
        hashes, nh, hlen = hash_bytes(request.block_hashes)
        new = ctypes.c_int64(0)
        h = self._handle()
        try:
            self._check(
                self._lib.tide_connector_lookup(
                    h, rid, int(request.num_tokens), hashes, nh, hlen,
                    int(num_computed_tokens), ctypes.byref(new),
                )
            )
        except errors.Error as e:
            if not self._unreachable(e):
                raise
            # The store went away under a running engine: a miss (vLLM computes the
            # prompt); tide:// reconnects by itself on a later call.
            self._warn_lookup(e)
            new.value = 0
        if new.value <= 0:
            self._offered.pop(request.request_id, None)
            return 0, False
        self._offered[request.request_id] = int(num_computed_tokens)
        return new.value, self.load_async

    def _warn_lookup(self, e: errors.Error) -> None:
        now = time.monotonic()
        if now >= getattr(self, "_lookup_warned", 0.0):
            self._lookup_warned = now + self.reconnect_s
            logger.warning(
                "TideStoreConnector: lookup in %s failed (%s): a miss, the prompt is computed",
                self.url, e,
            )

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        """The blocks vLLM allocated for a request it is about to schedule (or, for an
        asynchronous load, to load into); the load is armed when ``num_external_tokens``
        is what the lookup offered (the C side checks)."""
        rid = request.request_id
        self._requests[rid] = request
        ids, counts, ng = block_table(blocks, self.ngroups)
        self._check(
            self._lib.tide_connector_update_after_alloc(
                self._handle(), req_id_bytes(rid), ids, counts, ng, int(num_external_tokens)
            )
        )
        offered = self._offered.pop(rid, None)
        if num_external_tokens > 0 and offered is not None:
            self._armed[rid] = (block_groups(blocks), offered + int(num_external_tokens))

    def _step(self, rid: str, prompt: int, computed: int, request: Any, blocks: Any,
              is_new: bool) -> None:
        hashes, nh, hlen = hash_bytes(getattr(request, "block_hashes", None))
        ids, counts, ng = block_table(blocks, self.ngroups)
        self._check(
            self._lib.tide_connector_request_step(
                self._handle(), req_id_bytes(rid), int(prompt), int(computed), hashes, nh, hlen,
                ids, counts, ng, 1 if is_new else 0,
            )
        )
        self._prompts[rid] = int(prompt)
        self._computed[rid] = int(computed)

    def build_connector_meta(self, scheduler_output: Any) -> TideConnectorMetadata:
        """This step's jobs for the workers. Each scheduled request is passed to the C
        side (new and resumed ones with their whole block table, running ones with their
        new blocks), preempted ones are dropped, and a request whose asynchronous load was
        armed but which is not scheduled yet gets its load job."""
        self._maybe_reconnect()
        so = scheduler_output
        h = self._handle()
        for rid in getattr(so, "finished_req_ids", None) or ():
            self._forget(rid)
        for rid in getattr(so, "preempted_req_ids", None) or ():
            self._check(self._lib.tide_connector_request_preempted(h, req_id_bytes(rid)))
            self._computed.pop(rid, None)
        num_sched = so.num_scheduled_tokens
        scheduled = set()

        for new in so.scheduled_new_reqs:
            rid = new.req_id
            scheduled.add(rid)
            request = self._requests.get(rid)
            computed = int(new.num_computed_tokens) + int(num_sched.get(rid, 0))
            self._step(rid, prompt_len(new), computed, request, new.block_ids, True)

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
            self._step(rid, prompt_len(request), load_to, request, blocks, True)
        self._armed.clear()

        # Partial tails (hybrid, align mode): vLLM hands over, per request, the private
        # blocks holding the Mamba state at the prompt's last hash boundary.
        for rid, entries in (getattr(so, "partial_tail_offloads", None) or {}).items():
            self._partial_tail(rid, entries)

        # Blocks freed under saves still in flight: vLLM frees a preempted request's blocks
        # at once, and blocks leaving a sliding window (or a Mamba group's older states)
        # while the request runs; this step's forward pass may write them. The workers
        # wait for the earlier saves first (handle_preemptions).
        fence = bool(getattr(so, "preempted_req_ids", None)) or self._fence_next
        m = _lib.ConnectorMetaPtr()
        self._check(self._lib.tide_connector_build_meta(h, ctypes.byref(m)))
        try:
            size = ctypes.c_size_t(0)
            self._lib.tide_connector_meta_serialize(m, None, 0, ctypes.byref(size))
            buf = ctypes.create_string_buffer(max(1, size.value))
            self._check(
                self._lib.tide_connector_meta_serialize(m, buf, size.value, ctypes.byref(size))
            )
            meta = TideConnectorMetadata(buf.raw[: size.value], fence=fence)
        finally:
            self._lib.tide_connector_meta_free(m)
        self._fence_next = self._saves_freed_while_running(meta)
        if self._events is not None:
            self._events.plan(meta.describe(), self._requests)
        return meta

    def _saves_freed_while_running(self, meta: TideConnectorMetadata) -> bool:
        """Does meta save blocks of a group whose blocks vLLM frees while the request still
        runs (sliding window, Mamba: any kind but full attention, MLA and cross attention)?
        The next step then fences."""
        if self._freeing_groups is None:
            groups = (self.config or {}).get("kv_cache_config", {}).get("kv_cache_groups", [])
            self._freeing_groups = frozenset(
                g
                for g, grp in enumerate(groups)
                if (grp.get("kv_cache_spec") or {}).get("type") not in _KEPT_WHILE_RUNNING
            )
        if not self._freeing_groups:
            return False
        return any(
            b[0] in self._freeing_groups
            for job in meta.describe()["jobs"]
            if job["kind"] == "save"
            for b in job["blocks"]
        )

    def _partial_tail(self, rid: str, entries: Iterable[tuple[int, int, int]]) -> int:
        """(group, block id, boundary tokens) entries: the C side saves them in the next
        metadata; entries naming different boundaries raise tide.PartialTailError (a
        ValueError), with the reference's message."""
        entries = list(entries)
        n = len(entries)
        groups = (ctypes.c_int32 * max(1, n))(*[int(g) for g, _, _ in entries])
        blocks = (ctypes.c_int32 * max(1, n))(*[(-1 if b == 0 else int(b)) for _, b, _ in entries])
        bounds = (ctypes.c_int64 * max(1, n))(*[int(q) for _, _, q in entries])
        rc = self._lib.tide_connector_request_partial_tail(
            self._handle(), req_id_bytes(rid), groups, blocks, bounds, n
        )
        return self._check(int(rc))

    def register_finished_partial_tail(self, request: Any, block_ids: Any,
                                       partial_tail_offloads: Any) -> bool:
        """vLLM (>= 0.32) hands a finishing producer request's partial tails here, before
        request_finished: (group, private block, boundary) entries saved by the next
        metadata. request_finished then keeps the blocks until the save is reported, so
        this returns False."""
        if partial_tail_offloads:
            self._partial_tail(request.request_id, partial_tail_offloads)
        return False

    def _forget(self, rid: str) -> None:
        for d in (self._requests, self._prompts, self._computed, self._offered, self._armed):
            d.pop(rid, None)

    def update_connector_output(self, connector_output: Any) -> None:
        """Requests every worker reported saved (``finished_sending``, which vLLM
        aggregates over the ranks) no longer wait on tide; vLLM frees their blocks."""
        for rid in getattr(connector_output, "finished_sending", None) or ():
            self._awaiting_save.discard(rid)
            if self._events is not None:
                self._events.saved(rid)

    def request_finished(self, request: Any, block_ids: Any) -> tuple[bool, None]:
        """``(True, None)`` while saves of the request are queued: vLLM keeps its blocks
        until every worker reports it through ``get_finished``; else ``(False, None)``."""
        rid = request.request_id
        rc = self._check(
            self._lib.tide_connector_request_finished(self._handle(), req_id_bytes(rid))
        )
        self._forget(rid)
        if rc == 1:
            self._awaiting_save.add(rid)
            return True, None
        if self._events is not None:
            self._events.dropped(rid)
        return False, None

    def request_finished_all_groups(self, request: Any, block_ids: Any) -> tuple[bool, None]:
        """``request_finished`` for hybrid models (one block list per group)."""
        return self.request_finished(request, block_ids)

    @property
    def pending_saves(self) -> frozenset[str]:
        """Ids that request_finished kept alive and no report has released yet."""
        return frozenset(self._awaiting_save)

    def reset_cache(self) -> Optional[bool]:
        """Scheduler: drop every request's state and empty the store (vLLM's prefix-cache
        reset with reset_connector); True on success, False (logged) when the store could
        not be cleared. Worker: None (its queued jobs finish and report as usual)."""
        if role_number(self._role) != _lib.CONNECTOR_SCHEDULER:
            return None
        for d in (self._requests, self._prompts, self._computed, self._offered, self._armed):
            d.clear()
        if self._events is not None:
            self._events.cleared()
        try:
            self._check(self._lib.tide_connector_reset(self._handle(), 1))
        except errors.Error as e:
            logger.error("TideStoreConnector: reset_cache failed: %s", e)
            return False
        return True

    def take_events(self) -> Iterable[Any]:
        """KV-cache events of tide's tier since the last call (events.py): BlockStored for
        blocks of requests every worker reported saved, AllBlocksCleared after a reset.
        Empty unless KV events are enabled."""
        if self._events is None:
            return ()
        self._events.poll_feed()
        return self._events.take()

    def has_pending_push_work(self) -> bool:
        """False: tide pushes nothing to other engines. Requests whose saves are pending
        keep the engine stepping through vLLM's own delayed-free accounting."""
        return False

    # -- worker role ---------------------------------------------------------------------

    def _group_of_layers(self) -> dict[str, int]:
        groups = (self.config or {}).get("kv_cache_config", {}).get("kv_cache_groups", [])
        out = {}
        for g, group in enumerate(groups):
            for name in group.get("layer_names", []) or []:
                out[name] = g
        return out

    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
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
                regions.append((g, name, Region(name, value[0], whole_storage=True)))
            else:
                regions.append((g, name, Region(name, value)))
        # A layer outside every group's layer_names is accepted only when it reuses a
        # registered layer's tensor (vLLM's cross-layer KV sharing lists such layers).
        known = {(r.base, r.nbytes) for _, _, r in regions}
        for name, value in strays:
            r = Region(name, value[0] if isinstance(value, (list, tuple)) else value,
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
            self._register(g, name, r)
        self._kv_caches = kv_caches  # libtide holds raw pointers into these

    def _register(self, g: int, name: str, r: Region) -> None:
        """One region with the C connector (kept, to register again on a reconnection)."""
        h = self._handle()
        kvc = (self.config or {}).get("kv_cache_config", {})
        nb = int(kvc["num_blocks"]) if kvc.get("num_blocks") else r.num_blocks_guess()
        base, nbytes, shape, strides = r.for_c(nb)
        nd = len(shape)
        dims = (
            (ctypes.c_int64 * nd)(*shape) if nd else None,
            (ctypes.c_int64 * nd)(*strides) if nd else None,
            r.elem if nd else 0,
        )
        if r.kind == _lib.MEM_HOST:
            rc = self._lib.tide_connector_register_region(h, g, base, nbytes, nb, nd, *dims)
        else:  # GPU memory: libtide loads the CUDA runtime and pins its pool once
            rc = self._lib.tide_connector_register_device_region(
                h, g, r.kind, r.device, base, nbytes, nb, nd, *dims
            )
            if rc == 0:
                self._cuda_device = r.device
        if rc < 0:
            raw = self._lib.tide_connector_errmsg(h)
            msg = raw.decode("utf-8", "replace") if raw else ""
            raise errors.make_error(rc, f"KV cache {name!r}: {msg}")
        self._regions.append((g, name, r))

    def _start(self, kinds: int) -> int:
        """Queue this step's jobs of `kinds` that are not queued yet."""
        meta = self._connector_metadata
        if meta is None:
            return 0
        if self._started is None or self._started[0] is not meta:
            self._started = (meta, 0)
        kinds &= ~self._started[1]
        if not kinds:
            return 0
        if isinstance(meta, TideConnectorMetadata):
            data = meta.data
        elif isinstance(meta, (bytes, bytearray, memoryview)):  # the serialized jobs
            data = bytes(meta)
        else:
            raise TypeError(
                f"TideStoreConnector: the bound connector metadata is of type "
                f"{type(meta).__name__}, not the TideConnectorMetadata of a TideStoreConnector "
                f"scheduler"
            )
        m = parse_meta(self._lib, data)
        try:
            if self._cuda_device is None:
                rc = self._lib.tide_connector_start_jobs(self._handle(), m, kinds)
            else:  # the saves' copies wait, on the GPU, for what this stream has queued
                rc = self._lib.tide_connector_start_jobs_stream(
                    self._handle(), m, kinds, self._cuda_stream()
                )
            n = self._check(rc)
        finally:
            self._lib.tide_connector_meta_free(m)
        self._started = (meta, self._started[1] | kinds)
        return n

    def _cuda_stream(self) -> int:
        """The engine's current CUDA stream on the KV caches' device (its forward pass was
        queued there), as an integer; 0, the legacy default stream, without torch."""
        try:
            import torch
        except ImportError:
            return 0
        return int(torch.cuda.current_stream(self._cuda_device).cuda_stream)

    def _drain(self, kind: int, h: Handle = None) -> set[str]:
        """Every id the C worker reports finished for `kind` (LOAD or SAVE), and what a
        placeholder handed over on a reconnection."""
        h = h or self._handle()
        out, self._carry[kind] = self._carry[kind], set()
        cap = 1 << 16
        buf = ctypes.create_string_buffer(cap)
        while True:
            n = self._check(self._lib.tide_connector_get_finished(h, kind, buf, cap))
            if n <= 0:
                return out
            ids = buf.raw.split(b"\0")[:n]
            out.update(i.decode("utf-8") for i in ids)

    def handle_preemptions(self, kv_connector_metadata: Any) -> None:
        """vLLM calls this before each step's forward pass. When the scheduler freed blocks
        that saves of earlier steps may still be reading (a preemption; blocks leaving a
        sliding window), wait for those saves: the forward pass may write the freed blocks,
        and a save reading them after that would store the other request's bytes under this
        one's key, with a checksum that matches them."""
        if self._h and getattr(kv_connector_metadata, "fence", False):
            self._check(self._lib.tide_connector_wait(self._h))

    def start_load_kv(self, forward_context: Any = None, **kwargs: Any) -> None:
        """Nothing with asynchronous loads (they are queued in get_finished). With
        ``load_async: false`` the requests run in this very step, so their loads are
        queued and waited for here, before the forward pass."""
        if self.load_async or not self._h:
            return
        if self._start(_lib.CONNECTOR_LOAD):
            self._check(self._lib.tide_connector_wait(self._h))
        self._drain(_lib.CONNECTOR_LOAD)  # vLLM expects no recving ids for these

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Nothing: no layer-wise loading."""

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        """Nothing: saves are queued in get_finished, after the forward pass."""

    def wait_for_save(self) -> None:
        """Nothing: saves run on libtide's threads; the blocks of a finished request stay
        allocated until its save is reported."""

    def get_finished(
        self, finished_req_ids: set[str]
    ) -> tuple[Optional[set[str]], Optional[set[str]]]:
        """Queue this step's loads and saves (the forward pass has written the pages the
        saves read), then report ``(saved ids, loaded ids)``: finished requests whose saves
        all ran on this rank, and requests whose loads ran; each id once, ``None`` for
        none. Blocks that failed to load are reported by get_block_ids_with_load_errors
        no later than their request."""
        self._maybe_reconnect()
        self._start(_lib.CONNECTOR_LOAD | _lib.CONNECTOR_SAVE)
        recving = self._drain(_lib.CONNECTOR_LOAD)
        sending = self._drain(_lib.CONNECTOR_SAVE)
        return (sending or None), (recving or None)

    def get_block_ids_with_load_errors(self) -> set[int]:
        """Block ids whose load failed since the last call: vLLM recomputes or fails
        their requests (kv_load_failure_policy)."""
        return self._load_errors()

    def _load_errors(self, h: Handle = None) -> set[int]:
        h = h or self._handle()
        out, self._carry_errors = self._carry_errors, set()
        cap = 4096
        arr = (ctypes.c_int32 * cap)()
        while True:
            n = self._check(self._lib.tide_connector_get_load_errors(h, arr, cap))
            out.update(arr[i] for i in range(n))
            if n < cap:
                return out

    def wait(self) -> None:
        """Block until every queued job has run (tests, shutdown)."""
        self._check(self._lib.tide_connector_wait(self._handle()))
