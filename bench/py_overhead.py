"""py_overhead.py — what tide.Store adds to a batch call, measured without a network.

    PYTHONPATH=python /usr/bin/python3 bench/py_overhead.py [--size 4096] [--batch 64]

On an embedded mem:// store (no sockets, so the figures hold still on a loaded machine),
times tide.Store.get_many / put_many / exists_many of BATCH keys (memoryviews of one
buffer) against the same libtide call made through ctypes with the key and iov arrays
built once beforehand. The difference is the binding's own cost per call: building the
arrays, pinning the buffers, turning the results into lists. Each figure is the fastest of
7 passes of 2000 calls (the least disturbed by other processes), in microseconds a call.
Used by issue 18 (item 3); bench/mooncake.sh compares tide.Store with the C client over
tide://, where this cost is set against the network call.
"""

import argparse
import ctypes
import time

import tide
from tide import _buffers, store as _store


def per_call_us(fn, calls=2000, passes=7):
    best = float("inf")
    for _ in range(passes):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    n, size = a.batch, a.size
    s = tide.Store(f"mem://?capacity={max(64 << 20, 4 * n * size)}")
    keys = [f"ovh.{i}" for i in range(n)]
    buf = ctypes.create_string_buffer(n * size)
    ctypes.memset(buf, 0x5A, n * size)
    mv = memoryview(buf).cast("B")
    views = [mv[i * size : (i + 1) * size] for i in range(n)]
    s.put_many(keys, views)

    karr, _blob, _ = _store._key_array(keys)
    pin = _buffers.Pinned()
    if hasattr(_store, "_one_iov_array"):
        iov, cnt = _store._one_iov_array(pin, views, True, n, "get_many", "buffers")
    else:  # an older binding (before/after comparisons)
        iov, cnt = _store._iov_array(pin, [[v] for v in views], True, n, "get_many")
    res = (ctypes.c_int * n)()
    vlens = (ctypes.c_size_t * n)()
    present = (ctypes.c_uint8 * n)()
    lib, h = s._lib, s._h
    rows = [
        ("get_many", lambda: s.get_many(keys, views),
         lambda: lib.tide_get_many(h, karr, n, iov, cnt, res, vlens)),
        ("put_many", lambda: s.put_many(keys, views),
         lambda: lib.tide_put_many(h, karr, n, iov, cnt, res)),
        ("exists_many", lambda: s.exists_many(keys),
         lambda: lib.tide_exists_many(h, karr, n, present)),
    ]
    print(f"tide.Store on mem://, {n} keys of {size} bytes a call; us a call (fastest of 7 x 2000)")
    print()
    print("| call | tide.Store | bare ctypes call | binding's cost | per key |")
    print("|---|---|---|---|---|")
    for name, py, raw in rows:
        p, r = per_call_us(py), per_call_us(raw)
        print(f"| {name} | {p:.1f} | {r:.1f} | {p - r:.1f} | {(p - r) / n:.2f} |")
    pin.release()
    s.close()


if __name__ == "__main__":
    main()
