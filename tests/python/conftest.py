"""pytest set-up for the Python binding's tests.

Makes ``import tide`` find python/tide in this tree when PYTHONPATH does not already
(``make python-test`` sets PYTHONPATH=python and TIDE_LIB=build/libtide.so), unless
TIDE_TEST_INSTALLED=1: then the tests run against the tide that pip installed (into the
interpreter running pytest; scripts/test-install.sh does that) and refuse to start if
``import tide`` finds this tree's copy instead. It also gives
each test an empty store on each backend (mem://, and tide:// against a tided started for
the session from build/tide or $TIDE_BIN).
"""

import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "include", "tide.h")
INSTALLED = os.environ.get("TIDE_TEST_INSTALLED") == "1"
if not INSTALLED and os.path.join(ROOT, "python") not in [os.path.abspath(p) for p in sys.path]:
    sys.path.insert(0, os.path.join(ROOT, "python"))

import tide  # noqa: E402

#: The directory of the tide package under test (python/tide here, or site-packages/tide).
PKG_DIR = os.path.dirname(os.path.abspath(tide.__file__))
if INSTALLED and PKG_DIR.startswith(os.path.join(ROOT, "python") + os.sep):
    raise pytest.UsageError(
        f"TIDE_TEST_INSTALLED=1 but import tide found the source tree's {PKG_DIR}: install "
        f"the package (pip install ./python) and run pytest with that interpreter, without "
        f"python/ on PYTHONPATH"
    )


@pytest.fixture(scope="session")
def tided(tmp_path_factory):
    """A tided (build/tide serve, or $TIDE_BIN serve) on a free loopback port for the
    whole session; yields its port and is stopped at the end."""
    binary = os.environ.get("TIDE_BIN") or os.path.join(ROOT, "build", "tide")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"tided binary {binary} not found: run make, or set TIDE_BIN")
    d = tmp_path_factory.mktemp("tided")
    ready, log = d / "ready", d / "tided.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen(
            [binary, "serve", "--port", "0", "--metrics-port", "0", "--capacity", "64MiB",
             "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
        )
    try:
        deadline = time.monotonic() + 15
        while not (ready.exists() and ready.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"tided did not start (exit {proc.poll()}): {log.read_text()}")
            time.sleep(0.02)
        yield int(ready.read_text().split()[0])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(params=["mem", "tide"])
def store(request):
    """An empty store on each backend: a 64 MiB mem:// store, and a tide:// client of the
    session's tided (cleared first, since the server outlives one test). Closed after."""
    if request.param == "mem":
        url = "mem://?capacity=64MiB"
    else:
        url = f"tide://127.0.0.1:{request.getfixturevalue('tided')}"
    s = tide.Store(url)
    try:
        s.clear()
        yield s
    finally:
        s.close()
