"""vLLM's request and block-table objects as the C calls' arguments (ids, hashes, tables)."""

from __future__ import annotations

import ctypes
import errno
from typing import Any, Iterable, Optional, Union

from .. import errors

#: A block table as vLLM gives it: KVCacheBlocks (get_block_ids()), a tuple of per-group
#: lists, one flat list (one group), or None.
BlockTable = Any

def req_id_bytes(request_id: Union[str, bytes]) -> bytes:
    return request_id.encode("utf-8") if isinstance(request_id, str) else bytes(request_id)


def hash_bytes(
    block_hashes: Optional[Iterable[bytes]],
) -> tuple[Optional[bytes], int, int]:
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


def block_groups(blocks: BlockTable) -> list[list[int]]:
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


def block_table(
    blocks: BlockTable, ngroups: int
) -> tuple[ctypes.Array[ctypes.c_int32], ctypes.Array[ctypes.c_size_t], int]:
    """A block table (see block_groups) as (int32 array, size_t counts, groups). vLLM's null
    block (id 0) becomes -1, tide's "no block"; no table at all is ngroups empty lists."""
    groups = block_groups(blocks) or [[] for _ in range(ngroups)]
    flat = [(-1 if b == 0 else b) for g in groups for b in g]
    ids = (ctypes.c_int32 * max(1, len(flat)))(*flat)
    counts = (ctypes.c_size_t * max(1, len(groups)))(*[len(g) for g in groups])
    return ids, counts, len(groups)


def prompt_len(request: Any) -> int:
    """Tokens of a request's prompt (vLLM's Request or NewRequestData)."""
    for attr in ("prefill_token_ids", "prompt_token_ids"):
        toks = getattr(request, attr, None)
        if toks is not None:
            return len(toks)
    n = getattr(request, "num_prompt_tokens", None)
    if n is not None:
        return int(n)
    return int(getattr(request, "num_tokens", 0))
