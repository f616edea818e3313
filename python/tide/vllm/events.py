"""KV-cache events of tide's tier, for routers that consume vLLM's KV events: the scheduler
connector announces the blocks tide holds (``BlockStored``, medium ``CPU``, with the group
index) once every worker has reported their request saved, and ``AllBlocksCleared`` when
the cache is reset. vLLM publishes them with its own (``take_events``) when
``kv_events_config.enable_kv_cache_events`` is on.

Not announced: evictions (the store evicts without telling connectors, so a router learns of
them only as a smaller hit), and a save the store refused (full, or lost) is announced all
the same.
"""

MEDIUM = "CPU"  # tide's pool is host memory, on this host (unix://) or another (tide://)

try:  # pragma: no cover - exercised only where vLLM is installed
    from vllm.distributed.kv_events import AllBlocksCleared, BlockStored
    from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash
except ImportError:
    BlockStored = AllBlocksCleared = None

    def maybe_convert_block_hash(h):
        return h


class StoreEvents:
    """Events waiting for ``take``, and the saves planned per request that become events
    when the request is reported saved."""

    def __init__(self, block_sizes, hash_block_size):
        self.block_sizes = list(block_sizes)  # tokens per block, by group
        self.hash_block_size = int(hash_block_size)
        self.planned = {}  # req_id -> {(group, end_token): hash}
        self.requests = {}  # req_id -> the Request (its tokens and block hashes)
        self.ready = []

    def plan(self, described, requests):
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

    def saved(self, rid):
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
            run = []
            for end in ends + [None]:
                if run and (end is None or end != run[-1] + bs):
                    self._stored(group, bs, run, blocks, tokens, hashes)
                    run = []
                if end is not None:
                    run.append(end)

    def _stored(self, group, bs, ends, blocks, tokens, hashes):
        parent_at = (ends[0] - bs) // self.hash_block_size - 1
        parent = hashes[parent_at] if 0 <= parent_at < len(hashes) else None
        toks = tokens[ends[0] - bs:ends[-1]] if len(tokens) >= ends[-1] else []
        self.ready.append(
            BlockStored(
                block_hashes=[maybe_convert_block_hash(blocks[(group, e)]) for e in ends],
                parent_block_hash=None if parent is None else maybe_convert_block_hash(parent),
                token_ids=toks,
                block_size=bs,
                lora_id=None,
                medium=MEDIUM,
                lora_name=None,
                group_idx=group,
            )
        )

    def dropped(self, rid):
        """`rid` finished with nothing left to save, or was forgotten."""
        self.planned.pop(rid, None)
        self.requests.pop(rid, None)

    def cleared(self):
        self.planned.clear()
        self.requests.clear()
        if AllBlocksCleared is not None:
            self.ready.append(AllBlocksCleared())

    def take(self):
        out, self.ready = self.ready, []
        return out
