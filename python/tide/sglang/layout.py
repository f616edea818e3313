"""How tide.sglang lays SGLang's HiCache pages out in tide, without SGLang or torch: the
backend's settings (from ``--hicache-storage-backend-extra-config``), the keys, the 32-byte
header every value starts with, and the hit arithmetic of ``batch_exists_v2``.

Keys: ``<namespace>/<scope>/<pool>/<page hash>``. The scope is a digest of everything that
makes one page's bytes mean something: the model, the pool's class, layout, dtype, page
size and page bytes, and the shard the rank holds (TP rank and size unless the pool is
replicated MLA KV; PP, attention-CP and DCP ranks). Two engines that could not read each
other's pages never find them.

Header (little-endian): magic ``tSGL``, version 1, kind (0 a page of KV or of a pool laid
out like it, 1 a state: Mamba or sliding-window), 2 bytes zero, the payload's length (u64),
8 bytes of BLAKE2b of the value's own key, 8 bytes of BLAKE2b of the key of the KV page the
value belongs to (for a KV page its own key). A value whose header does not name the key it
was read under, or (for a state) the KV page of the same hash, is a miss: a state can only
ever be loaded next to the KV prefix it was saved with.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

MAGIC = b"tSGL"
VERSION = 1
HEADER = struct.Struct("<4sBBHQ8s8s")
HEADER_SIZE = HEADER.size  # 32
KIND_PAGE, KIND_STATE = 0, 1

#: Pool kinds (SGLang's PoolName values) tide.sglang stores, and what each is: a page
#: pool (its pages follow the KV prefix page by page) or a state pool (its pages hold the
#: state at the end of a prefix and load only together with that prefix's KV).
PAGE_POOLS = ("kv", "indexer", "draft", "draft_indexer")
STATE_POOLS = ("mamba", "swa", "auxiliary_swa", "draft_swa")
KNOWN_POOLS = PAGE_POOLS + STATE_POOLS

#: Hit policies (SGLang's PoolHitPolicy values) batch_exists_v2 understands.
ALL_PAGES, TRAILING_PAGES = "all_pages", "trailing_pages"

#: The extra_config keys tide.sglang reads; any other key starting with "tide_" is refused.
CONFIG_KEYS = ("tide_url", "tide_namespace")


class SGLangSetupError(ValueError):
    """A setting, a pool or an SGLang version tide.sglang cannot work with; the message
    names it."""


@dataclass(frozen=True)
class Settings:
    url: str
    namespace: str


def settings(extra_config: Optional[Mapping[str, Any]]) -> Settings:
    """The backend's settings from SGLang's extra_config dict: ``tide_url`` (else
    ``$TIDE_URL``) and ``tide_namespace`` (default ``sglang``)."""
    cfg = dict(extra_config or {})
    unknown = sorted(k for k in cfg if k.startswith("tide_") and k not in CONFIG_KEYS)
    if unknown:
        raise SGLangSetupError(
            f"tide.sglang: unknown setting(s) {', '.join(map(repr, unknown))} in "
            f"--hicache-storage-backend-extra-config (tide.sglang reads "
            f"{', '.join(CONFIG_KEYS)})"
        )
    url = cfg.get("tide_url") or os.environ.get("TIDE_URL") or ""
    if not isinstance(url, str) or not url:
        raise SGLangSetupError(
            "tide.sglang: no store URL: put \"tide_url\" (unix:///run/tide/tide.sock, "
            "tide://host:port, tide://h1,h2?replicas=2) in "
            "--hicache-storage-backend-extra-config, or set TIDE_URL"
        )
    if url.startswith("mem://"):
        raise SGLangSetupError(
            f"tide.sglang: tide_url {url!r} is a store private to one process; SGLang's "
            f"ranks and engines share pages through tided: use unix:// or tide://"
        )
    ns = cfg.get("tide_namespace", "sglang")
    if not isinstance(ns, str) or not ns or "/" in ns or len(ns) > 64:
        raise SGLangSetupError(
            f"tide.sglang: tide_namespace {ns!r}: expected 1..64 characters without '/'"
        )
    return Settings(url=url, namespace=ns)


def pool_kind(name: str) -> int:
    """KIND_PAGE or KIND_STATE for an SGLang pool name; SGLangSetupError for a pool kind
    tide.sglang does not know."""
    if name in PAGE_POOLS:
        return KIND_PAGE
    if name in STATE_POOLS:
        return KIND_STATE
    raise SGLangSetupError(
        f"tide.sglang: unknown HiCache pool kind {name!r} (tide.sglang stores "
        f"{', '.join(KNOWN_POOLS)})"
    )


def digest(*parts: object) -> str:
    """16 hex digits of BLAKE2b over the parts' reprs."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(repr(p).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def key_digest(key: str) -> bytes:
    return hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()


class Keys:
    """The tide keys of one pool: ``<namespace>/<scope>/<pool>/<page hash>``."""

    def __init__(self, namespace: str, pool: str, scope: str) -> None:
        self.prefix = f"{namespace}/{scope}/{pool}/"

    def key(self, page_hash: str) -> str:
        if len(self.prefix) + len(page_hash) > 250:  # tide keys are at most 256 bytes
            page_hash = "h" + hashlib.blake2b(page_hash.encode("utf-8")).hexdigest()
        return self.prefix + page_hash


def pack_header(kind: int, payload: int, key: str, kv_key: str) -> bytes:
    return HEADER.pack(MAGIC, VERSION, kind, 0, payload, key_digest(key), key_digest(kv_key))


def header_ok(raw: bytes, kind: int, payload: int, key: str, kv_key: str) -> bool:
    """Whether a value's first HEADER_SIZE bytes are the header pack_header would write."""
    if len(raw) < HEADER_SIZE:
        return False
    return bytes(raw[:HEADER_SIZE]) == pack_header(kind, payload, key, kv_key)


def leading(flags: Sequence[bool]) -> int:
    """The length of the leading run of True."""
    for i, f in enumerate(flags):
        if not f:
            return i
    return len(flags)


def prefix_hits(
    kv_present: Sequence[bool], pools: Sequence[tuple[str, str, int, Sequence[bool]]]
) -> tuple[int, dict[str, int], list[int]]:
    """batch_exists_v2's answer from what exists: kv_present[i] for page i's KV, and per
    extra pool (name, hit policy, trailing pages, present[i]).

    Returns (pages, per-pool hit pages, restorable prefix lengths): a prefix of p pages is
    restorable when KV pages 0..p-1 exist and every pool has what it needs for it (an
    ALL_PAGES pool every page 0..p-1, a TRAILING_PAGES pool its last `trailing` pages
    p-trailing..p-1); pages is the longest restorable prefix."""
    for name, policy, _, _ in pools:
        if policy not in (ALL_PAGES, TRAILING_PAGES):
            raise SGLangSetupError(
                f"tide.sglang: pool {name!r} asks for hit policy {policy!r}; tide.sglang "
                f"knows {ALL_PAGES!r} and {TRAILING_PAGES!r}"
            )
    kv_pages = leading(kv_present)
    hits: dict[str, int] = {"kv": kv_pages} if kv_pages else {}
    restorable = set(range(1, kv_pages + 1))
    for name, policy, trailing, present in pools:
        if not restorable:
            break
        if policy == ALL_PAGES:
            boundary = leading(present[:kv_pages])
            ok = set(range(1, boundary + 1))
        elif policy == TRAILING_PAGES:
            n = max(1, trailing)
            ok = {
                p
                for p in range(1, kv_pages + 1)
                if all(present[i] for i in range(max(0, p - n), p))
            }
            boundary = max(ok, default=0)
        if boundary:
            hits[name] = boundary
        restorable &= ok
    ordered = sorted(restorable)
    return (ordered[-1] if ordered else 0), hits, ordered
