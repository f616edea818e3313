"""tide.mooncake.MooncakeDistributedStore, driven the way vLLM's MooncakeStoreConnector
drives Mooncake's client: setup, register_buffer of the paged KV caches, batch_is_exist,
batch_put_from_multi_buffers of per-block K/V pages, batch_get_into_multi_buffers into
other blocks, remove_all, close — checking Mooncake's return codes throughout."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tide
from tide import mooncake as mc

from conftest import ROOT

NUM_BLOCKS, BLOCK, HEADS, DIM = 16, 16, 2, 32


@pytest.fixture
def client(monkeypatch):
    monkeypatch.delenv("TIDE_URL", raising=False)
    c = mc.MooncakeDistributedStore()
    # The reference's arguments: hostname, metadata server, segment and buffer sizes,
    # protocol, devices, master address. A non-tide master address means "embedded".
    assert c.setup("10.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", "10.0.0.9:50051") == 0
    assert c.url == f"mem://?capacity={64 << 20}"
    yield c
    c.close()


def kv_cache(seed=None):
    shape = (2, NUM_BLOCKS, BLOCK, HEADS, DIM)
    if seed is None:
        return np.zeros(shape, np.float16)
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16)


def block_pieces(cache, blocks):
    """Per block: [K page address, V page address] and their sizes, as the reference's
    register_kv_caches layout detection gives for a (2, num_blocks, ...) cache."""
    base = cache.ctypes.data
    plane = cache.strides[0]
    page = cache.strides[1]
    ptrs = [[base + b * page, base + plane + b * page] for b in blocks]
    sizes = [[page, page] for _ in blocks]
    return ptrs, sizes


def test_save_then_load_like_the_connector(client):
    src, dst = kv_cache(seed=7), kv_cache()
    assert client.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert client.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    keys = [f"model@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@{b:032x}" for b in range(4)]

    # Save path: look up, then put only what is missing.
    assert client.batch_is_exist(keys) == [0, 0, 0, 0]
    ptrs, sizes = block_pieces(src, [3, 5, 8, 13])
    assert client.batch_put_from_multi_buffers(keys, ptrs, sizes, mc.ReplicateConfig()) == [0] * 4
    assert client.batch_is_exist(keys + ["absent"]) == [1, 1, 1, 1, 0]
    # A second save of the same blocks succeeds and changes nothing.
    assert client.batch_put_from_multi_buffers(keys, ptrs, sizes) == [0] * 4

    # Load path: into different block ids of another cache.
    ptrs, sizes = block_pieces(dst, [0, 1, 2, 15])
    page = src.strides[1]
    assert client.batch_get_into_multi_buffers(keys, ptrs, sizes) == [2 * page] * 4
    for s, d in zip([3, 5, 8, 13], [0, 1, 2, 15]):
        np.testing.assert_array_equal(dst[:, d], src[:, s])
    assert not dst[:, 3:15].any()


def test_per_key_failure_codes(client):
    src = kv_cache(seed=1)
    assert client.register_buffer(src.ctypes.data, src.nbytes) == 0
    ptrs, sizes = block_pieces(src, [0])
    assert client.batch_put_from_multi_buffers(["k0"], ptrs, sizes) == [0]

    ptrs, sizes = block_pieces(src, [1, 2])
    res = client.batch_get_into_multi_buffers(["missing", "k0"], ptrs, [[8, 8], sizes[1]])
    assert res == [mc.OBJECT_NOT_FOUND, 2 * src.strides[1]]
    # A value larger than the buffers given for it.
    res = client.batch_get_into_multi_buffers(["k0"], [ptrs[0]], [[8, 8]])
    assert res == [mc.BUFFER_OVERFLOW]
    # An empty key, and pieces/sizes of different lengths: INVALID_KEY / INVALID_PARAMS.
    res = client.batch_put_from_multi_buffers(["", "k1"], ptrs, [sizes[0], [8]])
    assert res == [mc.INVALID_KEY, mc.INVALID_PARAMS]
    assert client.batch_put_from_multi_buffers(["a", "b"], ptrs[:1], sizes[:1]) == [
        mc.INVALID_PARAMS
    ] * 2


def test_unregistered_memory_is_refused_not_touched(client):
    src = kv_cache(seed=2)
    other = kv_cache()
    assert client.register_buffer(src.ctypes.data, src.nbytes) == 0
    ptrs, sizes = block_pieces(src, [0, 1])
    optrs, osizes = block_pieces(other, [0])  # never registered
    res = client.batch_put_from_multi_buffers(
        ["ok", "stray"], [ptrs[0], optrs[0]], [sizes[0], osizes[0]]
    )
    assert res == [0, mc.INVALID_PARAMS]
    assert "registered" in client.last_error.message
    assert client.batch_is_exist(["ok", "stray"]) == [1, 0]
    # A piece that runs past the end of its registered region is refused as well.
    end = src.ctypes.data + src.nbytes
    assert client.batch_get_into_multi_buffers(["ok"], [[end - 8]], [[16]]) == [mc.INVALID_PARAMS]
    # Once unregistered (say the cache was freed), the region cannot be written.
    assert client.unregister_buffer(src.ctypes.data) == 0
    assert client.batch_get_into_multi_buffers(["ok"], ptrs[:1], sizes[:1]) == [mc.INVALID_PARAMS]
    assert client.unregister_buffer(src.ctypes.data) == mc.INVALID_PARAMS


def test_register_buffer_rules(client):
    a = np.zeros(4096, np.uint8)
    p = a.ctypes.data
    assert client.register_buffer(p, 4096) == 0
    assert client.register_buffer(p, 4096) == 0  # the same region again
    assert client.register_buffer(p + 100, 10) == mc.INVALID_PARAMS  # overlaps
    assert client.register_buffer(0, 10) == mc.INVALID_PARAMS
    assert client.register_buffer(p + 8192, 0) == mc.INVALID_PARAMS
    assert client.register_buffer(p + 4096, 16) == 0  # adjacent is fine


def test_out_of_space_is_no_available_handle(monkeypatch):
    monkeypatch.delenv("TIDE_URL", raising=False)
    c = mc.MooncakeDistributedStore()
    assert c.setup("h", "", 1 << 20, 0, "tcp", "", "m:1") == 0
    big = np.zeros(2 << 20, np.uint8)
    assert c.register_buffer(big.ctypes.data, big.nbytes) == 0
    assert c.batch_put_from(["big"], [big.ctypes.data], [big.nbytes]) == [mc.NO_AVAILABLE_HANDLE]
    assert c.put_from("small", big.ctypes.data, 4096) == 0
    c.close()


def test_single_key_calls_and_remove_all(client):
    assert client.put("a", b"alpha") == 0
    assert client.put_batch(["b", "c"], [b"beta", b"gamma"]) == 0
    assert client.get("a") == b"alpha" and client.get("zz") == b""
    assert client.get_batch(["c", "zz"]) == [b"gamma", b""]
    assert client.get_size("b") == 4 and client.get_size("zz") == mc.OBJECT_NOT_FOUND
    assert client.is_exist("a") == 1 and client.is_exist("zz") == 0
    assert client.remove("a") == 0 and client.remove("a") == mc.OBJECT_NOT_FOUND
    assert client.batch_remove(["b", "zz"]) == [0, mc.OBJECT_NOT_FOUND]
    buf = np.zeros(16, np.uint8)
    assert client.register_buffer(buf.ctypes.data, 16) == 0
    assert client.get_into("c", buf.ctypes.data, 16) == 5 and bytes(buf[:5]) == b"gamma"
    assert client.remove_all(force=True) == 1
    assert client.batch_is_exist(["a", "b", "c"]) == [0, 0, 0]


def test_calls_after_close_or_before_setup():
    c = mc.MooncakeDistributedStore()
    assert c.batch_is_exist(["a"]) == [-1]
    assert c.put("a", b"x") == mc.UNAVAILABLE_IN_CURRENT_STATUS
    assert c.setup("h", "", 1 << 20, 0, "tcp", "", "m:1") == 0
    assert c.close() == 0
    assert c.batch_is_exist(["a", "b"]) == [-1, -1]
    assert c.put("a", b"x") == mc.UNAVAILABLE_IN_CURRENT_STATUS
    assert isinstance(c.last_error, tide.ClosedError)
    assert c.batch_put_from_multi_buffers(["a"], [[1]], [[1]]) == [mc.INVALID_PARAMS]


def test_setup_failures_say_why(monkeypatch):
    monkeypatch.setenv("TIDE_URL", "nope://x")
    c = mc.MooncakeDistributedStore()
    assert c.setup("h", "", 1 << 20, 0, "tcp", "", "m:1") == mc.INVALID_PARAMS
    assert "nope://" in c.last_error.message
    monkeypatch.delenv("TIDE_URL")
    assert c.setup("h", "", 0, 0, "tcp", "", "m:1") == mc.INVALID_PARAMS
    assert c.setup("h", "", 1 << 20, 0, "tcp", "", "m:1") == 0
    assert c.setup("h", "", 1 << 20, 0, "tcp", "", "m:1") == mc.INVALID_PARAMS  # twice
    c.close()


def test_master_address_may_name_a_tided(monkeypatch, tided):
    monkeypatch.delenv("TIDE_URL", raising=False)
    c = mc.MooncakeDistributedStore()
    assert c.setup("h", "", 1 << 20, 0, "tcp", "", f"tide://127.0.0.1:{tided}") == 0
    src = kv_cache(seed=3)
    dst = kv_cache()
    assert c.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert c.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    ptrs, sizes = block_pieces(src, [4])
    assert c.batch_put_from_multi_buffers(["mc-remote"], ptrs, sizes) == [0]
    ptrs, sizes = block_pieces(dst, [9])
    assert c.batch_get_into_multi_buffers(["mc-remote"], ptrs, sizes) == [2 * src.strides[1]]
    np.testing.assert_array_equal(dst[:, 9], src[:, 4])
    c.close()


def test_tide_codes_map_to_mooncake_codes():
    assert mc.mooncake_code(0) == 0 and mc.mooncake_code(4096) == 4096
    assert mc.mooncake_code(tide.ENOSPACE) == mc.NO_AVAILABLE_HANDLE == -200
    assert mc.mooncake_code(tide.ENOTFOUND) == mc.OBJECT_NOT_FOUND == -704
    assert mc.mooncake_code(-111) == mc.RPC_FAIL  # ECONNREFUSED
    assert mc.mooncake_code(tide.EAUTH) == mc.INTERNAL_ERROR


def test_compat_package_stands_in_for_mooncake_store():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python"), os.path.join(ROOT, "python", "compat")]
    )
    code = (
        "from mooncake.store import MooncakeDistributedStore, ReplicateConfig\n"
        "import tide.mooncake\n"
        "assert MooncakeDistributedStore is tide.mooncake.MooncakeDistributedStore\n"
        "s = MooncakeDistributedStore()\n"
        "assert s.setup('h', '', 1 << 20, 0, 'tcp', '', 'm:1') == 0\n"
        "assert s.put('k', b'v') == 0 and s.get('k') == b'v'\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
