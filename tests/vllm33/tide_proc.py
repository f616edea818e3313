"""A tided for the vLLM 0.33 tests of the tier and the events: build/tide serve (or
$TIDE_BIN) on a free loopback port, stopped by its pid."""

import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_tided(tmp, capacity="64MiB"):
    """(proc, port) of a tided serving `capacity` bytes; the caller stops proc."""
    binary = os.environ.get("TIDE_BIN") or os.path.join(ROOT, "build", "tide")
    ready, log = tmp / "ready", tmp / "tided.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen(
            [binary, "serve", "--port", "0", "--metrics-port", "0", "--capacity", capacity,
             "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
    deadline = time.monotonic() + 15
    while not (ready.exists() and ready.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"tided did not start: {log.read_text()}")
        time.sleep(0.02)
    return proc, int(ready.read_text().split()[0])


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
