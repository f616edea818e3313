"""tide.vllm.TideStoreConnector driven the way vLLM drives it, without vLLM.

Fake requests carry what vLLM's Request carries (request_id, num_tokens, block_hashes as
32-byte sha256 chain hashes, prompt_token_ids, num_computed_tokens); fake scheduler
outputs carry scheduled_new_reqs, scheduled_cached_reqs, num_scheduled_tokens,
finished_req_ids and preempted_req_ids; numpy arrays are the paged KV caches. Each step
goes scheduler -> metadata (pickled, as it travels to worker processes) -> every worker
(bind, start_load_kv, the "forward pass" writing pages, get_finished,
get_block_ids_with_load_errors) -> scheduler.update_connector_output.
"""

import copy
import gc
import hashlib
import json
import os
import pickle
import signal
import subprocess
import threading
import time
import types

import numpy as np
import pytest

import tide
from tide import vllm as tv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")

# One group: 16-token blocks, 2 KV heads of 8 in float16 -> a 1 KiB page per layer.
BLOCK, HEADS, HEAD = 16, 2, 8
NBLOCKS = 24


def dense_config(role="kv_both", layers=("layer.0", "layer.1"), **extra):
    return {
        "model_config": {"model": "org/Tiny-1B", "total_num_kv_heads": HEADS},
        "cache_config": {"block_size": BLOCK},
        "parallel_config": {},
        "kv_transfer_config": {
            "kv_connector": "TideStoreConnector",
            "kv_role": role,
            "kv_connector_extra_config": dict(extra),
        },
        "kv_cache_config": {
            "num_blocks": NBLOCKS,
            "kv_cache_groups": [
                {
                    "layer_names": list(layers),
                    "kv_cache_spec": {
                        "type": "FullAttentionSpec",
                        "block_size": BLOCK,
                        "num_kv_heads": HEADS,
                        "head_size": HEAD,
                        "dtype": "float16",
                    },
                }
            ],
        },
    }


# ---------------------------------------------------------------------------------------
# What vLLM hands the connector
# ---------------------------------------------------------------------------------------


def chain_hashes(tokens, unit):
    """vLLM-like block hashes: a sha256 chain over full units of tokens (32 bytes each)."""
    out, parent = [], b"\0" * 32
    for end in range(unit, len(tokens) + 1, unit):
        unit_bytes = np.asarray(tokens[end - unit : end], np.int64).tobytes()
        parent = hashlib.sha256(parent + unit_bytes).digest()
        out.append(parent)
    return out


class Request:
    """What vLLM's Request carries that the connector reads."""

    def __init__(self, rid, tokens, unit=BLOCK):
        self.request_id = rid
        self.prompt_token_ids = list(tokens)
        self.all_token_ids = list(tokens)
        self.num_computed_tokens = 0
        self.unit = unit
        self.block_hashes = chain_hashes(self.all_token_ids, unit)

    @property
    def num_tokens(self):
        return len(self.all_token_ids)

    @property
    def num_prompt_tokens(self):
        return len(self.prompt_token_ids)

    def append(self, token):
        self.all_token_ids.append(token)
        self.block_hashes = chain_hashes(self.all_token_ids, self.unit)


class Blocks:
    """vLLM's KVCacheBlocks: get_block_ids() -> one list of ids per group."""

    def __init__(self, *groups):
        self.groups = tuple(list(g) for g in groups)

    def get_block_ids(self):
        return tuple(list(g) for g in self.groups)


def new_req(req, table, computed):
    """NewRequestData for a request first scheduled with `computed` tokens already there."""
    return types.SimpleNamespace(
        req_id=req.request_id,
        prompt_token_ids=list(req.prompt_token_ids),
        prefill_token_ids=None,
        block_ids=tuple(list(g) for g in table),
        num_computed_tokens=computed,
    )


def sched_out(new=(), cached=(), num_sched=None, finished=(), preempted=()):
    """SchedulerOutput; cached entries are (req_id, new_block_ids, num_computed_tokens)."""
    return types.SimpleNamespace(
        scheduled_new_reqs=list(new),
        scheduled_cached_reqs=types.SimpleNamespace(
            req_ids=[c[0] for c in cached],
            resumed_req_ids=set(),
            new_block_ids=[c[1] for c in cached],
            num_computed_tokens=[c[2] for c in cached],
        ),
        num_scheduled_tokens=dict(num_sched or {}),
        finished_req_ids=set(finished),
        preempted_req_ids=set(preempted),
    )


class Output:
    """KVConnectorOutput, aggregated over the workers (an id counts once all report it)."""

    def __init__(self):
        self.finished_sending, self.finished_recving, self.invalid_block_ids = set(), set(), set()


class Engine:
    """One scheduler connector and its worker connectors, stepped as vLLM steps them."""

    def __init__(self, sched, workers):
        self.sched, self.workers = sched, workers
        self.sent, self.recvd, self.invalid = set(), set(), set()
        self._counts = {}

    def step(self, so, forward=None):
        meta = self.sched.build_connector_meta(so)
        assert isinstance(meta, tv.TideConnectorMetadata)
        wire = pickle.loads(pickle.dumps(meta))  # to the worker processes
        out = Output()
        for w in self.workers:
            w.bind_connector_metadata(wire)
            w.handle_preemptions(wire)  # vLLM: before the step's forward pass
            w.start_load_kv(None)
            if forward:
                forward(w)
            w.wait_for_save()
            sending, recving = w.get_finished(so.finished_req_ids)
            for kind, ids in (("s", sending), ("r", recving)):
                for rid in ids or ():
                    self._counts[(kind, rid)] = self._counts.get((kind, rid), 0) + 1
                    if self._counts[(kind, rid)] == len(self.workers):
                        (out.finished_sending if kind == "s" else out.finished_recving).add(rid)
            out.invalid_block_ids |= w.get_block_ids_with_load_errors()
            w.clear_connector_metadata()
        self.sched.update_connector_output(out)
        self.sent |= out.finished_sending
        self.recvd |= out.finished_recving
        self.invalid |= out.invalid_block_ids
        return meta, out

    def idle_until(self, cond, steps=200):
        """Empty steps (vLLM keeps stepping while transfers are pending) until cond()."""
        for _ in range(steps):
            if cond():
                return
            for w in self.workers:
                w.wait()
            self.step(sched_out())
        assert cond(), "the connector never reported"


def kv_cache(layout, seed=None):
    """One layer's paged cache: 'kv_first' (2, blocks, block, heads, dim) as FlashAttention
    lays it out, or 'blocks_first' (blocks, 2, block, heads, dim) as FlashInfer."""
    if layout == "kv_first":
        shape = (2, NBLOCKS, BLOCK, HEADS, HEAD)
    else:
        shape = (NBLOCKS, 2, BLOCK, HEADS, HEAD)
    if seed is None:
        return np.zeros(shape, np.float16)
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16)


def page(cache, layout, b):
    return cache[:, b] if layout == "kv_first" else cache[b]


def make_side(config, store=None, url=None, caches=None):
    """A scheduler connector and one worker connector with its caches registered."""
    s = tv.TideStoreConnector(config, "scheduler", store=store, url=url)
    w = tv.TideStoreConnector(config, "worker", store=store, url=url)
    if caches is not None:
        w.register_kv_caches(caches)
    return s, w


@pytest.fixture
def mem_store():
    """A mem:// store the test's connectors share (borrowed); the connectors are freed
    (their queues drained) before it closes."""
    s = tide.Store("mem://?capacity=64MiB")
    yield s
    gc.collect()
    s.close()


def produce(engine, req, table, prompt_steps=None):
    """A producer computes req's prompt in blocks `table` (one step, or chunks given as a
    list of token counts) and finishes it; returns request_finished's answer."""
    sched = engine.sched
    n, is_async = sched.get_num_new_matched_tokens(req, 0)
    assert (n, is_async) == (0, False)
    sched.update_state_after_alloc(req, Blocks(table), 0)
    chunks = prompt_steps or [req.num_tokens]
    done = 0
    for i, c in enumerate(chunks):
        if i == 0:
            so = sched_out(new=[new_req(req, [table], 0)], num_sched={req.request_id: c})
        else:
            so = sched_out(cached=[(req.request_id, None, done)], num_sched={req.request_id: c})
        engine.step(so)
        done += c
    return sched.request_finished(req, table)


def tokens(n, seed=1):
    return [seed * 100000 + i for i in range(n)]


# ---------------------------------------------------------------------------------------
# Producer / consumer
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["kv_first", "blocks_first"])
def test_producer_saves_consumer_loads_bit_exact(mem_store, layout):
    cfg = dense_config()
    pk = {"layer.0": kv_cache(layout, 1), "layer.1": kv_cache(layout, 2)}
    ck = {"layer.0": kv_cache(layout), "layer.1": kv_cache(layout)}
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    cs, cw = make_side(cfg, store=mem_store, caches=ck)
    prod, cons = Engine(ps, [pw]), Engine(cs, [cw])

    # Producer: a 100-token prompt in blocks 1..7 (6 full blocks + a partial one).
    p = Request("p", tokens(100))
    ptable = [1, 2, 3, 4, 5, 6, 7]
    assert produce(prod, p, ptable) == (True, None)  # saves are pending: keep the blocks
    assert ps.pending_saves == {"p"}
    prod.step(sched_out(finished={"p"}))
    prod.idle_until(lambda: "p" in prod.sent)
    assert ps.pending_saves == frozenset()
    assert mem_store.stats()["objects"] == 6

    # Consumer: same prompt; the hit is the 6 full blocks, loaded asynchronously.
    c = Request("c", tokens(100))
    assert cs.get_num_new_matched_tokens(c, 0) == (96, True)
    ctable = [11, 12, 13, 14, 15, 16, 17]
    cs.update_state_after_alloc(c, Blocks(ctable), 96)
    meta, _ = cons.step(sched_out())  # c waits for its KV: not scheduled this step
    jobs = meta.describe()["jobs"]
    assert [(j["kind"], j["req_id"], j["start_tokens"], j["end_tokens"]) for j in jobs] == [
        ("load", "c", 0, 96)
    ]
    assert [b[1] for b in jobs[0]["blocks"]] == ctable[:6]
    cons.idle_until(lambda: "c" in cons.recvd)
    assert cons.invalid == set()
    for name in pk:
        for i in range(6):
            got, want = page(ck[name], layout, ctable[i]), page(pk[name], layout, ptable[i])
            assert got.tobytes() == want.tobytes()
        assert not page(ck[name], layout, 17).any()  # the partial block is computed, not loaded
    # vLLM then schedules c as a new request with 96 tokens computed: nothing to save
    # beyond what it loaded (the blocks are in the store already).
    meta, _ = cons.step(sched_out(new=[new_req(c, [ctable], 96)], num_sched={"c": 4}))
    assert cw.stats()["saved_objects"] == 0
    assert cs.request_finished(c, ctable)[0] in (True, False)

    # A prompt the store covers entirely: the last token is always computed.
    whole = Request("w", tokens(96))
    assert cs.get_num_new_matched_tokens(whole, 0) == (80, True)


def test_partial_hits(mem_store):
    cfg = dense_config()
    pk = {"layer.0": kv_cache("kv_first", 3), "layer.1": kv_cache("kv_first", 4)}
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    produce(Engine(ps, [pw]), Request("p", tokens(80)), [1, 2, 3, 4, 5])
    pw.wait()
    cs = tv.TideStoreConnector(cfg, "scheduler", store=mem_store)
    # Shares the first 48 tokens, then differs.
    other = tokens(48) + tokens(40, seed=7)
    r = Request("x", other)
    assert cs.get_num_new_matched_tokens(r, 0) == (48, True)
    # A local prefix-cache hit of 16 tokens: only the 32 beyond it are offered.
    assert cs.get_num_new_matched_tokens(r, 16) == (32, True)
    # Local hit at least as long as the store's: nothing to load.
    assert cs.get_num_new_matched_tokens(r, 48) == (0, False)
    # A different first block: nothing at all.
    assert cs.get_num_new_matched_tokens(Request("y", tokens(80, seed=9)), 0) == (0, False)
    # Shorter than a block.
    assert cs.get_num_new_matched_tokens(Request("z", tokens(10)), 0) == (0, False)


def test_chunked_prefill_and_decode_steps(mem_store):
    """A prompt prefilled in two chunks saves each chunk's full blocks once; decode steps
    save nothing without save_decode_cache."""
    cfg = dense_config()
    pk = {"layer.0": kv_cache("kv_first", 5), "layer.1": kv_cache("kv_first", 6)}
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    eng = Engine(ps, [pw])
    p = Request("p", tokens(70))
    table = [1, 2, 3, 4, 5]
    ps.get_num_new_matched_tokens(p, 0)
    ps.update_state_after_alloc(p, Blocks(table), 0)
    m1, _ = eng.step(sched_out(new=[new_req(p, [table], 0)], num_sched={"p": 40}))
    m2, _ = eng.step(sched_out(cached=[("p", None, 40)], num_sched={"p": 30}))
    spans = [(j["start_tokens"], j["end_tokens"]) for m in (m1, m2) for j in m.describe()["jobs"]]
    assert spans == [(0, 32), (32, 64)]
    # Decode: tokens 70..100, a new block at 80; the hashes grow, nothing is saved.
    for t in range(30):
        p.append(999 + t)
        m, _ = eng.step(sched_out(cached=[("p", ([6],) if p.num_tokens == 81 else None, 70 + t)],
                                  num_sched={"p": 1}))
        assert m.describe()["jobs"] == []
    pw.wait()
    assert mem_store.stats()["objects"] == 4


def test_save_decode_cache_saves_decoded_blocks(mem_store):
    cfg = dense_config(save_decode_cache=True)
    pk = {"layer.0": kv_cache("kv_first", 5), "layer.1": kv_cache("kv_first", 6)}
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    eng = Engine(ps, [pw])
    p = Request("p", tokens(20))
    ps.get_num_new_matched_tokens(p, 0)
    ps.update_state_after_alloc(p, Blocks([1, 2]), 0)
    eng.step(sched_out(new=[new_req(p, [[1, 2]], 0)], num_sched={"p": 20}))
    saved = []
    for t in range(12):
        p.append(5 + t)
        m, _ = eng.step(sched_out(cached=[("p", None, 20 + t)], num_sched={"p": 1}))
        saved += [(j["start_tokens"], j["end_tokens"]) for j in m.describe()["jobs"]]
    assert saved == [(16, 32)]  # block 1 once decode completed it


def test_producer_consumer_through_tided(tided):
    """Two engines, each connector with its own connection to one tided (tide://), as a
    real deployment runs them in separate processes."""
    url = f"tide://127.0.0.1:{tided}"
    with tide.Store(url) as st:
        st.clear()
    cfg = dense_config()
    cfg["kv_transfer_config"]["kv_connector_extra_config"]["url"] = url  # as vLLM passes it
    pk = {"layer.0": kv_cache("kv_first", 11), "layer.1": kv_cache("kv_first", 12)}
    ck = {"layer.0": kv_cache("kv_first"), "layer.1": kv_cache("kv_first")}
    ps, pw = make_side(cfg, caches=pk)
    cs, cw = make_side(cfg, caches=ck)
    assert ps.url == url and cw.url == url
    prod, cons = Engine(ps, [pw]), Engine(cs, [cw])
    p = Request("p", tokens(64 + 5, seed=3))
    assert produce(prod, p, [1, 2, 3, 4, 5]) == (True, None)
    prod.step(sched_out(finished={"p"}))
    prod.idle_until(lambda: "p" in prod.sent)

    c = Request("c", tokens(64 + 5, seed=3))
    assert cs.get_num_new_matched_tokens(c, 0) == (64, True)
    cs.update_state_after_alloc(c, Blocks([20, 21, 22, 23, 9]), 64)
    cons.step(sched_out())
    cons.idle_until(lambda: "c" in cons.recvd)
    assert cons.invalid == set()
    for name in pk:
        assert np.array_equal(ck[name][:, 20:24], pk[name][:, 1:5])
    assert cw.stats()["load_get"]["calls"] == 1  # one batched get for the whole load
    for x in (ps, pw, cs, cw):
        x.shutdown()


# ---------------------------------------------------------------------------------------
# Hybrid: attention + Mamba (align), from examples/
# ---------------------------------------------------------------------------------------


def hybrid_config():
    with open(os.path.join(EXAMPLES, "qwen3-next-hybrid-align.json")) as f:
        cfg = json.load(f)
    # One rank holds every namespace: TP 1. Name the layers, size the caches.
    cfg["parallel_config"] = {"tensor_parallel_size": 1}
    cfg["kv_transfer_config"]["kv_role"] = "kv_both"
    groups = cfg["kv_cache_config"]["kv_cache_groups"]
    groups[0]["layer_names"] = ["model.layers.3.self_attn.attn"]
    groups[1]["layer_names"] = ["model.layers.0.linear_attn"]
    cfg["kv_cache_config"]["num_blocks"] = 8
    return cfg


def hybrid_caches(cfg, seed=None):
    """The attention layer (blocks, 2, 64, 1, 256) in bf16 (as uint16) and the Mamba layer:
    conv (3, 2048) bf16 and SSM (8, 128, 128) f32 states, views into one raw page buffer
    per block — the list vLLM passes for a Mamba layer."""
    nb = cfg["kv_cache_config"]["num_blocks"]
    rng = np.random.default_rng(seed)
    attn = np.zeros((nb, 2, 64, 1, 256), np.uint16)
    conv_bytes, ssm_bytes = 3 * 2048 * 2, 8 * 128 * 128 * 4
    raw = np.zeros((nb, conv_bytes + ssm_bytes), np.uint8)
    if seed is not None:
        attn[...] = rng.integers(0, 65535, attn.shape, dtype=np.uint16)
        raw[...] = rng.integers(0, 255, raw.shape, dtype=np.uint8)
    conv = raw[:, :conv_bytes].view(np.uint16).reshape(nb, 3, 2048)
    ssm = raw[:, conv_bytes:].view(np.float32).reshape(nb, 8, 128, 128)
    return {"model.layers.3.self_attn.attn": attn, "model.layers.0.linear_attn": [conv, ssm]}, raw


def test_hybrid_attention_and_mamba_align(mem_store):
    cfg = hybrid_config()
    pk, praw = hybrid_caches(cfg, seed=21)
    ck, craw = hybrid_caches(cfg)
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    cs, cw = make_side(cfg, store=mem_store, caches=ck)
    assert (ps.info.scheduler_block_size, ps.info.hash_block_size) == (64, 16)
    prod, cons = Engine(ps, [pw]), Engine(cs, [cw])

    # 200 tokens; hashes every 16. Align mode ends the first prefill step at the replay
    # boundary 192, where the Mamba state is snapshotted (table slot 192/64 - 1 = 2).
    p = Request("p", tokens(200, seed=5), unit=16)
    atable, mtable = [1, 2, 3, 4], [0, 0, 6, 7]  # 0: vLLM's null block
    ps.get_num_new_matched_tokens(p, 0)
    ps.update_state_after_alloc(p, Blocks(atable, mtable), 0)
    prod.step(sched_out(new=[new_req(p, [atable, mtable], 0)], num_sched={"p": 192}))
    prod.step(sched_out(cached=[("p", None, 192)], num_sched={"p": 8}))
    assert ps.request_finished_all_groups(p, (atable, mtable)) == (True, None)
    prod.step(sched_out(finished={"p"}))
    prod.idle_until(lambda: "p" in prod.sent)
    assert mem_store.stats()["objects"] == 4  # 3 attention blocks + 1 Mamba snapshot

    c = Request("c", tokens(200, seed=5), unit=16)
    assert cs.get_num_new_matched_tokens(c, 0) == (192, True)
    catable, cmtable = [5, 4, 3, 2], [0, 0, 1, 7]
    cs.update_state_after_alloc(c, Blocks(catable, cmtable), 192)
    cons.step(sched_out())
    cons.idle_until(lambda: "c" in cons.recvd)
    assert cons.invalid == set()
    attn = "model.layers.3.self_attn.attn"
    for i in range(3):
        assert ck[attn][catable[i]].tobytes() == pk[attn][atable[i]].tobytes()
    assert craw[1].tobytes() == praw[6].tobytes()  # the snapshot at 192, every state
    assert not craw[7].any()

    # A prompt whose Mamba snapshot is missing at the attention boundary: no hit.
    q = Request("q", tokens(200, seed=5)[:150] + tokens(50, seed=8), unit=16)
    assert cs.get_num_new_matched_tokens(q, 0) == (0, False)


def test_hybrid_partial_tail(mem_store):
    cfg = hybrid_config()
    pk, praw = hybrid_caches(cfg, seed=31)
    ck, craw = hybrid_caches(cfg)
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    cs, cw = make_side(cfg, store=mem_store, caches=ck)
    assert ps.info.partial_hits == 1
    prod, cons = Engine(ps, [pw]), Engine(cs, [cw])

    # 90 tokens: the last hash boundary 80 is inside Mamba block 1. Prefill to the replay
    # boundary 64, then to the end; the engine copies the state at 80 into private block 5.
    p = Request("p", tokens(200, seed=6)[:90], unit=16)
    atable, mtable = [1, 2], [3, 4]
    ps.get_num_new_matched_tokens(p, 0)
    ps.update_state_after_alloc(p, Blocks(atable, mtable), 0)
    prod.step(sched_out(new=[new_req(p, [atable, mtable], 0)], num_sched={"p": 64}))
    prod.step(sched_out(cached=[("p", None, 64)], num_sched={"p": 26}))
    pw.wait()  # the saves run on the worker's threads
    c = Request("c", tokens(200, seed=6)[:120], unit=16)
    assert cs.get_num_new_matched_tokens(c, 0) == (64, True)  # no tail yet

    so = sched_out()
    so.partial_tail_offloads = {"p": [(1, 5, 80), (1, 5, 64)]}
    with pytest.raises(tide.PartialTailError) as e:
        prod.step(so)
    assert str(e.value.message) == "Partial-tail offloads for one request must share a boundary"
    assert isinstance(e.value, ValueError)
    so.partial_tail_offloads = {"p": [(1, 5, 80)]}
    prod.step(so)
    assert ps.request_finished_all_groups(p, (atable, mtable)) == (True, None)
    prod.step(sched_out(finished={"p"}))
    prod.idle_until(lambda: "p" in prod.sent)
    # attention 0..64 and the state at 64; attention 64..80 and the state at 80
    assert mem_store.stats()["objects"] == 4

    assert cs.get_num_new_matched_tokens(c, 0) == (80, True)
    catable, cmtable = [6, 7], [0, 2]
    cs.update_state_after_alloc(c, Blocks(catable, cmtable), 80)
    cons.step(sched_out())
    cons.idle_until(lambda: "c" in cons.recvd)
    assert cons.invalid == set()
    attn = "model.layers.3.self_attn.attn"
    for i in range(2):
        assert ck[attn][catable[i]].tobytes() == pk[attn][atable[i]].tobytes()
    assert craw[2].tobytes() == praw[5].tobytes()  # the boundary state, every state


# ---------------------------------------------------------------------------------------
# Load errors, completions, synchronous loads
# ---------------------------------------------------------------------------------------


def key_prefix(cfg, tmp_path):
    """The key prefix tide derives for group 0, from `tide check-config` ($TIDE_BIN)."""
    binary = os.environ.get("TIDE_BIN") or os.path.join(ROOT, "build", "tide")
    doc = copy.deepcopy(cfg)
    doc["kv_transfer_config"]["kv_connector_extra_config"].pop("url", None)
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(doc))
    out = subprocess.run([binary, "check-config", str(path)], capture_output=True, text=True).stdout
    line = next(ln for ln in out.splitlines() if "key prefix:" in ln)
    return line.split("key prefix:")[1].strip().replace("<hash>", "")


def test_load_errors_are_reported(mem_store, tmp_path):
    cfg = dense_config()
    pk = {"layer.0": kv_cache("kv_first", 31), "layer.1": kv_cache("kv_first", 32)}
    ck = {"layer.0": kv_cache("kv_first"), "layer.1": kv_cache("kv_first")}
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    cs, cw = make_side(cfg, store=mem_store, caches=ck)
    prod, cons = Engine(ps, [pw]), Engine(cs, [cw])
    p = Request("p", tokens(65, seed=4))
    produce(prod, p, [1, 2, 3, 4, 5])
    pw.wait()

    c = Request("c", tokens(65, seed=4))
    assert cs.get_num_new_matched_tokens(c, 0) == (64, True)
    ctable = [10, 11, 12, 13, 14]
    cs.update_state_after_alloc(c, Blocks(ctable), 64)
    # Block 2 (tokens 32..48) disappears between the lookup and the load.
    prefix = key_prefix(cfg, tmp_path)
    assert mem_store.remove(prefix + c.block_hashes[2].hex())
    cons.step(sched_out())
    cons.idle_until(lambda: "c" in cons.recvd)  # still reported as received
    assert cons.invalid == {12}
    for b, src in ((10, 1), (11, 2), (13, 4)):
        assert np.array_equal(ck["layer.0"][:, b], pk["layer.0"][:, src])
    assert cw.get_block_ids_with_load_errors() == set()  # each reported once
    assert cw.stats()["load_errors"] == 1


def test_request_finished_and_completion(mem_store):
    """(True, None) while saves are pending, and the id comes back through get_finished
    once; a request that saved nothing is freed at once, as is one a consumer ran."""
    cfg = dense_config()
    pk = {"layer.0": kv_cache("kv_first", 41), "layer.1": kv_cache("kv_first", 42)}
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    eng = Engine(ps, [pw])
    short = Request("s", tokens(10))  # less than a block: nothing to save
    assert produce(eng, short, [1]) == (False, None)
    assert ps.request_finished(Request("never-seen", tokens(5)), []) == (False, None)
    p = Request("p", tokens(40))
    assert produce(eng, p, [2, 3, 4]) == (True, None)
    meta, out = eng.step(sched_out(finished={"s", "p"}))
    assert meta.describe()["finished"] == ["p"]
    eng.idle_until(lambda: "p" in eng.sent)
    assert eng.sent == {"p"}
    # Only once.
    for _ in range(3):
        _, out = eng.step(sched_out())
        assert not out.finished_sending
    # A consumer never saves, so its requests never hold their blocks.
    cons_cfg = dense_config(role="kv_consumer")
    cs = tv.TideStoreConnector(cons_cfg, "scheduler", store=mem_store)
    assert cs.info.saves == 0
    ce = Engine(cs, [])
    assert produce(ce, Request("k", tokens(40, seed=2)), [5, 6, 7]) == (False, None)


def test_synchronous_loads(mem_store):
    """load_async false: the request runs in the step its load is planned; the load runs
    in start_load_kv, before the forward pass, and no recving id is reported."""
    cfg = dense_config(load_async=False)
    pk = {"layer.0": kv_cache("kv_first", 51), "layer.1": kv_cache("kv_first", 52)}
    ck = {"layer.0": kv_cache("kv_first"), "layer.1": kv_cache("kv_first")}
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    cs, cw = make_side(cfg, store=mem_store, caches=ck)
    produce(Engine(ps, [pw]), Request("p", tokens(50)), [1, 2, 3, 4])
    pw.wait()
    c = Request("c", tokens(50))
    assert cs.get_num_new_matched_tokens(c, 0) == (48, False)
    table = [7, 8, 9, 10]
    cs.update_state_after_alloc(c, Blocks(table), 48)
    seen = {}

    def forward(w):  # the forward pass sees the loaded pages
        seen["pages"] = ck["layer.1"][:, 7:10].copy()

    cons = Engine(cs, [cw])
    meta, out = cons.step(sched_out(new=[new_req(c, [table], 48)], num_sched={"c": 2}), forward)
    assert [j["kind"] for j in meta.describe()["jobs"]] == ["load"]
    assert np.array_equal(seen["pages"], pk["layer.1"][:, 1:4])
    assert not out.finished_recving and not out.invalid_block_ids


def test_preempted_request_resaves_after_resume(mem_store):
    cfg = dense_config()
    pk = {"layer.0": kv_cache("kv_first", 61), "layer.1": kv_cache("kv_first", 62)}
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    eng = Engine(ps, [pw])
    p = Request("p", tokens(64))
    ps.get_num_new_matched_tokens(p, 0)
    ps.update_state_after_alloc(p, Blocks([1, 2, 3, 4]), 0)
    m, _ = eng.step(sched_out(new=[new_req(p, [[1, 2, 3, 4]], 0)], num_sched={"p": 32}))
    assert [(j["start_tokens"], j["end_tokens"]) for j in m.describe()["jobs"]] == [(0, 32)]
    # Preempted; resumed later into other blocks, re-prefilling from scratch.
    eng.step(sched_out(preempted={"p"}))
    ps.update_state_after_alloc(p, Blocks([5, 6, 7, 8]), 0)
    so = sched_out(cached=[("p", ([5, 6, 7, 8],), 0)], num_sched={"p": 64})
    so.scheduled_cached_reqs.resumed_req_ids = {"p"}
    m, _ = eng.step(so)
    (job,) = m.describe()["jobs"]
    assert (job["start_tokens"], job["end_tokens"]) == (0, 64)
    assert [b[1] for b in job["blocks"]] == [5, 6, 7, 8]


def sigstop(proc):
    """Stop proc with SIGSTOP and wait (at most 10 s) until every one of its threads is
    stopped: send_signal returns before they are, and on a loaded machine tided answered
    a save sent after it (the save then finished before the 'stopped' store resumed)."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    task = f"/proc/{proc.pid}/task"
    while True:
        states = []
        for tid in os.listdir(task):
            try:
                with open(f"{task}/{tid}/stat") as f:
                    states.append(f.read().rpartition(")")[2].split()[0])
            except (FileNotFoundError, ProcessLookupError):
                pass  # a thread that just exited
        if states and all(s in ("T", "t") for s in states):
            return
        assert time.monotonic() < deadline, f"tided not stopped 10 s after SIGSTOP: {states}"
        time.sleep(0.001)


def start_tided(tmp_path):
    """A tided of the test's own (it gets stopped with SIGSTOP): (process, port)."""
    binary = os.environ.get("TIDE_BIN") or os.path.join(ROOT, "build", "tide")
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [binary, "serve", "--port", "0", "--metrics-port", "0", "--capacity", "16MiB",
         "--ready-file", str(ready)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while not (ready.exists() and ready.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"tided did not start (exit {proc.poll()})")
        time.sleep(0.02)
    return proc, int(ready.read_text().split()[0])


def stop_tided(proc):
    proc.send_signal(signal.SIGCONT)
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="an ordering test with a 0.5 s window: the plain stage runs it; "
                    "under the ASan stage's preloaded runtime the window is not a bound")
def test_preemption_waits_for_saves_still_reading_the_freed_blocks(tmp_path):
    """Step N saves request p's blocks; the store is slow (a stopped tided), so the save
    has not read them yet. Step N+1 preempts p: vLLM frees its blocks at once and the
    step's forward pass writes them for another request. handle_preemptions, called
    before that pass, must hold it until the save has read the blocks; before the fix it
    returned at once and the store got the other request's bytes under p's keys."""
    proc, port = start_tided(tmp_path)
    try:
        url = f"tide://127.0.0.1:{port}"
        cfg = dense_config()
        pk = {"layer.0": kv_cache("kv_first", 71), "layer.1": kv_cache("kv_first", 72)}
        want = {n: pk[n][:, 1:3].copy() for n in pk}
        ps, pw = make_side(cfg, url=url, caches=pk)
        eng = Engine(ps, [pw])
        p = Request("p", tokens(40, seed=7))
        ps.get_num_new_matched_tokens(p, 0)
        ps.update_state_after_alloc(p, Blocks([1, 2, 3]), 0)
        sigstop(proc)  # the save of blocks 1, 2 waits on the store
        eng.step(sched_out(new=[new_req(p, [[1, 2, 3]], 0)], num_sched={"p": 40}))
        meta = ps.build_connector_meta(sched_out(preempted={"p"}))
        assert meta.fence
        wire = pickle.loads(pickle.dumps(meta))
        assert wire.fence
        pw.bind_connector_metadata(wire)
        order = []

        def step_n1():  # vLLM's execute_model: handle_preemptions, then the forward pass
            pw.handle_preemptions(wire)
            order.append("forward")
            for n in pk:  # another request's KV in the freed blocks
                pk[n][:, 1:3] = -7.0

        t = threading.Thread(target=step_n1)
        t.start()
        t.join(0.5)
        order.append("store resumed")
        proc.send_signal(signal.SIGCONT)
        t.join(60)
        assert not t.is_alive()
        assert order == ["store resumed", "forward"]
        pw.wait()
        pw.clear_connector_metadata()
        assert pw.stats()["saved_objects"] == 2
        # What the store holds under p's keys is p's bytes: a consumer loads them.
        ck = {"layer.0": kv_cache("kv_first"), "layer.1": kv_cache("kv_first")}
        cs, cw = make_side(cfg, url=url, caches=ck)
        cons = Engine(cs, [cw])
        c = Request("c", tokens(40, seed=7))
        assert cs.get_num_new_matched_tokens(c, 0) == (32, True)
        cs.update_state_after_alloc(c, Blocks([5, 6, 7]), 32)
        cons.step(sched_out())
        cons.idle_until(lambda: "c" in cons.recvd)
        for n in pk:
            assert ck[n][:, 5:7].tobytes() == want[n].tobytes()
        for x in (ps, pw, cs, cw):
            x.shutdown()
    finally:
        stop_tided(proc)


def test_saves_of_blocks_freed_while_running_fence_the_next_step(mem_store):
    """A sliding-window group frees blocks as they leave the window while the request
    runs: the step after one that saved such blocks fences; full attention alone never
    does, and a preemption always does."""
    full = dense_config()
    s = tv.TideStoreConnector(full, "scheduler", store=mem_store)
    p = Request("p", tokens(40))
    s.get_num_new_matched_tokens(p, 0)
    s.update_state_after_alloc(p, Blocks([1, 2, 3]), 0)
    m = s.build_connector_meta(sched_out(new=[new_req(p, [[1, 2, 3]], 0)], num_sched={"p": 40}))
    assert [j["kind"] for j in m.describe()["jobs"]] == ["save"] and not m.fence
    assert not s.build_connector_meta(sched_out()).fence
    assert s.build_connector_meta(sched_out(preempted={"p"})).fence
    assert not s.build_connector_meta(sched_out()).fence

    sw = dense_config()
    spec = sw["kv_cache_config"]["kv_cache_groups"][0]["kv_cache_spec"]
    spec.update(type="SlidingWindowSpec", sliding_window=32)
    s = tv.TideStoreConnector(sw, "scheduler", store=mem_store)
    q = Request("q", tokens(80, seed=3))
    s.get_num_new_matched_tokens(q, 0)
    s.update_state_after_alloc(q, Blocks([1, 2, 3, 4, 5]), 0)
    m = s.build_connector_meta(
        sched_out(new=[new_req(q, [[1, 2, 3, 4, 5]], 0)], num_sched={"q": 80}))
    assert [j["kind"] for j in m.describe()["jobs"]] == ["save"] and not m.fence
    assert s.build_connector_meta(sched_out()).fence  # the saves may read freed blocks
    assert not s.build_connector_meta(sched_out()).fence  # fenced once: nothing left


# ---------------------------------------------------------------------------------------
# Errors, validation, configuration
# ---------------------------------------------------------------------------------------


def load_example(name):
    with open(os.path.join(EXAMPLES, name)) as f:
        return json.load(f)


def test_unsupported_configuration_is_a_value_error():
    cfg = load_example("whisper-cross-attention.json")
    with pytest.raises(ValueError) as ei:
        tv.TideStoreConnector(cfg, "scheduler")
    assert str(ei.value) == "TideStoreConnector does not support: group 1: CrossAttentionSpec"
    assert isinstance(ei.value, tide.UnsupportedError) and ei.value.code == tide.EUNSUPPORTED
    # Capacity-only ranks lend memory and move no KV: validation is skipped.
    cfg["kv_transfer_config"]["kv_role"] = "kv_consumer"
    cfg["kv_transfer_config"]["kv_connector_extra_config"] = {"enable_lookup": False}
    c = tv.TideStoreConnector(cfg, "scheduler")
    assert c.info.capacity_only == 1
    assert c.get_num_new_matched_tokens(Request("r", tokens(64)), 0) == (0, False)


def test_c_errors_raise_tide_errors(mem_store):
    cfg = dense_config()
    cfg["cache_config"]["blok_size"] = 16
    with pytest.raises(tide.ConfigError, match="blok_size.*did you mean 'block_size'"):
        tv.TideStoreConnector(cfg, "scheduler")
    with pytest.raises(tide.ConfigError, match="line 1"):
        tv.TideStoreConnector('{"model_config": ', "scheduler")
    with pytest.raises(tide.ConfigError):
        tv.TideStoreConnector(dense_config(url="nope://x"), "scheduler")
    with pytest.raises(ValueError, match="unknown role"):
        tv.TideStoreConnector(dense_config(), "driver")

    s = tv.TideStoreConnector(dense_config(), "scheduler", store=mem_store)
    r = Request("r", tokens(40))
    msg = "2 groups of block ids, the configuration has 1"
    with pytest.raises(tide.InvalidArgument, match=msg):
        s.update_state_after_alloc(r, Blocks([1], [2]), 0)
    assert s.get_num_new_matched_tokens(r, 0) == (0, False)
    s.update_state_after_alloc(r, Blocks([1, 2, 3]), 0)
    s.build_connector_meta(sched_out(new=[new_req(r, [[1, 2, 3]], 0)], num_sched={"r": 40}))
    with pytest.raises(tide.InvalidArgument, match="went back from 40 to 10"):
        s._step("r", 40, 10, r, None, False)
    with pytest.raises(tide.InvalidArgument, match="not a worker connector"):
        s.register_kv_caches({"layer.0": kv_cache("kv_first")})
    s.shutdown()
    with pytest.raises(tide.ClosedError):
        s.get_num_new_matched_tokens(r, 0)

    w = tv.TideStoreConnector(dense_config(), "worker", store=mem_store)
    with pytest.raises(tide.InvalidArgument, match="in no group's layer_names"):
        w.register_kv_caches({"layer.9": kv_cache("kv_first")})
    shared = kv_cache("kv_first")  # a layer reusing another's KV (cross-layer sharing)
    w2 = tv.TideStoreConnector(dense_config(layers=["layer.0"]), "worker", store=mem_store)
    w2.register_kv_caches({"layer.0": shared, "layer.7": shared})
    w2.shutdown()
    bad = np.zeros((3, NBLOCKS + 1, BLOCK, HEADS, HEAD), np.float16)
    with pytest.raises(tide.InvalidArgument, match="'layer.0'.*block dimension should have 24"):
        w.register_kv_caches({"layer.0": bad})
    ro = kv_cache("kv_first")
    ro.flags.writeable = False
    with pytest.raises(tide.InvalidBuffer, match="read-only"):
        w.register_kv_caches({"layer.0": ro})
    with pytest.raises(tide.InvalidBuffer, match="torch tensor or a numpy array"):
        w.register_kv_caches({"layer.0": b"bytes"})
    # Metadata that is neither a scheduler's TideConnectorMetadata nor its bytes: named.
    w.bind_connector_metadata(tv.KVConnectorMetadata())
    with pytest.raises(TypeError, match="type KVConnectorMetadata, not the TideConnectorMeta"):
        w.get_finished(set())
    w.bind_connector_metadata(7)  # was bytes(7): seven zero bytes, "bad header" from C
    with pytest.raises(TypeError, match="of type int, not the TideConnectorMetadata"):
        w.get_finished(set())
    w.clear_connector_metadata()
    w.shutdown()


def test_a_lookup_after_the_offer_changed_is_refused(mem_store):
    cfg = dense_config()
    pk = {"layer.0": kv_cache("kv_first", 1), "layer.1": kv_cache("kv_first", 2)}
    ps, pw = make_side(cfg, store=mem_store, caches=pk)
    produce(Engine(ps, [pw]), Request("p", tokens(40)), [1, 2, 3])
    pw.wait()
    cs = tv.TideStoreConnector(cfg, "scheduler", store=mem_store)
    c = Request("c", tokens(40))
    assert cs.get_num_new_matched_tokens(c, 0) == (32, True)
    msg = "16 external tokens granted, the lookup offered 32"
    with pytest.raises(tide.InvalidArgument, match=msg):
        cs.update_state_after_alloc(c, Blocks([4, 5, 6]), 16)


class FakeTensor:
    """The parts of a torch tensor the connector reads, over a numpy array."""

    class _Device:
        def __init__(self, name):
            self.name, self.type = name, name.split(":")[0]

        def __str__(self):
            return self.name

    class _Storage:
        def __init__(self, root):
            self.root = root

        def data_ptr(self):
            return self.root.__array_interface__["data"][0]

        def nbytes(self):
            return self.root.nbytes

    def __init__(self, a, device="cpu"):
        self.a = a
        self.shape = a.shape
        self.device = FakeTensor._Device(device)

    def data_ptr(self):
        return self.a.__array_interface__["data"][0]

    def stride(self, d):
        return self.a.strides[d] // self.a.itemsize

    def element_size(self):
        return self.a.itemsize

    def untyped_storage(self):
        root = self.a
        while root.base is not None:
            root = root.base
        return self._Storage(root)


def test_torch_like_tensors(mem_store):
    cfg = dense_config()
    pk = {"layer.0": kv_cache("kv_first", 71), "layer.1": kv_cache("kv_first", 72)}
    ck = {"layer.0": kv_cache("kv_first"), "layer.1": kv_cache("kv_first")}
    ps, pw = make_side(cfg, store=mem_store)
    pw.register_kv_caches({k: FakeTensor(v) for k, v in pk.items()})
    cs, cw = make_side(cfg, store=mem_store)
    cw.register_kv_caches({k: FakeTensor(v) for k, v in ck.items()})
    produce(Engine(ps, [pw]), Request("p", tokens(33)), [1, 2, 3])
    pw.wait()
    c = Request("c", tokens(33))
    assert cs.get_num_new_matched_tokens(c, 0) == (32, True)
    cs.update_state_after_alloc(c, Blocks([4, 5, 6]), 32)
    cons = Engine(cs, [cw])
    cons.step(sched_out())
    cons.idle_until(lambda: "c" in cons.recvd)
    assert np.array_equal(ck["layer.1"][:, 4:6], pk["layer.1"][:, 1:3])

    # A CUDA tensor goes to libtide as a device region (kind, device, the tensor's pointer);
    # this machine has no GPU, so libtide answers TIDE_EDEVICE with the CUDA kind's reason.
    gw = tv.TideStoreConnector(cfg, "worker", store=mem_store)
    with pytest.raises(tide.DeviceError, match="KV cache 'layer.0': .*cuda"):
        gw.register_kv_caches({"layer.0": FakeTensor(kv_cache("kv_first"), "cuda:0")})
    with pytest.raises(tide.InvalidArgument, match="is on xpu:0: .*CUDA devices only"):
        gw.register_kv_caches({"layer.0": FakeTensor(kv_cache("kv_first"), "xpu:0")})


def test_metadata_pickles_and_parses():
    m = tv.TideConnectorMetadata(b"")
    with pytest.raises(tide.ConfigError):
        m.describe()
    good = tv.TideStoreConnector(dense_config(), "scheduler").build_connector_meta(sched_out())
    assert pickle.loads(pickle.dumps(good)).data == good.data
    assert good.describe() == {"jobs": [], "finished": []}
    assert isinstance(good, tv.KVConnectorMetadata)


# -- configuration from vLLM's config objects -------------------------------------------


class FullAttentionSpec:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class MambaSpec(FullAttentionSpec):
    pass


class Dtype:
    """Prints like a torch dtype."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


def fake_vllm_config(extra):
    ns = types.SimpleNamespace
    model = ns(model="/models/Tiny-1B/", max_model_len=4096, dtype=Dtype("float16"),
               get_total_num_kv_heads=lambda: HEADS)
    return ns(
        model_config=model,
        cache_config=ns(block_size=BLOCK, cache_dtype="auto", mamba_cache_mode="none",
                        prefix_match_unit=None, mamba_block_size=None, enable_prefix_caching=True,
                        prefix_caching_hash_algo="sha256", prefix_cache_retention_interval=0,
                        use_replayssm=False),
        parallel_config=ns(tensor_parallel_size=1, pipeline_parallel_size=1,
                           prefill_context_parallel_size=1, decode_context_parallel_size=1,
                           data_parallel_size=1, data_parallel_rank=0, rank=0),
        kv_transfer_config=ns(kv_connector="TideStoreConnector", kv_role="kv_both",
                              kv_load_failure_policy="recompute", kv_connector_extra_config=extra),
    )


def test_config_from_vllm_objects(tided):
    url = f"tide://127.0.0.1:{tided}"
    vc = fake_vllm_config({"url": url, "cache_prefix": "t"})
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=HEADS, head_size=HEAD,
                             head_size_v=HEAD, dtype=Dtype("float16"), sliding_window=None,
                             attention_chunk_size=None, page_size_padded=None,
                             kv_quant_mode=0)
    kvc = types.SimpleNamespace(
        num_blocks=NBLOCKS, prefix_cache_retention_interval=None,
        kv_cache_groups=[types.SimpleNamespace(layer_names=["layer.0"], kv_cache_spec=spec,
                                               is_eagle_group=False)],
    )
    cfg, got_url = tv.config_from_vllm(vc, kvc, "scheduler")
    assert got_url == url
    # The binding's own keys go to C with the rest: its key table accepts them.
    assert cfg["kv_transfer_config"]["kv_connector_extra_config"] == {"url": url,
                                                                      "cache_prefix": "t"}
    assert cfg["kv_cache_config"]["kv_cache_groups"][0]["kv_cache_spec"] == {
        "type": "FullAttentionSpec", "block_size": BLOCK, "num_kv_heads": HEADS,
        "head_size": HEAD, "head_size_v": HEAD, "dtype": "torch.float16",
    }
    assert cfg["model_config"] == {"model": "/models/Tiny-1B/", "total_num_kv_heads": HEADS,
                                   "max_model_len": 4096, "dtype": "torch.float16"}
    # The connector accepts it as vLLM would construct it.
    c = tv.TideStoreConnector(vc, tv.KVConnectorRole.SCHEDULER, kvc)
    assert c.url == url and c.info.scheduler_block_size == BLOCK and c.info.hash_bytes == 32
    c.shutdown()
    # An unknown spec class is the C side's to refuse.
    bad = MambaSpec(block_size=BLOCK, shapes=((2, 4),), dtypes=(Dtype("float32"),),
                    mamba_cache_mode="none", mamba_type="mamba2", num_speculative_blocks=0,
                    page_size_padded=None)
    kvc.kv_cache_groups.append(types.SimpleNamespace(layer_names=["m"], kv_cache_spec=bad))
    with pytest.raises(ValueError, match="TideStoreConnector does not support: group 1: MambaSpec"):
        tv.TideStoreConnector(vc, "scheduler", kvc)


def test_url_from_environment(monkeypatch, tided):
    monkeypatch.setenv("TIDE_URL", f"tide://127.0.0.1:{tided}")
    c = tv.TideStoreConnector(dense_config(), "scheduler")
    assert c.url == f"tide://127.0.0.1:{tided}"
    monkeypatch.delenv("TIDE_URL")
    assert tv.TideStoreConnector(dense_config(), "scheduler").url == "mem://"


def test_no_op_hooks_and_scheduler_extras(mem_store):
    s = tv.TideStoreConnector(dense_config(), "scheduler", store=mem_store)
    assert list(s.take_events()) == []
    assert s.has_pending_push_work() is False
    mem_store.put("x", b"1")
    assert s.reset_cache() is True
    assert mem_store.stats()["objects"] == 0
    w = tv.TideStoreConnector(dense_config(), "worker", store=mem_store)
    assert w.reset_cache() is None
    assert w.wait_for_layer_load("layer.0") is None
    assert w.save_kv_layer("layer.0", None, None) is None
    assert w.wait_for_save() is None
    assert w.get_finished(set()) == (None, None)  # no metadata bound, nothing done
    assert w.get_block_ids_with_load_errors() == set()
    assert w.role == tv.KVConnectorRole.WORKER
