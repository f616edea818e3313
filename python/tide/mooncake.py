"""A MooncakeDistributedStore look-alike over a tide store.

vLLM's MooncakeStoreConnector talks to ``mooncake.store.MooncakeDistributedStore``. This
module offers the same methods, arguments and integer return codes, implemented with a
``tide.Store``, so that connector (and other code written against Mooncake's Python API)
can run with tide underneath: put ``python/compat`` on PYTHONPATH (its ``mooncake.store``
re-exports this module), or import ``tide.mooncake`` directly.

Mapping:

- ``setup(local_hostname, metadata_server, global_segment_size, local_buffer_size,
  protocol, rdma_devices, master_server_addr, **kw)`` opens the tide store named by
  ``$TIDE_URL`` when set, else ``master_server_addr`` when it is a tide URL (``tide://``,
  ``mem://``), else an embedded ``mem://`` store of ``global_segment_size`` bytes (the
  memory this process contributes). The other arguments have no tide meaning and are
  accepted as they are.
- ``register_buffer(ptr, size)`` records a region. tide copies through the CPU and needs
  no registration, but every pointer given to the ``*_from``/``*_into`` calls must lie in
  a registered region, or that key fails with INVALID_PARAMS: a stale pointer into
  unregistered (perhaps freed) memory is refused instead of read or written.
- Return codes are Mooncake's (ErrorCode in mooncake-store/include/types.h): 0, bytes
  read, or a negative code. Out of space is NO_AVAILABLE_HANDLE (-200), which the vLLM
  connector treats as store pressure; a missing key is OBJECT_NOT_FOUND (-704). Nothing
  raises: the tide error behind the last failure is kept in ``last_error``.
- A put of a key that exists returns 0 (tide keeps the first value: keys are content
  addresses). ``ReplicateConfig`` is accepted and ignored: tide has no replicas to place.
"""

import bisect
import errno
import os
import threading

from . import errors
from .store import Store

OK = 0
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
NO_AVAILABLE_HANDLE = -200
INVALID_KEY = -400
INVALID_PARAMS = -600
REPLICA_IS_NOT_READY = -703
OBJECT_NOT_FOUND = -704
TRANSFER_FAIL = -800
RPC_FAIL = -900
UNAVAILABLE_IN_CURRENT_STATUS = -1010

_FROM_TIDE = {
    errors.ENOTFOUND: OBJECT_NOT_FOUND,
    errors.ECHECKSUM: OBJECT_NOT_FOUND,
    errors.EKEYEMPTY: INVALID_KEY,
    errors.EKEYLONG: INVALID_KEY,
    errors.EVALEMPTY: INVALID_PARAMS,
    errors.EVALBIG: NO_AVAILABLE_HANDLE,
    errors.ENOSPACE: NO_AVAILABLE_HANDLE,
    errors.EBUFSMALL: BUFFER_OVERFLOW,
    errors.EBUSY: REPLICA_IS_NOT_READY,
    errors.ELIMIT: INVALID_PARAMS,
    errors.ECLOSED: UNAVAILABLE_IN_CURRENT_STATUS,
    errors.EPROTO: RPC_FAIL,
    errors.ESERVER: RPC_FAIL,
}


def mooncake_code(tide_code):
    """The Mooncake ErrorCode for a tide result (0 and positive counts pass through)."""
    if tide_code >= 0:
        return tide_code
    if tide_code in _FROM_TIDE:
        return _FROM_TIDE[tide_code]
    cls = errors.error_class(tide_code)
    if cls is errors.TransportError:
        return RPC_FAIL
    if issubclass(cls, (errors.InvalidArgument, errors.ConfigError)):
        return INVALID_PARAMS
    return INTERNAL_ERROR


class ReplicateConfig:
    """Mooncake's replication settings; accepted for compatibility, not used by tide."""

    def __init__(self):
        self.replica_num = 1
        self.with_soft_pin = False
        self.with_hard_pin = False
        self.preferred_segment = ""
        self.preferred_segments = []
        self.prefer_alloc_in_same_node = False


class MooncakeDistributedStore:
    """Mooncake's store client API over tide (see the module's docstring)."""

    def __init__(self):
        self._store = None
        self._regions = []  # sorted (start, end) of registered buffers
        self._lock = threading.Lock()
        self.last_error = None  # the tide.Error behind the last failure, if any
        self.url = None

    # -- set-up --------------------------------------------------------------------------

    def setup(
        self,
        local_hostname="",
        metadata_server="",
        global_segment_size=16 << 20,
        local_buffer_size=16 << 20,
        protocol="tcp",
        rdma_devices="",
        master_server_addr="",
        **kwargs,
    ):
        """Open the tide store; 0 or a negative code (the reason in last_error)."""
        if self._store is not None:
            return self._fail(errors.InvalidArgument(-errno.EINVAL, "setup: already set up"))
        url = os.environ.get("TIDE_URL") or ""
        if not url and str(master_server_addr).startswith(("tide://", "mem://")):
            url = master_server_addr
        if not url:
            if not isinstance(global_segment_size, int) or global_segment_size <= 0:
                return self._fail(
                    errors.InvalidArgument(
                        -errno.EINVAL, f"setup: global_segment_size {global_segment_size!r} is not a size"
                    )
                )
            url = f"mem://?capacity={global_segment_size}"
        try:
            self._store = Store(url)
        except errors.Error as e:
            return self._fail(e)
        self.url = url
        return OK

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """Mooncake's test client set-up: an embedded store of mem_pool_size bytes."""
        return self.setup(global_segment_size=mem_pool_size, master_server_addr=server_address)

    def close(self):
        """Close the store; 0. Later calls fail with UNAVAILABLE_IN_CURRENT_STATUS."""
        if self._store is not None:
            self._store.close()
        return OK

    def get_hostname(self):
        return self.url or ""

    # -- registered memory ---------------------------------------------------------------

    def register_buffer(self, buffer_ptr, size):
        """Record [buffer_ptr, buffer_ptr + size); 0, or INVALID_PARAMS for a null
        pointer, a size <= 0, or a region overlapping another one differently."""
        if not isinstance(buffer_ptr, int) or not isinstance(size, int):
            return INVALID_PARAMS
        if buffer_ptr <= 0 or size <= 0:
            return INVALID_PARAMS
        region = (buffer_ptr, buffer_ptr + size)
        with self._lock:
            i = bisect.bisect_left(self._regions, region)
            if i < len(self._regions) and self._regions[i] == region:
                return OK  # registering the same region twice is harmless
            if (i > 0 and self._regions[i - 1][1] > region[0]) or (
                i < len(self._regions) and self._regions[i][0] < region[1]
            ):
                return INVALID_PARAMS
            self._regions.insert(i, region)
        return OK

    def unregister_buffer(self, buffer_ptr):
        """Forget the region starting at buffer_ptr; 0 or INVALID_PARAMS."""
        with self._lock:
            for i, (start, _end) in enumerate(self._regions):
                if start == buffer_ptr:
                    del self._regions[i]
                    return OK
        return INVALID_PARAMS

    def _registered(self, ptr, size):
        with self._lock:
            i = bisect.bisect_right(self._regions, (ptr, float("inf"))) - 1
            return i >= 0 and self._regions[i][0] <= ptr and ptr + size <= self._regions[i][1]

    # -- helpers -------------------------------------------------------------------------

    def _fail(self, err):
        self.last_error = err
        return mooncake_code(err.code)

    def _open(self):
        if self._store is None:
            self.last_error = errors.ClosedError(errors.ECLOSED, "setup() has not succeeded")
            return None
        return self._store

    def _multi(self, op, keys, all_ptrs, all_sizes):
        """Run put_many_ptrs / get_many_ptrs over the keys whose pieces are all valid and
        registered; the rest get INVALID_PARAMS. Returns Mooncake codes per key."""
        keys = list(keys)
        n = len(keys)
        store = self._open()
        if store is None:
            return [UNAVAILABLE_IN_CURRENT_STATUS] * n
        all_ptrs, all_sizes = list(all_ptrs), list(all_sizes)
        if len(all_ptrs) != n or len(all_sizes) != n:
            self.last_error = errors.InvalidArgument(
                -errno.EINVAL, f"{n} keys, {len(all_ptrs)} pointer lists, {len(all_sizes)} size lists"
            )
            return [INVALID_PARAMS] * n
        out = [INVALID_PARAMS] * n
        ok = []
        for i in range(n):
            ptrs, sizes = list(all_ptrs[i]), list(all_sizes[i])
            if len(ptrs) == len(sizes) and all(
                isinstance(p, int) and isinstance(s, int) and s >= 0 and self._registered(p, s)
                for p, s in zip(ptrs, sizes)
            ):
                ok.append(i)
            else:
                self.last_error = errors.InvalidArgument(
                    -errno.EINVAL,
                    f"key {i} ({keys[i]!r}): a piece is malformed or outside every "
                    f"registered buffer",
                )
        if not ok:
            return out
        try:
            res = op(
                [keys[i] for i in ok],
                [list(all_ptrs[i]) for i in ok],
                [list(all_sizes[i]) for i in ok],
            )
        except errors.Error as e:
            code = self._fail(e)
            for i in ok:
                out[i] = code
            return out
        for i, r in zip(ok, res):
            out[i] = mooncake_code(r)
        return out

    # -- batches the vLLM connector uses -------------------------------------------------

    def batch_is_exist(self, keys):
        """Per key 1 (present), 0 (absent) or -1 (error)."""
        keys = list(keys)
        store = self._open()
        if store is None:
            return [-1] * len(keys)
        try:
            return [1 if p else 0 for p in store.exists_many(keys)]
        except errors.Error as e:
            self.last_error = e
            return [-1] * len(keys)

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        """Store keys[i] = the concatenation of all_sizes[i][j] bytes at
        all_buffer_ptrs[i][j]; per key 0 or a negative code."""
        store = self._open()
        op = store.put_many_ptrs if store else None
        return self._multi(op, keys, all_buffer_ptrs, all_sizes)

    def batch_get_into_multi_buffers(
        self, keys, all_buffer_ptrs, all_sizes, prefer_alloc_in_same_node=False
    ):
        """Read keys[i] across its buffers; per key the bytes read or a negative code."""
        store = self._open()
        op = store.get_many_ptrs if store else None
        return self._multi(op, keys, all_buffer_ptrs, all_sizes)

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        return self.batch_put_from_multi_buffers(
            keys, [[p] for p in buffer_ptrs], [[s] for s in sizes], config
        )

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        return self.batch_get_into_multi_buffers(
            keys, [[p] for p in buffer_ptrs], [[s] for s in sizes]
        )

    def put_from(self, key, buffer_ptr, size, config=None):
        return self.batch_put_from([key], [buffer_ptr], [size], config)[0]

    def get_into(self, key, buffer_ptr, size):
        return self.batch_get_into([key], [buffer_ptr], [size])[0]

    # -- single keys, bytes --------------------------------------------------------------

    def _call(self, fn, default):
        store = self._open()
        if store is None:
            return UNAVAILABLE_IN_CURRENT_STATUS if default is None else default
        try:
            return fn(store)
        except errors.Error as e:
            code = self._fail(e)
            return code if default is None else default

    def put(self, key, value, config=None):
        """0 or a negative code."""
        return self._call(lambda s: s.put(key, value) or OK, None)

    def put_batch(self, keys, values, config=None):
        """0 if every key was stored, else the first key's negative code."""
        res = self._call(lambda s: s.put_many(keys, values), None)
        if isinstance(res, int):
            return res
        bad = [mooncake_code(r) for r in res if r < 0]
        return bad[0] if bad else OK

    def get(self, key):
        """The value, or b"" when it is missing (Mooncake's convention)."""
        return self._call(lambda s: s.get(key), b"")

    def get_batch(self, keys):
        """The values, b"" for missing keys."""
        res = self._call(lambda s: s.get_many(keys), [b""] * len(list(keys)))
        return [b"" if v is None else v for v in res]

    def get_size(self, key):
        """The value's size, or a negative code."""
        return self._call(lambda s: s.size(key), None)

    def is_exist(self, key):
        """1, 0, or -1 on error."""
        return self._call(lambda s: 1 if s.exists(key) else 0, -1)

    def remove(self, key, force=False):
        """0, or OBJECT_NOT_FOUND."""
        return self._call(lambda s: OK if s.remove(key) else OBJECT_NOT_FOUND, None)

    def batch_remove(self, keys, force=False):
        """Per key 0 or a negative code."""
        res = self._call(lambda s: s.remove_many(keys), None)
        if isinstance(res, int):
            return [res] * len(list(keys))
        return [mooncake_code(r) for r in res]

    def remove_all(self, force=False):
        """Remove every object; the number removed, or -1 on error."""

        def clear(s):
            before = s.stats()["objects"]
            s.clear()
            return before

        return self._call(clear, -1)


__all__ = [
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "mooncake_code",
] + [name for name, v in list(globals().items()) if name.isupper() and isinstance(v, int)]

