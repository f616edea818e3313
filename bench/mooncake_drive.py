"""mooncake_drive.py — the measuring half of bench/mooncake.sh (which starts the servers).

Run with .venv-mooncake's python and python/ on PYTHONPATH. One process holds four clients
and measures them back to back on the same calls:

  mooncake   Mooncake's own ``mooncake.store.MooncakeDistributedStore`` (pybind11 over its
             C++ client; it releases the GIL in every call used here), set up with no
             segment of its own, so every byte crosses loopback TCP to the mooncake_client
             process holding the segment;
  tide-mc    tide's Mooncake-compatible class (``tide.mooncake``) on tide://;
  tide-py    ``tide.Store`` on tide:// (put/get_into, put_many/get_many of memoryviews,
             exists/exists_many);
  tide-c     build/bench/drive/tide_drive: the same calls through libtide from C.

Every client moves values from and into one region per thread, allocated and touched
before the timed runs (registered with register_buffer for the two Mooncake APIs): slot i
of a batch is bytes [i*size, (i+1)*size) of it. Calls per row: single-key PUT of a fresh
key, single-key GET of working-set keys walked in order, and batches of BATCH keys (exists,
put of fresh keys, get into the slots). Threads share one client; each thread runs until
--seconds have passed or it has made its share of the call budget (PUT rows: --put-bytes
per run, so no store fills up; others: 10^6 calls). Keys a PUT run wrote are removed after
it, outside the timing. A failed call, a short read or a missing key counts as an error
and the row says so.

Each figure is the median of --runs runs; the rows are interleaved (every row of a run
before the next run) and within a row the clients take turns in a rotating order. Ratios
are taken per run, tide against Mooncake measured in the same row of the same run, then
their median and range. Prints markdown on stdout; the raw figures go to --json.
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import tide
import tide.mooncake as tmc
from mooncake.store import MooncakeDistributedStore

GB = 1e9


class Region:
    """One per-thread buffer: `nbytes` bytes, touched, with its address and a memoryview."""

    def __init__(self, nbytes):
        self.buf = ctypes.create_string_buffer(nbytes)
        ctypes.memset(self.buf, 0x5A, nbytes)
        self.addr = ctypes.addressof(self.buf)
        self.view = memoryview(self.buf).cast("B")
        self.nbytes = nbytes


class MooncakeApi:
    """Mooncake's pointer API (the real one, or tide's look-alike)."""

    def __init__(self, name, store, regions):
        self.name, self.s = name, store
        for r in regions:
            rc = store.register_buffer(r.addr, r.nbytes)
            if rc != 0:
                raise RuntimeError(f"{name}: register_buffer: {rc}")

    def calls(self, op, size, batch, region):
        s = self.s
        ptrs = [region.addr + i * size for i in range(batch)]
        sizes = [size] * batch
        p0 = ptrs[0]
        if batch == 1:
            if op == "put":
                return lambda keys: int(s.put_from(keys[0], p0, size) != 0)
            if op == "get":
                return lambda keys: int(s.get_into(keys[0], p0, size) != size)
            return lambda keys: int(s.is_exist(keys[0]) != 1)
        if op == "put":
            return lambda keys: sum(r != 0 for r in s.batch_put_from(keys, ptrs, sizes))
        if op == "get":
            return lambda keys: sum(r != size for r in s.batch_get_into(keys, ptrs, sizes))
        return lambda keys: sum(r != 1 for r in s.batch_is_exist(keys))

    def store_keys(self, keys, size, region):
        for i in range(0, len(keys), 64):
            part = keys[i : i + 64]
            res = self.s.batch_put_from(
                part, [region.addr + j * size for j in range(len(part))], [size] * len(part)
            )
            if any(r != 0 for r in res):
                raise RuntimeError(f"{self.name}: fill: {res}")

    def remove_keys(self, keys):
        for i in range(0, len(keys), 1024):
            self.s.batch_remove(keys[i : i + 1024], True)


class TideStoreApi:
    """tide.Store with memoryviews of the region."""

    name = "tide-py"

    def __init__(self, url):
        self.s = tide.Store(url)

    def calls(self, op, size, batch, region):
        s = self.s
        views = [region.view[i * size : (i + 1) * size] for i in range(batch)]
        v0 = views[0]
        if batch == 1:
            if op == "put":
                def put1(keys):
                    s.put(keys[0], v0)
                    return 0
                return put1
            if op == "get":
                return lambda keys: int(s.get_into(keys[0], v0) != size)
            return lambda keys: int(not s.exists(keys[0]))
        if op == "put":
            return lambda keys: sum(r != 0 for r in s.put_many(keys, views))
        if op == "get":
            return lambda keys: sum(r != size for r in s.get_many(keys, views))
        return lambda keys: sum(not p for p in s.exists_many(keys))

    def store_keys(self, keys, size, region):
        views = [region.view[i * size : (i + 1) * size] for i in range(64)]
        for i in range(0, len(keys), 64):
            part = keys[i : i + 64]
            if any(r != 0 for r in self.s.put_many(part, views[: len(part)])):
                raise RuntimeError("tide: fill failed")

    def remove_keys(self, keys):
        for i in range(0, len(keys), 1024):
            self.s.remove_many(keys[i : i + 1024])


def run_python(api, op, size, batch, threads, seconds, budget, ws, regions, fresh):
    """One timed run of a Python client: figures as a dict."""
    per = budget // threads
    fns = [api.calls(op, size, batch, regions[t]) for t in range(threads)]
    # Key lists for every call a thread may make, built before the clock starts.
    plans = []
    for t in range(threads):
        if op == "put":
            plans.append(fresh(t, per * batch))
        else:
            n = len(ws)
            start = n * t // threads
            ring = ws[start:] + ws[:start]
            plans.append(ring)
    done = [0] * threads
    errs = [0] * threads
    barrier = threading.Barrier(threads + 1)
    deadline = [0.0]

    def work(t):
        fn, plan, n = fns[t], plans[t], len(plans[t])
        mono = time.monotonic
        barrier.wait()
        end = deadline[0]
        calls = e = 0
        off = 0
        while calls < per and mono() < end:
            if off + batch > n:
                off = 0  # only for gets/exists: the ring repeats the working set
            e += fn(plan[off : off + batch])
            off += batch
            calls += 1
        done[t], errs[t] = calls, e

    ths = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in ths:
        th.start()
    deadline[0] = time.monotonic() + seconds
    t0 = time.monotonic()
    barrier.wait()
    for th in ths:
        th.join()
    secs = time.monotonic() - t0
    calls = sum(done)
    return {
        "calls": calls,
        "keys": calls * batch,
        "bytes": 0 if op == "exists" else calls * batch * size,
        "seconds": secs,
        "errors": sum(errs),
        "thread_calls": done,
    }


def run_c(args, prefix, op, size, batch, threads, seconds, budget, nkeys, run):
    cmd = [
        args.drive, "--url", args.tide_url, "--op", op, "--size", str(size), "--batch",
        str(batch), "--threads", str(threads), "--seconds", str(seconds), "--max-calls",
        str(budget), "--keys", str(nkeys), "--prefix", prefix, "--run", str(run),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=seconds + 60)
    return json.loads(out.stdout)


def fmt_size(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def med_range(xs, f="%.2f"):
    if not xs:
        return "—"
    m = statistics.median(xs)
    if min(xs) == max(xs):
        return f % m
    return (f + " (" + f + "–" + f + ")") % (m, min(xs), max(xs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tide-url", required=True)
    ap.add_argument("--mc-master", required=True)
    ap.add_argument("--mc-metadata", required=True)
    ap.add_argument("--drive", required=True)
    ap.add_argument("--sizes", default="65536 262144 1048576 4194304")
    ap.add_argument("--batch-sizes", default="65536 1048576")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", default="1 2")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--ws", type=int, default=64 << 20)
    ap.add_argument("--put-bytes", type=int, default=768 << 20)
    ap.add_argument("--warm-bytes", type=int, default=1536 << 20)
    ap.add_argument("--json", default="")
    ap.add_argument("--overhead", action="store_true",
                    help="only tide.Store against tide C, batch rows only (the table of the "
                         "Python binding's overhead)")
    args = ap.parse_args()

    sizes = [int(x) for x in args.sizes.split()]
    bsizes = [int(x) for x in args.batch_sizes.split()]
    tcounts = [int(x) for x in args.threads.split()]
    B = args.batch
    maxt = max(tcounts)
    region_bytes = max(max(sizes), B * max(bsizes))
    regions = [Region(region_bytes) for _ in range(maxt)]
    log = lambda *a: print("mooncake:", *a, file=sys.stderr, flush=True)

    if args.overhead:
        systems = ["tide-py", "tide-c"]
        apis = {"tide-py": TideStoreApi(args.tide_url)}
        stores = {"tide": apis["tide-py"]}
        mc = None
    else:
        mc = MooncakeDistributedStore()
        rc = mc.setup("127.0.0.1", args.mc_metadata, 0, 16 << 20, "tcp", "", args.mc_master)
        if rc != 0:
            sys.exit(f"mooncake_drive: MooncakeDistributedStore.setup: {rc}")
        tm = tmc.MooncakeDistributedStore()
        rc = tm.setup("127.0.0.1", "", 0, 0, "tcp", "", args.tide_url)
        if rc != 0:
            sys.exit(f"mooncake_drive: tide.mooncake setup: {rc} ({tm.last_error})")
        apis = {
            "mooncake": MooncakeApi("mooncake", mc, regions),
            "tide-mc": MooncakeApi("tide-mc", tm, regions),
            "tide-py": TideStoreApi(args.tide_url),
        }
        systems = ["mooncake", "tide-mc", "tide-py", "tide-c"]
        stores = {"mooncake": apis["mooncake"], "tide": apis["tide-py"]}

    # Touch each store's memory once: write and remove warm-bytes of 1 MiB values, so no
    # timed put meets pages the server has never written (tided is also pre-faulted).
    for name, api in stores.items():
        n = args.warm_bytes >> 20
        t0 = time.monotonic()
        keys = [f"warm.{i}" for i in range(n)]
        for i in range(0, n, 256):
            api.store_keys(keys[i : i + 256], 1 << 20, regions[0])
            api.remove_keys(keys[i : i + 256])
        log(f"{name}: wrote and removed {n} MiB in {time.monotonic() - t0:.1f} s (warm-up)")

    # Working sets, stored in both stores (the same keys and sizes).
    ws = {}
    for size in sorted(set(sizes) | set(bsizes)):
        n = max(args.ws // size, 4 * B if size in bsizes else 1, 2 * maxt)
        keys = [f"ws{size}.{i}" for i in range(n)]
        for api in stores.values():
            api.store_keys(keys, size, regions[0])
        ws[size] = keys
        log(f"working set: {n} keys of {fmt_size(size)} in each store")

    rows = []
    for size in sizes if not args.overhead else []:
        for op in ("put", "get"):
            for t in tcounts:
                rows.append((op, size, 1, t))
    for t in tcounts:
        rows.append(("exists", bsizes[0], B, t))
    for size in bsizes:
        for op in ("put", "get"):
            for t in tcounts:
                rows.append((op, size, B, t))

    results = {}  # (row, system) -> list of runs
    t_start = time.time()
    load0 = open("/proc/loadavg").read().split()[:3]
    for run in range(args.runs):
        for ri, row in enumerate(rows):
            op, size, batch, threads = row
            budget = max(1, args.put_bytes // (size * batch)) if op == "put" else 10**6
            k = (run + ri) % len(systems)
            order = systems[k:] + systems[:k]
            for sysname in order:
                tag = f"p{run}.{ri}.{sysname}."
                if sysname == "tide-c":
                    pfx = f"ws{size}." if op != "put" else tag
                    r = run_c(args, pfx, op, size, batch, threads, args.seconds, budget,
                              len(ws[size]), run)
                    written = [
                        f"{tag}{run}.{t}.{i}"
                        for t, c in enumerate(r["thread_calls"])
                        for i in range(c * batch)
                    ]
                    api = stores["tide"]
                else:
                    api = apis[sysname]

                    def fresh(t, n, tag=tag):
                        return [f"{tag}{t}.{i}" for i in range(n)]

                    r = run_python(api, op, size, batch, threads, args.seconds, budget,
                                   ws[size], regions, fresh)
                    written = [
                        f"{tag}{t}.{i}"
                        for t, c in enumerate(r["thread_calls"])
                        for i in range(c * batch)
                    ]
                    if sysname == "tide-mc":
                        api = stores["tide"]
                if op == "put":
                    api.remove_keys(written)
                results.setdefault((row, sysname), []).append(r)
            log(f"run {run + 1}/{args.runs}: {op} {fmt_size(size)} x{batch} {threads}t: " + ", ".join(
                f"{s} {rate(results[(row, s)][-1], op):.2f}" for s in systems))
    load1 = open("/proc/loadavg").read().split()[:3]
    elapsed = time.time() - t_start

    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"row": list(k[0]), "system": k[1], "runs": v} for k, v in
                       results.items()], f)
    if args.overhead:
        report_overhead(args, rows, results, load0, load1, elapsed)
    else:
        report(args, rows, systems, results, load0, load1, elapsed)
        mc.close()


def rate(r, op):
    """GB/s (10^9 value bytes a second), or for exists millions of keys a second."""
    if r["seconds"] <= 0:
        return 0.0
    return (r["keys"] if op == "exists" else r["bytes"]) / r["seconds"] / (1e6 if op == "exists" else GB)


def report(args, rows, systems, results, load0, load1, elapsed):
    p = print
    p(f"tide vs Mooncake Store ({mooncake_version()}), one process driving all four clients, "
      f"{args.runs} runs of ~{args.seconds:g} s per figure, rows interleaved; values from and "
      f"into one pre-touched buffer per thread (registered for both Mooncake APIs). GB/s = 10^9 "
      f"value bytes a second; exists rows: millions of keys a second. Figures: median of the "
      f"runs (range); ratios: per run, tide over Mooncake measured in the same row of the same "
      f"run, then median (range). Threads: Python threads sharing one client (every call "
      f"releases the GIL on both sides) and, for tide-c, pthreads sharing one handle. GETs read "
      f"a working set of max({args.ws >> 20} MiB, 4 batches) stored beforehand; PUTs write fresh "
      f"keys, at most {args.put_bytes >> 20} MiB a run, removed after the run. Single-key rows use "
      f"slot 0 of the buffer (it stays in cache); a batch spans batch x value bytes (64 MiB "
      f"for 64 x 1 MiB, beyond the L3), so those copies run from memory. Load average "
      f"{' '.join(load0)} at start, {' '.join(load1)} at end; {elapsed:.0f} s of runs.")
    p()
    p("| op | value | batch | threads | Mooncake (Python) | tide.Store | tide Mooncake API | tide C | "
      "tide.Store / Mooncake | tide Mooncake API / Mooncake | tide C / Mooncake | ≥ 3× |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|")
    met_rows = 0
    errors = []
    for row in rows:
        op, size, batch, threads = row
        figs = {s: [rate(r, op) for r in results[(row, s)]] for s in systems}
        for s in systems:
            e = sum(r["errors"] for r in results[(row, s)])
            if e:
                errors.append(f"{s} {op} {fmt_size(size)} x{batch} {threads}t: {e} failed keys")
        ratios = {}
        for s in ("tide-py", "tide-mc", "tide-c"):
            ratios[s] = [a / b for a, b in zip(figs[s], figs["mooncake"]) if b > 0]
        ok = all(ratios[s] and statistics.median(ratios[s]) >= 3 for s in ratios)
        low = min(statistics.median(ratios[s]) for s in ratios if ratios[s])
        met_rows += ok
        f = "%.3f" if op == "exists" else "%.2f"
        p(f"| {op} | {'—' if op == 'exists' else fmt_size(size)} | {batch} | {threads} | "
          + " | ".join(med_range(figs[s], f) for s in ("mooncake", "tide-py", "tide-mc", "tide-c"))
          + " | "
          + " | ".join(med_range(ratios[s]) for s in ("tide-py", "tide-mc", "tide-c"))
          + f" | {'met' if ok else 'NOT met'} ({tfig(low, 3)}) |")
    p()
    p(f"Target tide ≥ 3× Mooncake on every row (each of the three tide APIs, on the median of "
      f"the per-run ratios; the lowest in brackets): met on {met_rows} of {len(rows)} rows — "
      f"{'met' if met_rows == len(rows) else 'NOT met'}.")
    p("Mooncake's C/C++ API: the wheel ships no headers and its store.so exports only "
      "PyInit_store, so Mooncake is measured through Python only; the tide C column is "
      "libtide's C client on the same calls.")
    if errors:
        p("Errors: " + "; ".join(errors))


def tfig(v, thr, f="%.2f"):
    """v as a target line prints it against v >= thr: f, or four decimals where f's rounding
    would read as the other verdict (0.896 printed as 0.90 against >= 0.9)."""
    s = f % v
    return s if (float(s) >= thr) == (v >= thr) else "%.4f" % v


def report_overhead(args, rows, results, load0, load1, elapsed):
    p = print
    p(f"Python overhead: tide.Store against libtide's C client (bench/drive/tide_drive) on the "
      f"same calls: same keys, values, batch, threads and buffers (memoryviews of one "
      f"pre-touched buffer per thread for tide.Store, malloc'd and touched for C), the two "
      f"alternated {args.runs} times at ~{args.seconds:g} s each; figures: median (range); "
      f"ratio: per alternation, then median (range); target ≥ 0.9×. Load average "
      f"{' '.join(load0)} at start, {' '.join(load1)} at end; {elapsed:.0f} s of runs.")
    p()
    p("| op | value | batch | threads | tide.Store GB/s | tide C GB/s | tide.Store / C | ≥ 0.9× |")
    p("|---|---|---|---|---|---|---|---|")
    ok_rows = {}
    for row in rows:
        op, size, batch, threads = row
        a = [rate(r, op) for r in results[(row, "tide-py")]]
        c = [rate(r, op) for r in results[(row, "tide-c")]]
        rs = [x / y for x, y in zip(a, c) if y > 0]
        f = "%.3f" if op == "exists" else "%.2f"
        ok = ok_rows[row] = bool(rs) and statistics.median(rs) >= 0.9
        p(f"| {op} | {'—' if op == 'exists' else fmt_size(size)} | {batch} | {threads} | "
          f"{med_range(a, f)} | {med_range(c, f)} | {med_range(rs)} | {'met' if ok else 'NOT met'}"
          + (f" ({tfig(statistics.median(rs), 0.9)})" if rs and tfig(statistics.median(rs), 0.9)
             != "%.2f" % statistics.median(rs) else "") + " |")
    io = [r for r in rows if r[0] in ("put", "get")]
    met = sum(1 for r in io if ok_rows.get(r))
    p()
    p(f"Target tide.Store ≥ 0.9× the C client on batch put/get: met on {met} of {len(io)} rows — "
      f"{'met' if met == len(io) else 'NOT met'} (exists rows shown, not part of the target).")
    errors = [f"{s} {op} x{b} {t}t: {sum(r['errors'] for r in results[((op, z, b, t), s)])}"
              for (op, z, b, t) in rows for s in ("tide-py", "tide-c")
              if sum(r["errors"] for r in results[((op, z, b, t), s)])]
    if errors:
        p("Errors (failed keys): " + "; ".join(errors))


def mooncake_version():
    try:
        import importlib.metadata as m

        return "mooncake-transfer-engine-non-cuda " + m.version("mooncake-transfer-engine-non-cuda")
    except Exception:
        return "mooncake, version unknown"


if __name__ == "__main__":
    main()
