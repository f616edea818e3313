"""tide.Store: a Pythonic handle on a libtide store.

    with tide.Store("mem://?capacity=1GiB") as s:
        s.put("block:0", b"...")
        data = s.get("block:0")               # bytes
        n = s.get_into("block:0", bytearray(4096))

Keys are ``str`` (encoded as UTF-8) or bytes-like; values are any object with the buffer
protocol and are passed to C without copies (see _buffers.py). A Store may be used by
many threads at once: ctypes releases the GIL around every C call and libtide handles are
thread-safe. ``close()`` waits for calls in flight on other threads, then frees the
handle; any later call raises ``ClosedError``.

When batch calls raise
----------------------
A batch call (``put_many``, ``get_many``, ``exists_many``, ``remove_many``,
``put_many_iov``, ``get_many_iov``, ``match_prefix``) raises only when the call as a whole
fails: an argument the binding refuses before calling C (mismatched lengths, a key that
is neither str nor bytes, a buffer that is not contiguous or not writable), or a negative
return from libtide (more than tide.BATCH_MAX keys, a closed store, a transport failure).
What happens to each key is returned, never raised, as a list in key order:

- ``put_many``, ``put_many_iov``, ``remove_many``: 0, or the key's negative code
  (compare with ``tide.ENOTFOUND``, ``tide.EKEYEMPTY``, ...);
- ``get_many(keys, bufs)``, ``get_many_iov``: the value's length, or the key's negative
  code (``tide.EBUFSMALL`` when the value does not fit, ``tide.ENOTFOUND``);
- ``exists_many``: booleans.

The one exception is ``get_many(keys)`` without buffers, which returns the values
themselves (bytes, or None for a missing key): having no place to report any other per-key
failure (an empty key, say), it raises that failure as the matching ``Error``.
"""

import contextlib
import ctypes
import errno
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Literal, NamedTuple, Optional, Union, overload

from . import _buffers, _lib, errors
from ._buffers import BufferLike

#: A key: str (encoded as UTF-8) or bytes-like.
KeyLike = Union[str, bytes, bytearray, memoryview]
#: What the batch helpers return: (tide_iov array, iovcnt array).
_IovArrays = tuple[Any, Any]
_IovBuilder = Callable[[_buffers.Pinned, int], _IovArrays]

_GET_RETRIES = 8  # size-then-read attempts before a value that keeps changing size wins


def key_bytes(key: KeyLike, what: str = "key") -> bytes:
    """A key as bytes: str is encoded as UTF-8, bytes-like objects are copied."""
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise errors.InvalidKey(
        -errno.EINVAL, f"{what}: expected str or bytes, got {type(key).__name__}"
    )


def _key_array(keys: Sequence[KeyLike]) -> tuple[Any, Any, list[bytes]]:
    """keys -> (tide_key array, the buffer its pointers point into, the keys as bytes).
    All keys are packed into one buffer, so the caller keeps just that alive."""
    kb = [
        k.encode("utf-8") if type(k) is str else key_bytes(k, f"key {i}")
        for i, k in enumerate(keys)
    ]
    lens = list(map(len, kb))
    blob = ctypes.create_string_buffer(b"".join(kb), sum(lens) + 1)
    base = ctypes.addressof(blob)
    # tide_key is {pointer, size_t}: fill it as a flat array of words, two per key (one
    # slice assignment each instead of two attribute stores per key).
    n = len(kb)
    words = (ctypes.c_size_t * (2 * n))()
    words[0::2] = [base + off - k for off, k in zip(itertools.accumulate(lens), lens)]
    words[1::2] = lens  # type: ignore[assignment]  # mypy 1.0's typeshed: List[c_size_t | int]
    arr = (_lib.Key * n).from_buffer(words)
    return arr, blob, kb


def _iov_array(
    pinned: _buffers.Pinned,
    groups: Sequence[Sequence[BufferLike]],
    writable: bool,
    n: int,
    what: str,
    noun: str = "buffer lists",
) -> _IovArrays:
    """Per-key lists of buffers -> (tide_iov array, iovcnt array), buffers pinned."""
    if len(groups) != n:
        raise errors.InvalidArgument(-errno.EINVAL, f"{what}: {n} keys but {len(groups)} {noun}")
    flat = []
    counts = (ctypes.c_size_t * n)()
    for i, group in enumerate(groups):
        if not isinstance(group, (list, tuple)):
            raise errors.InvalidArgument(
                -errno.EINVAL,
                f"{what}: key {i}: expected a list of buffers, got {type(group).__name__}",
            )
        counts[i] = len(group)
        for j, buf in enumerate(group):
            flat.append(pinned.add(buf, writable, f"{what}: buffer {j} of key {i}"))
    # never a zero-length array: C wants non-NULL. tide_iov is {pointer, size_t}: filled
    # as a flat array of words (see _key_array).
    words = (ctypes.c_size_t * (2 * max(1, len(flat))))()
    words[: 2 * len(flat)] = list(itertools.chain.from_iterable(flat))
    return (_lib.Iov * max(1, len(flat))).from_buffer(words), counts


def _one_iov_array(
    pinned: _buffers.Pinned,
    bufs: Iterable[BufferLike],
    writable: bool,
    n: int,
    what: str,
    noun: str,
) -> _IovArrays:
    """One buffer per key -> (tide_iov array, None: iovcnt NULL means one entry a key).
    The common case of put_many/get_many, without building a list per key."""
    blist = list(bufs)
    if len(blist) != n:
        raise errors.InvalidArgument(-errno.EINVAL, f"{what}: {n} keys but {len(blist)} {noun}")
    try:
        flat = pinned.add_words(blist, writable)
    except errors.InvalidBuffer:
        for i, buf in enumerate(blist):  # name the culprit as _iov_array does
            _buffers.view(buf, writable, f"{what}: buffer 0 of key {i}")
        raise
    words = (ctypes.c_size_t * (2 * max(1, n)))()
    words[: 2 * n] = flat  # type: ignore[assignment]  # as above
    return (_lib.Iov * max(1, n)).from_buffer(words), None


def _raw_iov_array(
    ptr_lists: Iterable[Iterable[int]], size_lists: Iterable[Iterable[int]], n: int, what: str
) -> _IovArrays:
    """Per-key lists of raw addresses and sizes -> (tide_iov array, iovcnt array)."""
    plists, slists = list(ptr_lists), list(size_lists)
    if len(plists) != n or len(slists) != n:
        raise errors.InvalidArgument(
            -errno.EINVAL,
            f"{what}: {n} keys but {len(plists)} pointer lists and {len(slists)} "
            f"size lists",
        )
    flat = []
    counts = (ctypes.c_size_t * n)()
    for i, (praw, sraw) in enumerate(zip(plists, slists)):
        ptrs, sizes = list(praw), list(sraw)
        if len(ptrs) != len(sizes):
            raise errors.InvalidArgument(
                -errno.EINVAL, f"{what}: key {i}: {len(ptrs)} pointers but {len(sizes)} sizes"
            )
        for j, (p, size) in enumerate(zip(ptrs, sizes)):
            if not isinstance(p, int) or not isinstance(size, int) or size < 0 or (
                p == 0 and size
            ):
                raise errors.InvalidArgument(
                    -errno.EINVAL,
                    f"{what}: key {i} piece {j}: bad address/size ({p!r}, {size!r})",
                )
            flat.append((p, size))
        counts[i] = len(ptrs)
    words = (ctypes.c_size_t * (2 * max(1, len(flat))))()
    words[: 2 * len(flat)] = list(itertools.chain.from_iterable(flat))
    return (_lib.Iov * max(1, len(flat))).from_buffer(words), counts


class StoreEvent(NamedTuple):
    """One departure (tide_event): ``kind`` is DEPARTURE_REMOVED, DEPARTURE_EVICTED,
    DEPARTURE_DROPPED or DEPARTURE_CLEARED (then ``key`` is empty)."""

    seq: int
    kind: int
    key: bytes


DEPARTURE_REMOVED, DEPARTURE_EVICTED, DEPARTURE_DROPPED, DEPARTURE_CLEARED = 1, 2, 3, 4


class Store:
    """A libtide store opened from a URL (``None`` or ``""`` means ``"mem://"``).

    Raises ``ConfigError`` for an unknown scheme, a malformed URL or a bad option, with
    libtide's message.
    """

    def __init__(self, url: Optional[str] = None) -> None:
        self._lib = _lib.lib()
        self.url = url or "mem://"
        self._cv = threading.Condition()
        self._active = 0
        self._closed = True  # until the open succeeds, so __del__ has nothing to do
        handle = _lib.StorePtr()
        rc = self._lib.tide_open(url.encode("utf-8") if url else None, ctypes.byref(handle))
        if rc < 0:
            raise errors.make_error(rc, errors.last_message(None))
        self._h: Optional[Any] = handle  # None once closed
        self._closed = False

    # -- lifetime ------------------------------------------------------------------------

    def _enter(self) -> Any:
        """Count a call in flight and return the handle; ClosedError once closed."""
        with self._cv:
            if self._closed:
                raise errors.ClosedError(errors.ECLOSED, f"store {self.url} is closed")
            self._active += 1
            return self._h

    def _leave(self) -> None:
        with self._cv:
            self._active -= 1
            if self._active == 0:
                self._cv.notify_all()

    @contextlib.contextmanager
    def borrowed_handle(self) -> Iterator[Any]:
        """The C handle (a ``tide_store *``) for one call into libtide made elsewhere, as
        ``with store.borrowed_handle() as h: lib.tide_x(h, ...)``: the call counts as in
        flight, so close() waits for it, and the handle must not be kept past the block.
        Raises ClosedError once closed. For code that passes a Store to libtide (the vLLM
        connector shares one through tide_connector_create_with_store)."""
        h = self._enter()
        try:
            yield h
        finally:
            self._leave()

    def close(self) -> None:
        """Wait for calls in flight, then free the store. Closing twice is harmless."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            while self._active:
                self._cv.wait()
            handle, self._h = self._h, None
        self._lib.tide_close(handle)

    @property
    def closed(self) -> bool:
        """True once close() has been called."""
        return self._closed

    def __enter__(self) -> "Store":
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Literal[False]:
        self.close()
        return False

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: ctypes may already be gone
            pass

    def __repr__(self) -> str:
        return f"<tide.Store {errors.redact(self.url)!r}{' closed' if self._closed else ''}>"

    def _error(self, rc: int, handle: Any, **extra: Any) -> errors.Error:
        return errors.make_error(rc, errors.last_message(handle), **extra)

    def _checked(self, fn: Callable[..., int], *args: Any) -> int:
        """fn(handle, *args), a libtide call, as one call in flight; a negative return is
        raised as its error (with the handle's message), any other returned."""
        h = self._enter()
        try:
            rc = int(fn(h, *args))
            if rc < 0:
                raise self._error(rc, h)
            return rc
        finally:
            self._leave()

    # -- single keys ---------------------------------------------------------------------

    def put(self, key: KeyLike, value: BufferLike) -> None:
        """Store value (any buffer) under key. A key that already exists keeps its first
        value and the call succeeds. Raises InvalidKey, InvalidValue, NoSpace, ..."""
        k = key_bytes(key)
        h = self._enter()
        try:
            with _buffers.Pinned() as pin:
                addr, n = pin.add(value, False, "value")
                rc = self._lib.tide_put(h, k, len(k), addr, n)
            if rc < 0:
                raise self._error(rc, h)
        finally:
            self._leave()

    def _get(self, h: Any, k: bytes, addr: Optional[int], cap: int) -> tuple[int, int]:
        """One tide_get: (rc, value length or size needed)."""
        vlen = ctypes.c_size_t(0)
        rc = self._lib.tide_get(h, k, len(k), addr, cap, ctypes.byref(vlen))
        return rc, int(vlen.value)

    def size(self, key: KeyLike) -> int:
        """The length of key's value. Raises NotFound."""
        k = key_bytes(key)
        h = self._enter()
        try:
            rc, n = self._get(h, k, None, 0)
            if rc < 0 and rc != errors.EBUFSMALL:
                raise self._error(rc, h)
            return n
        finally:
            self._leave()

    def get(self, key: KeyLike) -> bytes:
        """key's value as bytes. Raises NotFound when absent."""
        k = key_bytes(key)
        h = self._enter()
        try:
            rc, need = self._get(h, k, None, 0)
            if rc == 0:
                return b""  # a backend that allows empty values
            for _ in range(_GET_RETRIES):
                if rc != errors.EBUFSMALL:
                    break
                buf = ctypes.create_string_buffer(need)
                rc, n = self._get(h, k, ctypes.addressof(buf), need)
                if rc == 0:
                    return bytes(buf.raw[:n])
                need = n  # replaced by a larger value meanwhile: try again
            raise self._error(rc, h)
        finally:
            self._leave()

    def get_into(self, key: KeyLike, buf: BufferLike) -> int:
        """Read key's value into buf (any writable C-contiguous buffer); returns its
        length. Raises NotFound, or BufferTooSmall whose ``needed`` is the value's size."""
        k = key_bytes(key)
        h = self._enter()
        try:
            with _buffers.Pinned() as pin:
                addr, cap = pin.add(buf, True, "buffer")
                rc, n = self._get(h, k, addr, cap)
            if rc < 0:
                raise self._error(rc, h, needed=n if rc == errors.EBUFSMALL else None)
            return n
        finally:
            self._leave()

    def exists(self, key: KeyLike) -> bool:
        """True if key is stored."""
        k = key_bytes(key)
        return self._checked(self._lib.tide_exists, k, len(k)) == 1

    def remove(self, key: KeyLike) -> bool:
        """Remove key: True if it was removed, False if it was not there."""
        k = key_bytes(key)
        h = self._enter()
        try:
            rc = self._lib.tide_remove(h, k, len(k))
            if rc == errors.ENOTFOUND:
                return False
            if rc < 0:
                raise self._error(rc, h)
            return True
        finally:
            self._leave()

    __contains__ = exists
    __getitem__ = get
    __setitem__ = put

    def __delitem__(self, key: KeyLike) -> None:
        if not self.remove(key):
            raise errors.NotFound(errors.ENOTFOUND, f"key {key!r} not found")

    # -- batches -------------------------------------------------------------------------

    def put_many(self, keys: Iterable[KeyLike], values: Iterable[BufferLike]) -> list[int]:
        """Store values[i] under keys[i]; returns per-key codes (0 = stored or already
        present). See "When batch calls raise" above."""
        return self._put_many(
            keys, lambda pin, n: _one_iov_array(pin, values, False, n, "put_many", "values")
        )

    def put_many_iov(
        self, keys: Iterable[KeyLike], buffer_lists: Iterable[Sequence[BufferLike]]
    ) -> list[int]:
        """Store, under keys[i], the concatenation of the buffers in buffer_lists[i] (a
        gather list: e.g. a block's K page and V page). Returns per-key codes."""
        lists = list(buffer_lists)
        return self._put_many(
            keys, lambda pin, n: _iov_array(pin, lists, False, n, "put_many_iov")
        )

    @overload
    def get_many(self, keys: Iterable[KeyLike], bufs: None = None) -> list[Optional[bytes]]: ...

    @overload
    def get_many(self, keys: Iterable[KeyLike], bufs: Iterable[BufferLike]) -> list[int]: ...

    def get_many(
        self, keys: Iterable[KeyLike], bufs: Optional[Iterable[BufferLike]] = None
    ) -> Union[list[int], list[Optional[bytes]]]:
        """With bufs: read keys[i] into bufs[i]; returns per key the value's length or a
        negative code. Without: returns the values as bytes, None for missing keys."""
        klist = list(keys)
        if bufs is None:
            return self._get_many_bytes(klist)
        into: Iterable[BufferLike] = bufs  # not None, also inside the lambda
        codes, lens = self._get_many_raw(
            klist, lambda pin, n: _one_iov_array(pin, into, True, n, "get_many", "buffers")
        )
        if not any(codes):
            return lens
        return [n if rc == 0 else rc for rc, n in zip(codes, lens)]

    def get_many_iov(
        self, keys: Iterable[KeyLike], buffer_lists: Iterable[Sequence[BufferLike]]
    ) -> list[int]:
        """Read keys[i] across the buffers of buffer_lists[i] in order (a scatter list:
        e.g. numpy views of one block in the K plane and the V plane). Returns per key
        the value's length, or a negative code (tide.EBUFSMALL when the value is longer
        than the list's total size, tide.ENOTFOUND)."""
        lists = list(buffer_lists)
        codes, lens = self._get_many_raw(
            list(keys), lambda pin, n: _iov_array(pin, lists, True, n, "get_many_iov")
        )
        return [n if rc == 0 else rc for rc, n in zip(codes, lens)]

    def put_many_ptrs(
        self,
        keys: Iterable[KeyLike],
        ptr_lists: Iterable[Iterable[int]],
        size_lists: Iterable[Iterable[int]],
    ) -> list[int]:
        """put_many_iov with raw addresses: key i's value is the concatenation of
        size_lists[i][j] bytes at ptr_lists[i][j]. For memory Python cannot describe as a
        buffer (a torch tensor's data_ptr(), memory registered elsewhere). The caller
        vouches for every address: nothing here can check that it is valid."""
        return self._put_many(
            keys, lambda pin, n: _raw_iov_array(ptr_lists, size_lists, n, "put_many_ptrs")
        )

    def get_many_ptrs(
        self,
        keys: Iterable[KeyLike],
        ptr_lists: Iterable[Iterable[int]],
        size_lists: Iterable[Iterable[int]],
    ) -> list[int]:
        """get_many_iov with raw addresses (see put_many_ptrs); the same per-key results."""
        codes, lens = self._get_many_raw(
            list(keys), lambda pin, n: _raw_iov_array(ptr_lists, size_lists, n, "get_many_ptrs")
        )
        return [n if rc == 0 else rc for rc, n in zip(codes, lens)]

    def _put_many(self, keys: Iterable[KeyLike], build: _IovBuilder) -> list[int]:
        """tide_put_many with the iov that build(pinned, n) makes: the results as a list."""
        klist = list(keys)
        karr, _blob, _ = _key_array(klist)
        n = len(klist)
        results = (ctypes.c_int * n)()
        h = self._enter()
        try:
            with _buffers.Pinned() as pin:
                iov, counts = build(pin, n)
                rc = self._lib.tide_put_many(h, karr, n, iov, counts, results)
            if rc < 0:
                raise self._error(rc, h)
            return list(results)
        finally:
            self._leave()

    def _get_many_raw(
        self, keys: Sequence[KeyLike], build: _IovBuilder
    ) -> tuple[list[int], list[int]]:
        """tide_get_many with the iov that build(pinned, n) makes: (results, vlens)."""
        karr, _blob, _ = _key_array(keys)
        n = len(keys)
        results = (ctypes.c_int * n)()
        vlens = (ctypes.c_size_t * n)()
        h = self._enter()
        try:
            with _buffers.Pinned() as pin:
                iov, counts = build(pin, n)
                rc = self._lib.tide_get_many(h, karr, n, iov, counts, results, vlens)
            if rc < 0:
                raise self._error(rc, h)
            return list(results), list(vlens)
        finally:
            self._leave()

    def _get_many_bytes(self, keys: Sequence[KeyLike]) -> list[Optional[bytes]]:
        """Ask every size in one batch (empty scatter lists), then read the values found
        in a second; values replaced by larger ones meanwhile are asked again."""
        out: list[Optional[bytes]] = [None] * len(keys)
        pending = list(range(len(keys)))
        sizes: dict[int, int] = {}
        for _ in range(_GET_RETRIES):
            if not pending:
                return out
            sub = [keys[i] for i in pending]
            bufs: Optional[list[bytearray]]
            lists: list[list[bytearray]]
            if sizes:
                bufs = [bytearray(sizes[i]) for i in pending]
                lists = [[b] for b in bufs]
            else:
                bufs = None
                lists = [[] for _ in sub]  # empty scatter lists: sizes only
            codes, lens = self._get_many_raw(
                sub, lambda pin, n: _iov_array(pin, lists, True, n, "get_many")
            )
            retry = []
            for j, i in enumerate(pending):
                rc = codes[j]
                if rc == 0:
                    out[i] = bytes(memoryview(bufs[j])[: lens[j]]) if bufs else b""
                elif rc == errors.EBUFSMALL:
                    sizes[i] = lens[j]
                    retry.append(i)
                elif rc != errors.ENOTFOUND and rc != 0:
                    raise errors.make_error(
                        rc, f"get_many: key {i} ({keys[i]!r}): {errors.strerror(rc)}"
                    )
            pending = retry
        raise errors.Busy(
            errors.EBUSY, f"get_many: values kept changing size over {_GET_RETRIES} attempts"
        )

    def exists_many(self, keys: Iterable[KeyLike]) -> list[bool]:
        """Per key, True if it is stored."""
        klist = list(keys)
        karr, _blob, _ = _key_array(klist)
        n = len(klist)
        present = (ctypes.c_uint8 * n)()
        self._checked(self._lib.tide_exists_many, karr, n, present)
        return [bool(p) for p in present]

    def remove_many(self, keys: Iterable[KeyLike]) -> list[int]:
        """Remove keys; per key 0 (removed) or tide.ENOTFOUND (or a key error)."""
        klist = list(keys)
        karr, _blob, _ = _key_array(klist)
        n = len(klist)
        results = (ctypes.c_int * n)()
        self._checked(self._lib.tide_remove_many, karr, n, results)
        return list(results)

    def match_prefix(self, keys: Iterable[KeyLike]) -> int:
        """How many leading keys are all stored: the longest cached prefix of a chain of
        block keys."""
        klist = list(keys)
        karr, _blob, _ = _key_array(klist)
        return self._checked(self._lib.tide_match_prefix, karr, len(klist))

    # -- the whole store -----------------------------------------------------------------

    def clear(self) -> None:
        """Remove every object. Raises when an SSD tier cannot record the clear (the objects
        are gone from the running store, but a restart could bring them back)."""
        self._checked(self._lib.tide_clear)

    def events(self, since: int, max_events: int = 1024) -> "tuple[list[StoreEvent], int, int]":
        """Departures numbered `since` on (tide_events_read): ``(events, next, lost)``. Pass
        ``next`` as `since` next time; ``lost`` > 0 says the store no longer holds some of the
        events asked for (the caller fell behind its ring, or the store restarted), so their
        departures are unknown. ``since`` 0 starts at the current end."""
        n = max(1, min(int(max_events), 65536))
        buf = (_lib.Event * n)()
        nxt = ctypes.c_uint64(0)
        lost = ctypes.c_uint64(0)
        rc = self._checked(
            self._lib.tide_events_read, int(since), buf, n, ctypes.byref(nxt), ctypes.byref(lost)
        )
        out = [StoreEvent(int(e.seq), int(e.kind), bytes(e.key[: e.klen])) for e in buf[:rc]]
        return out, int(nxt.value), int(lost.value)

    def stats(self) -> dict[str, int]:
        """The store's figures as a dict of ints (the fields of tide_stats)."""
        st = _lib.Stats()
        self._checked(self._lib.tide_stats_get, ctypes.byref(st), ctypes.sizeof(st))
        return {name: getattr(st, name) for name in _lib.STATS_FIELDS}
