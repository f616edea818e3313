"""tide as a secondary tier of vLLM's native OffloadingConnector (vLLM 0.32 and 0.33).

vLLM's tiering framework (``vllm/v1/kv_offload/tiering/``) keeps a CPU tier in front and
asks each secondary tier to copy chunks between that CPU tier's memory and itself. This
module is such a tier: chunks go to a tided that every engine reaches, so the engines share
what any of them offloaded, while vLLM's own CPU tier stays in front of it. Configure it in
the OffloadingConnector's extra config (the type is this class's name, loaded from
``module_path``)::

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": 8000000000,
        "secondary_tiers": [{"type": "TideSecondaryTier", "module_path": "tide.vllm.tier",
                             "url": "unix:///run/tide.sock"}]}}'

Keys: ``<key_prefix>@<model>@chunk<bytes>@<offload key hex>``. The offload key is vLLM's
(block hash and group index); the chunk's size in bytes stands for its layout, so two
deployments whose chunks differ never read each other's bytes.

I/O runs on ``io_threads`` background threads, one store connection each; the methods vLLM
calls on its scheduler thread only queue work, except ``lookup``, which asks the store
(one EXISTS round trip).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Optional

from .. import errors
from ..store import Store

logger = logging.getLogger(__name__)

try:  # pragma: no cover - only where vLLM is installed
    from vllm.v1.kv_offload.base import LookupResult, RequestOffloadingContext
    from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager

    HAVE_TIERING = True
except ImportError:  # vLLM absent, or older than the tiering framework
    HAVE_TIERING = False
    SecondaryTierManager = object

# Keys a TideSecondaryTier entry of secondary_tiers accepts (beyond type and module_path,
# which vLLM's factory takes, and backpressure, which it hands to its own detector).
TIER_KEYS = {
    "url": "the store: unix:///path (tided on this host) or tide://host:port (required)",
    "key_prefix": "first part of every key (default 'vllm-tier'): a namespace per cache",
    "io_threads": "background threads copying chunks (default 2)",
    "locality": "LOCAL or REMOTE: where the store is (vLLM's tier metadata)",
}

WHERE = "kv_connector_extra_config.secondary_tiers[] (type TideSecondaryTier)"


def check_tier_config(config: dict[str, Any]) -> None:
    """Raise ValueError naming every key of a tier entry that TideSecondaryTier does not
    accept, and where it was, with the keys it does."""
    unknown = sorted(k for k in config if k not in TIER_KEYS)
    if unknown:
        known = "; ".join(f"{k}: {v}" for k, v in TIER_KEYS.items())
        raise ValueError(
            f"{WHERE}: unknown key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(k) for k in unknown)}. Accepted: {known}"
        )
    if not isinstance(config.get("url"), str) or not config.get("url"):
        raise ValueError(f"{WHERE}: 'url' is required (unix:///path or tide://host:port)")
    threads = config.get("io_threads", 2)
    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 64:
        raise ValueError(f"{WHERE}: 'io_threads' must be an integer 1..64, got {threads!r}")


class TideSecondaryTier(SecondaryTierManager):
    """A vLLM secondary tier whose chunks live in a tide store (see the module comment)."""

    tolerates_off_thread_polling = False

    def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str,
                 backpressure_detector: Any = None, **config: Any) -> None:
        if not HAVE_TIERING:
            raise ImportError("TideSecondaryTier needs vLLM 0.32 or newer (its tiering framework)")
        check_tier_config(config)
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        self.url = config["url"]
        self.key_prefix = str(config.get("key_prefix") or "vllm-tier")
        view = primary_kv_view if primary_kv_view.ndim == 1 else primary_kv_view.cast("B")
        self._flat = view if view.format == "B" else view.cast("B")
        model = ""
        vc = getattr(offloading_spec, "vllm_config", None)
        if vc is not None:
            model = str(getattr(vc.model_config, "model", "")).rstrip("/").rsplit("/", 1)[-1]
        self._key_head = f"{self.key_prefix}@{model}@chunk{self.block_size_bytes}@".encode()
        self._store = Store(self.url)  # lookups, on the scheduler thread
        self._jobs: queue.Queue[Optional[tuple[str, Any]]] = queue.Queue()
        self._done: list[Any] = []  # vLLM's JobResults
        self._done_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        for i in range(int(config.get("io_threads", 2))):
            t = threading.Thread(target=self._run, name=f"tide-tier-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def key(self, offload_key: bytes) -> bytes:
        return self._key_head + bytes(offload_key).hex().encode()

    def _chunk(self, chunk_id: int) -> memoryview:
        b = self.block_size_bytes
        return self._flat[int(chunk_id) * b:(int(chunk_id) + 1) * b]

    # -- vLLM's calls (scheduler thread, under the tiering manager's lock) -------------

    def lookup(self, key: bytes, req_context: Any) -> Any:
        try:
            return LookupResult.HIT if self._store.exists(self.key(key)) else LookupResult.MISS
        except errors.Error as e:
            logger.warning("tide tier: lookup failed, counted a miss: %s", e)
            return LookupResult.MISS

    def submit_store(self, job_metadata: Any) -> None:
        self._jobs.put(("store", job_metadata))

    def submit_load(self, job_metadata: Any) -> None:
        self._jobs.put(("load", job_metadata))

    def get_finished_jobs(self) -> list[Any]:
        with self._done_lock:
            out, self._done = self._done, []
        return out

    def on_new_request(self, req_context: Any) -> Any:
        return RequestOffloadingContext()

    def drain_jobs(self) -> None:
        self._jobs.join()

    def shutdown(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:
            t.join(timeout=30)
        self._threads = []
        self._store.close()

    # -- background I/O ----------------------------------------------------------------

    def _run(self) -> None:
        store: Optional[Store] = None
        while True:
            item = self._jobs.get()
            if item is None:  # shutdown
                self._jobs.task_done()
                if store is not None:
                    store.close()
                return
            kind, job = item
            try:
                if store is None:
                    store = Store(self.url)
                self._finish(job, *self._transfer(store, kind, job))
            except errors.Error as e:
                logger.warning("tide tier: %s job failed: %s", kind, e)
                store = None  # a fresh connection next time
                self._finish(job, False, None, 0.0)
            finally:
                self._jobs.task_done()

    def _transfer(self, store: Store, kind: str, job: Any) -> tuple[bool, Any, float]:
        keys = [self.key(k) for k in job.keys]
        chunks = [self._chunk(c) for c in job.chunk_ids]
        t0 = time.monotonic()
        if kind == "store":
            codes = store.put_many(keys, chunks)
            return all(c == 0 for c in codes), None, time.monotonic() - t0
        codes = store.get_many(keys, chunks)
        ok = [k for k, c in zip(job.keys, codes) if c == self.block_size_bytes]
        if len(ok) == len(keys):
            return True, None, time.monotonic() - t0
        return False, tuple(ok) if ok else None, time.monotonic() - t0

    def _finish(self, job: Any, success: bool, partial: Any, seconds: float) -> None:
        res = JobResult(job_id=job.job_id, success=success, successful_keys=partial,
                        transfer_time=seconds,
                        transfer_bytes=len(job.chunk_ids) * self.block_size_bytes)
        with self._done_lock:
            self._done.append(res)
