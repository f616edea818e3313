"""SGLang 0.5.23's own HiCacheController driving tide.sglang on CPU.

The controller is the part of SGLang's engine that moves host-pool pages to and from the L3
storage backend: its backup thread writes pages (`write_storage`), its prefetch threads ask
the backend which pages of a token sequence it holds and load them into freshly allocated
host pages. Here it is built as the engine builds it (a CPU MHATokenToKVPool, its
MHATokenToKVPoolHost, `storage_backend="dynamic"` with tide.sglang's extra config, SGLang's
own page hashes of the tokens); the test plays only the scheduler's part between the
controller's queues. One controller writes pages; a second one, with an empty host pool as
a second engine would have, prefetches them from tided and must hold the same bytes. Tokens
that were never written are a miss.

What this cannot cover on CPU: the device<->host copies (SGLang imports its transfer ops
only from sgl_kernel on CUDA/ROCm or XPU), hence the engine itself (docs/SGLANG.md).
"""

import time

import pytest
import torch

from conftest import H, L, PAGE, D, fill, page_bytes

from sglang.srt.managers.cache_controller import HiCacheController
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.utils import get_storage_hash_str
from sglang.srt.runtime_context import get_parallel

DEVICE_TOKENS = 64
NPAGES = 6


class _Allocator:
    """The one call HiCacheController makes of the engine's token allocator."""

    def __init__(self, kv):
        self.kv = kv

    def get_kvcache(self):
        return self.kv


class Engine:
    """One engine's HiCache pieces: device pool, host pool, controller on tide."""

    def __init__(self, url, layout, v1):
        self.dev = MHATokenToKVPool(DEVICE_TOKENS, PAGE, torch.bfloat16, H, D, L, "cpu", False,
                                    enable_alt_stream=False)
        info = self.dev.get_device_pool_infos()[0].buffer_info
        self.host = MHATokenToKVPoolHost(info, 2.0, 0, PAGE, layout, pin_memory=False,
                                         device="cpu", device_capacity_tokens=DEVICE_TOKENS,
                                         start_layer=0, end_layer=L)
        cfg = {"backend_name": "tide", "module_path": "tide.sglang",
               "class_name": "TideHiCacheStorage", "tide_url": url}
        if v1:
            cfg["interface_v1"] = 1
        self.ctl = HiCacheController(_Allocator(self.dev), self.host, PAGE, None, None,
                                     write_policy="write_through", io_backend="direct",
                                     storage_backend="dynamic", model_name="tiny-model",
                                     storage_backend_extra_config=cfg)

    def write(self, tokens, host_indices):
        hashes = get_storage_hash_str(tokens, None, page_size=PAGE)
        op_id = self.ctl.write_storage(host_indices, tokens, hash_value=hashes)
        op = self.ctl.ack_backup_queue.get(timeout=60)
        assert op.id == op_id
        return op.completed_tokens

    def prefetch(self, tokens):
        """prefetch(), then what SGLang's scheduler does with the hit: allocate host pages
        for it and hand the operation to the controller's I/O thread. Returns (tokens
        found, host indices loaded, the acks' completed tokens)."""
        op = self.ctl.prefetch("req-" + str(time.monotonic_ns()), tokens)
        hit = self.ctl.prefetch_hit_queue.get(timeout=60)
        assert hit is op
        if op.storage_hit_count == 0:
            return 0, None, 0
        op.host_indices = self.ctl.alloc_prefetch_host_buffers(op, op.storage_hit_count)
        self.ctl.prefetch_buffer.put(op)
        done = 0
        while True:
            ack = self.ctl.ack_prefetch_queue.get(timeout=60)
            assert ack.operation is op
            if ack.completed_tokens is not None:
                done = max(done, ack.completed_tokens)
            if ack.completed_req:
                return op.storage_hit_count, op.host_indices, done

    def close(self):
        self.ctl.detach_storage_backend()


@pytest.fixture
def parallel():
    # SGLang's engine publishes its parallel layout before it builds the controller; a
    # single rank here.
    with get_parallel().override(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_dcp_size=1,
                                 attn_dcp_rank=0):
        yield


# interface_v1: the controller moves pages in place (batch_get_v1/batch_set_v1); without
# it, through flat page copies (batch_get/batch_set).
@pytest.mark.parametrize("layout,v1,scheme", [("page_first", True, "unix"),
                                              ("layer_first", True, "unix"),
                                              ("page_first", False, "unix"),
                                              ("page_first", True, "tcp")])
def test_controller_writes_pages_to_tide_and_prefetches_them_back(tided, parallel, layout,
                                                                     v1, scheme):
    from tide import Store
    from tide.sglang import TideHiCacheStorage

    url = tided.unix if scheme == "unix" else tided.tcp
    a = Engine(url, layout, v1)
    b = None
    try:
        assert isinstance(a.ctl.storage_backend, TideHiCacheStorage)
        assert a.ctl.enable_storage
        zero_copy = (a.ctl._page_get_zero_copy, a.ctl._page_set_zero_copy)
        assert ((a.ctl.page_get_func, a.ctl.page_set_func) == zero_copy) == v1
        tokens = [(i * 37 + 11) % 500 for i in range(NPAGES * PAGE)]
        idx = a.host.alloc(NPAGES * PAGE)
        fill(a.host, [int(i) for i in idx[::PAGE]], seed=27)
        want = [page_bytes(a.host, int(i)) for i in idx[::PAGE]]
        assert a.write(tokens, idx) == NPAGES * PAGE
        with Store(tided.tcp) as s:
            st = s.stats()
        assert st["objects"] == NPAGES and st["puts"] == NPAGES, st

        # The same engine finds them (its prefetch asks the backend) ...
        assert a.prefetch(tokens)[0] == NPAGES * PAGE

        # ... and a second engine, with nothing in its host pool, loads them from tided.
        b = Engine(url, layout, v1)
        found, got_idx, done = b.prefetch(tokens)
        assert (found, done) == (NPAGES * PAGE, NPAGES * PAGE)
        assert [page_bytes(b.host, int(i)) for i in got_idx[::PAGE]] == want

        # A prefix of them: the same first pages. Tokens past a page not stored: a miss there.
        assert b.prefetch(tokens[: 2 * PAGE])[0] == 2 * PAGE
        other = tokens[: 3 * PAGE] + [499 - t for t in tokens[3 * PAGE:]]
        assert b.prefetch(other)[0] == 3 * PAGE
        assert b.prefetch([7] * (2 * PAGE))[0] == 0
        with Store(tided.tcp) as s:
            assert s.stats()["objects"] == NPAGES
    finally:
        a.close()
        if b is not None:
            b.close()
