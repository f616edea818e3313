"""The connector's C API through ctypes, as the vLLM module will call it: numpy buffers
registered with their shape and strides, a save from one worker and a load into another,
bit-exact, with completions and metadata passed as bytes."""

import ctypes

import numpy as np

from tide import _lib

CONFIG = (
    '{"model_config":{"model":"org/Py-1B"},"cache_config":{"block_size":16},'
    '"parallel_config":{},"kv_transfer_config":{"kv_role":"kv_both"},'
    '"kv_cache_config":{"kv_cache_groups":[{"kv_cache_spec":{"type":"FullAttentionSpec",'
    '"block_size":16,"num_kv_heads":1,"head_size":4,"dtype":"float16"}}]}}'
).encode()


def create(L, store, role):
    c = _lib.ConnectorPtr()
    rc = L.tide_connector_create_with_store(CONFIG, store, role, ctypes.byref(c))
    assert rc == 0, L.tide_connector_errmsg(None)
    return c


def register(L, w, kv):
    shape = (ctypes.c_int64 * kv.ndim)(*kv.shape)
    strides = (ctypes.c_int64 * kv.ndim)(*(s // kv.itemsize for s in kv.strides))
    rc = L.tide_connector_register_region(
        w, 0, kv.ctypes.data, kv.nbytes, kv.shape[1], kv.ndim, shape, strides, kv.itemsize
    )
    assert rc == 0, L.tide_connector_errmsg(w)


def run_step(L, s, workers):
    meta = _lib.ConnectorMetaPtr()
    assert L.tide_connector_build_meta(s, ctypes.byref(meta)) == 0
    size = ctypes.c_size_t()
    L.tide_connector_meta_serialize(meta, None, 0, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    assert L.tide_connector_meta_serialize(meta, buf, size.value, ctypes.byref(size)) == 0
    L.tide_connector_meta_free(meta)
    parsed = _lib.ConnectorMetaPtr()
    assert L.tide_connector_meta_parse(buf, size.value, ctypes.byref(parsed)) == 0
    for w in workers:
        assert L.tide_connector_start_jobs(w, parsed, _lib.CONNECTOR_LOAD | _lib.CONNECTOR_SAVE) >= 0
        assert L.tide_connector_wait(w) == 0
    L.tide_connector_meta_free(parsed)


def test_save_and_load_through_ctypes():
    L = _lib.lib()
    store = _lib.StorePtr()
    assert L.tide_open(b"mem://?capacity=8MiB", ctypes.byref(store)) == 0
    s = create(L, store, _lib.CONNECTOR_SCHEDULER)
    w1 = create(L, store, _lib.CONNECTOR_WORKER)
    w2 = create(L, store, _lib.CONNECTOR_WORKER)
    # vLLM's flash-attention layout: (2, num_blocks, block_size, heads, head_size).
    kv1 = np.random.default_rng(1).standard_normal((2, 8, 16, 1, 4)).astype(np.float16)
    kv2 = np.zeros_like(kv1)
    register(L, w1, kv1)
    register(L, w2, kv2)
    hashes = bytes(range(256))[: 4 * 32]  # four sha256-sized block hashes
    ids = (ctypes.c_int32 * 4)(0, 1, 2, 3)
    count = (ctypes.c_size_t * 1)(4)
    assert L.tide_connector_request_step(s, b"p", 64, 64, hashes, 4, 32, ids, count, 1, 1) == 0
    run_step(L, s, [w1])
    new = ctypes.c_int64()
    assert L.tide_connector_lookup(s, b"c", 65, hashes, 4, 32, 0, ctypes.byref(new)) == 0
    assert new.value == 64
    cids = (ctypes.c_int32 * 4)(4, 5, 6, 7)
    assert L.tide_connector_update_after_alloc(s, b"c", cids, count, 1, 64) == 0
    assert L.tide_connector_request_step(s, b"c", 65, 65, hashes, 4, 32, cids, count, 1, 1) == 0
    run_step(L, s, [w2])
    out = ctypes.create_string_buffer(64)
    assert L.tide_connector_get_finished(w2, _lib.CONNECTOR_LOAD, out, 64) == 1
    assert out.value == b"c"
    errs = (ctypes.c_int32 * 4)()
    assert L.tide_connector_get_load_errors(w2, errs, 4) == 0
    assert np.array_equal(kv2[:, 4:8], kv1[:, 0:4])
    stats = _lib.ConnectorStats()
    assert L.tide_connector_get_stats(w2, ctypes.byref(stats), ctypes.sizeof(stats)) == 0
    assert stats.loaded_objects == 4 and stats.load_get.calls == 1
    for c in (w1, w2, s):
        L.tide_connector_destroy(c)
    L.tide_close(store)
