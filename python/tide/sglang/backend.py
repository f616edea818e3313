"""TideHiCacheStorage: SGLang HiCache's L3 storage backend (``HiCacheStorage``) over tide.

Imported only through ``tide.sglang`` (which names SGLang when it is missing). SGLang loads it
with ``--hicache-storage-backend dynamic`` and an extra config naming
``"module_path": "tide.sglang", "class_name": "TideHiCacheStorage"`` (docs/SGLANG.md).

Each registered host pool gets an I/O mode. ``ptr``: the pool describes its pages by address
(``get_page_buffer_meta``), and tide reads and writes those bytes in place (one copy, between
the pool and tided's shared memory over ``unix://``, or the socket over ``tide://``).
``flat``: the pool has no such description (a Mamba pool with side state; SGLang's
MambaPoolHost takes only the page_first and page_first_direct layouts), and pages go through ``get_data_page`` / ``set_from_flat_data_page`` copies. The mode is
part of a pool's key scope, so pages written one way are never read the other.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from typing import Any, Optional

import torch
from sglang.srt.mem_cache import hicache_storage as _hs

from .. import errors
from ..store import Store
from . import layout
from .layout import KIND_PAGE, KIND_STATE, SGLangSetupError

log = logging.getLogger("tide.sglang")

#: SGLang releases (major.minor) tide.sglang was tested with (`make test-sglang`).
SUPPORTED_SGLANG = ("0.5",)
#: The version scripts/sglang-env.sh installs.
TESTED_SGLANG = "0.5.23"


def _sglang_version() -> str:
    try:
        from importlib.metadata import version

        return str(version("sglang"))
    except Exception:  # a source checkout without metadata
        return "unknown"


SGLANG_VERSION = _sglang_version()

# The v1 interface is required; v2 (host pool transfers) exists from SGLang 0.5.
for _attr in ("HiCacheStorage", "HiCacheStorageConfig"):
    if not hasattr(_hs, _attr):
        raise ImportError(
            f"tide.sglang: SGLang {SGLANG_VERSION} has another HiCache storage interface "
            f"(sglang.srt.mem_cache.hicache_storage has no {_attr}); tide.sglang was "
            f"tested with SGLang {', '.join(SUPPORTED_SGLANG)}.x"
        )
for _attr in ("batch_get_v1", "batch_set_v1", "batch_exists", "exists"):
    if not hasattr(_hs.HiCacheStorage, _attr):
        raise ImportError(
            f"tide.sglang: SGLang {SGLANG_VERSION} has another HiCache storage interface "
            f"(HiCacheStorage has no {_attr}); tide.sglang was tested with SGLang "
            f"{', '.join(SUPPORTED_SGLANG)}.x"
        )
HAVE_V2 = all(
    hasattr(_hs, n) for n in ("PoolTransfer", "PoolTransferResult", "PoolHitPolicy")
) and hasattr(_hs.HiCacheStorage, "batch_get_v2")


def _name(pool_name: Any) -> str:
    return str(getattr(pool_name, "value", pool_name))


class _Pool:
    """One registered host pool: its kind, keys, I/O mode and page size in bytes."""

    def __init__(self, name: str, host: Any, cfg: Any, namespace: str) -> None:
        self.name = name
        self.kind = layout.pool_kind(name)
        self.host = host
        self.page_size = int(getattr(host, "page_size", 1) or 1)
        self.mode, self.payload = self._probe()
        self.keys = layout.Keys(namespace, name, self._scope(cfg, self.mode))
        # Flat pages (SGLang's batch_get/batch_set) can order a page's bytes otherwise than
        # the pool's address list (layer-first MHA: all K layers, then all V): their own scope.
        self.flat_keys = layout.Keys(namespace, name, self._scope(cfg, "flat"))

    def _scope(self, cfg: Any, mode: str) -> str:
        host, name = self.host, self.name
        mla = bool(getattr(cfg, "is_mla_model", False))
        # Replicated MLA KV is one shard for every TP rank; everything else (MHA heads,
        # Mamba and SWA state) is the TP rank's own.
        tp = None if (mla and name != "mamba") else (cfg.tp_rank, cfg.tp_size)
        return layout.digest(
            "v1",
            getattr(cfg, "model_name", None),
            type(host).__name__,
            getattr(host, "layout", None),
            str(getattr(host, "dtype", None)),
            getattr(host, "storage_format_tag", None),
            self.page_size,
            self.payload,
            mode,
            tp,
            (cfg.pp_rank, cfg.pp_size),
            (getattr(cfg, "attn_cp_rank", 0), getattr(cfg, "attn_cp_size", 1)),
            (getattr(cfg, "dcp_rank", 0), getattr(cfg, "dcp_size", 1)),
            getattr(cfg, "should_split_heads", False),
        )

    def _probe(self) -> tuple[str, int]:
        """("ptr", page bytes) when the pool describes a page by address, else
        ("flat", page bytes) from its flat page."""
        meta = getattr(self.host, "get_page_buffer_meta", None)
        if meta is not None:
            try:
                ptrs, sizes = meta(torch.zeros(self.page_size, dtype=torch.int64))
                if ptrs and len(ptrs) == len(sizes) and all(int(s) > 0 for s in sizes):
                    return "ptr", sum(int(s) for s in sizes)
            except (NotImplementedError, ValueError, AssertionError, AttributeError) as e:
                log.info("tide.sglang: pool %s: no zero-copy page meta (%s); copies", self.name, e)
        page = self.host.get_dummy_flat_data_page()
        return "flat", int(page.numel()) * int(page.element_size())


def _indices_fit(pool: _Pool, n: int, host_indices: Any) -> bool:
    """Whether host_indices holds n pages of pool (page_size indices each); logs why not."""
    if host_indices is not None and int(host_indices.numel()) == n * pool.page_size:
        return True
    log.error(
        "tide.sglang: %s: %d pages but %s host indices (page size %d)", pool.name, n,
        None if host_indices is None else int(host_indices.numel()), pool.page_size,
    )
    return False


class TideHiCacheStorage(_hs.HiCacheStorage):
    """HiCache L3 storage in tide. ``storage_config`` is SGLang's HiCacheStorageConfig; its
    ``extra_config`` carries ``tide_url`` and ``tide_namespace`` (layout.settings)."""

    def __init__(self, storage_config: Any, kwargs: Optional[dict[str, Any]] = None) -> None:
        self.storage_config = storage_config
        extra = getattr(storage_config, "extra_config", None)
        self.settings = layout.settings(extra)
        # SGLang's own switch (its cache controller reads the same key): with interface_v1,
        # pages move in place (batch_get_v1/batch_set_v1), else as flat pages
        # (batch_get/batch_set), each under its own keys. batch_exists and exists answer
        # for the keys SGLang will then read: a hit query must not count pages its reads
        # cannot find.
        self.in_place = bool((extra or {}).get("interface_v1", 0))
        self.store = Store(self.settings.url)
        self.pools: dict[str, _Pool] = {}
        self.registered_pools: dict[str, Any] = {}
        self.mem_pool_host: Any = None
        log.info(
            "tide.sglang: HiCache storage in %s (namespace %s, SGLang %s, v2 %s)",
            self.store.url, self.settings.namespace, SGLANG_VERSION, HAVE_V2,
        )

    # -- registration ----------------------------------------------------------------------

    def _register(self, host: Any, name: str) -> _Pool:
        pool = _Pool(name, host, self.storage_config, self.settings.namespace)
        self.pools[name] = pool
        self.registered_pools[name] = host
        return pool

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """The anchor pool (the KV host pool): v1 and the flat-page calls move its pages."""
        self.mem_pool_host = mem_pool_host
        self._register(mem_pool_host, "kv")

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        self._register(host_pool, _name(host_pool_name))

    def _pool(self, name: str) -> Optional[_Pool]:
        pool = self.pools.get(name)
        if pool is None:
            log.error("tide.sglang: no host pool %r was registered; its pages miss", name)
        return pool

    # -- the I/O of one pool ---------------------------------------------------------------

    def _kv_key(self, page_hash: str) -> str:
        kv = self.pools.get("kv")
        return kv.keys.key(page_hash) if kv is not None else ""

    def _headers(self, pool: _Pool, keys: Sequence[str], hashes: Sequence[str]) -> Any:
        buf = ctypes.create_string_buffer(max(1, len(keys)) * layout.HEADER_SIZE)
        for i, (k, h) in enumerate(zip(keys, hashes)):
            kv = k if pool.kind == KIND_PAGE else self._kv_key(h)
            hdr = layout.pack_header(pool.kind, pool.payload, k, kv)
            ctypes.memmove(ctypes.addressof(buf) + i * layout.HEADER_SIZE, hdr, len(hdr))
        return buf

    def _pieces(
        self, pool: _Pool, host_indices: Any, n: int, writing: bool
    ) -> tuple[list[list[int]], list[list[int]], list[Any]]:
        """Per page: the addresses and sizes of its bytes (after the header), and the
        tensors to keep alive (flat mode)."""
        ps = pool.page_size
        if pool.mode == "ptr":
            ptrs, sizes = pool.host.get_page_buffer_meta(host_indices[: n * ps])
            per = len(ptrs) // n
            return (
                [list(map(int, ptrs[i * per : (i + 1) * per])) for i in range(n)],
                [list(map(int, sizes[i * per : (i + 1) * per])) for i in range(n)],
                [],
            )
        idx = host_indices.tolist()
        if writing:
            pages = [pool.host.get_data_page(idx[i * ps], flat=True).contiguous() for i in range(n)]
        else:
            pages = [pool.host.get_dummy_flat_data_page() for _ in range(n)]
        return (
            [[int(p.data_ptr())] for p in pages],
            [[int(p.numel()) * int(p.element_size())] for p in pages],
            pages,
        )

    def _set(self, pool: _Pool, hashes: Sequence[str], host_indices: Any) -> list[bool]:
        n = len(hashes)
        if n == 0:
            return []
        if not _indices_fit(pool, n, host_indices):
            return [False] * n
        keys = [pool.keys.key(h) for h in hashes]
        try:
            ptrs, sizes, _keep = self._pieces(pool, host_indices, n, writing=True)
            # The header says payload bytes follow: a page of another size is refused here
            # (stored, it would fail its header on every load).
            fit = [sum(sz) == pool.payload for sz in sizes]
            if not all(fit):
                i = fit.index(False)
                log.error(
                    "tide.sglang: %s: %d of %d pages not saved: page %d has %d bytes, this "
                    "pool's pages have %d (registered)", pool.name, fit.count(False), n, i,
                    sum(sizes[i]), pool.payload,
                )
            sel = [i for i in range(n) if fit[i]]
            hdr = self._headers(pool, keys, hashes)
            base = ctypes.addressof(hdr)
            codes = [] if not sel else self.store.put_many_ptrs(
                [keys[i] for i in sel],
                [[base + i * layout.HEADER_SIZE] + ptrs[i] for i in sel],
                [[layout.HEADER_SIZE] + sizes[i] for i in sel],
            )
        except errors.Error as e:
            log.warning("tide.sglang: saving %d %s pages failed: %s", n, pool.name, e)
            return [False] * n
        ok = [False] * n
        for i, c in zip(sel, codes):
            ok[i] = c == 0
        return ok

    def _get(self, pool: _Pool, hashes: Sequence[str], host_indices: Any) -> list[bool]:
        n = len(hashes)
        if n == 0:
            return []
        if not _indices_fit(pool, n, host_indices):
            return [False] * n
        keys = [pool.keys.key(h) for h in hashes]
        try:
            allowed = [True] * n
            if pool.kind == KIND_STATE:
                # A state loads only where the KV page it ends is in the store.
                allowed = self.store.exists_many([self._kv_key(h) for h in hashes])
            ptrs, sizes, keep = self._pieces(pool, host_indices, n, writing=False)
            hdr = ctypes.create_string_buffer(n * layout.HEADER_SIZE)
            base = ctypes.addressof(hdr)
            sel = [i for i in range(n) if allowed[i]]
            got = self.store.get_many_ptrs(
                [keys[i] for i in sel],
                [[base + i * layout.HEADER_SIZE] + ptrs[i] for i in sel],
                [[layout.HEADER_SIZE] + sizes[i] for i in sel],
            )
        except errors.Error as e:
            log.warning("tide.sglang: loading %d %s pages failed: %s", n, pool.name, e)
            return [False] * n
        ok = [False] * n
        bad = []
        want = layout.HEADER_SIZE + pool.payload
        for i, length in zip(sel, got):
            if length == errors.ENOTFOUND or (length < 0 and length != errors.EBUFSMALL):
                continue
            raw = hdr.raw[i * layout.HEADER_SIZE : (i + 1) * layout.HEADER_SIZE]
            kv = keys[i] if pool.kind == KIND_PAGE else self._kv_key(hashes[i])
            if length == want and layout.header_ok(raw, pool.kind, pool.payload, keys[i], kv):
                ok[i] = True
            else:
                bad.append(keys[i])
        if bad:
            # Not a page of this pool and key (another format, another KV page, a short
            # value): a miss, and removed so the next save can store the right one.
            log.warning(
                "tide.sglang: %d %s values failed their header; removed", len(bad), pool.name
            )
            try:
                self.store.remove_many(bad)
            except errors.Error:
                pass
        if pool.mode == "flat":
            ps = pool.page_size
            idx = host_indices.tolist()
            for i in range(n):
                if ok[i]:
                    pool.host.set_from_flat_data_page(idx[i * ps], keep[i])
        return ok

    # -- v2: host pool transfers -----------------------------------------------------------

    def batch_exists_v2(
        self, keys: list[str], pool_transfers: Optional[list[Any]] = None, extra_info: Any = None
    ) -> Any:
        transfers = list(pool_transfers or [])
        kv = self.pools.get("kv")
        try:
            want: list[str] = [kv.keys.key(h) for h in keys] if kv else []
            plan = []
            for t in transfers:
                name = _name(t.name)
                pool = self.pools.get(name)
                plan.append((name, _name(t.hit_policy), len(t.keys or []) or 1, pool))
                if pool is not None:
                    want += [pool.keys.key(h) for h in keys]
            present = self.store.exists_many(want) if want else []
        except errors.Error as e:
            log.warning("tide.sglang: exists query failed: %s", e)
            return _hs.PoolTransferResult(0, {}, [])
        n = len(keys)
        kv_present = present[:n] if kv else [False] * n
        pos = n if kv else 0
        pools = []
        for name, policy, trailing, pool in plan:
            if pool is None:
                flags = [False] * n
            else:
                flags, pos = present[pos : pos + n], pos + n
            pools.append((name, policy, trailing, flags))
        pages, hits, restorable = layout.prefix_hits(kv_present, pools)
        return _hs.PoolTransferResult(pages, hits, restorable)

    def _io_v2(self, transfers: list[Any], setting: bool) -> dict[str, list[bool]]:
        out: dict[str, list[bool]] = {}
        for t in transfers:
            name = _name(t.name)
            hashes = list(t.keys or [])
            pool = self._pool(name)
            if pool is None:
                out[name] = [False] * len(hashes)
                continue
            io = self._set if setting else self._get
            out[name] = io(pool, hashes, t.host_indices)
        return out

    def batch_get_v2(self, transfers: list[Any], extra_info: Any = None) -> dict[str, list[bool]]:
        return self._io_v2(transfers, setting=False)

    def batch_set_v2(self, transfers: list[Any], extra_info: Any = None) -> dict[str, list[bool]]:
        return self._io_v2(transfers, setting=True)

    # -- v1: keys and KV host indices --------------------------------------------------------

    def _kv(self) -> _Pool:
        pool = self.pools.get("kv")
        if pool is None:
            raise SGLangSetupError(
                "tide.sglang: no KV host pool registered (register_mem_pool_host)"
            )
        return pool

    def batch_get_v1(
        self, keys: list[str], host_indices: Any, extra_info: Any = None
    ) -> list[bool]:
        return self._get(self._kv(), keys, host_indices)

    def batch_set_v1(
        self, keys: list[str], host_indices: Any, extra_info: Any = None
    ) -> list[bool]:
        return self._set(self._kv(), keys, host_indices)

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        pool = self._kv()
        scope = pool.keys if self.in_place else pool.flat_keys
        try:
            return layout.leading(self.store.exists_many([scope.key(k) for k in keys]))
        except errors.Error as e:
            log.warning("tide.sglang: exists query failed: %s", e)
            return 0

    # -- flat pages (SGLang's generic path, without interface_v1) -----------------------------

    def _flat_io(self, keys: list[str], tensors: list[Any], setting: bool) -> list[bool]:
        pool = self._kv()
        n = len(keys)
        if len(tensors) != n:
            raise SGLangSetupError(f"tide.sglang: {n} keys but {len(tensors)} pages")
        tks = [pool.flat_keys.key(k) for k in keys]
        flat = [t.contiguous() for t in tensors]
        sizes = [[int(t.numel()) * int(t.element_size())] for t in flat]
        for s in sizes:
            if s[0] != pool.payload:
                log.error(
                    "tide.sglang: a flat page of %d bytes; this pool's are %d", s[0], pool.payload
                )
                return [False] * n
        hdr = self._headers(pool, tks, keys) if setting else ctypes.create_string_buffer(
            max(1, n) * layout.HEADER_SIZE
        )
        base = ctypes.addressof(hdr)
        ptrs = [[base + i * layout.HEADER_SIZE, int(t.data_ptr())] for i, t in enumerate(flat)]
        lens = [[layout.HEADER_SIZE] + s for s in sizes]
        try:
            if setting:
                return [c == 0 for c in self.store.put_many_ptrs(tks, ptrs, lens)]
            got = self.store.get_many_ptrs(tks, ptrs, lens)
        except errors.Error as e:
            log.warning("tide.sglang: %d flat pages failed: %s", n, e)
            return [False] * n
        ok = []
        for i, length in enumerate(got):
            raw = hdr.raw[i * layout.HEADER_SIZE : (i + 1) * layout.HEADER_SIZE]
            good = length == layout.HEADER_SIZE + pool.payload and layout.header_ok(
                raw, KIND_PAGE, pool.payload, tks[i], tks[i]
            )
            ok.append(good)
            if good and flat[i].data_ptr() != tensors[i].data_ptr():
                tensors[i].copy_(flat[i].view_as(tensors[i]))
        return ok

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        return self.batch_get([key], [target_location])[0]

    def batch_get(
        self, keys: list[str], target_locations: Any = None, target_sizes: Any = None
    ) -> list[Any]:
        if target_locations is None:
            target_locations = [self._kv().host.get_dummy_flat_data_page() for _ in keys]
        ok = self._flat_io(list(keys), list(target_locations), setting=False)
        return [t if good else None for t, good in zip(target_locations, ok)]

    def set(
        self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None
    ) -> bool:
        return self.batch_set([key], [value])

    def batch_set(
        self, keys: list[str], values: Any = None, target_locations: Any = None,
        target_sizes: Any = None,
    ) -> bool:
        return all(self._flat_io(list(keys), list(values or []), setting=True))

    # -- the rest ------------------------------------------------------------------------------

    def clear(self) -> bool:
        """Not done: the store is shared (other engines, other models). Evict with tided's
        capacity, or run `tide clear` against it."""
        log.warning("tide.sglang: clear() leaves the shared tide store alone")
        return False

    def get_stats(self) -> Any:
        return None

    def close(self) -> None:
        self.store.close()
