"""Fixtures of the LMCache tests (tests/lmcache, `make test-lmcache`): LMCache 0.5.6 in
.venv-lmcache (scripts/lmcache-env.sh), a real tided from build/tide started per test with
its RESP port, and Debian's redis-server as the reference the wire tests compare against.
Every process is started here and stopped by its pid; ports are free loopback ports.
"""

import os
import re
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("TIDE_LIB", os.path.join(BUILD, "libtide.so"))
os.environ.setdefault("TIDE_BIN", os.path.join(BUILD, "tide"))
os.environ.setdefault("LMCACHE_DISABLE_BANNER", "1")

TOKEN = "lmcache-test-token-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(proc, port, log, what):
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                raise RuntimeError(f"{what} did not start: {open(log).read()}")
            time.sleep(0.02)


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Tided:
    """A tided with a RESP port: .port (native), .resp (RESP), .url, .proc, .unix."""

    def __init__(self, tmp, token=False, unix=False, capacity="64MiB", name="tided"):
        self.resp = free_port()
        ready, self.log = tmp / f"{name}.ready", str(tmp / f"{name}.log")
        args = [os.environ["TIDE_BIN"], "serve", "--port", "0", "--metrics-port", "0",
                "--capacity", capacity, "--resp-port", str(self.resp),
                "--ready-file", str(ready)]
        self.token = TOKEN if token else None
        if token:
            tf = tmp / f"{name}.token"
            tf.write_text(TOKEN + "\n")
            args += ["--auth-token-file", str(tf)]
        self.unix = str(tmp / f"{name}.sock") if unix else None
        if unix:
            args += ["--unix", self.unix]
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=logf)
        deadline = time.monotonic() + 15
        while not (ready.exists() and ready.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                stop(self.proc)
                raise RuntimeError(f"tided did not start: {open(self.log).read()}")
            time.sleep(0.02)
        self.port = int(ready.read_text().split()[0])
        q = f"?token={TOKEN}" if token else ""
        self.url = f"tide://127.0.0.1:{self.port}{q}"
        self.unix_url = f"unix://{self.unix}{q}" if unix else None
        wait_port(self.proc, self.resp, self.log, "tided's RESP port")

    def corrupt(self, value):
        """Flip one byte of every copy of `value` in tided's memory (a damaged value, as
        RAM or a stray write would leave it); returns how many copies were hit."""
        return corrupt_process_memory(self.proc.pid, value)


def corrupt_process_memory(pid, value):
    needle = bytes(value[:4096])
    hits = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "r+b", 0) as mem:
        for line in maps:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) rw", line)
            if not m or "[vvar" in line or "[vsyscall" in line:
                continue
            lo, hi = int(m.group(1), 16), int(m.group(2), 16)
            for start in range(lo, hi, 64 << 20):
                n = min(64 << 20, hi - start)
                try:
                    mem.seek(start)
                    data = mem.read(n)
                except OSError:
                    continue
                at = data.find(needle)
                while at >= 0:
                    mem.seek(start + at + len(needle) // 2)
                    mem.write(bytes([data[at + len(needle) // 2] ^ 0xFF]))
                    hits += 1
                    at = data.find(needle, at + 1)
    return hits


@pytest.fixture
def tided(tmp_path):
    t = Tided(tmp_path)
    yield t
    stop(t.proc)


@pytest.fixture
def tided_token(tmp_path):
    t = Tided(tmp_path, token=True, name="tided-token")
    yield t
    stop(t.proc)


def start_redis(tmp, password=None):
    port = free_port()
    log = str(tmp / f"redis-{port}.log")
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(tmp)]
    if password:
        args += ["--requirepass", password]
    with open(log, "wb") as logf:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
    wait_port(proc, port, log, "redis-server")
    return proc, port


@pytest.fixture
def redis(tmp_path):
    proc, port = start_redis(tmp_path)
    yield port
    stop(proc)


@pytest.fixture
def redis_token(tmp_path):
    proc, port = start_redis(tmp_path, TOKEN)
    yield port
    stop(proc)
