"""No token given to the binding is ever shown: exception messages (from libtide and from
Python), Store reprs and Mooncake set-up errors mask it as ``***`` (tide_redact)."""

import socket

import pytest

import tide
from tide import mooncake as mc

TOKEN = "tok-Py5cR8wQ2nLs7Vd"


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_errors_and_reprs_mask_the_token(monkeypatch):
    monkeypatch.delenv("TIDE_AUTH_TOKEN", raising=False)
    url = f"tide://127.0.0.1:{_dead_port()}?timeout_ms=300&token={TOKEN}"
    with pytest.raises(tide.Error) as e:
        tide.Store(url)
    for text in (str(e.value), repr(e.value), e.value.message):
        assert TOKEN not in text
    with pytest.raises(tide.Error) as e:
        tide.Store(f"nosuch://user:pw-Secret77@h?token={TOKEN}")
    assert TOKEN not in str(e.value) and "pw-Secret77" not in str(e.value)
    assert "token=***" in str(e.value) and "user:***@" in str(e.value)
    # A Store's repr, open and closed, and the error a closed store raises.
    s = tide.Store("mem://?capacity=1MiB&verify=1")
    s.url = f"mem://?capacity=1MiB&token={TOKEN}"  # as a tide:// URL would be kept
    assert TOKEN not in repr(s) and "token=***" in repr(s)
    s.close()
    assert TOKEN not in repr(s)
    with pytest.raises(tide.ClosedError) as e:
        s.get("k")
    assert TOKEN not in str(e.value) and "token=***" in str(e.value)
    # An exception made by Python code around a URL.
    err = tide.errors.make_error(tide.EURL, f"cannot use tide://h:1?token={TOKEN}")
    assert TOKEN not in str(err) and TOKEN not in repr(err)


def test_the_environment_token_is_masked(monkeypatch):
    monkeypatch.setenv("TIDE_AUTH_TOKEN", TOKEN)
    assert tide.errors.redact(f"HELLO with {TOKEN} refused") == "HELLO with *** refused"


def test_mooncake_setup_errors_mask_the_token(monkeypatch):
    for v in ("TIDE_URL", "MOONCAKE_MASTER", "MOONCAKE_CONFIG_PATH", "TIDE_AUTH_TOKEN"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("TIDE_URL", f"tide://127.0.0.1:{_dead_port()}?timeout_ms=300&token={TOKEN}")
    c = mc.MooncakeDistributedStore()
    assert c.setup("localhost", "", 1 << 20, 1 << 20, "tcp", "", "") != 0
    assert TOKEN not in str(c.last_error) and "token=***" in str(c.last_error)
