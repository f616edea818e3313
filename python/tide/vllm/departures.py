"""The store's departure feed (tide_events_read), turned into the blocks of one deployment.

The scheduler connector polls it at ``take_events``: every key that left the store (removed,
evicted with no copy left on tided's SSD tier, dropped) and that names a block of this
deployment becomes ``(group, block hash)``; a clear of the store, or a gap in the feed (the
connector fell more than the store's ring behind, or tided restarted), becomes "everything
is gone". A block is stored once per rank namespace (TP shard, PCP, DCP, PP stage); its
rank-0 key stands for it, so each departure is announced once.

Keys are those of src/connector/keys.c:
``[cache_prefix@]model@fp:FP@tp_rank:T@pcpP@dcpD@pp_rank:R@group:G@<hash hex>``.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import errors
from ..store import DEPARTURE_CLEARED, Store

logger = logging.getLogger(__name__)

RANK0 = b"@tp_rank:0@pcp0@dcp0@pp_rank:0@group:"
POLL_MAX = 4096  # events read per call; the rest wait for the next step


def key_start(config: dict[str, Any]) -> bytes:
    """What every key of this deployment starts with: cache prefix and model name (the last
    path component, as the C connector takes it)."""
    model = str((config.get("model_config") or {}).get("model") or "").rstrip("/")
    name = model.rsplit("/", 1)[-1]
    extra = config.get("kv_connector_extra_config") or {}
    prefix = str(extra.get("cache_prefix") or "")
    return ((prefix + "@") if prefix else "").encode() + name.encode() + b"@fp:"


def parse_key(key: bytes, start: bytes) -> tuple[int, bytes] | None:
    """(group, block hash) of a rank-0 key of this deployment, else None."""
    if not key.startswith(start):
        return None
    at = key.find(RANK0, len(start))
    if at < 0:
        return None
    group, sep, hexhash = key[at + len(RANK0):].partition(b"@")
    if not sep or not group.isdigit():
        return None
    try:
        return int(group), bytes.fromhex(hexhash.decode("ascii"))
    except ValueError:
        return None


class DepartureFeed:
    """A reader of one store's departures, from the moment it was made."""

    def __init__(self, store: Store, start: bytes):
        self.store = store
        self.start = start
        self.lost = 0  # events the feed could not give (gaps), for metrics and tests
        self.unsupported: str | None = None
        try:
            _, self.next, _ = store.events(0, 1)
        except errors.Error as e:
            self.unsupported = str(e)
            self.next = 0
            logger.warning("tide: no BlockRemoved events for routers: %s", e)

    def poll(self) -> tuple[dict[int, list[bytes]], bool]:
        """Departed blocks since the last poll, by group, and whether everything went (a
        clear, or a gap in the feed)."""
        gone: dict[int, list[bytes]] = {}
        if self.unsupported is not None:
            return gone, False
        try:
            evs, self.next, lost = self.store.events(self.next, POLL_MAX)
        except errors.Error as e:
            logger.warning("tide: reading the store's departures failed: %s", e)
            return gone, False
        everything = lost > 0
        self.lost += lost
        for ev in evs:
            if ev.kind == DEPARTURE_CLEARED:
                everything = True
                gone.clear()
                continue
            got = parse_key(ev.key, self.start)
            if got is not None:
                gone.setdefault(got[0], []).append(got[1])
        return gone, everything


def open_feed(store: Store | None, url: str, config: dict[str, Any]) -> DepartureFeed | None:
    """The departure feed of the connector's store: `store` when the connector was given one,
    else a connection of its own to `url` (closed with the process); None when the store
    cannot be opened now (the connector's own errors say why)."""
    try:
        return DepartureFeed(store if store is not None else Store(url), key_start(config))
    except errors.Error as e:
        logger.warning("tide: no BlockRemoved events for routers: %s", e)
        return None
