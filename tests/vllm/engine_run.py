"""engine_run.py — one vLLM engine in its own process, for tide's end-to-end tests and bench.

    .venv-vllm/bin/python tests/vllm/engine_run.py SPEC.json OUT.json

SPEC (JSON): ``model`` (a directory holding only a config.json: weights are vLLM's
``load_format="dummy"``, seeded, so every engine built from the same directory and seed has
the same weights), ``prompts`` (lists of token ids), ``max_tokens``, ``block_size``,
``connector`` (null: no connector; else ``{"url", "kv_role", "extra", "policy",
"module"}``), and optional engine settings: ``max_num_seqs``, ``max_model_len``,
``num_gpu_blocks``, ``kv_space_gib``, ``batch`` (true: every prompt in one generate call,
so they run concurrently; false: one call per prompt, in order), ``prefix_caching``,
``mamba_cache_mode``, ``dtype``, ``seed``, ``engine_args``, ``kv_events_port`` (publish
vLLM's KV events there and count what arrives), ``reset_prefix_cache`` (true: empty vLLM's
own prefix cache, not the connector's store, before each prompt of a one-by-one run, so a
repeated prefix is computed or loaded again each time; the bench's TTFT runs use it),
``processes`` (true, the default: vLLM's engine-core and worker processes under this one,
as a deployment runs them, the connector's scheduler and worker roles in different processes
and its metadata pickled between them; false: the engine in this process,
``VLLM_ENABLE_V1_MULTIPROCESSING=0``, two process starts and ~25 s fewer per engine here).

OUT (JSON): per prompt the greedy tokens, their logprobs and ``num_cached_tokens``; the
engine's Prometheus counters (``vllm:*``: external prefix-cache queries and hits, tide's
connector figures); seconds spent in start-up and in generation; each prompt's time to
first token when ``ttft`` is set (one prompt at a time, max_tokens 1); ``series``: every
``vllm:*`` counter sample by its labels (engine and model_name left out) as an exact float,
e.g. ``vllm:tide_operation_bytes_total{operation=load_get}`` (``metrics`` sums a name's
series as vLLM's reader does, which truncates counters to integers); with ``ttft``,
``prompt_series`` holds the same after each prompt.
Errors: the script exits non-zero with the exception in OUT["error"].
"""

import json
import os
import sys
import time
import traceback


def _metrics(llm):
    out = {}
    try:
        for m in llm.get_metrics():
            value = getattr(m, "value", None)
            if value is None:
                continue
            out[m.name] = out.get(m.name, 0) + value
    except Exception as e:  # metrics are figures for the test, not the engine's job
        out["error"] = repr(e)
    return out


class EventListener:
    """Subscribes to the KV events the engine publishes (vLLM's ZMQ publisher) and counts,
    per event type and medium, the events and block hashes received."""

    def __init__(self, port):
        import threading

        import msgspec
        import zmq

        # Imported here, before the thread starts: vLLM's imports run in the main thread at
        # the same time, and two threads importing vLLM's tree at once failed in
        # setuptools' vendored importer ("No module named pkg_resources.extern...").
        from vllm.distributed.kv_events import KVEventBatch

        self._dec = msgspec.msgpack.Decoder(type=KVEventBatch)
        self.counts = {}
        self._ctx = zmq.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._sub.setsockopt(zmq.RCVTIMEO, 200)
        # vLLM connects its PUB socket to a host:port endpoint: the subscriber binds.
        self._sub.bind(f"tcp://127.0.0.1:{int(port)}")
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        import zmq

        dec = self._dec
        while not self._stop:
            try:
                _topic, _seq, payload = self._sub.recv_multipart()
            except zmq.Again:
                continue
            for ev in dec.decode(payload).events:
                medium = getattr(ev, "medium", None)
                key = f"{type(ev).__name__}/{medium}"
                c = self.counts.setdefault(key, {"events": 0, "hashes": 0})
                c["events"] += 1
                c["hashes"] += len(getattr(ev, "block_hashes", ()) or ())

    def close(self):
        self._stop = True
        self._thread.join(timeout=5)
        self._sub.close(0)
        self._ctx.term()


def _series():
    """Every vllm:* counter sample, keyed name{label=value,...}, as an exact float."""
    out = {}
    try:
        from prometheus_client import REGISTRY

        for m in REGISTRY.collect():
            if not m.name.startswith("vllm:") or m.type != "counter":
                continue
            for s in m.samples:
                if not s.name.endswith("_total"):
                    continue
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())
                                  if k not in ("engine", "model_name"))
                key = f"{s.name}{{{labels}}}" if labels else s.name
                out[key] = out.get(key, 0.0) + float(s.value)
    except Exception as e:  # figures for the bench, not the engine's job
        out["error"] = repr(e)
    return out


def build_llm(spec):
    from vllm import LLM
    from vllm.config import KVTransferConfig

    kt = None
    conn = spec.get("connector")
    if conn is not None:
        extra = dict(conn.get("extra") or {})
        if conn.get("url") is not None:
            extra["url"] = conn["url"]
        kt = KVTransferConfig(
            kv_connector=conn.get("class", "TideStoreConnector"),
            kv_connector_module_path=conn.get("module", "tide.vllm"),
            kv_role=conn.get("kv_role", "kv_both"),
            kv_connector_extra_config=extra,
            kv_load_failure_policy=conn.get("policy", "recompute"),
        )
    args = dict(
        model=spec["model"],
        load_format="dummy",
        skip_tokenizer_init=True,
        enforce_eager=True,
        dtype=spec.get("dtype", "float32"),
        max_model_len=spec.get("max_model_len", 2048),
        block_size=spec.get("block_size", 32),
        seed=spec.get("seed", 0),
        max_num_seqs=spec.get("max_num_seqs", 4),
        enable_prefix_caching=spec.get("prefix_caching", True),
        disable_log_stats=False,
        kv_transfer_config=kt,
    )
    if spec.get("num_gpu_blocks"):
        args["num_gpu_blocks_override"] = int(spec["num_gpu_blocks"])
    if spec.get("kv_events_port"):
        from vllm.config import KVEventsConfig

        args["kv_events_config"] = KVEventsConfig(
            enable_kv_cache_events=True, publisher="zmq",
            endpoint=f"tcp://127.0.0.1:{int(spec['kv_events_port'])}")
    if spec.get("mamba_cache_mode"):
        args["mamba_cache_mode"] = spec["mamba_cache_mode"]
    args.update(spec.get("engine_args") or {})
    return LLM(**args)


def _processes():
    """This process and its descendants, by name (vLLM's engine core and workers name
    themselves: VLLM::EngineCore, VLLM::Worker...)."""
    parent, names = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        comm_end = st.rindex(")")
        names[int(d)] = st[st.index("(") + 1:comm_end]
        parent[int(d)] = int(st[comm_end + 2:].split()[1])
    mine, grew = {os.getpid()}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in mine and p not in mine}
        mine |= more
        grew = bool(more)
    return sorted(names.get(p, "?") for p in mine)


def run(spec):
    from vllm import SamplingParams

    t0 = time.monotonic()
    listener = EventListener(spec["kv_events_port"]) if spec.get("kv_events_port") else None
    llm = build_llm(spec)
    t1 = time.monotonic()
    procs = _processes()
    ttft = bool(spec.get("ttft"))
    sp = SamplingParams(
        max_tokens=1 if ttft else int(spec.get("max_tokens", 8)),
        temperature=0.0,
        logprobs=1,
        detokenize=False,
        ignore_eos=True,
    )
    prompts = [{"prompt_token_ids": list(p)} for p in spec["prompts"]]
    results, times, resets, after = [], [], [], []
    reset = bool(spec.get("reset_prefix_cache"))
    if spec.get("batch", False):
        outs = llm.generate(prompts, sp, use_tqdm=False)
    else:
        outs = []
        for p in prompts:
            if reset:  # vLLM's prefix cache only; the connector's store is kept
                resets.append(bool(llm.reset_prefix_cache()))
            s = time.monotonic()
            outs.extend(llm.generate([p], sp, use_tqdm=False))
            times.append(time.monotonic() - s)
            if ttft:
                after.append(_series())
    for o in outs:
        c = o.outputs[0]
        lps = []
        for tok, lp in zip(c.token_ids, c.logprobs or []):
            lps.append(float(lp[tok].logprob) if tok in lp else None)
        results.append(
            {"tokens": list(c.token_ids), "logprobs": lps,
             "num_cached_tokens": int(o.num_cached_tokens or 0),
             "finish_reason": None if c.finish_reason is None else str(c.finish_reason)}
        )
    t2 = time.monotonic()
    metrics = _metrics(llm)
    events = None
    if listener is not None:
        time.sleep(1.0)  # the publisher's last batch
        listener.close()
        events = listener.counts
    series = _series()
    # Stop the engine-core and worker processes now (their connectors drain and close).
    llm.llm_engine.engine_core.shutdown()
    return {
        "results": results,
        "metrics": metrics,
        "kv_events": events,
        "series": series,
        "prefix_cache_resets": resets,
        "prompt_series": after,
        "processes": procs,
        "startup_s": t1 - t0,
        "generate_s": t2 - t1,
        "prompt_s": times,
    }


def launch(python, spec, workdir, name, env, timeout):
    """Run this script for `spec` in its own process group (vLLM's engine-core and worker
    processes under it) with `python` and `env`; returns ``(OUT or {"error": ...}, log text,
    exit status)``. Raises TimeoutError, after killing the group, if it outlives `timeout`
    seconds. The tests (conftest.py) and bench/vllm_ttft.py start engines through it."""
    import signal
    import subprocess

    spec_path = os.path.join(workdir, f"{name}.spec.json")
    out_path = os.path.join(workdir, f"{name}.out.json")
    log_path = os.path.join(workdir, f"{name}.log")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    with open(log_path, "w") as log:
        proc = subprocess.Popen([python, os.path.abspath(__file__), spec_path, out_path],
                                stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise TimeoutError(f"engine {name} ran past {timeout} s (log: {log_path})")
        finally:
            try:  # vLLM's engine-core and worker processes, should any outlive it
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    text = open(log_path).read()
    out = json.load(open(out_path)) if os.path.exists(out_path) else {"error": "no output"}
    return out, text, proc.returncode


def main():
    spec_path, out_path = sys.argv[1], sys.argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(spec.get("kv_space_gib", 1)))
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if spec.get("processes", True) else "0"
    try:
        out = run(spec)
        rc = 0
    except BaseException as e:  # the test reads the cause from OUT
        out = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        print(out["traceback"], file=sys.stderr)  # in the log too, as vLLM's processes do
        rc = 1
    with open(out_path, "w") as f:
        json.dump(out, f)
    sys.stdout.flush()
    # The engine was shut down in run(); leave without interpreter teardown, which can
    # wait on vLLM's daemon threads.
    os._exit(rc)


if __name__ == "__main__":
    main()
