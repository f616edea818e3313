"""KV events of tide's tier as a router receives them: published with vLLM 0.33's own ZMQ
publisher and decoded by a ZMQ subscriber with vLLM's own event classes (KVEventBatch).
Stored blocks arrive as BlockStored with the shared-store medium EXTERNAL, the group index
and the LoRA name; blocks the store removed or evicted arrive as BlockRemoved (read from the
store's departure feed), once per block however many rank copies left; a clear, and a gap
in the feed, arrive as AllBlocksCleared.
"""

import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
sys.path.insert(0, HERE)

pytest.importorskip("vllm")
import msgspec  # noqa: E402
import zmq  # noqa: E402
from vllm.distributed.kv_events import (  # noqa: E402
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    ZmqEventPublisher,
)
from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash  # noqa: E402

import tide  # noqa: E402
import tide_proc  # noqa: E402
from tide.vllm import departures  # noqa: E402
from tide.vllm.events import StoreEvents  # noqa: E402

CONFIG = {"model_config": {"model": "/models/tiny-llama/"},
          "kv_connector_extra_config": {"cache_prefix": "t1"}}
BS = 16


def key(h, group=0, tp=0, model="tiny-llama", prefix="t1"):
    return (f"{prefix}@{model}@fp:0123abcd@tp_rank:{tp}@pcp0@dcp0@pp_rank:0"
            f"@group:{group}@{h.hex()}").encode()


class Lora:
    name, adapter_id = "adapter-a", 3


class Req:
    def __init__(self, hashes):
        self.all_token_ids = list(range(BS * len(hashes)))
        self.block_hashes = hashes
        self.lora_request = Lora()


def received(sub, want, timeout=10):
    """Events from the subscriber until `want` of them arrived (bounded by timeout)."""
    dec = msgspec.msgpack.Decoder(type=KVEventBatch)
    out, deadline = [], time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        try:
            _topic, _seq, payload = sub.recv_multipart()
        except zmq.Again:
            continue
        out += dec.decode(payload).events
    return out


def test_router_sees_stores_and_departures(tmp_path):
    store = tide.Store("mem://?capacity=256KiB")
    ev = StoreEvents([BS, BS], BS)
    ev.feed = departures.DepartureFeed(store, departures.key_start(CONFIG))
    # vLLM's own publisher, bound on an ipc endpoint (it binds wildcard and ipc endpoints and
    # connects to the rest); the router's subscriber connects, as routers do.
    endpoint = f"ipc://{tmp_path}/kv-events"
    pub = ZmqEventPublisher(0, endpoint=endpoint, topic="kv@engine-a@tiny")
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVTIMEO, 200)
    sub.connect(endpoint)
    try:
        hashes = [bytes([i]) * 32 for i in range(1, 5)]
        # Saves of one request: 4 blocks of group 0 and the last two of group 1.
        blocks = [(0, i, BS * (i + 1), h) for i, h in enumerate(hashes)]
        blocks += [(1, i, BS * (i + 1), hashes[i]) for i in (2, 3)]
        ev.plan({"jobs": [{"kind": "save", "req_id": "r", "blocks": blocks}]}, {"r": Req(hashes)})
        ev.saved("r")
        val = b"v" * 8192
        for g, _b, _e, h in blocks:
            for tp in (0, 1):  # two TP ranks: two keys per block
                store.put(key(h, g, tp), val)
        store.put(key(hashes[0], model="other-model"), val)  # another deployment's block
        # The store loses blocks: two removed by hand (both rank copies), the rest by eviction.
        for tp in (0, 1):
            store.remove(key(hashes[1], 0, tp))
        store.remove(key(hashes[0], model="other-model"))
        for i in range(60):
            store.put(f"filler{i}".encode(), val)
        ev.poll_feed()
        store.clear()
        ev.poll_feed()
        events = ev.take()
        assert events
        time.sleep(0.5)  # the subscriber has connected before the first publish
        pub.publish(KVEventBatch(ts=time.time(), events=events))
        got = received(sub, len(events))
        stored = [e for e in got if isinstance(e, BlockStored)]
        removed = [e for e in got if isinstance(e, BlockRemoved)]
        cleared = [e for e in got if isinstance(e, AllBlocksCleared)]
        ext = [maybe_convert_block_hash(h) for h in hashes]  # what vLLM publishes
        assert {(e.group_idx, tuple(e.block_hashes)) for e in stored} == {
            (0, tuple(ext)), (1, tuple(ext[2:]))}, stored
        for e in stored:
            assert e.medium == "EXTERNAL" and e.lora_name == "adapter-a" and e.lora_id == 3
            assert e.block_size == BS
        assert all(e.medium == "EXTERNAL" for e in removed)
        gone = [(e.group_idx, h) for e in removed for h in e.block_hashes]
        assert len(gone) == len(set(gone)), gone  # once per block, not once per rank copy
        # Every block of this deployment that left the store before the clear, and only
        # those; the other model's block is not ours to announce.
        want = {(g, maybe_convert_block_hash(h)) for g, _b, _e, h in blocks
                if not any(store.exists(key(h, g, tp)) for tp in (0, 1))}
        assert (0, ext[1]) in set(gone)
        assert set(gone) <= want and len(gone) >= 2, (gone, want)
        assert len(cleared) == 1 and got[-1] == cleared[0]
    finally:
        sub.close(0)
        ctx.destroy(linger=0)
        pub.shutdown()
        store.close()


def test_feed_gap_becomes_all_blocks_cleared():
    store = tide.Store("mem://?capacity=1MiB")
    ev = StoreEvents([BS], BS)
    ev.feed = departures.DepartureFeed(store, departures.key_start(CONFIG))
    try:
        for i in range(8192 + 5):  # more departures than the store's ring holds
            k = key(i.to_bytes(32, "big"))
            store.put(k, b"x")
            store.remove(k)
        ev.poll_feed()  # reads the first 4096 it still has ... after the 5 it lost
        out = ev.take()
        assert len(out) == 1 and isinstance(out[0], AllBlocksCleared), out[:3]
        assert ev.feed.lost == 5
    finally:
        store.close()


def test_parse_key():
    start = departures.key_start(CONFIG)
    assert start == b"t1@tiny-llama@fp:"
    assert departures.parse_key(key(b"\x01" * 32, 3), start) == (3, b"\x01" * 32)
    assert departures.parse_key(key(b"\x01" * 32, 3, tp=2), start) is None
    assert departures.parse_key(key(b"\x01" * 32, prefix="t2"), start) is None
    assert departures.parse_key(b"t1@tiny-llama@fp:x@tp_rank:0@pcp0@dcp0@pp_rank:0@group:z@00",
                                start) is None


def test_feed_over_tided(tmp_path):
    """The same feed from a tided (the EVENTS request), as a connector on another host reads
    it: removals of this deployment's blocks, one per block."""
    proc, port = tide_proc.start_tided(tmp_path)
    try:
        store = tide.Store(f"tide://127.0.0.1:{port}")
        feed = departures.DepartureFeed(store, departures.key_start(CONFIG))
        assert feed.unsupported is None
        hs = [bytes([i]) * 32 for i in range(3)]
        for h in hs:
            for tp in (0, 1):
                store.put(key(h, 2, tp), b"x" * 100)
        for tp in (0, 1):
            store.remove(key(hs[0], 2, tp))
            store.remove(key(hs[2], 2, tp))
        gone, everything = feed.poll()
        assert not everything and gone == {2: [hs[0], hs[2]]}
        assert feed.poll() == ({}, False)
        store.close()
    finally:
        tide_proc.stop(proc)
