"""LMCache 0.5.6's non-multiprocess remote stores against a real tided's RESP port, built the
way LMCache builds them (LMCacheEngineConfig, LMCacheMetadata, its LocalCPUBackend with its
own CPU allocator, CreateConnector from the remote URL): `redis://` (redis-py's asyncio
client: SET/GET/EXISTS/DEL of a chunk and its metadata key) and `resp://` (its C++ client).
Chunks are MemoryObjs from LMCache's own allocator; what comes back must equal what went in;
with a token, `redis://:TOKEN@` and the resp password must be accepted.
"""

import asyncio
import threading

import pytest
import torch

from conftest import TOKEN, Tided, stop

from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.connector import CreateConnector
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

CHUNK = 16
# layers, K/V, tokens, heads, head size: one chunk is 4*2*16*8*64 bf16 = 128 KiB.
KV_SHAPE = (4, 2, CHUNK, 8, 64)


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    th = threading.Thread(target=lp.run_forever, daemon=True)
    th.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    th.join(timeout=2)


def connector(url, loop, password=""):
    extra = {"password": password} if password else None
    cfg = LMCacheEngineConfig.from_defaults(chunk_size=CHUNK, local_cpu=True,
                                            max_local_cpu_size=0.05, remote_url=url,
                                            remote_serde="naive", extra_config=extra)
    meta = LMCacheMetadata(model_name="tide-test/model", world_size=1, local_world_size=1,
                           worker_id=0, local_worker_id=0, kv_dtype=torch.bfloat16,
                           kv_shape=KV_SHAPE)
    backend = LocalCPUBackend(cfg, meta)
    return CreateConnector(url, loop, backend, cfg, meta), backend, meta


def filled(backend, conn, seed):
    inner = conn.getWrappedConnector()
    obj = backend.allocate(inner.meta_shapes, inner.meta_dtypes, inner.meta_fmt)
    assert obj is not None
    g = torch.Generator().manual_seed(seed)
    obj.tensor.copy_(torch.randn(obj.tensor.shape, generator=g).to(obj.tensor.dtype))
    return obj


def run(loop, coro, timeout=30):
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=timeout)


def close(loop, conn):
    """Close the connector; the resp:// one's close waits on its C++ workers, bounded."""
    try:
        run(loop, conn.close(), timeout=2)
    except TimeoutError:
        pass


def drive(url, loop, password=""):
    conn, backend, _ = connector(url, loop, password)
    try:
        keys = [CacheEngineKey("tide-test/model", 1, 0, 0xABC0 + i, torch.bfloat16)
                for i in range(4)]
        objs = [filled(backend, conn, i) for i in range(4)]
        want = [o.tensor.clone() for o in objs]
        assert [run(loop, conn.exists(k)) for k in keys] == [False] * 4
        for k, o in zip(keys, objs):
            run(loop, conn.put(k, o))
        assert [run(loop, conn.exists(k)) for k in keys] == [True] * 4
        for k, w in zip(keys, want):
            got = run(loop, conn.get(k))
            assert got is not None and torch.equal(got.tensor, w)
    finally:
        close(loop, conn)


@pytest.mark.parametrize("scheme", ["redis", "resp"])
def test_remote_connector_round_trip(tmp_path, loop, scheme):
    t = Tided(tmp_path)
    try:
        drive(f"{scheme}://127.0.0.1:{t.resp}", loop)
    finally:
        stop(t.proc)


def test_redis_url_with_token(tmp_path, loop):
    t = Tided(tmp_path, token=True)
    try:
        drive(f"redis://:{TOKEN}@127.0.0.1:{t.resp}", loop)
    finally:
        stop(t.proc)


def test_resp_url_with_token(tmp_path, loop):
    t = Tided(tmp_path, token=True)
    try:
        drive(f"resp://127.0.0.1:{t.resp}", loop, password=TOKEN)
    finally:
        stop(t.proc)


def test_redis_connector_damaged_value_is_a_miss(tmp_path, loop):
    """redis:// stores a chunk as `<key>kv_bytes` and `<key>metadata`; a damaged kv_bytes
    value makes tided answer nil, which LMCache's connector turns into a miss (None), never
    the damaged bytes."""
    t = Tided(tmp_path)
    conn, backend, _ = connector(f"redis://127.0.0.1:{t.resp}", loop)
    try:
        k = CacheEngineKey("tide-test/model", 1, 0, 0xD00D, torch.bfloat16)
        o = filled(backend, conn, 99)
        raw = o.tensor.view(torch.uint8).numpy().tobytes()
        run(loop, conn.put(k, o))
        assert t.corrupt(raw) >= 1
        assert run(loop, conn.get(k)) is None
        assert run(loop, conn.exists(k)) is False  # it dropped the orphan metadata too
    finally:
        close(loop, conn)
        stop(t.proc)
