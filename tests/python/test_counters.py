"""The Python binding's stats are the operations that were done: one scripted sequence
(puts, a duplicate, a batch put, reads that size their buffer first, misses, a batch get,
removes, exists, an error) on each backend (mem:// and tide://), its figures checked in
Store.stats() and, for tide://, in `tide stat --json` too. A size answer (a value asked
for its size, or a buffer too small) is no get: one value read is one hit, however the
binding sized its buffer (Store.get asks the size first)."""

import json
import os
import subprocess

import pytest

import tide

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: What the sequence below does to one store.
EXPECT = {"puts": 6, "put_dups": 1, "gets": 4, "misses": 3, "bytes_in": 6600,
          "bytes_out": 5700}


def run_sequence(store: tide.Store) -> None:
    store.put("k1", bytes(100))
    store.put("k2", b"y" * 5000)
    store.put("k3", bytes(300))
    store.put("k1", bytes(50))  # a duplicate: the first value stays
    store.put_many(["b1", "b2", "b3"], [bytes(200), bytes(400), bytes(600)])
    assert store.get("k1") == bytes(100)  # asks the size, then reads: one hit
    assert store.size("k2") == 5000  # a size only: no get
    with pytest.raises(tide.BufferTooSmall):  # a buffer too small: a size answer, no get
        store.get_into("k2", bytearray(10))
    assert store.get_into("k2", bytearray(5000)) == 5000  # a hit
    with pytest.raises(tide.NotFound):
        store.get("none1")  # a miss
    assert store.get_many(["b1", "b2", "none2"]) == [bytes(200), bytes(400), None]  # 2 + 1
    assert store.remove("k3") is True
    assert store.remove("k3") is False
    with pytest.raises(tide.NotFound):
        store.get("k3")  # a miss
    assert store.exists("k1") and not store.exists("none1")
    with pytest.raises(tide.Error):  # an error: over the 64 MiB store
        store.put("big", bytes(65 << 20))


def test_stats_follow_the_sequence(store: tide.Store) -> None:
    before = store.stats()
    run_sequence(store)
    after = store.stats()
    delta = {k: after[k] - before[k] for k in EXPECT}
    assert delta == EXPECT
    assert after["objects"] == 5


def test_tide_stat_agrees(tided: int) -> None:
    url = f"tide://127.0.0.1:{tided}"
    binary = os.environ.get("TIDE_BIN") or os.path.join(ROOT, "build", "tide")

    def stat() -> dict[str, int]:
        out = subprocess.run([binary, "stat", url, "--json"], check=True, capture_output=True,
                             text=True, timeout=20).stdout
        return dict(json.loads(out))

    with tide.Store(url) as s:
        s.clear()
        before, py_before = stat(), s.stats()
        run_sequence(s)
        after, py_after = stat(), s.stats()
    for k, want in EXPECT.items():
        assert after[k] - before[k] == want, k
        assert py_after[k] - py_before[k] == want, k
