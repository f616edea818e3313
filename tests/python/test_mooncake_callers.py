"""The call sequences of three real users of Mooncake's Python store API, replayed
against the ``mooncake.store`` drop-in and a real tided, bytes compared:

- vLLM's MooncakeStoreConnector worker (vllm/distributed/kv_transfer/kv_connector/v1/
  mooncake/store/worker.py): setup with the seven positional settings (standalone-store
  mode: global_segment_size 0), register_buffer per KV-cache storage, lookups by
  batch_is_exist prefix, saves by batch_put_from_multi_buffers of per-block K/V pages
  with a ReplicateConfig (group_ids when the class has them), -200 read as pressure,
  loads by batch_get_replica_desc (tier log) then batch_get_into_multi_buffers;
- LMCache's Mooncake backend (lmcache/v1/storage_backend/connector/
  mooncakestore_connector.py): config from $MOONCAKE_CONFIG_PATH, setup, ReplicateConfig
  with preferred_segment = get_hostname(), register_buffer of the pinned CPU buffer;
  zero-copy mode put_from / batch_get_into; chunk-metadata mode put_parts(key, 28-byte
  metadata, data) / batch_get_buffer; is_exist; unregister_buffer; close;
- SGLang HiCache's Mooncake backend (python/sglang/srt/mem_cache/storage/mooncake_store/
  mooncake_store.py): settings from MOONCAKE_* variables, host pool from
  MooncakeHostMemAllocator, the eight-argument setup with a transfer engine (None),
  warmup put / is_exist / get of a 4 KiB value, register_buffer of the host pool,
  batch_is_exist, batch_put_from / batch_get_into of per-page K and V keys.

The sequences are written here from reading those sources; no code of theirs is used.
Nothing here needs torch: numpy arrays stand for the tensors and their data_ptr().
"""

import ctypes
import json
import struct
import uuid

import numpy as np
import pytest

from tide import mooncake as mc


@pytest.fixture
def env(monkeypatch):
    for v in ("TIDE_URL", "MOONCAKE_MASTER", "MOONCAKE_CONFIG_PATH"):
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def emptied(tided):
    c = mc.MooncakeDistributedStore()
    assert c.setup("h", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", f"127.0.0.1:{tided}") == 0
    assert c.remove_all() >= 0
    c.close()


# -- vLLM ------------------------------------------------------------------------------

NUM_BLOCKS, BLOCK, HEADS, DIM = 16, 16, 2, 32


def kv_cache(seed=None):
    shape = (2, NUM_BLOCKS, BLOCK, HEADS, DIM)  # (K/V, blocks, ...): one storage
    if seed is None:
        return np.zeros(shape, np.float16)
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16)


def block_pieces(caches, blocks):
    """Per block: the K page and V page of every layer, and their sizes."""
    ptrs, sizes = [], []
    for b in blocks:
        p, s = [], []
        for c in caches:
            page = c.strides[1]
            p += [c.ctypes.data + b * page, c.ctypes.data + c.strides[0] + b * page]
            s += [page, page]
        ptrs.append(p)
        sizes.append(s)
    return ptrs, sizes


def vllm_lookup(store, keys):
    hits = 0
    for present in store.batch_is_exist(keys):
        if present != 1:
            break
        hits += 1
    return hits


def test_vllm_store_worker_sequence(env, tided):
    emptied(tided)
    store = mc.MooncakeDistributedStore()
    # standalone-store mode: the rank contributes no segment, has a local buffer
    assert store.setup("10.0.0.1", "P2PHANDSHAKE", 0, 4 << 30, "rdma", "mlx5_0",
                       f"127.0.0.1:{tided}", tenant_id="default") == 0
    layers_src = [kv_cache(seed=s) for s in (1, 2)]  # prefill instance's caches
    layers_dst = [kv_cache(), kv_cache()]             # decode instance's caches
    seen = set()
    for c in layers_src + layers_dst:
        if c.ctypes.data not in seen:
            seen.add(c.ctypes.data)
            assert store.register_buffer(c.ctypes.data, c.nbytes) == 0
    prefix = "llama@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0"
    keys = [f"{prefix}@{h:032x}" for h in (0xA1, 0xB2, 0xC3, 0xD4)]

    # scheduler lookup: nothing cached yet
    assert vllm_lookup(store, keys) == 0
    # save: group ids when the installed ReplicateConfig has them
    cfg = mc.ReplicateConfig()
    assert hasattr(mc.ReplicateConfig, "group_ids") or hasattr(cfg, "group_ids")
    cfg.group_ids = [f"vllm-mooncake-store:llama@{k[-8:]}" for k in keys]
    cfg.prefer_alloc_in_same_node = True
    src_blocks = [3, 5, 8, 13]
    ptrs, sizes = block_pieces(layers_src, src_blocks)
    res = store.batch_put_from_multi_buffers(keys, ptrs, sizes, cfg)
    assert res == [0, 0, 0, 0]
    assert mc.NO_AVAILABLE_HANDLE not in res  # what the worker reads as store pressure
    assert vllm_lookup(store, keys + [f"{prefix}@{0xE5:032x}"]) == 4
    # a second save of the same blocks changes nothing
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes, cfg) == [0] * 4

    # load: tier log, then the scatter read into other block ids
    tiers = store.batch_get_replica_desc(keys)
    assert all(tiers[k][0].is_memory_replica() for k in keys)
    dst_blocks = [0, 1, 2, 15]
    ptrs, sizes = block_pieces(layers_dst, dst_blocks)
    res = store.batch_get_into_multi_buffers(keys, ptrs, sizes)
    page = layers_src[0].strides[1]
    assert res == [4 * page] * 4
    failed = [k for k, r in zip(keys, res) if r < 0]
    assert failed == []
    for s, d in zip(src_blocks, dst_blocks):
        for src, dst in zip(layers_src, layers_dst):
            assert src[:, s].tobytes() == dst[:, d].tobytes()
    assert not any(dst[:, 3:15].any() for dst in layers_dst)
    # a block the store does not have fails alone
    res = store.batch_get_into_multi_buffers([keys[0], f"{prefix}@{0xFF:032x}"],
                                             ptrs[:2], sizes[:2])
    assert res[0] == 4 * page and res[1] == mc.OBJECT_NOT_FOUND
    assert store.close() == 0


def test_vllm_chunked_sessions_sequence(env, tided):
    """vLLM's chunk-spanning path (its Mooncake session tracker): a put session per
    chunk, ranged writes, end (or revoke); a get session, ranged reads, end."""
    emptied(tided)
    store = mc.MooncakeDistributedStore()
    assert store.setup("h", "P2PHANDSHAKE", 0, 1 << 30, "tcp", "", f"127.0.0.1:{tided}") == 0
    src, dst = kv_cache(seed=9), kv_cache()
    for c in (src, dst):
        assert store.register_buffer(c.ctypes.data, c.nbytes) == 0
    page = src.strides[1]
    keys = ["chunk@0", "chunk@1", "chunk@2"]
    assert store.batch_put_session_start(keys, [2 * page] * 3) == [0, 0, 0]
    kptr = [src.ctypes.data + b * page for b in (1, 2, 3)]
    vptr = [src.ctypes.data + src.strides[0] + b * page for b in (1, 2, 3)]
    # K halves first (one chunk of layers), V halves later
    assert store.batch_put_from_multi_buffer_ranges(keys, [[p] for p in kptr], [[page]] * 3,
                                                    [[0]] * 3) == [0, 0, 0]
    assert store.batch_put_from_multi_buffer_ranges(keys, [[p] for p in vptr], [[page]] * 3,
                                                    [[page]] * 3) == [0, 0, 0]
    assert store.batch_put_session_end(keys[:2]) == [0, 0]
    assert store.batch_put_session_revoke(keys[2:]) == [0]
    assert store.batch_is_exist(keys) == [1, 1, 0]
    assert store.batch_get_session_start(keys[:2]) == [0, 0]
    for half in (0, 1):
        ptrs = [[dst.ctypes.data + half * dst.strides[0] + b * page] for b in (7, 9)]
        assert store.batch_get_into_multi_buffer_ranges(keys[:2], ptrs, [[page]] * 2,
                                                        [[half * page]] * 2) == [page, page]
    assert store.batch_get_session_end(keys[:2]) == 0
    assert src[:, 1].tobytes() == dst[:, 7].tobytes()
    assert src[:, 2].tobytes() == dst[:, 9].tobytes()
    store.close()


# -- LMCache ---------------------------------------------------------------------------

META_LEN = 28  # LMCache's RemoteMetadata: length, shape (4 x int32), dtype, format


def lmcache_metadata(length, shape, dtype_code, fmt):
    return struct.pack("<i4iii", length, *shape, dtype_code, fmt)


def lmcache_connector(tmp_path, tided, env):
    cfg = tmp_path / "mooncake.json"
    cfg.write_text(json.dumps({
        "local_hostname": "lmcache-node", "metadata_server": "http://127.0.0.1:8080/metadata",
        "global_segment_size": 3355443200, "local_buffer_size": 1073741824,
        "protocol": "tcp", "device_name": "", "master_server_address": f"127.0.0.1:{tided}",
        "transfer_timeout": 1, "prefer_local_alloc": True,
    }))
    env.setenv("MOONCAKE_CONFIG_PATH", str(cfg))
    conf = json.loads(open(cfg).read())
    store = mc.MooncakeDistributedStore()
    store.setup(conf["local_hostname"], conf["metadata_server"], conf["global_segment_size"],
                conf["local_buffer_size"], conf["protocol"], conf["device_name"],
                conf["master_server_address"])
    rc = mc.ReplicateConfig()
    rc.replica_num = 1
    if conf["prefer_local_alloc"]:
        rc.preferred_segment = store.get_hostname()
    return store, rc


def test_lmcache_zero_copy_sequence(env, tided, tmp_path):
    emptied(tided)
    store, rc = lmcache_connector(tmp_path, tided, env)
    assert rc.preferred_segment.startswith("lmcache-node:")  # Mooncake's host:port
    pinned = np.zeros(8 << 20, np.uint8)  # the pinned allocator's buffer
    assert store.register_buffer(pinned.ctypes.data, pinned.size) == 0
    chunk = 256 << 10
    keys = [f"vllm@llama@1@0@{i:016x}" for i in range(6)]
    rng = np.random.default_rng(5)
    for i, k in enumerate(keys):
        pinned[i * chunk:(i + 1) * chunk] = rng.integers(0, 256, chunk, dtype=np.uint8)
        assert store.put_from(k, pinned.ctypes.data + i * chunk, chunk, rc) == 0
    saved = pinned[: 6 * chunk].copy()
    assert store.is_exist(keys[0]) and store.is_exist("vllm@missing") == 0
    # batched_get: new buffers further on in the pinned region
    base = 16 * chunk
    ptrs = [pinned.ctypes.data + base + i * chunk for i in range(7)]
    got = store.batch_get_into(keys + ["vllm@missing"], ptrs, [chunk] * 7)
    assert got[:6] == [chunk] * 6 and got[6] < 0  # <= 0 is a miss for LMCache
    assert pinned[base: base + 6 * chunk].tobytes() == saved.tobytes()
    assert store.unregister_buffer(pinned.ctypes.data) == 0
    store.close()


def test_lmcache_chunk_metadata_sequence(env, tided, tmp_path):
    emptied(tided)
    store, rc = lmcache_connector(tmp_path, tided, env)
    kv = np.random.default_rng(3).standard_normal((2, 4, 16, 64)).astype(np.float16)
    kv_bytes = kv.tobytes()
    meta = lmcache_metadata(len(kv_bytes), kv.shape, 1, 2)
    assert len(meta) == META_LEN
    assert store.put_parts("lm@k0", meta, kv_bytes) == 0
    assert store.put_parts("lm@k1", meta, memoryview(kv).cast("B")) == 0
    buffers = store.batch_get_buffer(["lm@k0", "lm@k1", "lm@nope"])
    assert buffers[2] is None
    for b in buffers[:2]:
        view = memoryview(b)
        length, *shape, dtype, fmt = struct.unpack("<i4iii", view[:META_LEN])
        assert (length, tuple(shape), dtype, fmt) == (len(kv_bytes), kv.shape, 1, 2)
        assert len(view) == length + META_LEN
        got = np.frombuffer(b, dtype=np.float16, offset=META_LEN,
                            count=int(np.prod(shape))).reshape(shape)
        assert got.tobytes() == kv_bytes
        assert ctypes.string_at(b.ptr() + META_LEN, 16) == kv_bytes[:16]
    store.close()


# -- SGLang HiCache ---------------------------------------------------------------------


def sglang_config(env, tided):
    env.setenv("MOONCAKE_MASTER", f"127.0.0.1:{tided}")
    env.setenv("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE")
    env.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "4gb")
    env.setenv("MOONCAKE_PROTOCOL", "rdma")
    env.setenv("MOONCAKE_DEVICE", "")
    import os

    s = os.environ["MOONCAKE_GLOBAL_SEGMENT_SIZE"].strip().lower()
    size = int(s[:-2]) * (1 << 30) if s.endswith("gb") else int(s)
    return {
        "local_hostname": os.environ.get("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
        "metadata_server": os.environ["MOONCAKE_TE_META_DATA_SERVER"],
        "global_segment_size": size,
        "protocol": os.environ["MOONCAKE_PROTOCOL"],
        "device_name": os.environ["MOONCAKE_DEVICE"],
        "master_server_address": os.environ["MOONCAKE_MASTER"],
    }


def test_sglang_hicache_sequence(env, tided):
    emptied(tided)
    conf = sglang_config(env, tided)
    store = mc.MooncakeDistributedStore()
    tp_size, pp_size = 2, 1
    per_rank_segment = conf["global_segment_size"] // (tp_size * pp_size)
    transfer_engine = None  # no shared engine to reuse
    ret = store.setup(conf["local_hostname"], conf["metadata_server"], per_rank_segment,
                      16 << 20, conf["protocol"], conf["device_name"],
                      conf["master_server_address"], transfer_engine)
    assert ret == 0
    # warmup
    warm_key = "sglang_mooncake_store_warmup_key" + uuid.uuid4().hex
    warm_val = bytes(4 * 1024)
    assert store.put(warm_key, warm_val) == 0
    assert store.is_exist(warm_key) == 1
    assert store.get(warm_key) == warm_val

    # host KV pool from MooncakeHostMemAllocator, registered whole
    pages, page_tokens, layers, heads, dim = 8, 4, 2, 2, 16
    shape = (2, layers, pages * page_tokens, heads, dim)
    nbytes = int(np.prod(shape)) * 2
    alloc = mc.MooncakeHostMemAllocator()
    ptr = alloc.alloc(nbytes)
    host = np.frombuffer((ctypes.c_byte * nbytes).from_address(ptr), dtype=np.float16).reshape(shape)
    host[...] = np.random.default_rng(11).standard_normal(shape).astype(np.float16)
    assert store.register_buffer(ptr, nbytes) == 0

    # page-first layout: one page's K (or V) for one layer is a contiguous run
    def page_ptr(kv, layer, page):
        return ptr + (kv * host.strides[0] + layer * host.strides[1]
                      + page * page_tokens * host.strides[2])

    page_bytes = page_tokens * heads * dim * 2
    hashes = [f"{h:064x}" for h in range(100, 104)]
    suffix = "0"  # mha_suffix = tp rank
    keys, ptrs = [], []
    for i, h in enumerate(hashes):
        for layer in range(layers):
            keys += [f"{h}_{suffix}_l{layer}_k", f"{h}_{suffix}_l{layer}_v"]
            ptrs += [page_ptr(0, layer, i), page_ptr(1, layer, i)]
    assert store.batch_is_exist(keys) == [0] * len(keys)
    assert store.batch_put_from(keys, ptrs, [page_bytes] * len(keys)) == [0] * len(keys)
    exist = store.batch_is_exist(keys + ["nope_0_k"])
    assert exist == [1] * len(keys) + [0]
    saved = host.copy()
    # prefetch into other pages of the pool
    dst = []
    for i in range(len(hashes)):
        for layer in range(layers):
            dst += [page_ptr(0, layer, 4 + i), page_ptr(1, layer, 4 + i)]
    host[:, :, 4 * page_tokens:] = 0
    assert store.batch_get_into(keys, dst, [page_bytes] * len(keys)) == [page_bytes] * len(keys)
    for i in range(len(hashes)):
        a = saved[:, :, i * page_tokens:(i + 1) * page_tokens]
        b = host[:, :, (4 + i) * page_tokens:(5 + i) * page_tokens]
        assert a.tobytes() == b.tobytes()
    del host
    assert store.close() == 0
    assert alloc.free(ptr) == 0
