"""vllm_ttft.py — time to first token of a real vLLM engine (CPU build) with a 4k-token prefix
loaded from tide against recomputing it, over unix:// and tide://.

    .venv-vllm/bin/python bench/vllm_ttft.py [--prefix 4096] [--suffix 64] [--prompts 3]
        [--backends unix,tide] [--layers 8] [--hidden 1024] [--block-size 128]

(bench/vllm_ttft.sh builds .venv-vllm first; `make bench` runs it and puts the table in
bench/RESULTS.md.) The model is Llama-shaped, described by a config.json this script writes
(no download): vLLM's load_format="dummy" gives every engine the same seeded weights. Each
engine runs in its own process (tests/vllm/engine_run.py), prompts as token ids, one at a
time, max_tokens 1, greedy:

  1. recompute: an engine without a connector serves "prefix + suffix i" for i = 1..N
     (N = --prompts), vLLM's own prefix cache emptied before each prompt, so every prompt
     computes the whole prefix. TTFT median over the N prompts.
  2. for each backend, a fresh tided (build/tide serve, a Unix socket and a loopback port,
     stopped by its pid) and two engines with TideStoreConnector:
       cold: serves "prefix + suffix 0": a miss; it computes and saves the prefix blocks
             (what tided then holds is read with `tide stat`);
       warm: a new engine process, same weights, serves in turn "prefix + suffix i" (a hit:
             vLLM's prefix cache is emptied before each prompt, not tide's store, so each
             looks the prefix up in tide and loads it) and a miss, a prompt with a prefix of
             its own (looked up, computed, saved), i = 1..N. Hit and miss TTFT are medians
             over the N of each; the misses, measured in the same engine between the hits,
             are a recompute at about the same time, which the machine's varying load
             otherwise blurs.
     Bytes loaded and load time are the connector's own figures, vLLM's Prometheus counters
     vllm:tide_operation_bytes_total / _seconds_total {operation="load_get"}, read after
     each prompt: the hit with the median load time is shown (load GB/s = its bytes / the
     seconds of its get calls, 10^9 bytes/s).
  3. checks each hit against the recompute: vLLM's num_cached_tokens shows the prefix came
     from the store, and the greedy first token is the same; the misses got nothing.

Then (unless --no-serve) it runs `vllm serve` with the connector over unix:// (a server
that saves, a new one that loads, one request each through the OpenAI completions API,
their TTFT and what the new one's /metrics and `cached_tokens` show) and prints the command
as run.

Every engine runs with the same VLLM_CPU_OMP_THREADS_BIND (--omp-bind, default all CPUs):
vLLM's "auto" binding reserves one more CPU for an engine with a KV connector, so on a small
machine the engines with and without tide would compute on different CPU sets. The bench
fails when the engines' logged bindings differ.

Every engine first serves a short warm-up prompt of its own (not shared, not counted):
the first forward pass of a fresh CPU engine pays one-off set-up costs.

TTFT here is the wall time of one LLM.generate call with max_tokens=1: input processing,
scheduling, tide's lookup and load, the forward pass of what was not loaded, sampling.
The figures move with the machine and with what else it runs (the load average is
printed); the ratio much less. Exit status 0, or 1 when an engine fails, a hit got no
tokens from tide, a first token differs from the recompute's, or the `vllm serve` check
fails.
"""

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ENGINE_RUN = os.path.join(ROOT, "tests", "vllm", "engine_run.py")
sys.path.insert(0, os.path.dirname(ENGINE_RUN))
import engine_run  # noqa: E402  (the launcher the tests use too)


def llama_config(a):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": a.hidden,
        "intermediate_size": a.intermediate or int(a.hidden * 2.75),
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.hidden // a.head_dim,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "vocab_size": a.vocab,
        "max_position_embeddings": a.max_model_len,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": a.dtype,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Tided:
    """A tided with a Unix socket and a loopback port, stopped by its pid."""

    def __init__(self, tide_bin, workdir, capacity):
        self.tide_bin = tide_bin
        os.makedirs(workdir, exist_ok=True)
        self.sock = os.path.join(workdir, "tide.sock")
        ready = os.path.join(workdir, "ready")
        self.log = open(os.path.join(workdir, "tided.log"), "w")
        self.proc = subprocess.Popen(
            [tide_bin, "serve", "--port", "0", "--metrics-port", "0", "--unix", self.sock,
             "--ready-file", ready, "--capacity", capacity],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not (os.path.exists(ready) and open(ready).read().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("tided did not start: "
                                   + open(os.path.join(workdir, "tided.log")).read())
            time.sleep(0.05)
        self.port = int(open(ready).read().split()[0])
        self.urls = {"unix": f"unix://{self.sock}", "tide": f"tide://127.0.0.1:{self.port}"}

    def stats(self):
        """tided's figures (`tide stat URL --json`), {} when they cannot be read."""
        try:
            return json.loads(subprocess.run(
                [self.tide_bin, "stat", self.urls["tide"], "--json"], capture_output=True,
                text=True, timeout=30).stdout)
        except (OSError, ValueError, subprocess.SubprocessError):
            return {}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def engine_env(a):
    """The environment every engine of the bench runs in: tide importable, this build's
    libtide, the KV-cache space and the OpenMP binding of the command line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [os.path.join(ROOT, "python"), env.get("PYTHONPATH", "")] if p)
    env["TIDE_LIB"] = a.lib
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(a.kv_space_gib))
    env["VLLM_CPU_OMP_THREADS_BIND"] = a.omp_bind
    return env


def run_engine(a, spec, workdir, name):
    """One engine in its own process group; returns engine_run.py's OUT plus its log."""
    env = engine_env(a)
    before = loadavg()
    print(f"vllm_ttft: engine {name} (load average {before})", file=sys.stderr, flush=True)
    out, text, _ = engine_run.launch(a.python, spec, workdir, name, env, a.engine_timeout)
    if "error" in out:
        raise RuntimeError(f"engine {name} failed: {out['error']}\n--- log tail ---\n"
                           + text[-4000:])
    out["log"] = text
    out["load"] = (before, loadavg())
    m = re.search(r"core ids=(\[[^\]]*\])", text)
    out["cores"] = m.group(1) if m else None
    return out


def op(out, field, operation):
    return out["series"].get(f"vllm:tide_operation_{field}_total{{operation={operation}}}", 0.0)


def ms(s):
    return f"{s * 1000:.0f} ms" if s >= 0.1 else f"{s * 1000:.1f} ms"


def mib(n):
    return f"{n / (1 << 20):.1f} MiB"


def free_port():
    import socket

    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def http(url, body=None, timeout=600):
    import urllib.request

    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def serve_check(a, workdir, model, cold_prompt, warm_prompt):
    """`vllm serve` with the connector over unix://: a server that saves (one request, a
    miss), then a new server that loads (one request, same prefix, another suffix).
    Returns the command as run and what each server did."""
    vllm = os.path.join(os.path.dirname(a.python), "vllm")
    tided = Tided(a.tide, os.path.join(workdir, "tided-serve"), a.capacity)
    kt = {"kv_connector": "TideStoreConnector", "kv_connector_module_path": "tide.vllm",
          "kv_role": "kv_both", "kv_connector_extra_config": {"url": tided.urls["unix"]}}
    env = engine_env(a)
    out = {"shim": None}
    # vllm-cpu's `vllm` command asks importlib.metadata for the distribution "vllm", which
    # vllm-cpu does not install (it is "vllm-cpu"): PackageNotFoundError before anything
    # starts. A one-file distribution record on PYTHONPATH answers it.
    has = subprocess.run([a.python, "-c", "import importlib.metadata as m; m.version('vllm')"],
                         capture_output=True)
    if has.returncode != 0:
        ver = subprocess.run(
            [a.python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
            capture_output=True, text=True).stdout.strip() or "0"
        shim = os.path.join(workdir, "vllm-dist")
        os.makedirs(os.path.join(shim, f"vllm-{ver}.dist-info"), exist_ok=True)
        with open(os.path.join(shim, f"vllm-{ver}.dist-info", "METADATA"), "w") as f:
            f.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {ver}+cpu\n")
        env["PYTHONPATH"] = shim + os.pathsep + env["PYTHONPATH"]
        out["shim"] = f"vllm-{ver}.dist-info (Version: {ver}+cpu)"
    try:
        for phase, prompt in (("cold", cold_prompt), ("warm", warm_prompt)):
            port = free_port()
            cmd = [vllm, "serve", model, "--port", str(port), "--load-format", "dummy",
                   "--skip-tokenizer-init", "--enforce-eager", "--dtype", a.dtype,
                   "--block-size", str(a.block_size), "--max-model-len", str(a.max_model_len),
                   "--enable-prompt-tokens-details", "--kv-transfer-config", json.dumps(kt)]
            print(f"vllm_ttft: vllm serve, {phase} (load average {loadavg()})", file=sys.stderr,
                  flush=True)
            log_path = os.path.join(workdir, f"serve-{phase}.log")
            with open(log_path, "w") as log:
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
            try:
                base = f"http://127.0.0.1:{port}"
                deadline = time.monotonic() + a.engine_timeout
                while True:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"vllm serve did not come up (log {log_path}):\n"
                                           + open(log_path).read()[-3000:])
                    try:
                        http(base + "/health", timeout=5)
                        break
                    except OSError:
                        time.sleep(1)
                s0 = time.monotonic()
                r = json.loads(http(base + "/v1/completions", {
                    "model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}))
                ttft = time.monotonic() - s0
                metrics = http(base + "/metrics")
                loaded = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                             if line.startswith("vllm:tide_operation_bytes_total{")
                             and 'operation="load_get"' in line)
                details = (r.get("usage") or {}).get("prompt_tokens_details") or {}
                out[phase] = {"ttft": ttft, "cached": details.get("cached_tokens"),
                              "loaded": loaded, "tokens": r["choices"][0].get("token_ids")
                              or r["choices"][0].get("text")}
            finally:
                proc.send_signal(signal.SIGTERM)  # the server's pid; then its group
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    pass
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
    finally:
        tided.stop()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prefix", type=int, default=4096, help="shared prefix tokens")
    p.add_argument("--suffix", type=int, default=64, help="tokens after the prefix")
    p.add_argument("--prompts", type=int, default=3, help="timed prompts per engine (N)")
    p.add_argument("--backends", default="unix,tide")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--warmup", type=int, default=128, help="tokens of each engine's warm-up")
    p.add_argument("--kv-space-gib", type=int, default=2, help="VLLM_CPU_KVCACHE_SPACE")
    p.add_argument("--capacity", default="2GiB", help="tided --capacity")
    cpus = sorted(os.sched_getaffinity(0))
    p.add_argument("--omp-bind", default=os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
                   or (f"{cpus[0]}-{cpus[-1]}" if cpus == list(range(cpus[0], cpus[-1] + 1))
                       else ",".join(map(str, cpus))),
                   help="VLLM_CPU_OMP_THREADS_BIND for every engine (default: all CPUs)")
    p.add_argument("--engine-timeout", type=int, default=900)
    p.add_argument("--python", default=os.environ.get("VLLM_PYTHON")
                   or os.path.join(ROOT, ".venv-vllm", "bin", "python"))
    build = os.environ.get("BUILD", os.path.join(ROOT, "build"))
    p.add_argument("--tide", default=os.path.join(build, "tide"))
    p.add_argument("--lib", default=os.environ.get("TIDE_LIB",
                                                   os.path.join(build, "libtide.so")))
    p.add_argument("--no-serve", dest="serve", action="store_false",
                   help="skip the `vllm serve` check (a server that saves and a new one that "
                        "loads, one request each, unix://)")
    p.add_argument("--workdir", help="keep specs, outputs and logs here (default: a temp dir)")
    a = p.parse_args()
    a.tide, a.lib = os.path.abspath(a.tide), os.path.abspath(a.lib)
    backends = [b for b in a.backends.split(",") if b]
    for b in backends:
        if b not in ("unix", "tide"):
            p.error(f"--backends: {b!r} is not unix or tide")
    if a.prefix + a.suffix > a.max_model_len:
        p.error("--prefix + --suffix exceeds --max-model-len")

    workdir = a.workdir or tempfile.mkdtemp(prefix="vllm_ttft.")
    os.makedirs(workdir, exist_ok=True)
    model = os.path.join(workdir, "bench-llama")
    os.makedirs(model, exist_ok=True)
    cfg = llama_config(a)
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump(cfg, f)

    rng = random.Random(15)
    tok = lambda n: [rng.randrange(3, a.vocab) for _ in range(n)]  # noqa: E731
    prefix = tok(a.prefix)
    suffixes = [tok(a.suffix) for _ in range(a.prompts + 1)]
    timed = [prefix + s for s in suffixes[1:]]
    base = dict(model=model, dtype=a.dtype, block_size=a.block_size,
                max_model_len=a.max_model_len, max_num_seqs=1, ttft=True,
                reset_prefix_cache=True, kv_space_gib=a.kv_space_gib, seed=0)

    def spec(prompts, connector):
        # Each engine's own warm-up prompt first (different tokens for every engine).
        return dict(base, prompts=[tok(a.warmup)] + prompts, connector=connector)

    start_load = loadavg()
    fails = []
    t0 = time.monotonic()
    recompute = run_engine(a, spec(timed, None), workdir, "recompute")
    rec_t = recompute["prompt_s"][1:]
    rec_first = [r["tokens"][0] for r in recompute["results"][1:]]
    rec_lp = [r["logprobs"][0] for r in recompute["results"][1:]]

    def load_delta(ps, i, field):
        key = f"vllm:tide_operation_{field}_total{{operation=load_get}}"
        return ps[i].get(key, 0.0) - (ps[i - 1].get(key, 0.0) if i else 0.0)

    rows = []
    for b in backends:
        tided = Tided(a.tide, os.path.join(workdir, f"tided-{b}"), a.capacity)
        try:
            conn = {"url": tided.urls[b], "kv_role": "kv_both", "policy": "recompute"}
            cold = run_engine(a, spec([prefix + suffixes[0]], conn), workdir, f"cold-{b}")
            stored = tided.stats()
            # Warm: hit i, then a miss (a 4k prefix of its own: computed and saved), in turn,
            # so each hit has a recompute in the same engine at about the same time.
            misses = [tok(a.prefix) + tok(a.suffix) for _ in timed]
            warm = run_engine(a, spec([q for pair in zip(timed, misses) for q in pair], conn),
                              workdir, f"warm-{b}")
        finally:
            tided.stop()
        hit_i = list(range(1, 2 * len(timed), 2))  # indexes in the warm engine's prompts
        miss_i = [i + 1 for i in hit_i]
        res = [warm["results"][i] for i in hit_i]
        cached = [r["num_cached_tokens"] for r in res]
        miss_cached = [warm["results"][i]["num_cached_tokens"] for i in miss_i]
        same = sum(r["tokens"][0] == t for r, t in zip(res, rec_first))
        dlp = max((abs(r["logprobs"][0] - lp) for r, lp in zip(res, rec_lp)
                   if r["logprobs"][0] is not None and lp is not None), default=float("nan"))
        ps = warm.get("prompt_series") or []
        # Per hit: the growth of the load counters over its generate call.
        per = [(load_delta(ps, i, "bytes"), load_delta(ps, i, "seconds")) for i in hit_i
               if i < len(ps)]
        hit_t = [warm["prompt_s"][i] for i in hit_i]
        miss_t = [warm["prompt_s"][i] for i in miss_i]
        load_b = op(warm, "bytes", "load_get")
        rows.append(dict(
            backend=f"{b}://", rec=statistics.median(rec_t), hit=statistics.median(hit_t),
            hit_all=hit_t, miss=statistics.median(miss_t), miss_all=miss_t,
            cold=cold["prompt_s"][1], stored=stored, cached=cached, per=per,
            load_b=load_b, load_s=op(warm, "seconds", "load_get"),
            engine_load={n: o["load"] for n, o in (("cold", cold), ("warm", warm))},
            engines={"cold": cold, "warm": warm},
            same=same, dlp=dlp))
        if min(cached) < a.prefix - a.block_size or load_b <= 0:
            fails.append(f"{b}://: hits cached {cached} tokens, loaded {load_b:.0f} B")
        if max(miss_cached) > 0:
            fails.append(f"{b}://: the interleaved misses cached {miss_cached} tokens")
        if same != len(res):
            fails.append(f"{b}://: {len(res) - same} first tokens differ from the recompute")
    wall = time.monotonic() - t0
    engines = [("recompute", recompute)] + [(f"{r['backend']} {k}", o) for r in rows
                                            for k, o in r["engines"].items()]
    placements = {o["cores"] for _, o in engines}
    if len(placements) != 1:
        fails.append("the engines' OpenMP threads were bound differently: "
                     + ", ".join(f"{n} {o['cores']}" for n, o in engines))

    log = recompute["log"]
    ver = re.search(r"LLM engine \((v[^)]+)\)", log)
    cores = re.search(r"core ids=(\[[^\]]*\])", log)
    reserved = re.search(r"reserved_cpus=(\[[^\]]*\])", log)
    threads = re.search(r"leaving Torch threads at (\d+)", log)
    kv_tok = 2 * a.layers * a.kv_heads * a.head_dim * (2 if a.dtype in ("bfloat16",
                                                                        "float16") else 4)
    nparams = (a.vocab * a.hidden * 2 + a.layers * (
        a.hidden * a.hidden * 2 + 2 * a.hidden * a.kv_heads * a.head_dim
        + 3 * a.hidden * cfg["intermediate_size"]))
    n = a.prompts
    print(f"vLLM {ver.group(1) if ver else '?'} (CPU build), one engine process per run; "
          f"Llama-shaped model from a config.json with load_format=dummy (seeded weights): "
          f"{a.layers} layers, hidden {a.hidden}, {a.hidden // a.head_dim} heads and "
          f"{a.kv_heads} KV heads of {a.head_dim}, MLP {cfg['intermediate_size']}, vocab "
          f"{a.vocab}, {nparams / 1e6:.0f}M parameters, {a.dtype}, KV {kv_tok // 1024} KiB a "
          f"token; block size {a.block_size}, enforce_eager. Prompt = {a.prefix}-token prefix "
          f"+ {a.suffix}-token suffix, max_tokens 1, greedy; TTFT = wall time of one "
          f"LLM.generate call, median of {n} prompts (different suffixes after the same "
          f"prefix; vLLM's own prefix cache emptied before each). Recompute: the same engine "
          f"without a connector. Hit: a new engine after one that saved the prefix. Miss: in "
          f"that same engine, after each hit, a prompt with a {a.prefix}-token prefix of its "
          f"own (looked up, computed, saved). Threads: in every engine the model runs on "
          f"{threads.group(1) if threads else '?'} OpenMP threads bound to CPUs "
          f"{cores.group(1) if cores else '?'} (VLLM_CPU_OMP_THREADS_BIND={a.omp_bind}, "
          f"reserved CPUs {reserved.group(1) if reserved else '?'}; vLLM's auto binding would "
          f"not give every engine the same: it reserves one CPU more when a KV connector is "
          f"configured, so on 2 CPUs one with a connector got both and one without only "
          f"CPU 0). tided, vLLM's frontend and engine core unpinned; the connector's job "
          f"threads start in the worker process (their placement not checked). Load average "
          f"{start_load} at the start, {loadavg()} at the end; {wall:.0f} s in all.")
    print()
    print("| backend | recompute TTFT | miss TTFT (with tide) | hit TTFT (4k prefix loaded) "
          "| speed-up vs recompute | vs miss | tokens from tide | bytes loaded | load time "
          "| load GB/s | first token = recompute |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        # The hit with the median load time (per-hit figures when every hit's counters
        # moved; the engine's totals over its hits otherwise).
        per = [x for x in r["per"] if x[0] > 0 and x[1] > 0]
        if len(per) == n:
            r["mb"], r["ms"] = sorted(per, key=lambda x: x[1])[len(per) // 2]
        else:
            r["mb"], r["ms"] = r["load_b"] / n, r["load_s"] / n
        print(f"| {r['backend']} | {ms(r['rec'])} | {ms(r['miss'])} | {ms(r['hit'])} | "
              f"{r['rec'] / r['hit']:.1f}x | {r['miss'] / r['hit']:.1f}x | "
              f"{min(r['cached'])} of {a.prefix + a.suffix} | {mib(r['mb'])} | "
              f"{ms(r['ms'])} | {r['mb'] / r['ms'] / 1e9 if r['ms'] else 0:.2f} | "
              f"{r['same']} of {n} |")
    print()
    print(f"Per prompt: recompute {', '.join(ms(t) for t in rec_t)}; "
          + "; ".join(f"{r['backend']} hits {', '.join(ms(t) for t in r['hit_all'])}, misses "
                      f"{', '.join(ms(t) for t in r['miss_all'])}" for r in rows)
          + ". Bytes loaded, load time: the hit with the median load time (the growth of the "
          "engine's vllm:tide_operation_{bytes,seconds}_total{operation=load_get} over its "
          "generate call; seconds of the connector's get calls; GB/s = 10^9 B/s); load time "
          "per hit: "
          + "; ".join(f"{r['backend']} " + ", ".join(ms(x[1]) for x in r["per"]) for r in rows)
          + ". The engine that saved the prefix (a miss): "
          + "; ".join(f"{r['backend']} TTFT {ms(r['cold'])}, tided then held "
                      f"{r['stored'].get('objects', '?')} objects, "
                      f"{mib(r['stored'].get('used_bytes', 0))}" for r in rows)
          + ". Largest |first-token logprob - recompute's| over the hits: "
          + ", ".join(f"{r['backend']} {r['dlp']:.2g}" for r in rows) + ". Load average "
          f"(start / end of each engine): recompute {recompute['load'][0]} / "
          f"{recompute['load'][1]}; "
          + "; ".join(f"{r['backend']} {k} {v[0]} / {v[1]}" for r in rows
                      for k, v in r["engine_load"].items()) + ".")
    if "unix" in backends:
        u = next(r for r in rows if r["backend"] == "unix://")
        ratio = u["rec"] / u["hit"]
        print()
        print(f"Target >= 5x at {a.prefix} tokens on unix://: "
              f"{'met' if ratio >= 5 else 'not met'} ({ratio:.1f}x); recompute "
              f"{'>=' if u['rec'] >= 1 else '<'} 1 s ({ms(u['rec'])}).")
    sys.stdout.flush()
    served = None
    if a.serve:
        try:
            served = serve_check(a, workdir, model, prefix + suffixes[0], timed[0])
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            fails.append(f"vllm serve: {e}")
    if served:
        if not served["warm"]["loaded"] or (served["warm"]["cached"] or 0) < a.prefix:
            fails.append(f"vllm serve: the warm server loaded {served['warm']['loaded']:.0f} B,"
                         f" cached {served['warm']['cached']} tokens")
        c, w = served["cold"], served["warm"]
        print()
        print("`vllm serve` (OpenAI completions, token ids, max_tokens 1; one request per "
              "server, wall time of the HTTP call), unix://, a tided started as above:")
        print()
        print("    PYTHONPATH=$TIDE/python TIDE_LIB=$TIDE/build/libtide.so \\")
        print(f"    vllm serve MODEL_DIR --load-format dummy --skip-tokenizer-init "
              f"--enforce-eager --dtype {a.dtype} \\")
        print(f"      --block-size {a.block_size} --max-model-len {a.max_model_len} "
              f"--enable-prompt-tokens-details --kv-transfer-config \\")
        print("      '{\"kv_connector\": \"TideStoreConnector\", \"kv_connector_module_path\": "
              "\"tide.vllm\", \"kv_role\": \"kv_both\", \"kv_connector_extra_config\": "
              "{\"url\": \"unix:///PATH/tide.sock\"}}'")
        print()
        print(f"cold server (a miss: computes, saves): {ms(c['ttft'])}, cached_tokens "
              f"{c['cached']}; a new server, same prefix, another suffix: {ms(w['ttft'])}, "
              f"cached_tokens {w['cached']}, vllm:tide_operation_bytes_total"
              f"{{operation=\"load_get\"}} {mib(w['loaded'])} on its /metrics. Load "
              f"average {loadavg()}."
              + (f" vllm-cpu's `vllm` command needed the distribution record {served['shim']}"
                 " on PYTHONPATH (without it: PackageNotFoundError: No package metadata was "
                 "found for vllm)." if served["shim"] else ""))
    for f in fails:
        print(f"FAIL: {f}")
    print(f"vllm_ttft: logs in {workdir}", file=sys.stderr)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
