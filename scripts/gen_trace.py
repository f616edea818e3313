#!/usr/bin/env python3
"""gen_trace.py — seeded, reproducible synthetic request traces in Mooncake's format.

Writes JSON lines {"timestamp", "input_length", "output_length", "hash_ids"} to stdout,
as Mooncake's FAST'25 traces are (github.com/kvcache-ai/Mooncake, FAST25-release): a
request's hash_ids name its prompt's consecutive blocks of --block-tokens tokens, and two
requests share a hash id exactly when they share the whole prefix up to the end of that
block. Only the full blocks of a prompt are shared; its last, partial block gets a fresh
id (the next turn's prompt holds more tokens in that block, so a real hash differs too).

Three shapes, each a mix of sessions that interleave in time (sessions start as a Poisson
process; a session's next request comes after its own think time), so reuse distances are
those of a busy server, not of one user:

  chat     conversation: a system prompt drawn from a few (Zipf), then turns that each
           append the last answer and a new user message (a few hundred tokens each) to
           the context, some after a long document; sessions of a geometric number of
           turns (mean 6), think times of 5 to 60 seconds.
  tooluse  tool and agent calls: a large tool-schema prefix drawn from a few hundred
           (Zipf, thousands of tokens), then a short query; a session's later calls
           (a geometric number, mean 2.5 calls) append the tool's result (gaps of 0.3
           to 4 seconds).
  coding   agentic coding: a repository context drawn from a few hundred repositories
           (Zipf, 10k to 40k tokens), then many rapid turns that each append a tool
           output (file reads, test logs: 500 to 4000 tokens); sessions of a geometric
           number of turns (mean 25), gaps of 1 to 15 seconds.

Every random choice comes from random.Random(seed), so a (shape, seed, requests,
block-tokens) tuple names one trace byte for byte; tests and scripts/bench_trace.sh
regenerate traces instead of committing them.

Usage: gen_trace.py SHAPE [--requests N] [--seed S] [--block-tokens B] > trace.jsonl
"""

import argparse
import heapq
import json
import random
import sys

SHAPES = ("chat", "tooluse", "coding")


class Ids:
    """Dense hash ids: a block of a given prefix gets one id, the next free one."""

    def __init__(self) -> None:
        self.next = 0

    def fresh(self) -> int:
        self.next += 1
        return self.next - 1


def zipf_pick(rng: random.Random, n: int, s: float) -> int:
    """An index in [0, n) with probability proportional to 1 / (i + 1) ** s."""
    # Inverse transform over the normalised weights, cached per (n, s).
    key = (n, s)
    cdf = zipf_pick.cache.get(key)  # type: ignore[attr-defined]
    if cdf is None:
        w = [1.0 / (i + 1) ** s for i in range(n)]
        tot = sum(w)
        acc, cdf = 0.0, []
        for x in w:
            acc += x / tot
            cdf.append(acc)
        zipf_pick.cache[key] = cdf  # type: ignore[attr-defined]
    u = rng.random()
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cdf[mid] < u:
            lo = mid + 1
        else:
            hi = mid
    return lo


zipf_pick.cache = {}  # type: ignore[attr-defined]


class Context:
    """A prompt under construction: its token length and the ids of its full blocks."""

    def __init__(self, base_ids: list[int], base_tokens: int) -> None:
        self.ids = list(base_ids)
        self.tokens = base_tokens

    def extend(self, ids: Ids, tokens: int, bt: int) -> None:
        self.tokens += tokens
        while len(self.ids) < self.tokens // bt:
            self.ids.append(ids.fresh())

    def request(self, ids: Ids, bt: int) -> list[int]:
        """The hash ids of a prompt of this context: its full blocks and a fresh partial."""
        out = list(self.ids[: self.tokens // bt])
        if self.tokens % bt:
            out.append(ids.fresh())
        return out


def shape_params(shape: str) -> dict:
    if shape == "chat":
        return dict(prefixes=8, prefix_tokens=(600, 2500), zipf=1.1, rate=2.0,
                    turns_mean=6.0, think_ms=(5000, 60000), add_tokens=(60, 900),
                    out_tokens=(50, 700), long_doc=0.15, doc_tokens=(3000, 20000))
    if shape == "tooluse":
        return dict(prefixes=400, prefix_tokens=(2000, 9000), zipf=0.7, rate=8.0,
                    turns_mean=2.5, think_ms=(300, 4000), add_tokens=(80, 1200),
                    out_tokens=(5, 200), long_doc=0.0, doc_tokens=(0, 0))
    return dict(prefixes=300, prefix_tokens=(10000, 40000), zipf=0.8, rate=0.6,
                turns_mean=25.0, think_ms=(1000, 15000), add_tokens=(500, 4000),
                out_tokens=(20, 600), long_doc=0.0, doc_tokens=(0, 0))


def generate(shape: str, nreq: int, seed: int, bt: int, out) -> None:
    rng = random.Random(f"{shape}/{seed}")
    p = shape_params(shape)
    ids = Ids()
    # The shared prefixes (system prompts, tool schemas, repositories), built lazily.
    prefixes: dict[int, Context] = {}
    sessions: list[tuple[int, int, Context, int]] = []  # (next time, serial, ctx, turns left)
    t_next_session, serial, written = 0.0, 0, 0
    while written < nreq:
        if not sessions or t_next_session <= sessions[0][0]:
            k = zipf_pick(rng, p["prefixes"], p["zipf"])
            if k not in prefixes:
                c = Context([], 0)
                c.extend(ids, rng.randint(*p["prefix_tokens"]), bt)
                prefixes[k] = c
            base = prefixes[k]
            ctx = Context(base.ids, base.tokens)
            if p["long_doc"] and rng.random() < p["long_doc"]:
                ctx.extend(ids, rng.randint(*p["doc_tokens"]), bt)
            turns = 1
            while rng.random() > 1.0 / p["turns_mean"] and turns < 200:
                turns += 1
            heapq.heappush(sessions, (int(t_next_session), serial, ctx, turns))
            serial += 1
            t_next_session += rng.expovariate(p["rate"]) * 1000.0
            continue
        t, s, ctx, left = heapq.heappop(sessions)
        ctx.extend(ids, rng.randint(*p["add_tokens"]), bt)
        hash_ids = ctx.request(ids, bt)
        olen = rng.randint(*p["out_tokens"])
        out.write(json.dumps({"timestamp": t, "input_length": ctx.tokens,
                              "output_length": olen, "hash_ids": hash_ids}) + "\n")
        written += 1
        ctx.extend(ids, olen, bt)  # the answer joins the context of the next turn
        if left > 1:
            heapq.heappush(sessions, (t + rng.randint(*p["think_ms"]), s, ctx, left - 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", choices=SHAPES)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--block-tokens", type=int, default=512)
    a = ap.parse_args()
    if a.requests < 1:
        ap.error(f"--requests must be at least 1, got {a.requests}")
    if a.block_tokens < 1:
        ap.error(f"--block-tokens must be at least 1, got {a.block_tokens}")
    generate(a.shape, a.requests, a.seed, a.block_tokens, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
