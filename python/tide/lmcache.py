"""tide as a native L2 adapter of LMCache's multiprocess server (no RESP in between).

LMCache's ``native_plugin`` L2 adapter loads a connector class by module path and class
name and wraps it in its ``NativeConnectorL2Adapter``; the class must offer ``event_fd``,
``submit_batch_get/set/exists/delete``, ``drain_completions`` and ``close`` (the interface
of LMCache 0.5.6's own C++ connectors). ``TideConnector`` is that class over any tide URL
(``tide://``, ``unix://`` for a same-host tided, a cluster ``tide://h1,h2?replicas=2``,
``?token=`` for a tided with a token):

    lmcache server ... --l2-adapter '{"type": "native_plugin",
        "module_path": "tide.lmcache", "class_name": "TideConnector",
        "adapter_params": {"url": "unix:///run/tide/tided.sock"}}'

Each submit is queued to worker threads that run one batched libtide call (``get_many``,
``put_many``, ``exists_many``, ``remove_many``) and post ``(future_id, ok, error,
per_key_results)`` to the completion list, then wake the event fd. A load is a hit only
when the stored value has exactly the buffer's size (what LMCache's RESP client also
requires); a value tide finds damaged is a miss, never wrong bytes (tide checks every value
it returns), and is removed so that the next lookup misses too and the chunk can be
stored again; so is a stored value of another size than the buffer (tide keeps a key's
first value: left in place it would be missed for ever).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import queue
import threading
from typing import Any, Optional, Sequence

from . import errors
from .store import Store

__all__ = ["TideConnector", "LMCacheInterfaceError", "check_lmcache", "TESTED_LMCACHE"]

#: The LMCache release this adapter was written and tested against.
TESTED_LMCACHE = "0.5.6"

# The methods LMCache's native_plugin factory requires of a connector (0.5.6).
_REQUIRED = (
    "event_fd",
    "submit_batch_get",
    "submit_batch_set",
    "submit_batch_exists",
    "drain_completions",
    "close",
)
_ADAPTER_MODULE = "lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter"
_PLUGIN_MODULE = "lmcache.v1.distributed.l2_adapters.native_plugin_l2_adapter"

Completion = tuple[int, bool, str, Optional[list[bool]]]


class LMCacheInterfaceError(RuntimeError):
    """LMCache is missing, or its version lacks the native_plugin L2 interface."""


def check_lmcache() -> str:
    """The installed LMCache's version, once its native_plugin L2 interface is found.

    Raises LMCacheInterfaceError naming what is missing: the package, or the module or
    class of the interface (an LMCache older or newer than this adapter knows)."""
    try:
        version = importlib.metadata.version("lmcache")
    except importlib.metadata.PackageNotFoundError:
        raise LMCacheInterfaceError(
            "tide.lmcache: the lmcache package is not installed in this Python "
            f"(pip install lmcache=={TESTED_LMCACHE}; scripts/lmcache-env.sh makes a "
            "tested environment)"
        ) from None
    for mod, attr in ((_ADAPTER_MODULE, "NativeConnectorL2Adapter"), (_PLUGIN_MODULE, None)):
        try:
            m = importlib.import_module(mod)
        except ImportError as e:
            raise LMCacheInterfaceError(
                f"tide.lmcache: lmcache {version} has no {mod} ({e}); tide.lmcache "
                f"implements the native_plugin L2 interface of lmcache {TESTED_LMCACHE}"
            ) from e
        if attr is not None and not hasattr(m, attr):
            raise LMCacheInterfaceError(
                f"tide.lmcache: lmcache {version}'s {mod} has no {attr}; tide.lmcache "
                f"implements the native_plugin L2 interface of lmcache {TESTED_LMCACHE}"
            )
    return version


def _codes_error(what: str, keys: Sequence[str], codes: Sequence[int]) -> str:
    bad = [(k, c) for k, c in zip(keys, codes) if c < 0]
    if not bad:
        return ""
    k, c = bad[0]
    return f"tide: {what} of {len(bad)} of {len(keys)} keys failed (first {k!r}: {errors.errname(c)})"


class TideConnector:
    """LMCache native connector over a tide store URL (see the module's docstring).

    ``url``: any tide URL. ``num_workers``: threads running the batched calls (each
    batch is one pipelined libtide call; more workers overlap batches). ``check``: verify
    first that the installed LMCache has the interface this class implements."""

    def __init__(self, url: str, num_workers: int = 2, check: bool = True) -> None:
        if not isinstance(url, str) or not url:
            raise ValueError("tide.lmcache.TideConnector: url must be a tide store URL")
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(
                f"tide.lmcache.TideConnector: num_workers must be a positive integer, "
                f"not {num_workers!r}"
            )
        if check:
            check_lmcache()
        self._store = Store(url)
        # A pipe as the event fd: readable while completions wait (LMCache polls POLLIN).
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._lock = threading.Lock()
        self._next = 0
        self._done: list[Completion] = []
        self._queue: "queue.Queue[Optional[tuple[str, int, list[str], list[Any]]]]" = (
            queue.Queue()
        )
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"tide-lmcache-{i}", daemon=True)
            for i in range(num_workers)
        ]
        for t in self._threads:
            t.start()

    # -- the interface LMCache calls -------------------------------------------------

    def event_fd(self) -> int:
        return self._rfd

    def submit_batch_get(self, keys: Sequence[str], memoryviews: list[Any]) -> int:
        if len(keys) != len(memoryviews):
            raise ValueError(
                f"tide.lmcache: submit_batch_get got {len(keys)} keys and "
                f"{len(memoryviews)} buffers"
            )
        return self._submit("get", keys, memoryviews)

    def submit_batch_set(self, keys: Sequence[str], memoryviews: list[Any]) -> int:
        if len(keys) != len(memoryviews):
            raise ValueError(
                f"tide.lmcache: submit_batch_set got {len(keys)} keys and "
                f"{len(memoryviews)} buffers"
            )
        return self._submit("set", keys, memoryviews)

    def submit_batch_exists(self, keys: Sequence[str]) -> int:
        return self._submit("exists", keys, [])

    def submit_batch_delete(self, keys: Sequence[str]) -> int:
        return self._submit("delete", keys, [])

    def drain_completions(self) -> list[Completion]:
        try:
            while os.read(self._rfd, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            done, self._done = self._done, []
        return done

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join()
        self._store.close()
        os.close(self._rfd)
        os.close(self._wfd)

    # -- inside ------------------------------------------------------------------------

    def _submit(self, op: str, keys: Sequence[str], views: list[Any]) -> int:
        with self._lock:
            if self._closed:
                raise errors.ClosedError(errors.ECLOSED, "tide.lmcache: connector is closed")
            self._next += 1
            fid = self._next
        self._queue.put((op, fid, list(keys), list(views)))
        return fid

    def _run(self, op: str, keys: list[str], views: list[Any]) -> Completion:
        if op == "get":
            lens = self._store.get_many(keys, views)
            hits = [n >= 0 and n == len(v) for n, v in zip(lens, views)]
            # A value that fails its checksum is a miss (libtide reports it as not found).
            # LMCache loads only what its lookup found, and it would find a damaged value
            # again and again, and could never store the chunk anew (tide keeps a key's
            # first value): so a missed key that still exists is removed. (Rarely, that is
            # a value put between the two calls: removing it costs one more miss.)
            missed = [k for k, n in zip(keys, lens) if n == errors.ENOTFOUND]
            stale = []
            if missed:
                there = self._store.exists_many(missed)
                stale = [k for k, e in zip(missed, there) if e]
            # A stored value of another size than the chunk asks for (shorter, or longer:
            # EBUFSMALL) is a miss that would be found, and kept, for ever in the same way:
            # removed too.
            stale += [
                k
                for k, n, v in zip(keys, lens, views)
                if (n >= 0 and n != len(v)) or n == errors.EBUFSMALL
            ]
            if stale:
                self._store.remove_many(stale)
            return (0, True, "", hits)
        if op == "set":
            codes = self._store.put_many(keys, views)
            err = _codes_error("put", keys, codes)
            return (0, not err, err, None)
        if op == "exists":
            return (0, True, "", self._store.exists_many(keys))
        codes = self._store.remove_many(keys)
        return (0, True, "", [c == 0 for c in codes])

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            op, fid, keys, views = item
            try:
                _, ok, err, res = self._run(op, keys, views)
            except Exception as e:  # reported to LMCache as a failed batch
                ok, err, res = False, f"tide.lmcache: {op} failed: {e}", None
                if op != "set":
                    res = [False] * len(keys)
            with self._lock:
                self._done.append((fid, ok, err, res))
            try:
                os.write(self._wfd, b"x")
            except BlockingIOError:
                pass  # the pipe is full of wake-ups already: the fd stays readable
