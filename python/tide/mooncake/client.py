"""A drop-in for Mooncake's ``MooncakeDistributedStore`` (``mooncake.store``) over tide.

Code written against Mooncake Store's Python API (vLLM's MooncakeStoreConnector worker,
LMCache's Mooncake backend, SGLang HiCache's Mooncake backend) runs on tide by putting
``python/compat`` on PYTHONPATH, whose ``mooncake.store`` re-exports this module. Every
method of Mooncake's class is here with its arguments, defaults and integer return codes
(Mooncake's ErrorCode, mooncake-store/include/types.h); docs/MOONCAKE.md lists each one
as supported, accepted-and-ignored or refused, and why. Mooncake's error codes live
in codes.py, its value types in values.py, how setup() finds the store in address.py, and
the tensor methods in tensor.py (a mixin of this class).

Invariants:

- ``setup()`` in any form resolves to a tide URL (``resolve_url``): ``$TIDE_URL`` when set,
  else the master address (argument, dict key, ``$MOONCAKE_MASTER``, or the
  ``master_server_address`` of the JSON file named by ``$MOONCAKE_CONFIG_PATH``), where a
  plain ``host:port[,host:port...]`` means the tided (or tide cluster) at those
  addresses. No tided answering there is a failed setup naming the address; there is no
  fallback to a private store.
- Nothing raises for a store failure: calls return Mooncake's codes and keep the tide
  error behind the last failure in ``last_error``. Wrong Python types raise TypeError,
  as pybind11 does.
- Pointers given to ``*_from`` / ``*_into`` calls must lie in a region given to
  ``register_buffer`` (or allocated by ``alloc_from_mem_pool``); others are refused with
  INVALID_PARAMS before any byte is touched.
- A buffer too small for a value is INVALID_PARAMS (-600), as in Mooncake's client; so
  is any call before setup() or after close() (Mooncake's "client is not initialized").
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import logging
import os
import random
import re
import socket
import threading
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from .. import errors
from ..store import Store
from .address import (
    DEFAULT_MASTER,
    SetupError,
    has_port,
    master_to_url,
    open_checked,
    parse_size,
    resolve_url,
)
from .codes import (
    HC_HEALTHY,
    HC_MASTER_UNREACHABLE,
    HC_NOT_INITIALIZED,
    INVALID_PARAMS,
    NOT_SUPPORTED,
    OBJECT_NOT_FOUND,
    OK,
    mooncake_code,
)
from .tensor import TensorHelpers
from .values import (
    BufferHandle,
    ReplicaDescriptor,
    ReplicateConfig,
)

log = logging.getLogger("tide.mooncake")

_T = TypeVar("_T")
_D = TypeVar("_D")


class MooncakeDistributedStore(TensorHelpers):
    """Mooncake's store client over tide; see the module's docstring and
    docs/MOONCAKE.md for what each method does here."""

    def __init__(self) -> None:
        self._store: Optional[Store] = None
        self._regions: List[Tuple[int, int]] = []  # sorted (start, end) of registered buffers
        self._lock = threading.Lock()
        self._pool: Dict[int, Any] = {}  # alloc_from_mem_pool blocks by address
        self._get_sessions: Dict[str, bytes] = {}
        self._put_sessions: Dict[str, bytearray] = {}
        self.last_error: Optional[Exception] = None
        self.url: Optional[str] = None
        self.hostname = ""
        self._given_hostname = ""
        self._port_hold: Optional[socket.socket] = None  # reserves get_hostname()'s port
        self.local_buffer_size = 0  # setup()'s: 0 means no staging buffer for the byte API
        self._any_pointer = False  # protocol "cxl": pointers need no registration

    # -- set-up --------------------------------------------------------------------------

    _SETUP_ARGS = (
        "local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
        "protocol", "rdma_devices", "master_server_addr", "engine", "enable_ssd_offload",
        "ssd_offload_path", "tenant_id", "enable_client_http_server", "client_http_port",
    )
    _SETUP_REQUIRED = 7  # pybind gives the first seven no default

    def setup(self, *args: Any, **kwargs: Any) -> int:
        """Mooncake's two forms: ``setup(local_hostname, metadata_server,
        global_segment_size, local_buffer_size, protocol, rdma_devices,
        master_server_addr, engine=None, enable_ssd_offload=False, ssd_offload_path="",
        tenant_id="default", enable_client_http_server=False, client_http_port=9300)``
        and ``setup(config)`` with a dict of those names (values may be strings; sizes
        like "16MB"). 0, or a negative code with the reason logged and in last_error."""
        if (len(args) == 1 and not kwargs and isinstance(args[0], dict)) or (
            not args and set(kwargs) == {"config"} and isinstance(kwargs["config"], dict)
        ):
            return self._setup_dict(dict(args[0] if args else kwargs["config"]))
        names = self._SETUP_ARGS
        if len(args) > len(names):
            raise TypeError(f"setup() takes at most {len(names)} arguments ({len(args)} given)")
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"setup() got an unexpected keyword argument {k!r}")
            if k in bound:
                raise TypeError(f"setup() got multiple values for argument {k!r}")
            bound[k] = v
        missing = [k for k in names[: self._SETUP_REQUIRED] if k not in bound]
        if missing:
            raise TypeError(f"setup() missing required arguments: {', '.join(missing)}")
        for k in ("global_segment_size", "local_buffer_size"):
            if not isinstance(bound[k], int) or isinstance(bound[k], bool) or bound[k] < 0:
                raise TypeError(f"setup(): {k} must be a non-negative int, got {bound[k]!r}")
        for k in ("local_hostname", "metadata_server", "protocol", "rdma_devices",
                  "master_server_addr"):
            if not isinstance(bound[k], str):
                raise TypeError(f"setup(): {k} must be a str, got {type(bound[k]).__name__}")
        return self._do_setup(bound["local_hostname"], bound["master_server_addr"],
                              bound["local_buffer_size"], explicit=True,
                              protocol=bound["protocol"])

    def _setup_dict(self, cfg: Dict[Any, Any]) -> int:
        cfg = {str(k): v for k, v in cfg.items()}
        for k in ("local_hostname", "metadata_server"):
            if not str(cfg.get(k, "")):
                return self._setup_failed(SetupError(
                    INVALID_PARAMS, f"setup(config): missing required key {k!r}"))
        try:
            parse_size(cfg.get("global_segment_size", 16 << 20), "global_segment_size")
            local = parse_size(cfg.get("local_buffer_size", 16 << 20), "local_buffer_size")
        except SetupError as e:
            return self._setup_failed(e)
        master = str(cfg.get("master_server_addr", cfg.get("master_server_address", "")))
        return self._do_setup(str(cfg["local_hostname"]), master or DEFAULT_MASTER, local,
                              protocol=str(cfg.get("protocol", "tcp")),
                              explicit=bool(master))

    def _do_setup(self, hostname: str, master: str, local_buffer_size: int,
                  explicit: bool, protocol: str = "tcp") -> int:
        if self._store is not None:
            return self._setup_failed(SetupError(INVALID_PARAMS, "setup: already set up (close() first)"))
        try:
            # An empty or left-out master address lets $MOONCAKE_MASTER or
            # $MOONCAKE_CONFIG_PATH name the store, then Mooncake's default address.
            url, where = resolve_url(master if explicit else "")
        except SetupError as e:
            if explicit and master:
                return self._setup_failed(e)
            if not master:
                return self._setup_failed(e)
            try:
                url, where = master_to_url(master), f"default master_server_addr {master!r}"
            except SetupError as e2:
                return self._setup_failed(e2)
        try:
            self._store = open_checked(url, where)
        except SetupError as e:
            return self._setup_failed(e)
        self.url, self._given_hostname = url, hostname
        self.hostname = self._endpoint_name(hostname)
        self.local_buffer_size = local_buffer_size
        # Mooncake's CXL mode reads and writes client memory with the CPU and needs no
        # registration; so does tide, which then takes any pointer (as Mooncake does).
        self._any_pointer = protocol == "cxl"
        self.last_error = None
        return OK

    def _endpoint_name(self, hostname: str) -> str:
        """get_hostname()'s answer, as Mooncake's RealClient builds it: local_hostname as
        given when it names a port, else local_hostname:PORT with PORT a TCP port this
        client holds (bound, not listening) until close(), taken from
        $MC_STORE_CLIENT_MIN_PORT..$MC_STORE_CLIENT_MAX_PORT (12300..14300) as Mooncake
        takes its transfer engine's, or one the kernel picks when all are taken. tide's
        client listens on nothing; the port makes the name unique per client on a host,
        which is what Mooncake's callers use it for (a segment name). "" stays ""
        (Mooncake's dummy client)."""
        if not hostname or has_port(hostname):
            return hostname
        try:
            lo = int(os.environ.get("MC_STORE_CLIENT_MIN_PORT", 12300))
            hi = int(os.environ.get("MC_STORE_CLIENT_MAX_PORT", 14300))
        except ValueError:
            lo, hi = 12300, 14300
        if not 1 <= lo <= hi <= 65535:
            lo, hi = 12300, 14300
        host = f"[{hostname}]" if ":" in hostname else hostname  # a bare IPv6 address
        start = random.randint(lo, hi)
        for i in range(min(hi - lo + 1, 64) + 1):  # bounded: 64 tries, then any port
            port = 0 if i == min(hi - lo + 1, 64) else lo + (start - lo + i) % (hi - lo + 1)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("", port))
            except OSError:
                s.close()
                continue
            self._port_hold = s
            return f"{host}:{s.getsockname()[1]}"
        return hostname

    def _setup_failed(self, e: SetupError) -> int:
        self.last_error = e
        log.error("%s", e)
        return e.code

    def setup_dummy(self, mem_pool_size: int, local_buffer_size: int, server_address: str) -> int:
        """Mooncake's dummy client (which talks to a standalone real client at
        server_address): here server_address resolves like a master address."""
        if not isinstance(mem_pool_size, int) or not isinstance(local_buffer_size, int):
            raise TypeError("setup_dummy(mem_pool_size: int, local_buffer_size: int, server_address: str)")
        return self._do_setup("", str(server_address), local_buffer_size,
                              explicit=bool(server_address))

    def init_all(self, protocol: str, device_name: str, mount_segment_size: int = 16 << 20) -> int:
        """Mooncake's older two-step set-up; the transport is tide's own: 0 once set up."""
        return OK if self._store is not None else INVALID_PARAMS

    def close(self) -> int:
        """Close the store and forget registrations; 0. setup() may be called again."""
        store, self._store = self._store, None
        if store is not None:
            store.close()
        if self._port_hold is not None:
            self._port_hold.close()
            self._port_hold = None
        with self._lock:
            self._regions.clear()
            self._get_sessions.clear()
            self._put_sessions.clear()
        for m in self._pool.values():
            try:
                m.close()
            except BufferError:
                pass
        self._pool.clear()
        return OK

    def health_check(self) -> int:
        """0 healthy, 1 not set up or closed, 2 the store does not answer."""
        store = self._store
        if store is None:
            return HC_NOT_INITIALIZED
        try:
            store.exists("__tide_mooncake_probe__")
        except errors.Error as e:
            self.last_error = e
            return HC_MASTER_UNREACHABLE
        return HC_HEALTHY

    def get_hostname(self) -> str:
        return self.hostname

    def get_offload_rpc_read_count(self) -> int:
        """Reads served by another client's SSD offload: tide has none, so 0."""
        return 0

    def _get_pyclient_capsule(self) -> Any:
        raise NotImplementedError(
            "tide: _get_pyclient_capsule exposes Mooncake's C++ client; tide has none"
        )

    # -- segments (memory a Mooncake client contributes): tided owns tide's memory -------

    def mount_segment(self, path: str, size: int, offset: int = 0, protocol: str = "tcp",
                      location: str = "") -> Dict[str, Any]:
        return {"ret": NOT_SUPPORTED, "segment_ids": []}

    def allocate_and_mount_segment(self, size: int, protocol: str = "tcp",
                                   location: str = "") -> Dict[str, Any]:
        return {"ret": NOT_SUPPORTED, "segment_ids": [], "allocated_size": 0}

    def unmount_segment(self, segment_ids: Sequence[str], grace_period_seconds: int = 0) -> int:
        return NOT_SUPPORTED

    def unmount_and_free_segment(self, segment_ids: Sequence[str],
                                 grace_period_seconds: int = 0) -> int:
        return NOT_SUPPORTED

    def unmount_local_disk_segment(self, grace_period_seconds: int = 0) -> int:
        return NOT_SUPPORTED

    # -- registered memory ---------------------------------------------------------------

    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Record [buffer_ptr, buffer_ptr + size); 0, or INVALID_PARAMS for a null
        pointer, a size <= 0, or a region overlapping another one differently."""
        if not isinstance(buffer_ptr, int) or not isinstance(size, int):
            raise TypeError("register_buffer(buffer_ptr: int, size: int)")
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

    def unregister_buffer(self, buffer_ptr: int) -> int:
        """Forget the region starting at buffer_ptr; 0 or INVALID_PARAMS."""
        with self._lock:
            for i, (start, _end) in enumerate(self._regions):
                if start == buffer_ptr:
                    del self._regions[i]
                    return OK
        return INVALID_PARAMS

    def _registered(self, ptr: int, size: int) -> bool:
        if self._any_pointer:
            return ptr > 0 or size == 0
        with self._lock:
            i = bisect.bisect_right(self._regions, (ptr, float("inf"))) - 1
            return i >= 0 and self._regions[i][0] <= ptr and ptr + size <= self._regions[i][1]

    def alloc_from_mem_pool(self, size: int) -> int:
        """An address of size bytes of host memory, registered with this client and
        freed by close(); 0 when it cannot be had."""
        import mmap

        if self._store is None or not isinstance(size, int) or size <= 0:
            return 0
        try:
            m = mmap.mmap(-1, size)
        except (OSError, ValueError, OverflowError) as e:
            self.last_error = e
            return 0
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        if self.register_buffer(addr, size) != OK:
            m.close()
            return 0
        self._pool[addr] = m
        return addr

    # -- helpers -------------------------------------------------------------------------

    def _fail(self, err: errors.Error) -> int:
        self.last_error = err
        return mooncake_code(err.code)

    def _bad(self, message: str, code: int = INVALID_PARAMS) -> int:
        self.last_error = errors.InvalidArgument(-errno.EINVAL, message)
        return code

    def _open(self) -> Optional[Store]:
        if self._store is None:
            self.last_error = errors.ClosedError(errors.ECLOSED, "setup() has not succeeded")
            return None
        return self._store

    def _check_config(self, config: Optional[ReplicateConfig]) -> int:
        if config is None:
            return OK
        if not isinstance(config, ReplicateConfig):
            raise TypeError(f"config: expected ReplicateConfig, got {type(config).__name__}")
        rc = config.check()
        if rc != OK:
            self._bad(f"ReplicateConfig refused: {config!r} (a soft_pin_ttl_ms needs ENABLE)")
        return rc

    def _put_refused(self, config: Optional[ReplicateConfig], staged: bool = False,
                     needs_store: bool = False) -> int:
        """The checks every put and upsert makes first, in Mooncake's order: OK, or the
        code to return (the reason in last_error). staged: a byte-API call, whose values
        Mooncake stages in the local buffer (refused when setup() gave none); needs_store:
        INVALID_PARAMS before setup() as well. A config that is no ReplicateConfig raises
        TypeError."""
        if staged and self._no_staging():
            return INVALID_PARAMS
        rc = self._check_config(config)
        if rc != OK:
            return rc
        if needs_store and self._store is None:
            return INVALID_PARAMS
        return OK

    def _multi(self, put: bool, keys: Sequence[str], all_ptrs: Sequence[Sequence[int]],
               all_sizes: Sequence[Sequence[int]]) -> List[int]:
        """put_many_ptrs / get_many_ptrs over the keys whose pieces are all valid and
        registered; the rest get INVALID_PARAMS. Mooncake codes per key."""
        keys = list(keys)
        n = len(keys)
        store = self._open()
        if store is None:
            return [INVALID_PARAMS] * n
        all_ptrs, all_sizes = list(all_ptrs), list(all_sizes)
        if len(all_ptrs) != n or len(all_sizes) != n:
            self._bad(f"{n} keys, {len(all_ptrs)} pointer lists, {len(all_sizes)} size lists")
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
                self._bad(
                    f"key {i} ({keys[i]!r}): a piece is malformed or outside every "
                    f"registered buffer"
                )
        if not ok:
            return out
        op = store.put_many_ptrs if put else store.get_many_ptrs
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
            if r < 0:
                self.last_error = errors.make_error(r, f"key {keys[i]!r}: {errors.strerror(r)}")
        return out

    def _call(self, fn: Callable[[Store], _T]) -> Union[_T, int]:
        """fn(store); a tide failure becomes its Mooncake code."""
        store = self._open()
        if store is None:
            return INVALID_PARAMS
        try:
            return fn(store)
        except errors.Error as e:
            return self._fail(e)

    def _call_or(self, fn: Callable[[Store], _T], default: _D) -> Union[_T, _D]:
        """fn(store); default when the store is not open or fn fails (the failure in
        last_error)."""
        store = self._open()
        if store is None:
            return default
        try:
            return fn(store)
        except errors.Error as e:
            self._fail(e)
            return default

    def _no_staging(self) -> bool:
        """True (and last_error set) when setup() gave no local buffer: Mooncake stages
        the byte API's values (put, get, upsert, ... of bytes) there, so with 0 bytes
        it refuses them; the zero-copy calls (*_from, *_into) need none."""
        if self._store is not None and self.local_buffer_size == 0:
            self._bad("setup() gave local_buffer_size=0: the byte API has no local buffer "
                      "(use the *_from / *_into calls, or a local_buffer_size > 0)")
            return True
        return False

    # -- put ------------------------------------------------------------------------------

    def put(self, key: str, value: Any, config: Optional[ReplicateConfig] = None) -> int:
        """Store value (any buffer) under key: 0 or a negative code. A key that exists
        keeps its value (tide keys are content addresses); see upsert()."""
        rc = self._put_refused(config, staged=True)
        if rc != OK:
            return rc

        def go(s: Store) -> int:
            s.put(key, value)
            return OK

        return self._call(go)

    def put_parts(self, key: str, *parts: Any, config: Optional[ReplicateConfig] = None) -> int:
        """Store the concatenation of parts (1-D bytes-like) under key."""
        rc = self._put_refused(config, staged=True)
        if rc != OK:
            return rc
        bufs = []
        for j, p in enumerate(parts):
            mv = memoryview(p)
            if mv.ndim != 1 or mv.itemsize != 1:
                raise RuntimeError("parts must be 1-D bytes-like")
            bufs.append(mv)
        if not bufs:
            return self._bad(f"put_parts({key!r}): no parts")

        def go(s: Store) -> int:
            r = s.put_many_iov([key], [bufs])[0]
            return mooncake_code(r) if r < 0 else OK

        return self._call(go)

    def put_batch(self, keys: Sequence[str], values: Sequence[Any],
                  config: Optional[ReplicateConfig] = None) -> int:
        """0 if every key was stored, else the first failing key's code."""
        rc = self._put_refused(config, staged=True)
        if rc != OK:
            return rc
        keys, values = list(keys), list(values)
        if len(keys) != len(values):
            return self._bad(f"put_batch: {len(keys)} keys, {len(values)} values")
        res = self._call(lambda s: s.put_many(keys, values))
        if isinstance(res, int):
            return res
        bad = [mooncake_code(r) for r in res if r < 0]
        return bad[0] if bad else OK

    def put_from(self, key: str, buffer_ptr: int, size: int,
                 config: Optional[ReplicateConfig] = None) -> int:
        rc = self._check_config(config)
        if rc != OK:
            return rc
        return self._multi(True, [key], [[buffer_ptr]], [[size]])[0]

    def put_from_with_metadata(self, key: str, buffer_ptr: int, metadata_buffer_ptr: int,
                               size: int, metadata_size: int,
                               config: Optional[ReplicateConfig] = None) -> int:
        """Store [metadata][data] under key (Mooncake's layout: metadata first)."""
        rc = self._check_config(config)
        if rc != OK:
            return rc
        return self._multi(True, [key], [[metadata_buffer_ptr, buffer_ptr]],
                           [[metadata_size, size]])[0]

    def batch_put_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                       sizes: Sequence[int], config: Optional[ReplicateConfig] = None) -> List[int]:
        keys = list(keys)
        rc = self._check_config(config)
        if rc != OK:
            return [rc] * len(keys)
        buffer_ptrs, sizes = list(buffer_ptrs), list(sizes)
        if len(buffer_ptrs) != len(keys) or len(sizes) != len(keys):
            self._bad(f"{len(keys)} keys, {len(buffer_ptrs)} pointers, {len(sizes)} sizes")
            return [INVALID_PARAMS] * len(keys)
        return self._multi(True, keys, [[p] for p in buffer_ptrs], [[s] for s in sizes])

    def batch_put_from_multi_buffers(self, keys: Sequence[str],
                                     all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     config: Optional[ReplicateConfig] = None) -> List[int]:
        """keys[i] = the concatenation of all_sizes[i][j] bytes at all_buffer_ptrs[i][j];
        per key 0 or a negative code ([] before setup, as Mooncake)."""
        if self._store is None:
            return []
        keys = list(keys)
        rc = self._check_config(config)
        if rc != OK:
            return [rc] * len(keys)
        return self._multi(True, keys, all_buffer_ptrs, all_sizes)

    # -- upsert: insert or replace ---------------------------------------------------------
    # tide keeps the first value of a key, so a replace is remove + put. A reader between
    # the two sees the key missing (never a mixture of old and new bytes).

    def _upsert_many(self, keys: List[str], put: Callable[[Store, List[str]], List[int]]) -> List[int]:
        store = self._open()
        if store is None:
            return [INVALID_PARAMS] * len(keys)
        try:
            store.remove_many(keys)
            res = put(store, keys)
        except errors.Error as e:
            return [self._fail(e)] * len(keys)
        return [mooncake_code(r) if isinstance(r, int) and r < 0 else OK for r in res]

    def upsert(self, key: str, value: Any, config: Optional[ReplicateConfig] = None) -> int:
        rc = self._put_refused(config, staged=True, needs_store=True)
        if rc != OK:
            return rc
        return self._upsert_many([key], lambda s, k: s.put_many(k, [value]))[0]

    def upsert_parts(self, key: str, *parts: Any, config: Optional[ReplicateConfig] = None) -> int:
        rc = self._put_refused(config, staged=True, needs_store=True)
        if rc != OK:
            return rc
        bufs = []
        for p in parts:
            mv = memoryview(p)
            if mv.ndim != 1 or mv.itemsize != 1:
                raise RuntimeError("parts must be 1-D bytes-like")
            bufs.append(mv)
        if not bufs:
            return self._bad(f"upsert_parts({key!r}): no parts")
        return self._upsert_many([key], lambda s, k: s.put_many_iov(k, [bufs]))[0]

    def upsert_batch(self, keys: Sequence[str], values: Sequence[Any],
                     config: Optional[ReplicateConfig] = None) -> int:
        """0 if every key was stored, else the first failing key's code."""
        rc = self._put_refused(config, staged=True, needs_store=True)
        if rc != OK:
            return rc
        keys, values = list(keys), list(values)
        if len(keys) != len(values):
            return self._bad(f"upsert_batch: {len(keys)} keys, {len(values)} values")
        res = self._upsert_many(keys, lambda s, k: s.put_many(k, values))
        bad = [r for r in res if r < 0]
        return bad[0] if bad else OK

    def upsert_from(self, key: str, buffer_ptr: int, size: int,
                    config: Optional[ReplicateConfig] = None) -> int:
        if self._store is None:
            return INVALID_PARAMS
        return self.batch_upsert_from([key], [buffer_ptr], [size], config)[0]

    def batch_upsert_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                          sizes: Sequence[int], config: Optional[ReplicateConfig] = None) -> List[int]:
        keys = list(keys)
        if self._store is None:
            return [INVALID_PARAMS] * len(keys)
        rc = self._check_config(config)
        if rc != OK:
            return [rc] * len(keys)
        buffer_ptrs, sizes = list(buffer_ptrs), list(sizes)
        if len(buffer_ptrs) != len(keys) or len(sizes) != len(keys):
            self._bad(f"{len(keys)} keys, {len(buffer_ptrs)} pointers, {len(sizes)} sizes")
            return [INVALID_PARAMS] * len(keys)
        good = [i for i in range(len(keys)) if isinstance(buffer_ptrs[i], int)
                and isinstance(sizes[i], int) and self._registered(buffer_ptrs[i], sizes[i])]
        out = [INVALID_PARAMS] * len(keys)
        if len(good) < len(keys):
            self._bad("batch_upsert_from: a buffer lies outside every registered buffer")
        if good:
            sub = [keys[i] for i in good]
            res = self._upsert_many(sub, lambda s, k: s.put_many_ptrs(
                k, [[buffer_ptrs[i]] for i in good], [[sizes[i]] for i in good]))
            for i, r in zip(good, res):
                out[i] = r
        return out

    # -- get --------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        """The value, or b"" when it is missing or on error (Mooncake's convention)."""
        if self._no_staging():
            return b""
        return self._call_or(lambda s: s.get(key), b"")

    def get_batch(self, keys: Sequence[str]) -> List[bytes]:
        """The values, b"" for missing keys."""
        keys = list(keys)
        if self._no_staging():
            return [b""] * len(keys)
        res = self._call_or(lambda s: s.get_many(keys), [b""] * len(keys))
        return [b"" if v is None else v for v in res]

    def get_buffer(self, key: str) -> Optional[BufferHandle]:
        """The value as a BufferHandle, or None when it is missing."""
        v = self._call(lambda s: s.get(key))
        return None if isinstance(v, int) else BufferHandle(v)

    def batch_get_buffer(self, keys: Sequence[str]) -> List[Optional[BufferHandle]]:
        keys = list(keys)
        res = self._call_or(lambda s: s.get_many(keys), [None] * len(keys))
        return [None if v is None else BufferHandle(v) for v in res]

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Bytes read into the registered buffer, or a negative code (INVALID_PARAMS when
        the value does not fit)."""
        return self._multi(False, [key], [[buffer_ptr]], [[size]])[0]

    def batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                       sizes: Sequence[int]) -> List[int]:
        keys = list(keys)
        buffer_ptrs, sizes = list(buffer_ptrs), list(sizes)
        if len(buffer_ptrs) != len(keys) or len(sizes) != len(keys):
            self._bad(f"{len(keys)} keys, {len(buffer_ptrs)} pointers, {len(sizes)} sizes")
            return [INVALID_PARAMS] * len(keys)
        return self._multi(False, keys, [[p] for p in buffer_ptrs], [[s] for s in sizes])

    def batch_get_into_multi_buffers(self, keys: Sequence[str],
                                     all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     prefer_alloc_in_same_node: bool = False) -> List[int]:
        """Read keys[i] across its buffers; per key the bytes read or a negative code."""
        return self._multi(False, keys, all_buffer_ptrs, all_sizes)

    def get_into_ranges(self, buffer_ptrs: Sequence[int], all_keys: Sequence[Sequence[str]],
                        all_dst_offsets: Sequence[Sequence[Sequence[int]]],
                        all_src_offsets: Sequence[Sequence[Sequence[int]]],
                        all_sizes: Sequence[Sequence[Sequence[int]]]) -> List[List[List[int]]]:
        """For buffer i, key j, fragment k: copy all_sizes[i][j][k] bytes of key
        all_keys[i][j] from all_src_offsets[i][j][k] to buffer i + all_dst_offsets[i][j][k].
        The same nesting back: bytes copied per fragment, or a negative code."""
        bufs = list(buffer_ptrs)
        nest: List[List[Any]] = [list(all_keys), list(all_dst_offsets), list(all_src_offsets),
                                 list(all_sizes)]

        def shape(code: int) -> List[List[List[int]]]:
            keys = nest[0]
            return [[[code] * (len(nest[1][i][j]) if i < len(nest[1]) and j < len(nest[1][i]) else 1)
                     for j in range(len(keys[i]) if i < len(keys) else 1)]
                    for i in range(len(bufs))]

        store = self._open()
        if store is None:
            return shape(INVALID_PARAMS)
        if any(len(x) != len(bufs) for x in nest):
            self._bad("get_into_ranges: buffer_ptrs and the four lists differ in length")
            return shape(INVALID_PARAMS)
        wanted = sorted({k for ks in nest[0] for k in ks})
        try:
            values = dict(zip(wanted, store.get_many(wanted)))
        except errors.Error as e:
            return shape(self._fail(e))
        out: List[List[List[int]]] = []
        for i, base in enumerate(bufs):
            rows = []
            for j, key in enumerate(nest[0][i]):
                dsts, srcs, sizes = nest[1][i][j], nest[2][i][j], nest[3][i][j]
                row = []
                for k in range(len(dsts)):
                    v = values.get(key)
                    d, s, n = dsts[k], srcs[k] if k < len(srcs) else -1, sizes[k] if k < len(sizes) else -1
                    if v is None:
                        row.append(OBJECT_NOT_FOUND)
                    elif len(srcs) != len(dsts) or len(sizes) != len(dsts) or s < 0 or n < 0 \
                            or s + n > len(v) or not self._registered(base + d, n):
                        self._bad(f"get_into_ranges: buffer {i} key {key!r} fragment {k} "
                                  f"is out of range or unregistered")
                        row.append(INVALID_PARAMS)
                    else:
                        ctypes.memmove(base + d, v[s:s + n], n)
                        row.append(n)
                rows.append(row)
            out.append(rows)
        return out

    # -- sessions: reserve, fill by ranges, publish ------------------------------------------

    def batch_get_session_start(self, keys: Sequence[str]) -> List[int]:
        """Read the keys once and hold their bytes for ranged reads: per key 0 or a code."""
        keys = list(keys)
        store = self._open()
        if store is None:
            return []
        try:
            vals = store.get_many(keys)
        except errors.Error as e:
            return [self._fail(e)] * len(keys)
        out = []
        with self._lock:
            for k, v in zip(keys, vals):
                if v is None:
                    out.append(OBJECT_NOT_FOUND)
                else:
                    self._get_sessions[k] = v
                    out.append(OK)
        return out

    def batch_get_into_multi_buffer_ranges(self, keys: Sequence[str],
                                           all_buffer_ptrs: Sequence[Sequence[int]],
                                           all_sizes: Sequence[Sequence[int]],
                                           all_src_offsets: Sequence[Sequence[int]]) -> List[int]:
        """Per key: fill its buffers from the session's bytes at all_src_offsets[i][j];
        the bytes copied or a negative code."""
        if self._store is None:
            return []
        keys = list(keys)
        out = []
        for i, key in enumerate(keys):
            with self._lock:
                v = self._get_sessions.get(key)
            try:
                ptrs, sizes, srcs = list(all_buffer_ptrs[i]), list(all_sizes[i]), list(all_src_offsets[i])
            except IndexError:
                out.append(self._bad("batch_get_into_multi_buffer_ranges: list lengths differ"))
                continue
            if v is None:
                out.append(self._bad(f"key {key!r} has no get session", INVALID_PARAMS))
                continue
            if not (len(ptrs) == len(sizes) == len(srcs)) or any(
                s < 0 or n < 0 or s + n > len(v) or not self._registered(p, n)
                for p, n, s in zip(ptrs, sizes, srcs)
            ):
                out.append(self._bad(f"key {key!r}: a range is outside the value or unregistered"))
                continue
            for p, n, s in zip(ptrs, sizes, srcs):
                ctypes.memmove(p, v[s:s + n], n)
            out.append(sum(sizes))
        return out

    def batch_get_session_end(self, keys: Sequence[str]) -> int:
        if self._store is None:
            return -1
        with self._lock:
            for k in keys:
                self._get_sessions.pop(k, None)
        return OK

    def batch_put_session_start(self, keys: Sequence[str], sizes: Sequence[int],
                                config: Optional[ReplicateConfig] = None) -> List[int]:
        """Reserve keys of the given sizes (held here until batch_put_session_end)."""
        keys, sizes = list(keys), list(sizes)
        if self._store is None:
            return []
        rc = self._check_config(config)
        if rc != OK:
            return [rc] * len(keys)
        if len(keys) != len(sizes):
            self._bad(f"{len(keys)} keys, {len(sizes)} sizes")
            return [INVALID_PARAMS] * len(keys)
        out = []
        with self._lock:
            for k, n in zip(keys, sizes):
                if not isinstance(n, int) or n <= 0 or k in self._put_sessions:
                    out.append(INVALID_PARAMS)
                else:
                    self._put_sessions[k] = bytearray(n)
                    out.append(OK)
        return out

    def batch_put_from_multi_buffer_ranges(self, keys: Sequence[str],
                                           all_buffer_ptrs: Sequence[Sequence[int]],
                                           all_sizes: Sequence[Sequence[int]],
                                           all_dst_offsets: Sequence[Sequence[int]]) -> List[int]:
        if self._store is None:
            return []
        out = []
        for i, key in enumerate(list(keys)):
            with self._lock:
                buf = self._put_sessions.get(key)
            try:
                ptrs, sizes, dsts = list(all_buffer_ptrs[i]), list(all_sizes[i]), list(all_dst_offsets[i])
            except IndexError:
                out.append(self._bad("batch_put_from_multi_buffer_ranges: list lengths differ"))
                continue
            if buf is None:
                out.append(self._bad(f"key {key!r} has no put session"))
                continue
            if not (len(ptrs) == len(sizes) == len(dsts)) or any(
                d < 0 or n < 0 or d + n > len(buf) or not self._registered(p, n)
                for p, n, d in zip(ptrs, sizes, dsts)
            ):
                out.append(self._bad(f"key {key!r}: a range is outside the object or unregistered"))
                continue
            for p, n, d in zip(ptrs, sizes, dsts):
                buf[d:d + n] = ctypes.string_at(p, n)
            out.append(OK)
        return out

    def batch_put_session_end(self, keys: Sequence[str]) -> List[int]:
        """Store the reserved objects; per key 0 or a code."""
        keys = list(keys)
        store = self._open()
        if store is None:
            return []
        with self._lock:
            bufs = [self._put_sessions.pop(k, None) for k in keys]
        out = [INVALID_PARAMS] * len(keys)
        have = [i for i, b in enumerate(bufs) if b is not None]
        if have:
            try:
                res = store.put_many([keys[i] for i in have], [bufs[i] for i in have])
            except errors.Error as e:
                res = [e.code] * len(have)
                self.last_error = e
            for i, r in zip(have, res):
                out[i] = mooncake_code(r)
        return out

    def batch_put_session_revoke(self, keys: Sequence[str]) -> List[int]:
        if self._store is None:
            return []
        with self._lock:
            return [OK if self._put_sessions.pop(k, None) is not None else INVALID_PARAMS
                    for k in keys]

    # -- existence, size, removal ---------------------------------------------------------

    def get_size(self, key: str) -> int:
        """The value's size, or a negative code."""
        return self._call(lambda s: s.size(key))

    def is_exist(self, key: str) -> int:
        """1, 0, or the negative code of the failure."""
        return self._call(lambda s: 1 if s.exists(key) else 0)

    def batch_is_exist(self, keys: Sequence[str]) -> List[int]:
        """Per key 1 (present), 0 (absent) or a negative code."""
        keys = list(keys)
        store = self._open()
        if store is None:
            return [INVALID_PARAMS] * len(keys)
        try:
            return [1 if p else 0 for p in store.exists_many(keys)]
        except errors.Error as e:
            return [self._fail(e)] * len(keys)

    def remove(self, key: str, force: bool = False) -> int:
        """0, or OBJECT_NOT_FOUND. tide has no leases, so force changes nothing."""
        return self._call(lambda s: OK if s.remove(key) else OBJECT_NOT_FOUND)

    def batch_remove(self, keys: Sequence[str], force: bool = False) -> List[int]:
        """Per key 0 or a negative code."""
        keys = list(keys)
        res = self._call(lambda s: s.remove_many(keys))
        if isinstance(res, int):
            return [res] * len(keys)
        return [mooncake_code(r) for r in res]

    def remove_by_regex(self, regex_pattern: str, force: bool = False) -> int:
        """Refused: tide has no way to list keys. NOT_SUPPORTED."""
        re.compile(regex_pattern)  # a bad pattern is still the caller's error to see
        return self._bad("remove_by_regex: tide cannot list keys", NOT_SUPPORTED)

    def remove_all(self, force: bool = False) -> int:
        """Remove every object; the number removed, or a negative code."""

        def clear(s: Store) -> int:
            before = s.stats()["objects"]
            s.clear()
            return before

        return self._call(clear)

    # -- replicas ---------------------------------------------------------------------------

    def get_replica_desc(self, key: str) -> List[ReplicaDescriptor]:
        """One complete memory replica (endpoint = the store URL) if key exists, else []."""
        size = self._call(lambda s: s.size(key))
        if size < 0:
            return []
        return [ReplicaDescriptor(self.url or "", size)]

    def batch_get_replica_desc(self, keys: Sequence[str]) -> Dict[str, List[ReplicaDescriptor]]:
        return {k: self.get_replica_desc(k) for k in keys}

    def batch_replica_clear(self, keys: Sequence[str], segment_name: str = "") -> List[str]:
        """Drop the keys' replicas: tide removes the keys (a segment name other than ""
        or this client's hostname names nothing tide has, so nothing is cleared).
        Returns the keys cleared."""
        keys = list(keys)
        if self._store is None:
            return []
        if segment_name and segment_name not in (self.hostname, self._given_hostname, self.url):
            return []
        res = self._call(lambda s: s.remove_many(keys))
        if isinstance(res, int):
            return []
        return [k for k, r in zip(keys, res) if r == 0]

    def create_copy_task(self, key: str, targets: Sequence[str]) -> Tuple[uuid.UUID, int]:
        """Refused: tide places replicas itself (the cluster URL's R)."""
        return (uuid.UUID(int=0), NOT_SUPPORTED)

    def create_move_task(self, key: str, source: str, target: str) -> Tuple[uuid.UUID, int]:
        return (uuid.UUID(int=0), NOT_SUPPORTED)

    def query_task(self, task_id: Any) -> Tuple[None, int]:
        return (None, NOT_SUPPORTED)

__all__ = [
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "SoftPinAction",
    "ObjectDataType",
    "ReplicaStatus",
    "ReplicaDescriptor",
    "MemoryDescriptor",
    "DiskDescriptor",
    "Descriptor",
    "TaskType",
    "TaskStatus",
    "BufferHandle",
    "MooncakeHostMemAllocator",
    "SetupError",
    "resolve_url",
    "mooncake_code",
    "TENSOR_HEADER_SIZE",
] + [name for name, v in list(globals().items()) if name.isupper() and isinstance(v, int)
     and not name.startswith("_") and name != "TENSOR_HEADER_SIZE"]
