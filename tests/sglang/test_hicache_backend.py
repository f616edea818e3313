"""tide.sglang against SGLang 0.5.23's own code on CPU: the backend made by SGLang's
StorageBackendFactory ('dynamic'), pages of SGLang's real MHATokenToKVPoolHost and
MambaPoolHost moved through v1 (batch_*_v1), v2 (batch_*_v2, batch_exists_v2) and the flat
page calls, to a real tided over unix:// and tide://, and a two-node cluster with a node
killed. Every round trip clears the host pages first and compares bytes."""

import os
import signal

import pytest
import torch
from conftest import PAGE, fill, mamba_host, mha_host, page_bytes, storage_config
from sglang.srt.mem_cache.hicache_storage import (
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
)
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

import tide
from tide.sglang import SGLangSetupError, TideHiCacheStorage


def make(url, host=None, **kw):
    """The backend as SGLang's cache controller makes it: the factory, then the anchor pool.
    interface_v1 on (as docs/SGLANG.md configures it) unless a test says otherwise."""
    kw.setdefault("interface_v1", 1)
    host = host if host is not None else mha_host()
    b = StorageBackendFactory.create_backend("dynamic", storage_config(url, **kw), host)
    b.register_mem_pool_host(host)
    return b, host


def idx(pages):
    """Host token indices of the given host pages (page p holds tokens p*PAGE..)."""
    return torch.cat([torch.arange(p * PAGE, (p + 1) * PAGE) for p in pages])


def hashes(n, tag="a"):
    return [f"{tag}{i:063x}" for i in range(n)]


def clear(host, pages):
    for p in pages:
        page = host.get_data_page(p * PAGE, flat=True)
        host.set_from_flat_data_page(p * PAGE, torch.zeros_like(page))


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
@pytest.mark.parametrize("scheme", ["unix", "tcp"])
def test_v1_round_trip_through_the_factory(tided, layout, scheme):
    url = tided.unix if scheme == "unix" else tided.tcp
    b, host = make(url, mha_host(layout))
    assert isinstance(b, TideHiCacheStorage)
    assert b.pools["kv"].mode == "ptr"  # pages read and written in place
    fill(host, [p * PAGE for p in range(1, 5)], seed=1)
    want = [page_bytes(host, p * PAGE) for p in range(1, 5)]
    keys = hashes(4)
    assert b.batch_set_v1(keys, idx([1, 2, 3, 4])) == [True] * 4
    assert b.batch_exists(keys + hashes(2, "z")) == 4
    assert b.exists(keys[0]) and not b.exists("z" * 64)
    clear(host, range(5, 9))
    assert b.batch_get_v1(keys, idx([5, 6, 7, 8])) == [True] * 4
    assert [page_bytes(host, p * PAGE) for p in range(5, 9)] == want
    assert b.batch_get_v1(hashes(1, "z"), idx([9])) == [False]
    b.close()


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_flat_page_calls_round_trip(tided, layout):
    """SGLang's generic path (no interface_v1): batch_set of flat pages, batch_get into
    the pool's dummy pages, then set_from_flat_data_page."""
    b, host = make(tided.unix, mha_host(layout), interface_v1=0)
    fill(host, [PAGE, 2 * PAGE], seed=2)
    data = [host.get_data_page(p, flat=True) for p in (PAGE, 2 * PAGE)]
    want = [page_bytes(host, p) for p in (PAGE, 2 * PAGE)]
    assert b.batch_exists(hashes(2)) == 0
    assert b.batch_set(hashes(2), data)
    # SGLang's hit query (batch_exists, then batch_get of the hits) finds flat pages.
    assert b.batch_exists(hashes(2) + hashes(1, "z")) == 2 and b.exists(hashes(1)[0])
    got = b.batch_get(hashes(2), [host.get_dummy_flat_data_page() for _ in range(2)])
    assert [bytes(g.contiguous().view(torch.uint8).numpy().tobytes()) for g in got] == want
    assert b.get("z" * 64, host.get_dummy_flat_data_page()) is None
    # Pages written in place (v1) and flat pages are separate scopes: never read across
    # (a layer-first flat page holds every K layer then every V layer; in place, K and V
    # alternate by layer).
    assert b.batch_get_v1(hashes(2), idx([3, 4])) == [False, False]
    assert b.batch_set_v1(hashes(2, "v"), idx([1, 2])) == [True, True]
    assert b.batch_get(hashes(2, "v"), [host.get_dummy_flat_data_page()] * 2) == [None, None]
    assert b.batch_exists(hashes(2, "v")) == 0  # nor counted by this (flat) backend's query


def test_v2_kv_and_mamba_round_trip_and_hits(tided):
    b, host = make(tided.unix)
    mamba = mamba_host()
    b.register_mem_host_pool_v2(host, PoolName.KV)
    b.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
    assert b.pools["mamba"].mode == "ptr"
    fill(host, [p * PAGE for p in range(1, 4)], seed=3)
    fill(mamba, [2], seed=4)
    keys = hashes(3)
    kv_want = [page_bytes(host, p * PAGE) for p in range(1, 4)]
    st_want = page_bytes(mamba, 2)
    res = b.batch_set_v2([
        PoolTransfer(name=PoolName.KV, host_indices=idx([1, 2, 3]), keys=keys),
        PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([2]), keys=keys[-1:]),
    ])
    assert res == {"kv": [True] * 3, "mamba": [True]}
    mt = PoolTransfer(name=PoolName.MAMBA, keys=keys[-1:], hit_policy=PoolHitPolicy.TRAILING_PAGES)
    r = b.batch_exists_v2(keys, [mt])
    assert (r.kv_hit_pages, r.extra_pool_hit_pages, r.restorable_prefix_pages) == (
        3, {"kv": 3, "mamba": 3}, [3])
    clear(host, range(4, 7))
    mamba.set_from_flat_data_page(5, torch.zeros(len(st_want), dtype=torch.uint8))
    res = b.batch_get_v2([
        PoolTransfer(name=PoolName.KV, host_indices=idx([4, 5, 6]), keys=keys),
        PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([5]), keys=keys[-1:]),
    ])
    assert res == {"kv": [True] * 3, "mamba": [True]}
    assert [page_bytes(host, p * PAGE) for p in range(4, 7)] == kv_want
    assert page_bytes(mamba, 5) == st_want


def test_mamba_without_zero_copy_meta_goes_through_flat_copies(tided):
    """A host pool SGLang cannot describe by address (here: a Mamba pool whose
    get_page_buffer_meta refuses) is moved with get_data_page/set_from_flat_data_page."""
    b, host = make(tided.unix)
    mamba = mamba_host()

    def refuse(indices):
        raise NotImplementedError("no zero-copy here")

    mamba.get_page_buffer_meta = refuse
    b.register_mem_host_pool_v2(mamba, "mamba")
    assert b.pools["mamba"].mode == "flat"
    fill(host, [PAGE], seed=5)
    fill(mamba, [1], seed=6)
    want = page_bytes(mamba, 1)
    assert b.batch_set_v1(hashes(1), idx([1])) == [True]
    assert b.batch_set_v2([PoolTransfer(name="mamba", host_indices=torch.tensor([1]),
                                        keys=hashes(1))]) == {"mamba": [True]}
    mamba.set_from_flat_data_page(3, torch.zeros(len(want), dtype=torch.uint8))
    assert b.batch_get_v2([PoolTransfer(name="mamba", host_indices=torch.tensor([3]),
                                        keys=hashes(1))]) == {"mamba": [True]}
    assert page_bytes(mamba, 3) == want


def test_a_page_of_another_size_is_refused_when_saved(tided, caplog):
    """The header of a stored page says it holds the pool's page size (measured at
    registration): a page whose bytes add up to another size is not stored, and the error
    names it; the other pages of the call are saved."""
    b, host = make(tided.unix)
    pool = b.pools["kv"]
    assert pool.mode == "ptr"
    fill(host, [p * PAGE for p in range(1, 3)], seed=9)
    real = host.get_page_buffer_meta

    def one_short(indices):  # page 0 of the call one byte short
        ptrs, sizes = real(indices)
        per = len(sizes) // (len(indices) // PAGE)
        sizes = list(sizes)
        sizes[per - 1] = int(sizes[per - 1]) - 1
        return ptrs, sizes

    host.get_page_buffer_meta = one_short
    keys = hashes(2, "s")
    with caplog.at_level("ERROR", logger="tide.sglang"):
        assert b.batch_set_v1(keys, idx([1, 2])) == [False, True]
    assert f"page 0 has {pool.payload - 1} bytes, this pool's pages have {pool.payload}" in (
        caplog.text
    )
    assert not b.exists(keys[0]) and b.exists(keys[1])
    host.get_page_buffer_meta = real
    b.close()


def _kv_and_state(b, host, mamba, keys, page0, slot, seed):
    n = len(keys)
    fill(host, [p * PAGE for p in range(page0, page0 + n)], seed=seed)
    fill(mamba, [slot], seed=seed + 100)
    res = b.batch_set_v2([
        PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([slot]), keys=keys[-1:]),
        PoolTransfer(name=PoolName.KV, host_indices=idx(range(page0, page0 + n)), keys=keys),
    ])
    assert all(all(v) for v in res.values()), res


def test_a_state_is_never_paired_with_the_wrong_kv(tided):
    b, host = make(tided.unix)
    mamba = mamba_host()
    b.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
    a, c = hashes(3, "a"), hashes(3, "c")
    _kv_and_state(b, host, mamba, a, 1, 1, seed=10)
    _kv_and_state(b, host, mamba, c, 4, 2, seed=20)
    raw = tide.Store(tided.unix)
    trail = PoolTransfer(name=PoolName.MAMBA, keys=a[-1:], hit_policy=PoolHitPolicy.TRAILING_PAGES)
    get_state = [PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([9]), keys=a[-1:])]

    # 1. A's state copied under C's state key (a store that mixed objects up): C misses.
    ka, kc = b.pools["mamba"].keys.key(a[-1]), b.pools["mamba"].keys.key(c[-1])
    va = raw.get(ka)
    raw.remove(kc)
    raw.put(kc, va)
    assert b.batch_get_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([9]),
                                        keys=c[-1:])]) == {"mamba": [False]}
    assert not raw.exists(kc)  # removed, so the next save stores C's own state

    # 2. A's last KV page evicted, its state kept: no hit reaches the state, and the
    # state does not load on its own.
    raw.remove(b.pools["kv"].keys.key(a[-1]))
    r = b.batch_exists_v2(a, [trail])
    assert r.kv_hit_pages == 0 and r.restorable_prefix_pages == []
    assert b.batch_get_v2(get_state) == {"mamba": [False]}

    # 3. The KV comes back (saved again): state and KV load together again.
    fill(host, [PAGE * 3], seed=10)  # same bytes as before, at the same page
    assert b.batch_set_v1(a[-1:], idx([3])) == [True]
    assert b.batch_exists_v2(a, [trail]).kv_hit_pages == 3
    assert b.batch_get_v2(get_state) == {"mamba": [True]}

    # 4. Another TP rank, another model, another KV layout: same page hashes, no hit.
    for kw, h in (({"tp_rank": 1, "tp_size": 2}, mha_host()), ({"model": "other"}, mha_host()),
                  ({}, mha_host("layer_first"))):
        other, _ = make(tided.unix, h, **kw)
        other.register_mem_host_pool_v2(mamba_host(), PoolName.MAMBA)
        assert other.batch_exists_v2(a, [trail]).kv_hit_pages == 0, kw
        assert other.batch_get_v2(get_state) == {"mamba": [False]}, kw


def test_mla_kv_is_shared_by_tp_ranks_but_mamba_state_is_not(tided):
    r0, h0 = make(tided.unix, mla=True, tp_rank=0, tp_size=2)
    r1, _ = make(tided.unix, mla=True, tp_rank=1, tp_size=2)
    for r in (r0, r1):
        r.register_mem_host_pool_v2(mamba_host(), PoolName.MAMBA)
    fill(h0, [PAGE], seed=7)
    assert r0.batch_set_v1(hashes(1), idx([1])) == [True]
    assert r0.batch_set_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([1]),
                                         keys=hashes(1))]) == {"mamba": [True]}
    assert r1.batch_exists(hashes(1)) == 1
    mt = PoolTransfer(name=PoolName.MAMBA, keys=hashes(1), hit_policy=PoolHitPolicy.TRAILING_PAGES)
    assert r1.batch_exists_v2(hashes(1), [mt]).kv_hit_pages == 0
    assert r0.batch_exists_v2(hashes(1), [mt]).kv_hit_pages == 1


def _pool_fd(pid):
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if "memfd:" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                return f"/proc/{pid}/fd/{fd}"
        except OSError:
            pass
    raise AssertionError("tided has no memfd pool")


@pytest.mark.parametrize("scheme", ["unix", "tcp"])
def test_a_damaged_value_is_a_miss(tided, scheme):
    """One payload byte of a stored page flipped inside tided's pool: the load misses."""
    b, host = make(tided.unix if scheme == "unix" else tided.tcp)
    fill(host, [PAGE], seed=8)
    assert b.batch_set_v1(hashes(1), idx([1])) == [True]
    key = b.pools["kv"].keys.key(hashes(1)[0])
    from tide.sglang import layout

    hdr = layout.pack_header(layout.KIND_PAGE, b.pools["kv"].payload, key, key)
    path = _pool_fd(tided.proc.pid)
    with open(path, "r+b") as f:
        pool = f.read()
        at = pool.find(hdr)
        assert at >= 0 and pool.find(hdr, at + 1) < 0
        f.seek(at + layout.HEADER_SIZE + 5)
        f.write(bytes([pool[at + layout.HEADER_SIZE + 5] ^ 0x40]))
    assert b.batch_get_v1(hashes(1), idx([2])) == [False]


def test_a_short_or_foreign_value_is_a_miss(tided):
    b, host = make(tided.unix)
    raw = tide.Store(tided.unix)
    k = hashes(2)
    raw.put(b.pools["kv"].keys.key(k[0]), b"x" * 40)  # too short
    raw.put(b.pools["kv"].keys.key(k[1]), b"\0" * (32 + b.pools["kv"].payload))  # no header
    assert b.batch_get_v1(k, idx([1, 2])) == [False, False]
    assert raw.exists_many([b.pools["kv"].keys.key(x) for x in k]) == [False, False]


def test_cluster_with_two_replicas_survives_a_killed_node(cluster):
    url = f"tide://127.0.0.1:{cluster[0].port},127.0.0.1:{cluster[1].port}?replicas=2"
    b, host = make(url)
    mamba = mamba_host()
    b.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
    keys = hashes(4)
    _kv_and_state(b, host, mamba, keys, 1, 1, seed=30)
    want = [page_bytes(host, p * PAGE) for p in range(1, 5)]
    st = page_bytes(mamba, 1)
    cluster[0].stop(signal.SIGKILL)
    trail = PoolTransfer(name=PoolName.MAMBA, keys=keys[-1:],
                         hit_policy=PoolHitPolicy.TRAILING_PAGES)
    assert b.batch_exists_v2(keys, [trail]).kv_hit_pages == 4
    clear(host, range(5, 9))
    res = b.batch_get_v2([
        PoolTransfer(name=PoolName.KV, host_indices=idx(range(5, 9)), keys=keys),
        PoolTransfer(name=PoolName.MAMBA, host_indices=torch.tensor([3]), keys=keys[-1:]),
    ])
    assert res == {"kv": [True] * 4, "mamba": [True]}
    assert [page_bytes(host, p * PAGE) for p in range(5, 9)] == want
    assert page_bytes(mamba, 3) == st


def test_a_token_goes_through_the_url(tmp_path, monkeypatch):
    from conftest import Tided

    monkeypatch.delenv("TIDE_AUTH_TOKEN", raising=False)
    t = Tided(tmp_path, "auth", token="s3cret-token-for-sglang")
    try:
        b, host = make(f"{t.tcp}?token=s3cret-token-for-sglang")
        fill(host, [PAGE], seed=9)
        assert b.batch_set_v1(hashes(1), idx([1])) == [True]
        assert b.batch_exists(hashes(1)) == 1
        try:  # without the token: refused, at open or as misses, never pages
            nob, _ = make(t.tcp)
        except tide.AuthError:
            return
        assert nob.batch_exists(hashes(1)) == 0
        assert nob.batch_get_v1(hashes(1), idx([2])) == [False]
    finally:
        t.stop()


def test_bad_input_is_named(tided):
    with pytest.raises(SGLangSetupError, match="unknown HiCache pool kind 'deepseek_v4_c4'"):
        b, _ = make(tided.unix)
        b.register_mem_host_pool_v2(mha_host(), PoolName.DEEPSEEK_V4_C4)
    with pytest.raises(SGLangSetupError, match="no store URL"):
        make("")
    with pytest.raises(SGLangSetupError, match="unknown setting.*'tide_urll'"):
        make(tided.unix, tide_urll="x")
    with pytest.raises(SGLangSetupError, match="private to one process"):
        make("mem://")
    b, _ = make(tided.unix)
    with pytest.raises(SGLangSetupError, match="hit policy 'block_groups'"):
        b.batch_exists_v2(hashes(1), [PoolTransfer(name=PoolName.KV, keys=hashes(1),
                                                   hit_policy=PoolHitPolicy.BLOCK_GROUPS)])


def test_sglang_failure_injector_wraps_it(tided, monkeypatch):
    """SGLang's own test hook (random storage failures) wraps the backend; failures are
    misses, and every call that gets through still works."""
    monkeypatch.setenv("SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE", "0.5")
    b, host = make(tided.unix)
    assert type(b).__name__ == "HiCacheStorageFailureInjector"
    fill(host, [PAGE], seed=11)
    want = page_bytes(host, PAGE)
    for _ in range(40):
        if b.batch_set_v1(hashes(1), idx([1])) == [True]:
            break
    for _ in range(40):
        clear(host, [2])
        if b.batch_get_v1(hashes(1), idx([2])) == [True]:
            assert page_bytes(host, 2 * PAGE) == want
            return
    pytest.fail("40 tries, no load got through a 50% failure injector")


def test_swa_window_loads_only_with_its_kv(tided):
    """A sliding-window pool (SGLang registers an MHA host pool as 'swa', trailing pages):
    a prefix counts only where its last two SWA pages and every KV page below exist."""
    b, host = make(tided.unix)
    swa = mha_host()
    b.register_mem_host_pool_v2(swa, PoolName.SWA)
    keys = hashes(4)
    fill(host, [p * PAGE for p in range(1, 5)], seed=40)
    fill(swa, [p * PAGE for p in (1, 2)], seed=41)
    want = [page_bytes(swa, p * PAGE) for p in (1, 2)]
    res = b.batch_set_v2([
        PoolTransfer(name=PoolName.KV, host_indices=idx(range(1, 5)), keys=keys),
        PoolTransfer(name=PoolName.SWA, host_indices=idx([1, 2]), keys=keys[2:]),
    ])
    assert res == {"kv": [True] * 4, "swa": [True, True]}
    window = PoolTransfer(name=PoolName.SWA, keys=keys[2:], hit_policy=PoolHitPolicy.TRAILING_PAGES)
    r = b.batch_exists_v2(keys, [window])
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (4, [4])
    raw = tide.Store(tided.unix)
    raw.remove(b.pools["kv"].keys.key(keys[2]))  # a KV page under the window evicted
    assert b.batch_exists_v2(keys, [window]).kv_hit_pages == 0
    clear(swa, [5, 6])
    got = b.batch_get_v2([PoolTransfer(name=PoolName.SWA, host_indices=idx([5, 6]),
                                       keys=keys[2:])])
    assert got == {"swa": [False, True]}  # page 2's KV is gone: its SWA page does not load
    assert page_bytes(swa, 6 * PAGE) == want[1]
