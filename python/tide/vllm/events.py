"""KV-cache events of tide's tier, for routers that consume vLLM's KV events: the scheduler
connector announces the blocks tide holds (``BlockStored``, medium ``EXTERNAL``, with the
group index, LoRA name and per-block extra keys) once every worker has reported their
request saved; ``BlockRemoved`` for blocks the store lost (removed, evicted, dropped: read
from the store's departure feed, tide_events_read, see departures.py); ``AllBlocksCleared``
when the cache is reset or the feed reports a gap. vLLM publishes them with its own
(``take_events``) when ``kv_events_config.enable_kv_cache_events`` is on.

Why ``EXTERNAL`` (docs/VLLM.md, "KV events"): tide's pool is shared by every engine that
reaches it, and ``CPU`` tells routers "this engine's own host memory". Dynamo's router maps
``EXTERNAL`` to its shared external tier (``CPU`` to the engine's host-pinned tier, and drops
media it does not know); llm-d takes the medium as a device-tier label with a configurable
weight; vLLM 0.33's own names are GPU, CPU and STORAGE (STORAGE meaning an engine's disk).

Still not announced: a save the store refused (full, or lost) is announced all the same, and
its departure never comes (it never arrived).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from .departures import DepartureFeed

MEDIUM = "EXTERNAL"  # a store shared by every engine that reaches it

try:  # pragma: no cover - exercised only where vLLM is installed
    from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
    from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash
except ImportError:
    BlockStored = BlockRemoved = AllBlocksCleared = None

    def maybe_convert_block_hash(h: Any) -> Any:
        return h


try:  # pragma: no cover - present in vLLM 0.32 and 0.33
    from vllm.v1.core.kv_cache_utils import generate_block_hash_extra_keys, to_event_extra_keys
except ImportError:
    generate_block_hash_extra_keys = to_event_extra_keys = None


def _extra_keys(req: Any, starts: list[int], bs: int) -> Any:
    """The per-block extra keys of the blocks starting at `starts` (LoRA name, multimodal
    identifiers, cache salt: what vLLM's own BlockStored carries), or None."""
    if req is None or generate_block_hash_extra_keys is None:
        return None
    out: list[Any] = []
    mm = 0
    try:
        for start in starts:
            keys, mm = generate_block_hash_extra_keys(req, start, start + bs, mm)
            out.append(keys)
        return to_event_extra_keys(out)
    except (AttributeError, TypeError):  # a stand-in request without vLLM's fields
        return None


class StoreEvents:
    """Events waiting for ``take``, and the saves planned per request that become events
    when the request is reported saved."""

    def __init__(self, block_sizes: list[int], hash_block_size: int) -> None:
        self.block_sizes = list(block_sizes)  # tokens per block, by group
        self.hash_block_size = int(hash_block_size)
        self.planned: dict[str, dict[tuple[int, int], bytes]] = {}  # req_id -> {(group, end): hash}
        self.requests: dict[str, Any] = {}  # req_id -> the Request (tokens, block hashes)
        self.ready: list[Any] = []  # vLLM's event objects
        self.feed: Optional[DepartureFeed] = None  # set by the connector

    def plan(self, described: dict[str, Any], requests: dict[str, Any]) -> None:
        """A step's metadata (TideConnectorMetadata.describe()): remember its saves."""
        for job in described["jobs"]:
            if job["kind"] != "save":
                continue
            rid = job["req_id"]
            mine = self.planned.setdefault(rid, {})
            for group, _block, end, h in job["blocks"]:
                mine[(group, end)] = h
            if rid in requests:
                self.requests[rid] = requests[rid]

    def saved(self, rid: str) -> None:
        """Every worker saved `rid`'s blocks: one BlockStored per group and contiguous run."""
        blocks = self.planned.pop(rid, {})
        req = self.requests.pop(rid, None)
        if BlockStored is None or not blocks:
            return
        tokens = list(getattr(req, "all_token_ids", None) or [])
        hashes = list(getattr(req, "block_hashes", None) or [])
        for group in sorted({g for g, _ in blocks}):
            bs = self.block_sizes[group]
            ends = sorted(e for g, e in blocks if g == group)
            run: list[int] = []
            for end in [*ends, None]:
                if run and (end is None or end != run[-1] + bs):
                    self._stored(group, bs, run, blocks, tokens, hashes, req)
                    run = []
                if end is not None:
                    run.append(end)

    def removed(self, by_group: dict[int, list[bytes]]) -> None:
        """The store lost these blocks ({group: [hash bytes]}, from departures.py)."""
        if BlockRemoved is None:
            return
        for group in sorted(by_group):
            self.ready.append(
                BlockRemoved(
                    block_hashes=[maybe_convert_block_hash(h) for h in by_group[group]],
                    medium=MEDIUM,
                    group_idx=group,
                )
            )

    def _stored(self, group: int, bs: int, ends: list[int],
                blocks: dict[tuple[int, int], bytes], tokens: list[int], hashes: list[Any],
                req: Any = None) -> None:
        parent_at = (ends[0] - bs) // self.hash_block_size - 1
        parent = hashes[parent_at] if 0 <= parent_at < len(hashes) else None
        toks = tokens[ends[0] - bs:ends[-1]] if len(tokens) >= ends[-1] else []
        lora = getattr(req, "lora_request", None)
        self.ready.append(
            BlockStored(
                block_hashes=[maybe_convert_block_hash(blocks[(group, e)]) for e in ends],
                parent_block_hash=None if parent is None else maybe_convert_block_hash(parent),
                token_ids=toks,
                block_size=bs,
                lora_id=getattr(lora, "adapter_id", None) if lora else None,
                medium=MEDIUM,
                lora_name=getattr(lora, "name", None) if lora else None,
                extra_keys=_extra_keys(req, [e - bs for e in ends], bs),
                group_idx=group,
            )
        )

    def dropped(self, rid: str) -> None:
        """`rid` finished with nothing left to save, or was forgotten."""
        self.planned.pop(rid, None)
        self.requests.pop(rid, None)

    def cleared(self) -> None:
        self.planned.clear()
        self.requests.clear()
        if AllBlocksCleared is not None:
            self.ready.append(AllBlocksCleared())

    def poll_feed(self) -> None:
        """Turn the store's departures since the last call into events (departures.py)."""
        if self.feed is None:
            return
        gone, everything = self.feed.poll()
        if everything:
            if AllBlocksCleared is not None:
                self.ready.append(AllBlocksCleared())
            return
        if gone:
            self.removed(gone)

    def take(self) -> list[Any]:
        out, self.ready = self.ready, []
        return out
