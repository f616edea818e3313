"""tide as a secondary tier of vLLM 0.33's OffloadingConnector (python/tide/vllm/tier.py),
at the manager level: vLLM's own SecondaryTierFactory loads the tier by module_path from a
tier config, as TieringOffloadingSpec does, over a real tided; chunks stored by one engine's
tier are found and loaded, byte for byte, by another engine's tier. A wrong key in the tier
config is refused with a message naming it and where it was.
"""

import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
sys.path.insert(0, HERE)

vllm = pytest.importorskip("vllm")
from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key  # noqa: E402
from vllm.v1.kv_offload.tiering.base import TransferJob  # noqa: E402
from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory  # noqa: E402

import numpy as np  # noqa: E402
import tide_proc  # noqa: E402

CHUNK = 4096
NCHUNKS = 16


class Spec:
    """What the tier reads of vLLM's OffloadingSpec: the model's name."""

    class vllm_config:  # noqa: N801
        class model_config:  # noqa: N801
            model = "/models/tiny-llama"


@pytest.fixture(scope="module")
def tided(tmp_path_factory):
    proc, port = tide_proc.start_tided(tmp_path_factory.mktemp("tier"))
    yield f"tide://127.0.0.1:{port}"
    tide_proc.stop(proc)


def primary():
    """A primary tier's memory as vLLM hands it over: one row a chunk."""
    buf = np.zeros((NCHUNKS, CHUNK), dtype=np.uint8)
    return buf, memoryview(buf)


def tier(url, view, **extra):
    cfg = {"type": "TideSecondaryTier", "module_path": "tide.vllm.tier", "url": url, **extra}
    return SecondaryTierFactory.create_secondary_tier(cfg, view, Spec())


def wait_jobs(t, want, timeout=10):
    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += list(t.get_finished_jobs())
        time.sleep(0.005)
    return got


def test_two_engines_share_chunks(tided):
    buf_a, view_a = primary()
    buf_b, view_b = primary()
    a, b = tier(tided, view_a), tier(tided, view_b, io_threads=1)
    try:
        ctx = ReqContext(req_id="r1")
        keys = [make_offload_key(bytes([i]) * 32, 0) for i in range(4)]
        for i in range(4):
            buf_a[i] = np.arange(CHUNK, dtype=np.uint32).astype(np.uint8) ^ (i + 1)
        assert all(b.lookup(k, ctx) == LookupResult.MISS for k in keys)
        a.submit_store(TransferJob(job_id=1, keys=keys, chunk_ids=np.arange(4),
                                   is_promotion=False, req_context=ctx))
        a.drain_jobs()
        done = wait_jobs(a, 1)
        assert [(r.job_id, r.success) for r in done] == [(1, True)]
        # Engine B's tier sees them, and loads them into other chunks of its own memory.
        assert all(b.lookup(k, ctx) == LookupResult.HIT for k in keys)
        b.submit_load(TransferJob(job_id=7, keys=keys, chunk_ids=np.array([10, 11, 12, 13]),
                                  is_promotion=True, req_context=ctx))
        done = wait_jobs(b, 1)
        assert [(r.job_id, r.success) for r in done] == [(7, True)]
        for i in range(4):
            assert bytes(buf_b[10 + i]) == bytes(buf_a[i])
        # A load of a chunk nobody stored fails, keeping the ones that loaded.
        missing = make_offload_key(b"\xee" * 32, 0)
        b.submit_load(TransferJob(job_id=8, keys=[keys[0], missing], chunk_ids=np.array([2, 3]),
                                  is_promotion=True, req_context=ctx))
        done = wait_jobs(b, 1)
        assert done[0].job_id == 8 and not done[0].success
        assert tuple(done[0].successful_keys) == (keys[0],)
        # Group index and chunk size are part of the key.
        assert b.lookup(make_offload_key(bytes([0]) * 32, 1), ctx) == LookupResult.MISS
    finally:
        a.shutdown()
        b.shutdown()


@pytest.mark.parametrize("extra, words", [
    ({"urll": "x"}, ["'urll'", "secondary_tiers", "TideSecondaryTier", "url:"]),
    ({"io_threads": 0}, ["io_threads", "1..64"]),
])
def test_tier_config_errors(tided, extra, words):
    _, view = primary()
    with pytest.raises(ValueError) as e:
        tier(tided, view, **extra)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_tier_without_url():
    _, view = primary()
    cfg = {"type": "TideSecondaryTier", "module_path": "tide.vllm.tier"}
    with pytest.raises(ValueError, match="'url' is required"):
        SecondaryTierFactory.create_secondary_tier(cfg, view, Spec())
