"""Which tide store a Mooncake setup() means: sizes and master addresses as Mooncake's config
takes them, resolved to a tide URL (``resolve_url``), and the store opened and probed
(``open_checked``). Failures raise SetupError, whose code setup() returns."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Tuple

from .. import errors
from ..store import Store
from .codes import INVALID_PARAMS, RPC_FAIL

DEFAULT_MASTER = "127.0.0.1:50051"  # Mooncake's default master_server_addr
_SCHEMES = ("tide://", "unix://", "etcd://", "mem://")  # addresses that are tide URLs

class SetupError(Exception):
    """Why setup() failed; its code is the Mooncake code setup() returns."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(errors.redact(message))  # URLs in it never show their token
        self.code = code


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}


def parse_size(value: Any, what: str) -> int:
    """A size as Mooncake's config accepts it: an int, or "16MB", "16 mb", "2g", "1024".
    Raises SetupError (INVALID_PARAMS) for anything else (a percentage, a negative)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise SetupError(INVALID_PARAMS, f"setup: {what} {value!r} is negative")
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise SetupError(INVALID_PARAMS, f"setup: {what} {value!r} is not a size "
                         f"(bytes, or a number with KB/MB/GB/TB)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def has_port(host: str) -> bool:
    """Mooncake's hasExplicitPort: "[v6]:port" and "name:port" name one, a bare IPv6
    address does not."""
    if host.startswith("["):
        return "]:" in host
    return host.count(":") == 1


def master_to_url(addr: str) -> str:
    """A Mooncake master address as a tide URL: a tide URL stays as it is; a master
    address ``host:port`` (or ``h1:p1,h2:p2``, or ``;``-separated) names the tided
    (cluster) serving there."""
    addr = addr.strip()
    if addr.startswith(_SCHEMES):
        return addr
    if addr.startswith("etcd:") and not addr.startswith("etcd://"):
        return "etcd://" + addr[len("etcd:"):].lstrip("/")
    nodes = [a.strip() for a in re.split(r"[,;]", addr) if a.strip()]
    for a in nodes:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise SetupError(
                INVALID_PARAMS,
                f"master address {addr!r}: {a!r} is not host:port (or give a tide URL: "
                f"tide://host:port, unix:///path)",
            )
    if not nodes:
        raise SetupError(INVALID_PARAMS, "master address is empty")
    return "tide://" + ",".join(nodes)


def _config_file_master() -> Tuple[str, str]:
    """(master address, where it came from) from $MOONCAKE_CONFIG_PATH, or ("", "")."""
    path = os.environ.get("MOONCAKE_CONFIG_PATH")
    if not path:
        return "", ""
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise SetupError(INVALID_PARAMS, f"MOONCAKE_CONFIG_PATH={path}: {e}") from e
    addr = cfg.get("master_server_address") or cfg.get("master_server_addr") or ""
    return str(addr), f"MOONCAKE_CONFIG_PATH={path}"


def resolve_url(master_server_addr: str = "") -> Tuple[str, str]:
    """(tide URL, the setting it came from) for a setup() call. Order: $TIDE_URL, the
    master address given, $MOONCAKE_MASTER, $MOONCAKE_CONFIG_PATH's
    master_server_address. Raises SetupError when none is set or it is malformed."""
    env = os.environ.get("TIDE_URL")
    if env:
        return env, "TIDE_URL"
    if master_server_addr:
        return master_to_url(master_server_addr), f"master_server_addr {master_server_addr!r}"
    env = os.environ.get("MOONCAKE_MASTER")
    if env:
        return master_to_url(env), f"MOONCAKE_MASTER={env}"
    addr, where = _config_file_master()
    if addr:
        return master_to_url(addr), where
    raise SetupError(
        INVALID_PARAMS,
        "setup: no store address: pass master_server_addr (host:port of a tided, or a "
        "tide URL), or set TIDE_URL, MOONCAKE_MASTER or MOONCAKE_CONFIG_PATH",
    )


def open_checked(url: str, where: str) -> Store:
    """Open url and make sure a tided answers (one exists() round trip)."""
    try:
        store = Store(url)
    except errors.Error as e:
        code = INVALID_PARAMS if isinstance(e, errors.ConfigError) else RPC_FAIL
        raise SetupError(code, f"setup: no tide store at {url} (from {where}): {e}") from e
    if not url.startswith("mem://"):
        try:
            store.exists("__tide_mooncake_probe__")
        except errors.Error as e:
            store.close()
            raise SetupError(RPC_FAIL, f"setup: no tided answers at {url} (from {where}): {e}") from e
    return store
