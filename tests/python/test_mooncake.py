"""tide.mooncake.MooncakeDistributedStore (the ``mooncake.store`` drop-in) against a real
tided: every method of Mooncake's class, its return codes, every setup() form and how an
address resolves, close() then setup() again, and the method table of docs/MOONCAKE.md
checked against the class. The call sequences of vLLM, LMCache and SGLang are in
test_mooncake_callers.py."""

import ctypes
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import tide
from tide import mooncake as mc
from tide.mooncake import tensor as mt

from conftest import ROOT

# Every method Mooncake's pybind class defines (mooncake-integration/store/store_py.cpp,
# MooncakeDistributedStore), in its order.
MOONCAKE_METHODS = """
_get_pyclient_capsule setup setup_dummy init_all mount_segment unmount_segment
allocate_and_mount_segment unmount_and_free_segment unmount_local_disk_segment
alloc_from_mem_pool get get_batch get_offload_rpc_read_count get_buffer batch_get_buffer
remove remove_by_regex remove_all batch_remove is_exist batch_is_exist close health_check
get_size get_tensor_with_tp batch_get_tensor_with_tp get_tensor put_tensor_with_tp
batch_put_tensor_with_tp put_tensor batch_get_tensor batch_put_tensor
save_tensor_to_safetensor load_tensor_from_safetensor pub_tensor batch_pub_tensor
pub_tensor_with_tp batch_pub_tensor_with_tp get_tensor_into batch_get_tensor_into
get_tensor_into_cuda batch_get_tensor_into_cuda get_tensor_with_tp_into
batch_get_tensor_with_tp_into put_tensor_from batch_put_tensor_from put_tensor_with_tp_from
batch_put_tensor_with_tp_from upsert_tensor upsert_tensor_from batch_upsert_tensor_from
batch_upsert_tensor upsert_pub_tensor batch_upsert_pub_tensor get_tensor_with_parallelism
batch_get_tensor_with_parallelism get_tensor_with_parallelism_into
batch_get_tensor_with_parallelism_into put_tensor_with_parallelism
batch_put_tensor_with_parallelism put_tensor_with_parallelism_from
batch_put_tensor_with_parallelism_from upsert_tensor_with_parallelism
upsert_tensor_with_parallelism_from batch_upsert_tensor_with_parallelism_from
batch_upsert_tensor_with_parallelism upsert_from batch_upsert_from upsert upsert_parts
upsert_batch register_buffer unregister_buffer get_into get_into_ranges batch_get_into
put_from put_from_with_metadata batch_put_from put put_parts put_batch get_hostname
batch_put_from_multi_buffers batch_get_into_multi_buffers batch_get_session_start
batch_get_into_multi_buffer_ranges batch_get_session_end batch_put_session_start
batch_put_from_multi_buffer_ranges batch_put_session_end batch_put_session_revoke
get_replica_desc batch_get_replica_desc batch_replica_clear create_copy_task
create_move_task query_task
""".split()

TENSOR_METHODS = [m for m in MOONCAKE_METHODS if "tensor" in m]


def master(port):
    """A Mooncake-style master address naming the test's tided."""
    return f"127.0.0.1:{port}"


def setup7(c, addr, local_buffer=16 << 20):
    return c.setup("localhost", "P2PHANDSHAKE", 64 << 20, local_buffer, "tcp", "", addr)


@pytest.fixture
def clean_env(monkeypatch):
    for v in ("TIDE_URL", "MOONCAKE_MASTER", "MOONCAKE_CONFIG_PATH"):
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


@pytest.fixture
def client(clean_env, tided):
    """A client set up with a Mooncake master address that names the session's tided,
    the store emptied first."""
    c = mc.MooncakeDistributedStore()
    assert setup7(c, master(tided)) == 0, c.last_error
    assert c.url == f"tide://127.0.0.1:{tided}"
    assert c.remove_all() >= 0
    yield c
    c.close()


def buf(n, fill=None):
    a = np.zeros(n, np.uint8) if fill is None else np.frombuffer(fill, np.uint8).copy()
    return a


def free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_tided(tmp_path, name, *flags):
    """Another tided (16 MiB) for one test: (process, port). The caller stops it."""
    ready = tmp_path / f"{name}.ready"
    proc = subprocess.Popen(
        [os.environ.get("TIDE_BIN") or os.path.join(ROOT, "build", "tide"), "serve",
         "--port", "0", "--metrics-port", "0", "--capacity", "16MiB",
         "--ready-file", str(ready), *flags],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while not (ready.exists() and ready.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"tided {name} did not start")
        time.sleep(0.02)
    return proc, int(ready.read_text().split()[0])


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- the surface ------------------------------------------------------------------------


def test_every_mooncake_method_exists():
    missing = [m for m in MOONCAKE_METHODS if not callable(getattr(mc.MooncakeDistributedStore, m, None))]
    assert missing == []
    assert len(MOONCAKE_METHODS) == len(set(MOONCAKE_METHODS)) == 98  # setup has two forms


def test_doc_table_lists_every_method_once_with_a_verdict():
    doc = open(os.path.join(ROOT, "docs", "MOONCAKE.md")).read()
    rows = re.findall(r"^\| `([a-z_]+)\(?[^`]*`\s*\|\s*(supported|accepted-and-ignored|refused)\b", doc, re.M)
    names = [r[0] for r in rows]
    dupes = sorted({n for n in names if names.count(n) > 1})
    assert dupes == []
    assert sorted(set(names)) == sorted(MOONCAKE_METHODS)
    public = {n for n in dir(mc.MooncakeDistributedStore)
              if callable(getattr(mc.MooncakeDistributedStore, n)) and not n.startswith("_")}
    assert public - set(names) == set(), "public methods missing from docs/MOONCAKE.md"


def test_module_names_mooncake_code_imports():
    # The names Mooncake's test files and callers import from mooncake.store.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(ROOT, "python"), os.path.join(ROOT, "python", "compat")]))
    code = ("from mooncake.store import (MooncakeDistributedStore, ReplicateConfig, SoftPinAction,"
            " ReplicaStatus, MooncakeHostMemAllocator, ObjectDataType, TaskStatus, TaskType)\n"
            "import tide.mooncake\n"
            "assert MooncakeDistributedStore is tide.mooncake.MooncakeDistributedStore\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_replicate_config_fields_and_soft_pin_rules():
    c = mc.ReplicateConfig()
    assert (c.replica_num, c.nof_replica_num, c.dfs_replica_num) == (1, 0, 0)
    assert c.soft_pin_action == mc.SoftPinAction.PRESERVE and c.soft_pin_ttl_ms is None
    assert c.with_hard_pin is False and c.prefer_alloc_in_same_node is False
    assert c.preferred_segments == [] and c.preferred_nof_segments == []
    assert c.preferred_segment == "" and c.data_type == mc.ObjectDataType.UNKNOWN
    assert c.group_ids is None
    c.soft_pin_ttl_ms = 1000
    assert c.soft_pin_ttl_ms == 1000 and c.check() == mc.INVALID_PARAMS  # TTL needs ENABLE
    c.soft_pin_action = mc.SoftPinAction.ENABLE
    assert c.check() == 0
    for bad in (-1, 1 << 64, "10"):
        with pytest.raises(TypeError):
            c.soft_pin_ttl_ms = bad
    c.with_soft_pin = False
    assert c.soft_pin_action == mc.SoftPinAction.PRESERVE
    assert [a.name for a in mc.SoftPinAction] == ["PRESERVE", "ENABLE", "DISABLE"]


# -- setup: forms, addresses, failures ---------------------------------------------------


def test_setup_eight_argument_form_with_an_engine_and_keywords(clean_env, tided):
    c = mc.MooncakeDistributedStore()
    engine = object()  # SGLang passes its transfer engine (or None) eighth
    assert c.setup("localhost", "P2PHANDSHAKE", 1 << 20, 16 << 20, "rdma", "mlx5_0",
                   master(tided), engine, enable_ssd_offload=True, ssd_offload_path="/x",
                   tenant_id="t", enable_client_http_server=True, client_http_port=9301) == 0
    assert c.put("eight", b"arg") == 0 and c.get("eight") == b"arg"
    assert re.fullmatch(r"localhost:\d+", c.get_hostname())
    c.close()
    with pytest.raises(TypeError, match="master_server_addr"):
        c.setup("localhost", "P2PHANDSHAKE", 1, 1, "tcp", "")
    with pytest.raises(TypeError, match="unexpected keyword"):
        c.setup("h", "m", 1, 1, "tcp", "", master(tided), rdma="x")
    with pytest.raises(TypeError, match="global_segment_size"):
        c.setup("h", "m", "1", 1, "tcp", "", master(tided))


def test_setup_dict_form(clean_env, tided):
    c = mc.MooncakeDistributedStore()
    cfg = {"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
           "global_segment_size": "16MB", "local_buffer_size": "16 mb", "protocol": "tcp",
           "master_server_addr": master(tided)}
    assert c.setup(cfg) == 0 and c.put("dict", b"form") == 0
    c.close()
    assert c.setup(config=dict(cfg, global_segment_size=1 << 20)) == 0
    assert c.get("dict") == b"form"
    c.close()
    assert c.setup(dict(cfg, global_segment_size="50%")) == mc.INVALID_PARAMS
    assert "50%" in str(c.last_error)
    missing = dict(cfg)
    del missing["metadata_server"]
    assert c.setup(missing) == mc.INVALID_PARAMS and "metadata_server" in str(c.last_error)


def test_address_mapping(clean_env, tided, tmp_path):
    url = f"tide://127.0.0.1:{tided}"
    assert mc.resolve_url(master(tided))[0] == url
    assert mc.resolve_url(url)[0] == url
    assert mc.resolve_url("a:1,b:2")[0] == "tide://a:1,b:2"
    assert mc.resolve_url("a:1;b:2")[0] == "tide://a:1,b:2"
    assert mc.resolve_url("etcd://e:2379")[0] == "etcd://e:2379"
    with pytest.raises(mc.SetupError, match="not host:port"):
        mc.resolve_url("no-port")
    with pytest.raises(mc.SetupError, match="no store address"):
        mc.resolve_url("")
    clean_env.setenv("MOONCAKE_MASTER", master(tided))
    assert mc.resolve_url("") == (url, f"MOONCAKE_MASTER={master(tided)}")
    clean_env.delenv("MOONCAKE_MASTER")
    cfg = tmp_path / "mooncake.json"
    cfg.write_text(json.dumps({"master_server_address": master(tided)}))
    clean_env.setenv("MOONCAKE_CONFIG_PATH", str(cfg))
    assert mc.resolve_url("")[0] == url
    clean_env.setenv("TIDE_URL", "tide://t:1")
    assert mc.resolve_url("m:2") == ("tide://t:1", "TIDE_URL")  # TIDE_URL wins


def test_env_and_config_file_name_the_store(clean_env, tided, tmp_path):
    c = mc.MooncakeDistributedStore()
    clean_env.setenv("MOONCAKE_MASTER", master(tided))
    assert setup7(c, "") == 0 and c.url == f"tide://127.0.0.1:{tided}"
    c.close()
    clean_env.delenv("MOONCAKE_MASTER")
    cfg = tmp_path / "mc.json"
    cfg.write_text(json.dumps({"local_hostname": "h", "master_server_address": master(tided)}))
    clean_env.setenv("MOONCAKE_CONFIG_PATH", str(cfg))
    # the dict form without a master address also consults the environment
    assert c.setup({"local_hostname": "h", "metadata_server": "m"}) == 0
    c.close()
    cfg.write_text("{not json")
    assert setup7(c, "") == mc.INVALID_PARAMS and str(cfg) in str(c.last_error)
    clean_env.setenv("TIDE_URL", f"tide://127.0.0.1:{tided}")
    assert setup7(c, "10.255.255.1:50051") == 0  # TIDE_URL overrides the master address
    c.close()


def test_no_tided_at_the_address_is_an_error_naming_it(clean_env, caplog):
    port = free_port()
    c = mc.MooncakeDistributedStore()
    with caplog.at_level("ERROR", logger="tide.mooncake"):
        assert setup7(c, f"127.0.0.1:{port}") == mc.RPC_FAIL
    assert f"127.0.0.1:{port}" in str(c.last_error)
    assert f"127.0.0.1:{port}" in caplog.text
    assert c.put("k", b"v") == mc.INVALID_PARAMS  # no private store behind the failure
    assert c.health_check() == mc.HC_NOT_INITIALIZED
    assert setup7(c, "") == mc.INVALID_PARAMS and "no store address" in str(c.last_error)


def test_two_objects_share_one_store(client, tided, clean_env):
    other = mc.MooncakeDistributedStore()
    assert setup7(other, master(tided)) == 0
    assert client.put("shared", b"between objects") == 0
    assert other.get("shared") == b"between objects"
    other.close()


def test_two_processes_share_one_store(client, tided):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(ROOT, "python"), os.path.join(ROOT, "python", "compat")]),
        MOONCAKE_MASTER=master(tided))
    env.pop("TIDE_URL", None)
    code = ("from mooncake.store import MooncakeDistributedStore as M\n"
            "s = M()\n"
            "assert s.setup('other', 'P2PHANDSHAKE', 1 << 20, 1 << 20, 'tcp', '', '') == 0\n"
            "assert s.put('from-child', b'child bytes') == 0\n"
            "print(s.get('from-parent').decode())\n")
    assert client.put("from-parent", b"parent bytes") == 0
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "parent bytes"
    assert client.get("from-child") == b"child bytes"


def test_close_then_setup_again_and_calls_when_closed(clean_env, tided):
    c = mc.MooncakeDistributedStore()
    assert c.is_exist("a") == mc.INVALID_PARAMS  # before setup
    assert c.batch_put_from_multi_buffers(["a"], [[1]], [[1]]) == []  # Mooncake's []
    for _ in range(3):
        assert setup7(c, master(tided)) == 0
        assert setup7(c, master(tided)) == mc.INVALID_PARAMS  # twice without close
        assert c.put("again", b"x") == 0 and c.health_check() == mc.HC_HEALTHY
        assert c.close() == 0
    assert c.close() == 0  # twice is harmless
    assert c.put("a", b"x") == mc.INVALID_PARAMS and c.get("a") == b""
    assert c.batch_is_exist(["a", "b"]) == [mc.INVALID_PARAMS] * 2
    assert isinstance(c.last_error, tide.ClosedError)


def test_setup_dummy_resolves_its_server_address(clean_env, tided):
    c = mc.MooncakeDistributedStore()
    assert c.setup_dummy(1 << 20, 1 << 20, master(tided)) == 0
    assert c.put("dummy", b"d") == 0 and c.get("dummy") == b"d"
    c.close()
    assert c.setup_dummy(1 << 20, 1 << 20, f"127.0.0.1:{free_port()}") == mc.RPC_FAIL


def test_cluster_master_address(clean_env, tmp_path):
    a, pa = start_tided(tmp_path, "a")
    b, pb = start_tided(tmp_path, "b")
    try:
        c = mc.MooncakeDistributedStore()
        assert setup7(c, f"127.0.0.1:{pa},127.0.0.1:{pb}") == 0
        assert c.url == f"tide://127.0.0.1:{pa},127.0.0.1:{pb}"
        keys = [f"cl{i}" for i in range(32)]
        assert c.put_batch(keys, [k.encode() * 10 for k in keys]) == 0
        assert c.get_batch(keys) == [k.encode() * 10 for k in keys]
        c.close()
        counts = []
        for p in (pa, pb):
            with tide.Store(f"tide://127.0.0.1:{p}") as s:
                counts.append(s.stats()["objects"])
        assert sum(counts) >= 32 and min(counts) > 0  # placed across both nodes
    finally:
        stop(a)
        stop(b)


def test_health_check_sees_a_dead_tided(clean_env, tmp_path):
    proc, port = start_tided(tmp_path, "hc")
    c = mc.MooncakeDistributedStore()
    try:
        assert setup7(c, master(port)) == 0 and c.health_check() == mc.HC_HEALTHY
    finally:
        stop(proc)
    assert c.health_check() == mc.HC_MASTER_UNREACHABLE
    assert c.put("k", b"v") == mc.RPC_FAIL
    c.close()


def test_accepted_and_ignored_setup_helpers(client):
    assert client.init_all("rdma", "mlx5_0", 1 << 20) == 0
    assert client.get_offload_rpc_read_count() == 0
    with pytest.raises(NotImplementedError, match="tide"):
        client._get_pyclient_capsule()


# -- bytes ----------------------------------------------------------------------------------


def test_put_get_exist_size_remove(client):
    v = os.urandom(64 << 10)
    assert client.put("a", v) == 0 and client.put("a", b"other") == 0  # exists: kept
    assert client.get("a") == v and client.get("zz") == b""
    assert client.get_size("a") == len(v) and client.get_size("zz") == mc.OBJECT_NOT_FOUND
    assert client.is_exist("a") == 1 and client.is_exist("zz") == 0
    assert client.is_exist("") == mc.INVALID_KEY  # the error code, not -1
    assert client.batch_is_exist(["a", "zz"]) == [1, 0]
    assert client.remove("a", force=True) == 0 and client.remove("a") == mc.OBJECT_NOT_FOUND
    assert client.put("", b"x") == mc.INVALID_KEY and client.put("e", b"") == mc.INVALID_PARAMS


def test_put_batch_get_batch_batch_remove_remove_all(client):
    keys = [f"b{i}" for i in range(10)]
    vals = [os.urandom(100 + i) for i in range(10)]
    assert client.put_batch(keys, vals) == 0
    assert client.get_batch(keys + ["zz"]) == vals + [b""]
    assert client.put_batch(["x", ""], [b"1", b"2"]) == mc.INVALID_KEY
    assert client.put_batch(["x"], [b"1", b"2"]) == mc.INVALID_PARAMS
    assert client.batch_remove(["b0", "zz"], force=True) == [0, mc.OBJECT_NOT_FOUND]
    assert client.remove_all(force=True) == 10  # b1..b9 and x
    assert client.batch_is_exist(keys) == [0] * 10


def test_put_parts_and_get_buffer(client):
    meta, data = b"M" * 48, np.arange(4096, dtype=np.uint8)
    assert client.put_parts("pp", meta, memoryview(data), bytearray(b"tail")) == 0
    h = client.get_buffer("pp")
    assert isinstance(h, mc.BufferHandle) and h.size() == len(h) == 48 + 4096 + 4
    assert ctypes.string_at(h.ptr(), h.size()) == meta + data.tobytes() + b"tail"
    assert bytes(memoryview(h)) == meta + data.tobytes() + b"tail"
    assert client.get_buffer("zz") is None
    hs = client.batch_get_buffer(["pp", "zz"])
    assert hs[1] is None and bytes(hs[0]) == bytes(h)
    with pytest.raises(RuntimeError, match="1-D bytes-like"):
        client.put_parts("bad", np.zeros((2, 2), np.uint8))
    assert client.put_parts("none") == mc.INVALID_PARAMS


def test_upsert_family_replaces(client):
    assert client.upsert("u", b"one") == 0 and client.upsert("u", b"two!") == 0
    assert client.get("u") == b"two!"
    assert client.upsert_parts("u", b"th", b"ree") == 0 and client.get("u") == b"three"
    assert client.upsert_batch(["u", "w"], [b"4", b"5"]) == 0
    assert client.get_batch(["u", "w"]) == [b"4", b"5"]
    src = buf(0, os.urandom(256))
    assert client.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert client.upsert_from("u", src.ctypes.data, 256) == 0 and client.get("u") == src.tobytes()
    assert client.batch_upsert_from(["u", "w"], [src.ctypes.data, src.ctypes.data + 128],
                                    [64, 128]) == [0, 0]
    assert client.get_batch(["u", "w"]) == [src.tobytes()[:64], src.tobytes()[128:]]
    stray = buf(8)
    assert client.upsert_from("u", stray.ctypes.data, 8) == mc.INVALID_PARAMS
    cfg = mc.ReplicateConfig()
    cfg.soft_pin_ttl_ms = 1000  # a TTL without ENABLE: Mooncake's master refuses it
    assert client.upsert("u", b"x", cfg) == mc.INVALID_PARAMS
    assert client.put("u2", b"x", cfg) == mc.INVALID_PARAMS and client.is_exist("u2") == 0
    cfg.soft_pin_action = mc.SoftPinAction.ENABLE
    assert client.upsert("u", b"x", cfg) == 0 and client.get("u") == b"x"


def test_zero_local_buffer_refuses_the_byte_api_only(clean_env, tided):
    c = mc.MooncakeDistributedStore()
    assert setup7(c, master(tided), local_buffer=0) == 0
    assert c.put("zl", b"v") == mc.INVALID_PARAMS and c.is_exist("zl") == 0
    assert "local_buffer_size=0" in str(c.last_error)
    a = buf(0, b"zero-copy")
    assert c.register_buffer(a.ctypes.data, a.nbytes) == 0
    assert c.put_from("zl", a.ctypes.data, a.nbytes) == 0 and c.is_exist("zl") == 1
    assert c.get("zl") == b""
    c.close()


# -- registered memory, zero copy ---------------------------------------------------------


def test_register_buffer_rules(client):
    a = buf(4096)
    p = a.ctypes.data
    assert client.register_buffer(p, 4096) == 0
    assert client.register_buffer(p, 4096) == 0  # the same region again
    assert client.register_buffer(p + 100, 10) == mc.INVALID_PARAMS  # overlaps
    assert client.register_buffer(0, 10) == mc.INVALID_PARAMS
    assert client.register_buffer(p + 8192, 0) == mc.INVALID_PARAMS
    assert client.unregister_buffer(p) == 0 and client.unregister_buffer(p) == mc.INVALID_PARAMS
    with pytest.raises(TypeError):
        client.register_buffer("p", 1)


def test_cxl_protocol_takes_unregistered_pointers(clean_env, tided):
    c = mc.MooncakeDistributedStore()
    assert c.setup("h", "m", 1 << 20, 1 << 20, "cxl", "", master(tided)) == 0
    a, b = buf(0, b"cxl bytes"), buf(9)
    assert c.put_from("cxl", a.ctypes.data, 9) == 0  # never registered
    assert c.get_into("cxl", b.ctypes.data, 9) == 9 and b.tobytes() == b"cxl bytes"
    assert c.put_from("cxl0", 0, 9) == mc.INVALID_PARAMS  # a null pointer still is not
    c.close()
    assert setup7(c, master(tided)) == 0  # tcp again: registration required
    assert c.get_into("cxl", b.ctypes.data, 9) == mc.INVALID_PARAMS
    c.close()


def test_put_from_get_into_and_small_buffers(client):
    src, dst, small = buf(0, os.urandom(8192)), buf(8192), buf(100)
    for a in (src, dst, small):
        assert client.register_buffer(a.ctypes.data, a.nbytes) == 0
    assert client.put_from("z", src.ctypes.data, 8192, mc.ReplicateConfig()) == 0
    assert client.get_into("z", dst.ctypes.data, 8192) == 8192 and (dst == src).all()
    assert client.get_into("z", small.ctypes.data, 100) == mc.INVALID_PARAMS  # -600, not -10
    assert client.get_into("zz", dst.ctypes.data, 8192) == mc.OBJECT_NOT_FOUND
    other = buf(64)  # never registered
    assert client.put_from("o", other.ctypes.data, 64) == mc.INVALID_PARAMS
    assert "registered" in str(client.last_error)
    meta = buf(0, b"HEADER--")
    assert client.register_buffer(meta.ctypes.data, 8) == 0
    assert client.put_from_with_metadata("wm", src.ctypes.data, meta.ctypes.data, 16, 8) == 0
    assert client.get("wm") == b"HEADER--" + src.tobytes()[:16]


def test_batch_put_from_batch_get_into(client):
    src, dst = buf(0, os.urandom(4 * 1024)), buf(4 * 1024)
    client.register_buffer(src.ctypes.data, src.nbytes)
    client.register_buffer(dst.ctypes.data, dst.nbytes)
    keys = [f"bp{i}" for i in range(4)]
    ptrs = [src.ctypes.data + i * 1024 for i in range(4)]
    assert client.batch_put_from(keys, ptrs, [1024] * 4) == [0] * 4
    out = [dst.ctypes.data + (3 - i) * 1024 for i in range(4)]
    assert client.batch_get_into(keys + ["zz"], out + [dst.ctypes.data], [1024] * 5) == [1024] * 4 + [mc.OBJECT_NOT_FOUND]
    assert (dst.reshape(4, 1024)[::-1] == src.reshape(4, 1024)).all()
    assert client.batch_get_into(keys[:1], out[:1], [512]) == [mc.INVALID_PARAMS]
    assert client.batch_put_from(keys, ptrs[:2], [1] * 4) == [mc.INVALID_PARAMS] * 4


def test_multi_buffers_and_per_key_codes(client):
    src, dst = buf(0, os.urandom(4096)), buf(4096)
    client.register_buffer(src.ctypes.data, 4096)
    client.register_buffer(dst.ctypes.data, 4096)
    s, d = src.ctypes.data, dst.ctypes.data
    assert client.batch_put_from_multi_buffers(["m0", "m1"], [[s, s + 2048], [s + 1024]],
                                               [[512, 512], [256]]) == [0, 0]
    assert client.get("m0") == src.tobytes()[:512] + src.tobytes()[2048:2560]
    res = client.batch_get_into_multi_buffers(["m0", "zz", "m1"], [[d + 3000, d], [d], [d + 100]],
                                              [[100, 924], [8], [8]], True)
    assert res == [1024, mc.OBJECT_NOT_FOUND, mc.INVALID_PARAMS]  # m1 (256 B) > 8 B
    assert dst.tobytes()[3000:3100] + dst.tobytes()[:412] == client.get("m0")[:512]
    assert client.batch_put_from_multi_buffers(["", "k1"], [[s], [s, s]], [[8], [8]]) == [
        mc.INVALID_KEY, mc.INVALID_PARAMS]


def test_get_into_ranges(client):
    v = os.urandom(1000)
    assert client.put("r", v) == 0 and client.put("q", b"Q" * 100) == 0
    a, b = buf(256), buf(256)
    client.register_buffer(a.ctypes.data, 256)
    client.register_buffer(b.ctypes.data, 256)
    res = client.get_into_ranges(
        [a.ctypes.data, b.ctypes.data],
        [["r", "q"], ["zz", "r"]],
        [[[0, 100], [200]], [[0], [10]]],
        [[[10, 900], [50]], [[0], [990]]],
        [[[50, 100], [50]], [[5], [20]]],
    )
    assert res == [[[50, 100], [50]], [[mc.OBJECT_NOT_FOUND], [mc.INVALID_PARAMS]]]
    assert a.tobytes()[:50] == v[10:60] and a.tobytes()[100:200] == v[900:1000]
    assert a.tobytes()[200:250] == b"Q" * 50
    bad = client.get_into_ranges([a.ctypes.data], [["r"]], [[[0]]], [[[0]]], [])
    assert bad == [[[mc.INVALID_PARAMS]]]


def test_put_and_get_sessions(client):
    src, dst = buf(0, os.urandom(512)), buf(512)
    client.register_buffer(src.ctypes.data, 512)
    client.register_buffer(dst.ctypes.data, 512)
    s, d = src.ctypes.data, dst.ctypes.data
    assert client.batch_put_session_start(["s1", "s2", "s3"], [300, 100, 8]) == [0, 0, 0]
    assert client.is_exist("s1") == 0  # not readable before the end
    assert client.batch_put_from_multi_buffer_ranges(
        ["s1", "s2", "nosession"], [[s, s + 200], [s + 400], [s]], [[200, 100], [100], [1]],
        [[0, 200], [0], [0]]) == [0, 0, mc.INVALID_PARAMS]
    assert client.batch_put_from_multi_buffer_ranges(["s2"], [[s]], [[101]], [[0]]) == [mc.INVALID_PARAMS]
    assert client.batch_put_session_revoke(["s3", "s3"]) == [0, mc.INVALID_PARAMS]
    assert client.batch_put_session_end(["s1", "s2", "s3"]) == [0, 0, mc.INVALID_PARAMS]
    assert client.get("s1") == src.tobytes()[:300] and client.get("s2") == src.tobytes()[400:500]
    assert client.batch_get_session_start(["s1", "zz"]) == [0, mc.OBJECT_NOT_FOUND]
    assert client.batch_get_into_multi_buffer_ranges(
        ["s1", "s2"], [[d, d + 100], [d]], [[50, 50], [10]], [[250, 0], [0]]) == [100, mc.INVALID_PARAMS]
    assert dst.tobytes()[:50] == src.tobytes()[250:300] and dst.tobytes()[100:150] == src.tobytes()[:50]
    assert client.batch_get_session_end(["s1"]) == 0
    assert client.batch_get_into_multi_buffer_ranges(["s1"], [[d]], [[1]], [[0]]) == [mc.INVALID_PARAMS]


def test_alloc_from_mem_pool(client):
    p = client.alloc_from_mem_pool(1 << 16)
    assert p != 0 and p % 4096 == 0
    ctypes.memmove(p, b"pooled", 6)
    assert client.put_from("pool", p, 6) == 0 and client.get("pool") == b"pooled"
    assert client.alloc_from_mem_pool(0) == 0
    assert client.register_buffer(p + 10, 10) == mc.INVALID_PARAMS  # already registered


def test_host_mem_allocator():
    a = mc.MooncakeHostMemAllocator()
    p = a.alloc(8192)
    ctypes.memmove(p, b"x" * 8192, 8192)
    assert a.free(p) == 0 and a.free(p) == mc.INVALID_PARAMS
    with pytest.raises(ValueError):
        a.alloc(0)


# -- replicas, segments, tasks --------------------------------------------------------------


def test_replica_descriptors_and_clear(client):
    assert client.put("rd", b"12345") == 0
    (r,) = client.get_replica_desc("rd")
    assert r.status == mc.ReplicaStatus.COMPLETE and r.is_memory_replica()
    assert not r.is_disk_replica() and not r.is_local_disk_replica()
    d = r.get_memory_descriptor().buffer_descriptor
    assert d.size == 5 and d.transport_endpoint == client.url
    assert client.get_replica_desc("zz") == []
    got = client.batch_get_replica_desc(["rd", "zz"])
    assert list(got) == ["rd", "zz"] and len(got["rd"]) == 1 and got["zz"] == []
    assert client.put("rd2", b"x") == 0
    assert client.batch_replica_clear(["rd"], "some-other-segment") == []
    assert client.is_exist("rd") == 1
    assert client.batch_replica_clear(["rd", "rd2", "zz"]) == ["rd", "rd2"]
    assert client.batch_is_exist(["rd", "rd2"]) == [0, 0]
    assert client.put("rd3", b"x") == 0
    assert client.batch_replica_clear(["rd3"], client.get_hostname()) == ["rd3"]


def test_refused_calls_say_not_supported(client):
    assert client.mount_segment("/dev/shm/x", 1 << 20) == {"ret": mc.NOT_SUPPORTED, "segment_ids": []}
    assert client.allocate_and_mount_segment(1 << 20)["ret"] == mc.NOT_SUPPORTED
    assert client.unmount_segment(["s"]) == mc.NOT_SUPPORTED
    assert client.unmount_and_free_segment(["s"], 1) == mc.NOT_SUPPORTED
    assert client.unmount_local_disk_segment() == mc.NOT_SUPPORTED
    task, rc = client.create_copy_task("k", ["seg"])
    assert rc == mc.NOT_SUPPORTED and task.int == 0
    assert client.create_move_task("k", "a", "b")[1] == mc.NOT_SUPPORTED
    assert client.query_task(task) == (None, mc.NOT_SUPPORTED)
    assert client.put("re1", b"x") == 0
    assert client.remove_by_regex("re.*") == mc.NOT_SUPPORTED and client.is_exist("re1") == 1
    assert "list keys" in str(client.last_error)
    spec = object()  # any ParallelAxis / TensorParallelism / ReadTarget spec
    assert client.put_tensor_with_parallelism("k", None, spec) == mc.NOT_SUPPORTED
    assert client.put_tensor_with_parallelism("k", None, writer_partition=spec) == mc.NOT_SUPPORTED
    assert client.batch_put_tensor_with_parallelism(["a", "b"], [None, None], [spec, None]) == [mc.NOT_SUPPORTED] * 2
    assert client.batch_put_tensor_with_parallelism_from(["a"], [1], [1], [spec]) == [mc.NOT_SUPPORTED]
    assert client.put_tensor_with_parallelism_from("k", 1, 1, spec) == mc.NOT_SUPPORTED
    assert client.upsert_tensor_with_parallelism("k", None, spec) == mc.NOT_SUPPORTED
    assert client.upsert_tensor_with_parallelism_from("k", 1, 1, spec) == mc.NOT_SUPPORTED
    assert client.batch_upsert_tensor_with_parallelism(["a"], [None], None, None, [spec]) == [mc.NOT_SUPPORTED]
    assert client.batch_upsert_tensor_with_parallelism_from(["a"], [1], [1], [spec]) == [mc.NOT_SUPPORTED]
    assert client.get_tensor_with_parallelism("k", spec) is None
    assert client.batch_get_tensor_with_parallelism(["a", "b"], [spec, spec]) == [None, None]
    assert client.get_tensor_with_parallelism_into("k", 1, 1, spec) is None
    assert client.batch_get_tensor_with_parallelism_into(["a"], [1], [1], [spec]) == [None]
    assert "not supported by tide" in str(client.last_error)


def test_codes_map():
    assert mc.mooncake_code(0) == 0 and mc.mooncake_code(4096) == 4096
    assert mc.mooncake_code(tide.ENOSPACE) == mc.NO_AVAILABLE_HANDLE == -200
    assert mc.mooncake_code(tide.ENOTFOUND) == mc.OBJECT_NOT_FOUND == -704
    assert mc.mooncake_code(tide.EBUFSMALL) == mc.INVALID_PARAMS == -600
    assert mc.mooncake_code(-111) == mc.RPC_FAIL  # ECONNREFUSED
    assert mc.mooncake_code(tide.EAUTH) == mc.INTERNAL_ERROR


def test_out_of_space_is_no_available_handle(clean_env):
    # An explicit mem:// URL (a private store, by request) with a 1 MiB pool: a 2 MiB value
    # is tide's EVALBIG, Mooncake's NO_AVAILABLE_HANDLE (store pressure to vLLM). Against
    # a tided, a value over its --max-value ends the connection (tided's rule), so this
    # mapping is checked in-process.
    c = mc.MooncakeDistributedStore()
    assert setup7(c, "mem://?capacity=1MiB") == 0
    big = buf(2 << 20)
    assert c.register_buffer(big.ctypes.data, big.nbytes) == 0
    assert c.batch_put_from(["big"], [big.ctypes.data], [big.nbytes]) == [mc.NO_AVAILABLE_HANDLE]
    assert c.put_from("small", big.ctypes.data, 4096) == 0
    c.close()


# -- tensor helpers (torch) ---------------------------------------------------------------


def test_tensor_helpers_without_torch_say_so(client):
    if mt.load_torch() is not None:
        pytest.skip("torch imports here; test_tensor_helpers covers them")
    with pytest.raises(ImportError, match="torch"):
        client.put_tensor("t", None)
    with pytest.raises(ImportError, match="torch"):
        client.get_tensor("t")
    with pytest.raises(ImportError, match="torch"):
        client.save_tensor_to_safetensor("t")
    assert client.put("notensor", b"x") == 0
    assert client.load_tensor_from_safetensor(file_name="/nonexistent/f") is None


def test_tensor_helpers(client, tmp_path):
    torch = pytest.importorskip("torch")
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    assert client.put_tensor("t", t) == 0
    assert torch.equal(client.get_tensor("t"), t) and client.get_tensor("zz") is None
    ts = [torch.randn(3, 5).to(torch.bfloat16), torch.randint(0, 9, (7,), dtype=torch.int64)]
    assert client.batch_put_tensor(["t1", "t2"], ts) == [0, 0]
    got = client.batch_get_tensor(["t1", "t2", "zz"])
    assert torch.equal(got[0], ts[0]) and torch.equal(got[1], ts[1]) and got[2] is None
    assert client.pub_tensor("p", t, mc.ReplicateConfig()) == 0
    assert client.batch_pub_tensor(["p1"], [t]) == [0]
    assert client.upsert_tensor("t", t * 2) == 0 and torch.equal(client.get_tensor("t"), t * 2)
    assert client.batch_upsert_tensor(["t1"], [t]) == [0] and torch.equal(client.get_tensor("t1"), t)
    assert client.upsert_pub_tensor("p", t + 1) == 0 and torch.equal(client.get_tensor("p"), t + 1)
    assert client.batch_upsert_pub_tensor(["p1"], [t + 2]) == [0]
    # tensor parallelism: split on a dim, key_tp_<rank>
    assert client.put_tensor_with_tp("w", t, tp_size=2, split_dim=1) == 0
    assert torch.equal(client.get_tensor("w_tp_1"), t[:, 3:])
    assert torch.equal(client.get_tensor_with_tp("w", tp_rank=0, tp_size=2), t[:, :3])
    assert client.batch_put_tensor_with_tp(["w2"], [t], tp_size=4) == [0]
    assert torch.equal(client.batch_get_tensor_with_tp(["w2"], tp_rank=3, tp_size=4)[0], t[3:])
    assert client.pub_tensor_with_tp("w3", t, tp_size=2) == 0
    assert client.batch_pub_tensor_with_tp(["w4"], [t], tp_size=3, split_dim=1) == [0]
    assert client.put_tensor_with_tp("bad", t, tp_size=5) == mc.INVALID_PARAMS
    # into registered buffers, and from them
    n = mc.TENSOR_HEADER_SIZE + t.numel() * 4
    b = buf(2 * n)
    client.register_buffer(b.ctypes.data, b.nbytes)
    x = client.get_tensor_into("t", b.ctypes.data, n)
    assert torch.equal(x, t * 2)
    assert client.put_tensor_from("tf", b.ctypes.data, n) == 0 and torch.equal(client.get_tensor("tf"), t * 2)
    assert client.batch_put_tensor_from(["tf2"], [b.ctypes.data], [n]) == [0]
    assert client.upsert_tensor_from("tf", b.ctypes.data, n) == 0
    assert client.batch_upsert_tensor_from(["tf2"], [b.ctypes.data], [n]) == [0]
    assert client.put_tensor_from("tf3", b.ctypes.data + 1, n) == mc.INVALID_PARAMS
    ys = client.batch_get_tensor_into(["t1", "zz"], [b.ctypes.data, b.ctypes.data + n], [n, n])
    assert torch.equal(ys[0], t) and ys[1] is None
    assert client.get_tensor_into("t", b.ctypes.data, 16) is None
    # wrong as a whole: INVALID_PARAMS per key (Mooncake's), not None
    assert client.batch_get_tensor_into(["t", "t1"], [b.ctypes.data], [n]) == [mc.INVALID_PARAMS] * 2
    assert client.batch_get_tensor_into(["t"], [0], [n]) == [mc.INVALID_PARAMS]
    assert client.get_tensor_into("t", 0, n) is None
    assert torch.equal(client.get_tensor_with_tp_into("w", b.ctypes.data, n, tp_rank=1, tp_size=2), t[:, 3:])
    assert torch.equal(client.batch_get_tensor_with_tp_into(["w"], [b.ctypes.data], [n], 0, 2)[0], t[:, :3])
    assert client.get_tensor_into("t", b.ctypes.data, n) is not None
    assert client.put_tensor_with_tp_from("wf", b.ctypes.data, n, tp_size=2) == 0
    assert torch.equal(client.get_tensor("wf_tp_0"), (t * 2)[:2])
    assert client.batch_put_tensor_with_tp_from(["wf2"], [b.ctypes.data], [n], 0, 2, 1) == [0]
    # *_with_parallelism without a spec: whole tensors
    assert client.put_tensor_with_parallelism("wp", t) == 0
    assert torch.equal(client.get_tensor_with_parallelism("wp"), t)
    assert client.batch_put_tensor_with_parallelism(["wp1", "wp2"], [t, t + 1]) == [0, 0]
    got = client.batch_get_tensor_with_parallelism(["wp1", "wp2"], [None, None])
    assert torch.equal(got[0], t) and torch.equal(got[1], t + 1)
    assert client.upsert_tensor_with_parallelism("wp", t + 5) == 0
    assert client.batch_upsert_tensor_with_parallelism(["wp1"], [t + 6]) == [0]
    assert torch.equal(client.get_tensor("wp"), t + 5) and torch.equal(client.get_tensor("wp1"), t + 6)
    x = client.get_tensor_with_parallelism_into("wp", b.ctypes.data, n)
    assert torch.equal(x, t + 5)
    assert client.put_tensor_with_parallelism_from("wpf", b.ctypes.data, n) == 0
    assert client.batch_put_tensor_with_parallelism_from(["wpf2"], [b.ctypes.data], [n]) == [0]
    assert client.upsert_tensor_with_parallelism_from("wpf", b.ctypes.data, n) == 0
    assert client.batch_upsert_tensor_with_parallelism_from(["wpf2"], [b.ctypes.data], [n]) == [0]
    assert torch.equal(client.batch_get_tensor_with_parallelism_into(
        ["wpf2"], [b.ctypes.data + n], [n])[0], t + 5)
    # the module-level codec Mooncake's Python helpers use
    hdr, ptr, nbytes, owner = mc._serialize_tensor(t[:, 1:])  # strided: a contiguous copy
    assert len(hdr) == mc._tensor_metadata_size() and nbytes == 4 * 5 * 4
    payload = hdr + ctypes.string_at(ptr, nbytes)
    assert torch.equal(mc._deserialize_tensor(payload), t[:, 1:]) and owner.is_contiguous()
    with pytest.raises(ValueError):
        mc._deserialize_tensor(b"not a tensor" * 10)
    with pytest.raises(ValueError):
        mc._serialize_tensor("nope")
    # safetensors files
    st = pytest.importorskip("safetensors.torch")
    f = str(tmp_path / "t.safetensors")
    assert client.save_tensor_to_safetensor("t", f) == 0
    assert torch.equal(st.load_file(f)["t"], t * 2)
    assert client.save_tensor_to_safetensor("zz", f) == mc.FILE_NOT_FOUND
    assert client.save_tensor_to_safetensor("t", str(tmp_path / "no" / "dir")) == mc.INVALID_PARAMS
    back = client.load_tensor_from_safetensor("t_back", f)  # entry "t_back" absent: the first
    assert torch.equal(back, t * 2) and torch.equal(client.get_tensor("t_back"), t * 2)
    assert client.load_tensor_from_safetensor(file_name=str(tmp_path / "missing")) is None
    assert "missing" in str(client.last_error)
    # into an existing tensor ("cuda" in Mooncake; any device here)
    dst = torch.zeros(4, 6)
    assert client.get_tensor_into_cuda("t", dst) == t.numel() * 4 and torch.equal(dst, t * 2)
    assert client.batch_get_tensor_into_cuda(["t1", "zz"], [dst, dst]) == [96, mc.OBJECT_NOT_FOUND]
    assert client.get_tensor_into_cuda("t", torch.zeros(3)) == mc.INVALID_PARAMS


# -- get_hostname: Mooncake's "host:port" ------------------------------------------------


def test_get_hostname_is_host_and_a_held_port(clean_env, tided, monkeypatch):
    monkeypatch.setenv("MC_STORE_CLIENT_MIN_PORT", "20000")
    monkeypatch.setenv("MC_STORE_CLIENT_MAX_PORT", "20063")
    a, b = mc.MooncakeDistributedStore(), mc.MooncakeDistributedStore()
    args = ("P2PHANDSHAKE", 1 << 20, 1 << 20, "tcp", "", master(tided))
    assert a.setup("127.0.0.1", *args) == 0 and b.setup("127.0.0.1", *args) == 0
    ha, hb = a.get_hostname(), b.get_hostname()
    host, port = ha.rsplit(":", 1)
    assert host == "127.0.0.1" and ha != hb  # two clients, two ports
    # the port is held: binding it again fails until close()
    import socket
    s = socket.socket()
    with pytest.raises(OSError):
        s.bind(("", int(port)))
    s.close()
    # this client's segment name clears its keys; another client's does not
    assert a.put("hn", b"x") == 0
    assert a.batch_replica_clear(["hn"], hb) == []
    assert a.batch_replica_clear(["hn"], ha) == ["hn"]
    a.close()
    b.close()
    s = socket.socket()
    s.bind(("", int(port)))  # released by close()
    s.close()
    # a hostname that names its port is kept as given; so is a bracketed IPv6 one
    c = mc.MooncakeDistributedStore()
    assert c.setup("node7:17777", *args) == 0 and c.get_hostname() == "node7:17777"
    c.close()
    assert c.setup("[::1]:17778", *args) == 0 and c.get_hostname() == "[::1]:17778"
    c.close()
    assert c.setup("::1", *args) == 0 and re.fullmatch(r"\[::1\]:\d+", c.get_hostname())
    c.close()
    d = mc.MooncakeDistributedStore()  # Mooncake's dummy client has no hostname
    assert d.setup_dummy(1 << 20, 1 << 20, master(tided)) == 0 and d.get_hostname() == ""
    d.close()


# -- tensor objects: Mooncake's TensorMetadata, byte for byte ----------------------------

# Mooncake's struct TensorMetadata (mooncake-integration/integration_utils.h), laid out
# by hand from the struct: little-endian, natural alignment, 304 bytes.


def _u(n, v, signed=False):
    return int(v).to_bytes(n, "little", signed=signed)


def _hand_header(dtype, global_shape, local_shape, nbytes, kind=0, axes=()):
    h = bytearray(304)
    h[0:4] = _u(4, 0x4D4F4F4E)        # magic "NOOM" little-endian
    h[4:6] = _u(2, 1)                 # version
    h[6:8] = _u(2, 304)               # header_size
    h[8:12] = _u(4, dtype, True)
    h[12:16] = _u(4, len(local_shape), True)
    h[16:20] = _u(4, kind)            # layout_kind
    h[20:24] = _u(4, 0)               # reserved_flags
    h[24:32] = _u(8, 304)             # data_offset
    h[32:40] = _u(8, nbytes)          # data_bytes
    for base, shape in ((40, global_shape), (104, local_shape)):
        for i in range(8):
            h[base + 8 * i:base + 8 * i + 8] = _u(8, shape[i] if i < len(shape) else -1, True)
    h[168:172] = _u(4, len(axes))     # axis_count; 172..176 reserved
    for j, ax in enumerate(axes):     # LayoutAxis: six int32 then an int64
        o = 176 + 32 * j
        for k, v in enumerate(ax[:6]):
            h[o + 4 * k:o + 4 * k + 4] = _u(4, v, True)
        h[o + 24:o + 32] = _u(8, ax[6], True)
    return bytes(h)


def test_tensor_header_size_and_layout_without_torch():
    assert mc.TENSOR_HEADER_SIZE == 304 and mc._tensor_metadata_size() == 304
    want = _hand_header(8, [3, 4], [3, 4], 96)  # int64 = 8 in Mooncake's numbering
    assert mt.pack_header(8, [3, 4], [3, 4], 96) == want
    assert mt.parse_header(want, 304 + 96) == ("int64", [3, 4], 96, 304)
    axes = [(1, 0, 1, 2, 1, 0, 3)]
    want = _hand_header(0, [2, 6], [2, 3], 24, 1, axes)
    assert mt.pack_header(0, [2, 6], [2, 3], 24, 1, axes) == want
    assert mt.parse_header(want, 304 + 24) == ("float32", [2, 3], 24, 304)
    # what Mooncake's ValidateTensorMetadata refuses, tide refuses too
    good = bytearray(_hand_header(6, [5], [5], 20))
    for off, val in ((0, b"TIDT"), (4, b"\x02\x00"), (6, b"\x58\x00"), (8, _u(4, 15)),
                     (12, _u(4, 9)), (16, _u(4, 2)), (24, _u(8, 8)), (32, _u(8, 21)),
                     (48, _u(8, 0)), (104, _u(8, -2, True)), (168, _u(4, 5))):
        bad = bytearray(good)
        bad[off:off + len(val)] = val
        assert mt.parse_header(bytes(bad)) is None, off
    assert mt.parse_header(bytes(good), 304 + 19) is None  # data_bytes != what follows
    assert mt.parse_header(bytes(good)[:303]) is None


def test_tensor_objects_are_mooncake_bytes(client):
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    assert client.put_tensor("hdr", t) == 0
    raw = client.get("hdr")
    assert raw == _hand_header(8, [3, 4], [3, 4], 96) + t.numpy().tobytes()
    meta, ptr, nbytes, owner = mc._serialize_tensor(t)
    assert meta == raw[:304] and nbytes == 96 and ctypes.string_at(ptr, 96) == raw[304:]
    assert torch.equal(mc._deserialize_tensor(raw), t)
    # an object written by hand in Mooncake's layout reads back (bf16, 0-d, empty too)
    data = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    assert client.put("bf", _hand_header(12, [3], [3], 6) + data.view(torch.uint8).numpy().tobytes()) == 0
    assert torch.equal(client.get_tensor("bf"), data)
    assert client.put("s", _hand_header(1, [], [], 8) + _u(8, 0)) == 0
    assert client.get_tensor("s").shape == () and client.get_tensor("s").dtype == torch.float64
    assert client.put("e", _hand_header(0, [0, 2], [0, 2], 0)) == 0
    assert client.get_tensor("e").shape == (0, 2)
    # a TP shard: layout_kind 1, the full shape global, one TP axis (kind 1) whose
    # reserved1 is the shard's extent along split_dim
    w = torch.arange(12, dtype=torch.float32).reshape(2, 6)
    assert client.put_tensor_with_tp("w", w, tp_size=2, split_dim=1) == 0
    for r in range(2):
        raw = client.get(f"w_tp_{r}")
        shard = w[:, 3 * r:3 * r + 3].contiguous()
        assert raw == _hand_header(0, [2, 6], [2, 3], 24, 1, [(1, 0, r, 2, 1, 0, 3)]) \
            + shard.numpy().tobytes()
