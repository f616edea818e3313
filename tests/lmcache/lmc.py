"""Helpers that drive LMCache 0.5.6's own classes on CPU: real TensorMemoryObj chunks (as
its L1 allocator makes them: a torch CPU tensor with its metadata), ObjectKeys, and its L2
adapters built through its own config parser and factory, polled on their event fds."""

import json
import select
import argparse

import torch

from lmcache.v1.distributed.api import ObjectKey
from lmcache.v1.distributed.internal_api import L1MemoryDesc
from lmcache.v1.distributed.l2_adapters import create_l2_adapter
from lmcache.v1.distributed.l2_adapters.config import parse_args_to_l2_adapters_config
from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj
from lmcache.v1.platform import consume_fd

# One chunk: 2 (K, V) x 4 layers x 16 tokens x 256 hidden, bfloat16 = 64 KiB.
SHAPE = torch.Size([2, 4, 16, 256])
DTYPE = torch.bfloat16


def chunk(seed):
    """A TensorMemoryObj over its own CPU tensor, filled from seed."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(SHAPE, generator=g).to(DTYPE)
    return wrap(t)


def empty_chunk():
    return wrap(torch.zeros(SHAPE, dtype=DTYPE))


def wrap(t):
    t = t.contiguous()
    meta = MemoryObjMetadata(shape=t.shape, dtype=t.dtype, address=t.data_ptr(),
                             phy_size=t.numel() * t.element_size(), fmt=MemoryFormat.KV_2LTD,
                             ref_count=1)
    return TensorMemoryObj(t, meta, parent_allocator=None)


def key(i, model="tide-test/model"):
    return ObjectKey(chunk_hash=(0x1000 + i).to_bytes(32, "big"), model_name=model, kv_rank=0)


def adapter(spec):
    """An L2 adapter from its --l2-adapter JSON, through LMCache's own parser and factory."""
    cfg = parse_args_to_l2_adapters_config(argparse.Namespace(l2_adapter=[json.dumps(spec)]))
    buf = torch.empty(1 << 20, dtype=torch.uint8)
    desc = L1MemoryDesc(ptr=buf.data_ptr(), size=buf.numel(), align_bytes=1)
    return create_l2_adapter(cfg.adapters[0], l1_memory_desc=desc)


def _wait(fd, what, timeout_ms=20000):
    p = select.poll()
    p.register(fd, select.POLLIN)
    if not p.poll(timeout_ms):
        raise AssertionError(f"{what}: no completion within {timeout_ms} ms")
    try:
        consume_fd(fd)
    except BlockingIOError:
        pass


def store(a, keys, objs):
    tid = a.submit_store_task(keys, objs)
    for _ in range(50):
        _wait(a.get_store_event_fd(), "store")
        done = a.pop_completed_store_tasks()
        if tid in done:
            return done[tid].is_successful()
    raise AssertionError("store task never completed")


def _bits(bm, n):
    return [bool(bm.test(i)) for i in range(n)]


def lookup(a, keys):
    tid = a.submit_lookup_and_lock_task(keys, {})
    for _ in range(50):
        _wait(a.get_lookup_and_lock_event_fd(), "lookup")
        bm = a.query_lookup_and_lock_result(tid)
        if bm is not None:
            a.submit_unlock(keys)
            return _bits(bm, len(keys))
    raise AssertionError("lookup task never completed")


def load(a, keys, objs):
    tid = a.submit_load_task(keys, objs)
    for _ in range(50):
        _wait(a.get_load_event_fd(), "load")
        bm = a.query_load_result(tid)
        if bm is not None:
            return _bits(bm, len(keys))
    raise AssertionError("load task never completed")
