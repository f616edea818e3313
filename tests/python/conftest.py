"""pytest set-up for the Python binding's tests.

Makes ``import tide`` find python/tide in this tree when PYTHONPATH does not already
(``make python-test`` sets PYTHONPATH=python and TIDE_LIB=build/libtide.so), and gives
each test a fresh embedded store.
"""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "include", "tide.h")
if os.path.join(ROOT, "python") not in [os.path.abspath(p) for p in sys.path]:
    sys.path.insert(0, os.path.join(ROOT, "python"))

import tide  # noqa: E402


@pytest.fixture
def store():
    """A 64 MiB mem:// store, closed after the test."""
    s = tide.Store("mem://?capacity=64MiB")
    try:
        yield s
    finally:
        s.close()
