"""LMCache 0.5.6's multiprocess server end to end on CPU, its L2 pointed at a real tided.

`lmcache server` (the request server LMCache's engine adapters talk to, with its HTTP API)
runs as its own process with one L2 adapter: `resp` on tided's RESP port, or `native_plugin`
loading tide.lmcache.TideConnector (unix://, tide://). The client is LMCache's own: its ZMQ
RequestClient and the engine-driven transfer context a CPU worker of LMCache's vLLM adapter
makes (`create_transfer_context` over CPU paged KV caches), which registers the caches and
stores and retrieves chunks by token ids. A first server stores two chunks; tided must then
hold them (its objects and bytes_in); the server is stopped, and a second one, with an empty
L1 and the same L2, must prefetch both chunks from tided and hand back the stored bytes. A chunk damaged
inside tided must be a miss for the second server, never wrong bytes.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
import torch
import zmq

from conftest import ROOT, Tided, free_port, stop
from lmcache.v1.multiprocess.custom_types import IPCCacheServerKey
from lmcache.v1.multiprocess.transfer_context.worker_transfer import create_transfer_context
from lmcache.v1.multiprocess.transport.factory import RequestClientFactory

from tide import Store

MODEL = "tide-test/mp-model"
# The worker's paged KV caches (HND, as LMCache's CPU path lays them out): per layer
# [blocks, 2 (K, V), heads, tokens per block, head size], bfloat16. A chunk is one block.
LAYERS, HEADS, BLOCK, HEAD = 2, 2, 16, 64
NBLOCKS = 8
CHUNK_BYTES = LAYERS * 2 * HEADS * BLOCK * HEAD * 2
TOKENS = tuple(range(100, 100 + 2 * BLOCK))  # two chunks


class MPServer:
    """`lmcache server` with one --l2-adapter, on free loopback ports; stopped by pid."""

    def __init__(self, tmp, spec, name):
        self.port, self.http = free_port(), free_port()
        self.log = str(tmp / f"{name}.log")
        exe = os.path.join(os.path.dirname(sys.executable), "lmcache")
        args = [exe, "server", "--host", "127.0.0.1", "--port", str(self.port),
                "--http-host", "127.0.0.1", "--http-port", str(self.http),
                "--chunk-size", str(BLOCK), "--l1-size-gb", "0.0625",
                "--eviction-policy", "LRU", "--supported-transfer-mode", "auto",
                "--disable-observability", "--l2-adapter", json.dumps(spec)]
        # tide.lmcache for the native_plugin adapter; no usage reports from a test.
        path = [os.path.join(ROOT, "python")] + [os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, LMCACHE_TRACK_USAGE="false",
                   PYTHONPATH=os.pathsep.join(p for p in path if p))
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=logf, env=env)
        deadline = time.monotonic() + 90
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"lmcache server did not start: {self.tail()}")
            time.sleep(0.2)

    def _healthy(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/status",
                                        timeout=5) as r:
                return json.load(r).get("is_healthy") is True
        except OSError:
            return False

    def status(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/status", timeout=10) as r:
            return json.load(r)

    def tail(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-4000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # its KeyboardInterrupt shutdown path
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        stop(self.proc)


class Worker:
    """A CPU worker as LMCache's vLLM adapter makes one: its request client and its
    engine-driven transfer context over paged KV caches, registered with the server."""

    def __init__(self, server):
        self.kv = {f"layer.{i}": torch.zeros((NBLOCKS, 2, HEADS, BLOCK, HEAD),
                                             dtype=torch.bfloat16) for i in range(LAYERS)}
        self.zctx = zmq.Context()
        self.client = RequestClientFactory.create(f"tcp://127.0.0.1:{server.port}",
                                                  context=self.zctx)
        self.iid = uuid.uuid4().int & ((1 << 63) - 1)
        self.ctx = create_transfer_context(self.kv, instance_id=self.iid,
                                           req_client=self.client)
        hints = dict(kv_layout="HND", num_kv_heads=HEADS, tokens_per_block=BLOCK,
                     head_dim=HEAD)
        self.ctx.register(self.kv, MODEL, 1, 1, 60.0, layout_hints=hints)

    def key(self, rid, tokens, worker=0):
        k = IPCCacheServerKey(model_name=MODEL, world_size=1, num_kv_readers=1,
                              worker_id=worker, token_ids=tuple(tokens), start=0,
                              end=len(tokens), request_id=rid)
        return k if worker is not None else k.no_worker_id_version()

    def store(self, tokens, blocks):
        rid = "store-" + uuid.uuid4().hex
        try:
            return self.ctx.submit_store(rid, self.key(rid, tokens), self.kv, [blocks], None,
                                         1).result(timeout=60)
        finally:
            self.client.end_session(rid).result(timeout=60)

    def lookup_retrieve(self, tokens, blocks):
        """LOOKUP (the server prefetches from L2 into L1), then RETRIEVE into blocks:
        (chunks found, retrieve ok)."""
        rid = "retrieve-" + uuid.uuid4().hex
        try:
            self.client.lookup(self.key(rid, tokens, None), 1).result(timeout=60)
            deadline = time.monotonic() + 60
            while (found := self.client.query_prefetch_status(rid).result(timeout=60)) is None:
                assert time.monotonic() < deadline, "prefetch never finished"
                time.sleep(0.05)
            if found == 0:
                return 0, False
            n = found * BLOCK
            ok = self.ctx.submit_retrieve(rid, self.key(rid, tokens[:n]), self.kv, [blocks],
                                          None, 1).result(timeout=60)
            return found, ok
        finally:
            self.client.end_session(rid).result(timeout=60)

    def close(self):
        try:
            self.ctx.unregister()
        finally:
            self.ctx.close()
            self.client.close()
            self.zctx.term()


def wait_stats(url, want, what):
    """tided's figures once they reach `want` (LMCache writes L2 behind the store)."""
    deadline = time.monotonic() + 60
    with Store(url) as s:
        while True:
            st = s.stats()
            if all(st[k] >= v for k, v in want.items()) or time.monotonic() > deadline:
                return st
            time.sleep(0.1)


def spec_for(kind, t):
    if kind == "resp":
        return {"type": "resp", "host": "127.0.0.1", "port": t.resp, "num_workers": 2}
    url = t.unix_url if kind == "native-unix" else t.url
    return {"type": "native_plugin", "module_path": "tide.lmcache",
            "class_name": "TideConnector", "adapter_params": {"url": url}}


@pytest.mark.parametrize("kind", ["resp", "native-unix"])
def test_mp_server_round_trip_through_tided(tmp_path, kind):
    t = Tided(tmp_path, unix=True, capacity="64MiB")
    started = []
    try:
        a = MPServer(tmp_path, spec_for(kind, t), "server-a")
        started.append(a)
        w = Worker(a)
        g = torch.Generator().manual_seed(27)
        ref = {k: torch.randn(v.shape, generator=g).to(v.dtype) for k, v in w.kv.items()}
        for k in w.kv:
            w.kv[k][1:3] = ref[k][1:3]
        assert w.store(TOKENS, [1, 2]) is True
        st = wait_stats(t.url, {"objects": 2, "bytes_in": 2 * CHUNK_BYTES}, "store")
        assert (st["objects"], st["puts"], st["bytes_in"]) == (2, 2, 2 * CHUNK_BYTES), st
        assert st["bytes_out"] == 0, st
        w.close()
        a.stop()

        # A new server: empty L1, the same L2. Both chunks come from tided.
        b = MPServer(tmp_path, spec_for(kind, t), "server-b")
        started.append(b)
        w = Worker(b)
        assert b.status()["storage_manager"]["l1_managers"]["_default"][
            "total_object_count"] == 0
        found, ok = w.lookup_retrieve(TOKENS, [4, 5])
        assert (found, ok) == (2, True), b.tail()
        for k in w.kv:
            assert torch.equal(w.kv[k][4:6], ref[k][1:3]), k
            assert not w.kv[k][6:].any() and not w.kv[k][:4].any(), k
        st = wait_stats(t.url, {"gets": 2}, "load")
        assert st["gets"] >= 2 and st["bytes_out"] >= 2 * CHUNK_BYTES, st
        assert st["checksum_errors"] == 0, st

        # Tokens never stored: nothing found, nothing loaded.
        other = tuple(range(5000, 5000 + 2 * BLOCK))
        assert w.lookup_retrieve(other, [6, 7]) == (0, False)
        assert not any(w.kv[k][6:].any() for k in w.kv)
        w.close()
    finally:
        for s in started:
            s.stop()
        stop(t.proc)


def test_mp_server_damaged_chunk_in_tided_is_a_miss(tmp_path):
    """One byte of the second chunk flipped inside tided: a second server's LOOKUP through
    the native adapter finds only the first chunk (the damaged one is a miss, never wrong
    bytes), and RETRIEVE hands back that chunk alone."""
    t = Tided(tmp_path, unix=True, capacity="64MiB")
    started = []
    try:
        a = MPServer(tmp_path, spec_for("native-unix", t), "server-a")
        started.append(a)
        w = Worker(a)
        g = torch.Generator().manual_seed(28)
        ref = {k: torch.randn(v.shape, generator=g).to(v.dtype) for k, v in w.kv.items()}
        for k in w.kv:
            w.kv[k][1:3] = ref[k][1:3]
        assert w.store(TOKENS, [1, 2]) is True
        wait_stats(t.url, {"objects": 2}, "store")
        w.close()
        a.stop()
        # Layer 0's K of head 0, token 0 of the second chunk: 128 contiguous bytes in the
        # worker's block and in any chunk layout LMCache stores.
        needle = ref["layer.0"][2, 0, 0, 0].contiguous().view(torch.uint8).numpy().tobytes()
        assert t.corrupt(needle) >= 1

        b = MPServer(tmp_path, spec_for("native-unix", t), "server-b")
        started.append(b)
        w = Worker(b)
        found, ok = w.lookup_retrieve(TOKENS, [4, 5])
        assert (found, ok) == (1, True), b.tail()
        for k in w.kv:
            assert torch.equal(w.kv[k][4], ref[k][1]), k
            assert not w.kv[k][5].any(), k
        st = wait_stats(t.url, {"checksum_errors": 1}, "load")
        assert st["checksum_errors"] >= 1, st
        w.close()
    finally:
        for s in started:
            s.stop()
        stop(t.proc)
