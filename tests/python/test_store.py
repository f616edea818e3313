"""tide.Store over the embedded mem:// backend: round trips with every buffer kind, the
errors each bad input raises (class, code and message), batch and scatter-gather calls,
match_prefix, stats, closing, and threads sharing one store."""

import array
import socket
import threading

import numpy as np
import pytest

import tide

# ---------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------


def test_put_get_with_str_and_bytes_keys(store):
    store.put("alpha", b"one")
    assert store.get("alpha") == b"one"
    assert store.get(b"alpha") == b"one"  # str keys are their UTF-8 bytes
    store.put("ключ/🔑", b"two")
    assert store.get("ключ/🔑".encode()) == b"two"
    store.put(bytearray(b"\x00bin\xff"), b"three")
    assert store.get(memoryview(b"\x00bin\xff")) == b"three"
    assert isinstance(store.get("alpha"), bytes)


def _value_kinds():
    base = bytearray(range(256)) * 4
    f32 = np.arange(48, dtype=np.float32).reshape(4, 12)
    ro = np.arange(10, dtype=np.int64)
    ro.flags.writeable = False
    big = np.arange(64, dtype=np.uint8).reshape(8, 8)
    return {
        "bytes": bytes(base),
        "bytearray": bytearray(base),
        "memoryview-readonly": memoryview(bytes(base)),
        "memoryview-slice": memoryview(base)[3:777],
        "array.array": array.array("d", [1.5, -2.25, 1e300]),
        "numpy-2d-f32": f32,
        "numpy-f16": np.linspace(0, 1, 33, dtype=np.float16),
        "numpy-readonly": ro,
        "numpy-row-view": big[3],  # contiguous view at an offset into its base
        "numpy-rows-view": big[2:5],
    }


@pytest.mark.parametrize("kind", sorted(_value_kinds()))
def test_put_accepts_every_buffer_kind(store, kind):
    value = _value_kinds()[kind]
    want = memoryview(value).tobytes()
    store.put(kind, value)
    assert store.get(kind) == want
    assert store.size(kind) == len(want)


def test_get_into_bytearray_memoryview_and_numpy(store):
    src = np.arange(24, dtype=np.float32).reshape(2, 12)
    store.put("k", src)
    n = src.nbytes

    ba = bytearray(n + 10)
    assert store.get_into("k", ba) == n
    assert bytes(ba[:n]) == src.tobytes() and ba[n:] == bytearray(10)

    # Into the middle of a larger bytearray through a memoryview: nothing outside touched.
    outer = bytearray(b"\xee" * (n + 20))
    assert store.get_into("k", memoryview(outer)[7 : 7 + n]) == n
    assert outer[:7] == b"\xee" * 7 and outer[7 + n :] == b"\xee" * 13
    assert bytes(outer[7 : 7 + n]) == src.tobytes()

    dst = np.zeros((2, 12), dtype=np.float32)
    assert store.get_into("k", dst) == n
    np.testing.assert_array_equal(dst, src)

    # A row of a larger array (a contiguous view at an offset).
    plane = np.zeros((3, 24), dtype=np.float32)
    assert store.get_into("k", plane[1]) == n
    np.testing.assert_array_equal(plane[1], src.ravel())
    assert not plane[0].any() and not plane[2].any()

    arr = array.array("f", [0.0] * 24)
    assert store.get_into("k", arr) == n
    assert list(arr) == list(src.ravel())


def test_a_second_put_of_a_key_keeps_the_first_value(store):
    store.put("k", b"first")
    store.put("k", b"second, longer")
    assert store.get("k") == b"first"


def test_exists_remove_and_mapping_forms(store):
    assert not store.exists("k") and "k" not in store
    store["k"] = b"v"
    assert store.exists("k") and "k" in store and store["k"] == b"v"
    assert store.remove("k") is True
    assert store.remove("k") is False
    store["k"] = b"v"
    del store["k"]
    with pytest.raises(tide.NotFound):
        del store["k"]
    with pytest.raises(KeyError):
        store["k"]


def test_clear(store):
    for i in range(10):
        store.put(f"k{i}", b"x" * (i + 1))
    store.clear()
    assert store.exists_many([f"k{i}" for i in range(10)]) == [False] * 10
    assert store.stats()["objects"] == 0


# ---------------------------------------------------------------------------------------
# Errors: class, code, name and message text
# ---------------------------------------------------------------------------------------


def test_empty_key(store):
    with pytest.raises(tide.InvalidKey) as ei:
        store.put("", b"v")
    e = ei.value
    assert e.code == tide.EKEYEMPTY and e.name == "TIDE_EKEYEMPTY"
    assert "empty key" in e.message and str(e) == f"{e.message} [TIDE_EKEYEMPTY]"
    assert isinstance(e, ValueError) and isinstance(e, tide.Error)
    for call in (store.get, store.exists, store.remove, store.size):
        with pytest.raises(tide.InvalidKey, match="empty key"):
            call(b"")


def test_long_key(store):
    store.put("k" * tide.KEY_MAX, b"v")  # the limit itself is fine
    with pytest.raises(tide.InvalidKey) as ei:
        store.put("k" * (tide.KEY_MAX + 1), b"v")
    assert ei.value.code == tide.EKEYLONG
    assert "257" in ei.value.message and "256" in ei.value.message
    # The limit is in bytes, not characters: 129 two-byte characters are 258 bytes.
    with pytest.raises(tide.InvalidKey, match="258"):
        store.get("ж" * 129)


def test_key_of_the_wrong_type(store):
    with pytest.raises(tide.InvalidKey, match="expected str or bytes, got int"):
        store.put(17, b"v")
    with pytest.raises(tide.InvalidKey, match="key 1: expected str or bytes, got NoneType"):
        store.exists_many(["a", None])


def test_empty_value(store):
    for empty in (b"", bytearray(), np.zeros(0, dtype=np.float32)):
        with pytest.raises(tide.InvalidValue) as ei:
            store.put("k", empty)
        assert ei.value.code == tide.EVALEMPTY and "empty value" in ei.value.message
    assert not store.exists("k")


def test_value_larger_than_the_store():
    with tide.Store("mem://?capacity=1MiB") as s:
        with pytest.raises(tide.InvalidValue) as ei:
            s.put("k", bytes(2 << 20))
        assert ei.value.code == tide.EVALBIG


def test_missing_key(store):
    with pytest.raises(tide.NotFound) as ei:
        store.get("no-such-key")
    e = ei.value
    assert e.code == tide.ENOTFOUND and e.name == "TIDE_ENOTFOUND"
    assert "no-such-key" in e.message and isinstance(e, KeyError)
    with pytest.raises(tide.NotFound, match="no-such-key"):
        store.get_into("no-such-key", bytearray(8))
    with pytest.raises(tide.NotFound):
        store.size("no-such-key")


def test_buffer_too_small_reports_the_size_needed(store):
    store.put("k", bytes(300))
    buf = bytearray(299)
    with pytest.raises(tide.BufferTooSmall) as ei:
        store.get_into("k", buf)
    e = ei.value
    assert e.code == tide.EBUFSMALL and e.needed == 300
    assert "300" in e.message and "299" in e.message
    assert store.get_into("k", bytearray(300)) == 300


def test_unknown_scheme():
    with pytest.raises(tide.ConfigError) as ei:
        tide.Store("nope://somewhere")
    assert ei.value.code == tide.ESCHEME and "nope://" in ei.value.message
    assert "mem://" in ei.value.message  # lists the schemes it knows


def test_bad_option():
    with pytest.raises(tide.ConfigError) as ei:
        tide.Store("mem://?bogus=1")
    assert ei.value.code == tide.EOPTION and "bogus" in ei.value.message
    with pytest.raises(tide.ConfigError) as ei:
        tide.Store("mem://?policy=fifo")
    assert ei.value.code == tide.EOPTION and "fifo" in ei.value.message


def test_bad_size():
    with pytest.raises(tide.ConfigError) as ei:
        tide.Store("mem://?capacity=lots")
    assert ei.value.code == tide.ESIZE and "capacity=lots" in ei.value.message


def test_malformed_url():
    with pytest.raises(tide.ConfigError) as ei:
        tide.Store("justtext")
    assert ei.value.code == tide.EURL


def test_unreachable_server():
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(tide.TransportError) as ei:
        tide.Store(f"tide://127.0.0.1:{port}?timeout_ms=2000")
    e = ei.value
    assert isinstance(e, ConnectionError) and e.name == "ECONNREFUSED"
    assert f"127.0.0.1:{port}" in e.message


def test_default_url_is_mem():
    for url in (None, ""):
        with tide.Store(url) as s:
            s.put("k", b"v")
            assert s.get("k") == b"v"
            assert s.url == "mem://"


# ---------------------------------------------------------------------------------------
# Buffers the binding refuses before calling C
# ---------------------------------------------------------------------------------------


def test_non_contiguous_arrays_are_refused(store):
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    store.put("k", np.ascontiguousarray(a[:, :4]))
    for bad in (a[:, :4], a[::2], a.T, memoryview(bytearray(64))[::2]):
        with pytest.raises(tide.InvalidBuffer, match="not C-contiguous") as ei:
            store.get_into("k", bad)
        assert isinstance(ei.value, ValueError) and ei.value.name == "EINVAL"
        with pytest.raises(tide.InvalidBuffer, match="not C-contiguous"):
            store.put("other", bad)
    with pytest.raises(tide.InvalidBuffer, match=r"value: numpy.ndarray of shape \(8, 4\)"):
        store.put("other", a[:, :4])
    assert not store.exists("other")


def test_read_only_targets_are_refused(store):
    store.put("k", b"12345678")
    ro = np.zeros(8, dtype=np.uint8)
    ro.flags.writeable = False
    for bad in (bytes(8), memoryview(bytes(8)), ro):
        with pytest.raises(tide.InvalidBuffer, match="read-only"):
            store.get_into("k", bad)


def test_objects_without_the_buffer_protocol_are_refused(store):
    with pytest.raises(tide.InvalidBuffer, match="got str"):
        store.put("k", "text is not bytes")
    with pytest.raises(tide.InvalidBuffer, match="buffer protocol.*got list"):
        store.put("k", [1, 2, 3])
    with pytest.raises(tide.InvalidBuffer, match="buffer protocol"):
        store.get_into("k", None)


# ---------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------


def test_put_many_per_key_results(store):
    res = store.put_many(["a", "", "c", "a", "x" * 300], [b"1", b"2", b"", b"4", b"5"])
    assert res == [0, tide.EKEYEMPTY, tide.EVALEMPTY, 0, tide.EKEYLONG]
    assert store.get("a") == b"1"  # the duplicate in the same batch did not replace it
    assert store.exists_many(["a", "c"]) == [True, False]


def test_get_many_into_buffers(store):
    store.put_many(["a", "b", "c"], [b"A" * 10, np.arange(5, dtype=np.int32), b"C" * 100])
    bufs = [bytearray(10), np.zeros(5, dtype=np.int32), bytearray(50), bytearray(4)]
    res = store.get_many(["a", "b", "c", "missing"], bufs)
    assert res == [10, 20, tide.EBUFSMALL, tide.ENOTFOUND]
    assert bufs[0] == b"A" * 10
    np.testing.assert_array_equal(bufs[1], np.arange(5, dtype=np.int32))


def test_get_many_as_bytes(store):
    store.put_many(["a", "b"], [b"alpha", bytes(range(200))])
    assert store.get_many(["b", "nope", "a", "b"]) == [bytes(range(200)), None, b"alpha", bytes(range(200))]
    assert store.get_many([]) == []
    # No room in a list of values for a per-key error other than "missing": it raises.
    with pytest.raises(tide.InvalidKey, match="key 1"):
        store.get_many(["a", ""])


def test_exists_many_and_remove_many(store):
    store.put_many(["a", "b", "c"], [b"1", b"2", b"3"])
    assert store.exists_many(["a", "zz", "c", ""]) == [True, False, True, False]
    assert store.remove_many(["a", "zz", "c"]) == [0, tide.ENOTFOUND, 0]
    assert store.exists_many(["a", "b", "c"]) == [False, True, False]


def test_empty_batches(store):
    assert store.put_many([], []) == []
    assert store.get_many([], []) == []
    assert store.exists_many([]) == []
    assert store.remove_many([]) == []
    assert store.match_prefix([]) == 0


def test_batch_argument_errors_raise(store):
    with pytest.raises(tide.InvalidArgument, match="put_many: 2 keys but 1 values"):
        store.put_many(["a", "b"], [b"1"])
    with pytest.raises(tide.InvalidArgument, match="get_many: 1 keys but 2 buffers"):
        store.get_many(["a"], [bytearray(1), bytearray(1)])
    with pytest.raises(tide.InvalidArgument, match="key 0: expected a list of buffers"):
        store.put_many_iov(["a"], [b"not a list"])
    assert not store.exists("a")


def test_more_keys_than_the_batch_limit(store):
    keys = [b"k%d" % i for i in range(tide.BATCH_MAX + 1)]
    with pytest.raises(tide.LimitExceeded) as ei:
        store.exists_many(keys)
    assert ei.value.code == tide.ELIMIT and str(tide.BATCH_MAX + 1) in ei.value.message


# ---------------------------------------------------------------------------------------
# Scatter-gather into a paged KV layout
# ---------------------------------------------------------------------------------------


def _kv_cache(num_blocks, seed):
    """A vLLM-like paged cache: (2, num_blocks, block_size, heads, head_dim) with the K
    plane at [0] and the V plane at [1]."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((2, num_blocks, 16, 4, 8)).astype(np.float16)


def test_scatter_gather_blocks_of_a_kv_cache(store):
    src = _kv_cache(num_blocks=12, seed=1)
    blocks = [3, 7, 0, 11]
    keys = [f"blk:{b}" for b in blocks]
    # One object per block: its K page then its V page (two pieces, one key).
    assert store.put_many_iov(keys, [[src[0, b], src[1, b]] for b in blocks]) == [0] * 4
    page = src[0, 0].nbytes
    assert store.get(keys[0]) == src[0, 3].tobytes() + src[1, 3].tobytes()

    # Load into different block ids of another cache, as a new request would.
    dst = np.zeros_like(src)
    targets = [1, 2, 9, 5]
    res = store.get_many_iov(keys, [[dst[0, t], dst[1, t]] for t in targets])
    assert res == [2 * page] * 4
    for b, t in zip(blocks, targets):
        np.testing.assert_array_equal(dst[:, t], src[:, b])
    untouched = [i for i in range(12) if i not in targets]
    assert not dst[:, untouched].any()


def test_scatter_list_shorter_than_the_value(store):
    src = _kv_cache(num_blocks=2, seed=2)
    store.put_many_iov(["b0"], [[src[0, 0], src[1, 0]]])
    dst = np.zeros_like(src)
    res = store.get_many_iov(["b0", "nope"], [[dst[0, 0]], [dst[0, 1], dst[1, 1]]])
    assert res == [tide.EBUFSMALL, tide.ENOTFOUND]


def test_scatter_piece_that_is_strided_is_named(store):
    src = _kv_cache(num_blocks=2, seed=3)
    with pytest.raises(tide.InvalidBuffer, match="buffer 1 of key 0.*not C-contiguous"):
        store.put_many_iov(["b0"], [[src[0, 0], src[1, :, 0]]])
    assert not store.exists("b0")


# ---------------------------------------------------------------------------------------
# match_prefix, stats, closing, threads
# ---------------------------------------------------------------------------------------


def test_match_prefix(store):
    chain = [f"model@tp_rank:0@{i:032x}" for i in range(5)]
    assert store.match_prefix(chain) == 0
    store.put_many(chain[:3], [b"x"] * 3)
    assert store.match_prefix(chain) == 3
    store.put(chain[4], b"x")  # a hole at 3 still ends the prefix there
    assert store.match_prefix(chain) == 3
    store.remove(chain[1])
    assert store.match_prefix(chain) == 1


def test_stats(store):
    st = store.stats()
    assert set(st) == set(tide._lib.STATS_FIELDS)
    assert all(isinstance(v, int) for v in st.values())
    assert st["capacity_bytes"] >= 64 << 20 and st["objects"] == 0
    store.put_many(["a", "b"], [bytes(100), bytes(300)])
    store.put("a", bytes(5))  # a duplicate
    with pytest.raises(tide.NotFound):
        store.get_into("missing", bytearray(1))
    store.get_into("b", bytearray(300))
    after = store.stats()
    # Counters are totals since the store started (a shared tided has run other tests).
    delta = {k: after[k] - st[k] for k in st}
    assert after["objects"] == 2 and delta["puts"] == 2 and delta["put_dups"] == 1
    assert delta["bytes_in"] == 400 and delta["bytes_out"] == 300
    assert delta["misses"] == 1 and delta["gets"] == 1
    assert after["used_bytes"] >= 400


def test_context_manager_closes(store):
    with tide.Store() as s:
        s.put("k", b"v")
        assert not s.closed
    assert s.closed and "closed" in repr(s)
    with pytest.raises(tide.ClosedError) as ei:
        s.get("k")
    assert ei.value.code == tide.ECLOSED and "closed" in ei.value.message
    for call in (lambda: s.put("k", b"v"), lambda: s.exists_many(["k"]), s.stats, s.clear):
        with pytest.raises(tide.ClosedError):
            call()
    s.close()  # a second close is harmless


def test_threads_share_one_store(store):
    errors = []
    nthreads, nkeys = 8, 200

    def worker(t):
        try:
            mine = [f"t{t}:k{i}" for i in range(nkeys)]
            vals = [np.full(64, t * 1000 + i, dtype=np.int32) for i in range(nkeys)]
            assert store.put_many(mine, vals) == [0] * nkeys
            for i in range(0, nkeys, 7):
                store.put(f"shared:{i}", np.full(64, i, dtype=np.int32))
            out = [np.empty(64, dtype=np.int32) for _ in range(nkeys)]
            assert store.get_many(mine, out) == [256] * nkeys
            for i in range(nkeys):
                assert out[i][0] == t * 1000 + i and out[i][-1] == t * 1000 + i
            # Each thread sees the message of its own failure.
            try:
                store.get(f"absent-of-thread-{t}")
            except tide.NotFound as e:
                assert f"absent-of-thread-{t}" in e.message, e.message
            else:
                raise AssertionError("no NotFound")
        except Exception as e:  # reported by the main thread
            errors.append((t, e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert store.stats()["objects"] == nthreads * nkeys + len(range(0, nkeys, 7))
    for i in range(0, nkeys, 7):
        assert np.frombuffer(store.get(f"shared:{i}"), dtype=np.int32)[0] == i


def test_close_while_other_threads_are_calling():
    s = tide.Store("mem://?capacity=16MiB")
    s.put("k", bytes(4096))
    started = threading.Barrier(5)
    outcomes = []

    def reader():
        buf = bytearray(4096)
        started.wait()
        calls = 0
        while True:
            try:
                s.get_into("k", buf)
                calls += 1
            except tide.ClosedError:
                outcomes.append(calls)
                return

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for th in threads:
        th.start()
    started.wait()
    s.close()  # waits for the calls in flight, then frees the handle
    for th in threads:
        th.join(timeout=30)
    assert len(outcomes) == 4 and s.closed


def test_borrowed_handle_holds_close_until_the_block_ends():
    """The handle another module passes to libtide (Store.borrowed_handle): close() waits
    for the block to end; once closed, borrowing raises ClosedError."""
    s = tide.Store("mem://?capacity=16MiB")
    closed = threading.Event()
    with s.borrowed_handle() as h:
        assert h  # the tide_store pointer
        th = threading.Thread(target=lambda: (s.close(), closed.set()))
        th.start()
        assert not closed.wait(0.2)  # close() waits for the borrowed handle
        assert s._lib.tide_exists(h, b"k", 1) == 0  # the handle still works
    assert closed.wait(30)
    th.join(timeout=30)
    with pytest.raises(tide.ClosedError):
        with s.borrowed_handle():
            pass


def test_raw_address_forms(store):
    src = _kv_cache(num_blocks=4, seed=4)
    page = src[0, 0].nbytes
    ptrs = [[src[0, b].ctypes.data, src[1, b].ctypes.data] for b in (1, 2)]
    assert store.put_many_ptrs(["p1", "p2"], ptrs, [[page, page]] * 2) == [0, 0]
    assert store.get("p2") == src[0, 2].tobytes() + src[1, 2].tobytes()
    dst = np.zeros_like(src)
    dptrs = [[dst[0, 3].ctypes.data, dst[1, 3].ctypes.data], [dst[0, 0].ctypes.data]]
    res = store.get_many_ptrs(["p1", "p2"], dptrs, [[page, page], [page]])
    assert res == [2 * page, tide.EBUFSMALL]
    np.testing.assert_array_equal(dst[:, 3], src[:, 1])
    with pytest.raises(tide.InvalidArgument, match="key 0: 2 pointers but 1 sizes"):
        store.put_many_ptrs(["x"], [ptrs[0]], [[page]])
    with pytest.raises(tide.InvalidArgument, match=r"key 0 piece 0: bad address/size \(0, 8\)"):
        store.put_many_ptrs(["x"], [[0]], [[8]])
    with pytest.raises(tide.InvalidArgument, match="bad address/size"):
        store.get_many_ptrs(["x"], [[dst.ctypes.data]], [[-1]])
    with pytest.raises(tide.InvalidArgument, match="1 keys but 2 pointer lists"):
        store.get_many_ptrs(["x"], dptrs, [[page]])
    assert not store.exists("x")
