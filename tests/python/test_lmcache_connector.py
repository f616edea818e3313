"""tide.lmcache.TideConnector without LMCache installed (check=False): a stored value of
another size than the chunk's buffer is a miss and is removed, so that the chunk can be
stored again (tide keeps a key's first value)."""

import os
import select
import time

from tide.lmcache import TideConnector


def _wait(conn, fid, timeout=10.0):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        select.select([conn.event_fd()], [], [], 0.5)
        for done in conn.drain_completions():
            if done[0] == fid:
                return done
    raise AssertionError(f"future {fid} did not complete within {timeout} s")


def test_wrong_size_value_is_removed_and_stored_again():
    conn = TideConnector("mem://?capacity=16MiB", num_workers=1, check=False)
    try:
        short, long_ = b"s" * 100, b"l" * 300
        _, ok, err, _ = _wait(
            conn, conn.submit_batch_set(["short", "long"], [memoryview(short), memoryview(long_)])
        )
        assert ok, err
        want = os.urandom(200)
        bufs = [bytearray(200), bytearray(200)]
        _, ok, _, hits = _wait(conn, conn.submit_batch_get(["short", "long"], bufs))
        assert ok and hits == [False, False]  # 100 and 300 bytes for a 200-byte chunk
        _, _, _, there = _wait(conn, conn.submit_batch_exists(["short", "long"]))
        assert there == [False, False], "a wrong-size value stayed: the chunk is stuck"
        _, ok, err, _ = _wait(
            conn, conn.submit_batch_set(["short", "long"], [memoryview(want), memoryview(want)])
        )
        assert ok, err
        bufs = [bytearray(200), bytearray(200)]
        _, ok, _, hits = _wait(conn, conn.submit_batch_get(["short", "long"], bufs))
        assert hits == [True, True]
        assert bufs[0] == want and bufs[1] == want
    finally:
        conn.close()
