"""The tensor helpers of tide.mooncake.MooncakeDistributedStore (Mooncake's put_tensor,
get_tensor_into, *_with_tp, *_with_parallelism without a layout spec, safetensors files).

A mixin: MooncakeDistributedStore inherits it and supplies the helpers it calls
(``_call``, ``_bad``, ``_check_config``, ``_upsert_many``, ``_registered``,
``batch_get_into``, ``batch_put_from``, ``batch_upsert_from``). torch is imported only
when a helper runs; without it the helpers raise ImportError saying so (the safetensors calls also need the
safetensors package).

Object layout: Mooncake's own, byte for byte (its C struct TensorMetadata, 304 bytes,
little-endian, natural alignment), then the tensor's bytes:

  offset  field                       value written
  0       magic u32                   0x4d4f4f4e
  4       version u16                 1
  6       header_size u16             304
  8       dtype i32                   Mooncake's numbering (_TDTYPES below)
  12      ndim i32                    0..8
  16      layout_kind u32             0 full tensor, 1 shard (the *_with_tp shards)
  20      reserved_flags u32          0
  24      data_offset u64             304
  32      data_bytes u64              bytes after the header
  40      global_shape i64 x 8        the whole tensor's shape, -1 past ndim
  104     local_shape i64 x 8         this object's shape (= global for a full tensor)
  168     axis_count u32, reserved u32
  176     axes: 4 x {kind, axis_index, shard_rank, shard_count, split_dim, reserved0 i32;
          reserved1 i64 (a shard's extent along split_dim)}, zero past axis_count

So a tensor put by code written for Mooncake reads back identically, and code that
parses the header (Mooncake's structured_object_store) works on tide's objects.
"""

from __future__ import annotations

import ctypes
import struct
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple, TypeVar, Union

from .codes import (
    FILE_NOT_FOUND,
    INVALID_PARAMS,
    NOT_SUPPORTED,
    OBJECT_NOT_FOUND,
    OK,
    mooncake_code,
)
from .values import ReplicateConfig

if TYPE_CHECKING:
    from ..store import Store

_T = TypeVar("_T")
_D = TypeVar("_D")

_TMAGIC = 0x4D4F4F4E
_TVERSION = 1
_TMAXDIMS = 8
_TMAXAXES = 4
_TOBJ = struct.Struct("<IHHiiIIQQ")  # TensorObjectHeader, 40 bytes
_TSHAPE = struct.Struct("<8q")
_TAXIS = struct.Struct("<6iq")  # LayoutAxis, 32 bytes
TENSOR_HEADER_SIZE = _TOBJ.size + 2 * _TSHAPE.size + 8 + _TMAXAXES * _TAXIS.size  # 304
_LAYOUT_FULL, _LAYOUT_SHARD = 0, 1
_AXIS_TP = 1
_TDTYPES = (
    "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
    "int64", "uint64", "bool", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
)
_TDSIZE = (4, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1, 2, 2, 1, 1)


def load_torch() -> Any:
    """torch, or None when it cannot be imported."""
    try:
        import torch  # noqa: PLC0415

        return torch
    except ImportError:
        return None


def pack_header(dtype: int, global_shape: Sequence[int], local_shape: Sequence[int],
                 nbytes: int, layout_kind: int = _LAYOUT_FULL,
                 axes: Sequence[Tuple[int, int, int, int, int, int, int]] = ()) -> bytes:
    """Mooncake's TensorMetadata for one object (see the module docstring)."""
    ndim = len(local_shape)
    pad = [-1] * (_TMAXDIMS - ndim)
    out = [_TOBJ.pack(_TMAGIC, _TVERSION, TENSOR_HEADER_SIZE, dtype, ndim, layout_kind, 0,
                      TENSOR_HEADER_SIZE, nbytes),
           _TSHAPE.pack(*global_shape, *pad), _TSHAPE.pack(*local_shape, *pad),
           struct.pack("<II", len(axes), 0)]
    out += [_TAXIS.pack(*a) for a in axes]
    out.append(bytes(_TAXIS.size * (_TMAXAXES - len(axes))))
    return b"".join(out)


def _tensor_header(torch: Any, t: Any, global_shape: Optional[Sequence[int]] = None,
                   axes: Sequence[Tuple[int, int, int, int, int, int, int]] = ()) -> bytes:
    """The header for contiguous CPU tensor t; with global_shape, t is a shard of a
    tensor of that shape (layout_kind 1, the given axes)."""
    name = str(t.dtype).replace("torch.", "")
    if name not in _TDTYPES:
        raise TypeError(f"tide: tensor dtype {t.dtype} is not one Mooncake stores")
    if t.dim() > _TMAXDIMS:
        raise TypeError(f"tide: tensor of {t.dim()} dimensions (at most 8)")
    local = list(t.shape)
    kind = _LAYOUT_FULL if global_shape is None else _LAYOUT_SHARD
    return pack_header(_TDTYPES.index(name), local if global_shape is None else list(global_shape),
                        local, t.numel() * t.element_size(), kind, axes)


def parse_header(raw: bytes, total: Optional[int] = None) -> Optional[Tuple[str, List[int], int, int]]:
    """(dtype name, local shape, data bytes, data offset) from a header, or None when it is
    not one Mooncake's ValidateTensorMetadata accepts. total: the object's whole length,
    when known (data_bytes must then be exactly what follows data_offset)."""
    if len(raw) < TENSOR_HEADER_SIZE:
        return None
    magic, ver, hsize, dt, ndim, kind, _flags, doff, nbytes = _TOBJ.unpack_from(raw)
    if magic != _TMAGIC or ver != _TVERSION or hsize != TENSOR_HEADER_SIZE:
        return None
    if not 0 <= dt < len(_TDTYPES) or not 0 <= ndim <= _TMAXDIMS or kind > _LAYOUT_SHARD:
        return None
    gshape = _TSHAPE.unpack_from(raw, _TOBJ.size)
    lshape = _TSHAPE.unpack_from(raw, _TOBJ.size + _TSHAPE.size)
    (naxes,) = struct.unpack_from("<I", raw, _TOBJ.size + 2 * _TSHAPE.size)
    if naxes > _TMAXAXES or doff < TENSOR_HEADER_SIZE:
        return None
    if total is not None and (doff > total or nbytes != total - doff):
        return None
    if any(d < 0 for d in gshape[:ndim] + lshape[:ndim]) \
            or any(d != -1 for d in gshape[ndim:] + lshape[ndim:]):
        return None
    numel = 1
    for d in lshape[:ndim]:
        numel *= d
    if numel * _TDSIZE[dt] != nbytes:
        return None
    return _TDTYPES[dt], list(lshape[:ndim]), nbytes, doff


def _tensor_from_bytes(torch: Any, raw: Any, offset: int = 0) -> Any:
    """A tensor over raw[offset:] (a writable buffer): shares memory with raw."""
    mv = memoryview(raw)[offset:]
    hdr = parse_header(bytes(mv[:TENSOR_HEADER_SIZE]))
    if hdr is None:
        return None
    name, dims, nbytes, doff = hdr
    if len(mv) < doff + nbytes:
        return None
    dtype = getattr(torch, name)
    data = mv[doff:doff + nbytes]
    if nbytes == 0:
        return torch.empty(dims, dtype=dtype)
    t = torch.frombuffer(data, dtype=torch.uint8)
    return t.view(dtype).reshape(dims)



# -- mooncake.store's module-level tensor codec (used by Mooncake's Python helpers) --------


def tensor_metadata_size() -> int:
    """Bytes of the header put before a tensor's bytes."""
    return TENSOR_HEADER_SIZE


def serialize_tensor(tensor: Any) -> Tuple[bytes, int, int, Any]:
    """(header, data address, data bytes, owner) for a tensor: the owner (a contiguous
    CPU tensor, a copy when the tensor was elsewhere or strided) holds the bytes at
    that address. ValueError for a tensor Mooncake could not store either."""
    torch = load_torch()
    if torch is None:
        raise ImportError("tide.mooncake: _serialize_tensor needs torch, which does not import")
    if not isinstance(tensor, torch.Tensor):
        raise ValueError("unsupported tensor for Mooncake tensor serialization")
    owner = tensor.detach().to("cpu").contiguous()
    try:
        hdr = _tensor_header(torch, owner)
    except TypeError as e:
        raise ValueError(f"unsupported tensor for Mooncake tensor serialization: {e}") from e
    nbytes = owner.numel() * owner.element_size()
    return hdr, owner.data_ptr() if nbytes else 0, nbytes, owner


def deserialize_tensor(payload: bytes) -> Any:
    """The tensor in header + bytes (a copy it owns); ValueError when malformed."""
    torch = load_torch()
    if torch is None:
        raise ImportError("tide.mooncake: _deserialize_tensor needs torch, which does not import")
    t = _tensor_from_bytes(torch, bytearray(payload))
    if t is None:
        raise ValueError("invalid serialized Mooncake tensor payload")
    return t

class TensorHelpers:
    """Mooncake's tensor methods; see the module docstring."""

    if TYPE_CHECKING:  # what MooncakeDistributedStore (client.py) supplies

        _store: Optional[Store]

        def _bad(self, message: str, code: int = INVALID_PARAMS) -> int: ...

        def _check_config(self, config: Optional[ReplicateConfig]) -> int: ...

        def _registered(self, ptr: int, size: int) -> bool: ...

        def _upsert_many(self, keys: List[str],
                         put: Callable[[Store, List[str]], List[int]]) -> List[int]: ...

        def _call(self, fn: Callable[[Store], _T]) -> Union[_T, int]: ...

        def _call_or(self, fn: Callable[[Store], _T], default: _D) -> Union[_T, _D]: ...

        def batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                           sizes: Sequence[int]) -> List[int]: ...

        def batch_put_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                           sizes: Sequence[int],
                           config: Optional[ReplicateConfig] = None) -> List[int]: ...

        def batch_upsert_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                              sizes: Sequence[int],
                              config: Optional[ReplicateConfig] = None) -> List[int]: ...

    def _need_torch(self) -> Any:
        torch = load_torch()
        if torch is None:
            raise ImportError("tide.mooncake: the tensor helpers need torch, which does not import")
        return torch

    def _tensor_blob(self, torch: Any, t: Any, layout: Any = None) -> List[Any]:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"expected a torch.Tensor, got {type(t).__name__}")
        c = t.detach().to("cpu").contiguous()
        hdr = _tensor_header(torch, c, *(layout or ()))
        data = c.view(torch.uint8).reshape(-1).numpy() if c.numel() else b""
        return [hdr, data, c]  # c keeps data's memory alive

    def _put_tensors(self, keys: List[str], tensors: List[Any], replace: bool,
                     config: Optional[ReplicateConfig] = None,
                     layouts: Optional[List[Any]] = None) -> List[int]:
        """layouts: per tensor None or (global shape, axes) for a shard's header."""
        torch = self._need_torch()
        if len(keys) != len(tensors):
            self._bad(f"{len(keys)} keys, {len(tensors)} tensors")
            return [INVALID_PARAMS] * len(keys)
        rc = self._check_config(config)
        if rc != OK:
            return [rc] * len(keys)
        layouts = layouts or [None] * len(tensors)
        blobs = [self._tensor_blob(torch, t, lay) for t, lay in zip(tensors, layouts)]
        lists = [[b[0], b[1]] if len(b[1]) else [b[0]] for b in blobs]
        if replace:
            return self._upsert_many(keys, lambda s, k: s.put_many_iov(k, lists))
        res = self._call(lambda s: s.put_many_iov(keys, lists))
        if isinstance(res, int):
            return [res] * len(keys)
        return [mooncake_code(r) for r in res]

    def put_tensor(self, key: str, tensor: Any) -> int:
        return self._put_tensors([key], [tensor], False)[0]

    def batch_put_tensor(self, keys: Sequence[str], tensors_list: Sequence[Any]) -> List[int]:
        return self._put_tensors(list(keys), list(tensors_list), False)

    def pub_tensor(self, key: str, tensor: Any, config: Optional[ReplicateConfig] = None) -> int:
        return self._put_tensors([key], [tensor], False, config)[0]

    def batch_pub_tensor(self, keys: Sequence[str], tensors_list: Sequence[Any],
                         config: Optional[ReplicateConfig] = None) -> List[int]:
        return self._put_tensors(list(keys), list(tensors_list), False, config)

    def upsert_tensor(self, key: str, tensor: Any) -> int:
        return self._put_tensors([key], [tensor], True)[0]

    def batch_upsert_tensor(self, keys: Sequence[str], tensors_list: Sequence[Any]) -> List[int]:
        return self._put_tensors(list(keys), list(tensors_list), True)

    def upsert_pub_tensor(self, key: str, tensor: Any, config: Optional[ReplicateConfig] = None) -> int:
        return self._put_tensors([key], [tensor], True, config)[0]

    def batch_upsert_pub_tensor(self, keys: Sequence[str], tensors_list: Sequence[Any],
                                config: Optional[ReplicateConfig] = None) -> List[int]:
        return self._put_tensors(list(keys), list(tensors_list), True, config)

    def get_tensor(self, key: str) -> Any:
        """The tensor stored under key, or None."""
        return self.batch_get_tensor([key])[0]

    def batch_get_tensor(self, keys: Sequence[str]) -> List[Any]:
        torch = self._need_torch()
        keys = list(keys)
        vals = self._call_or(lambda s: s.get_many(keys), [None] * len(keys))
        return [None if v is None else _tensor_from_bytes(torch, bytearray(v)) for v in vals]

    @staticmethod
    def _tp_key(key: str, rank: int) -> str:
        return f"{key}_tp_{rank}"

    def _shards(self, torch: Any, t: Any, tp_size: int, split_dim: int) -> Optional[List[Any]]:
        if not isinstance(tp_size, int) or tp_size < 1 or not 0 <= split_dim < max(t.dim(), 1):
            return None
        if t.dim() == 0 or t.shape[split_dim] % tp_size:
            return None
        return list(torch.chunk(t, tp_size, dim=split_dim))

    def _put_tp(self, keys: List[str], tensors: List[Any], tp_size: int, split_dim: int,
                config: Optional[ReplicateConfig], replace: bool = False) -> List[int]:
        torch = self._need_torch()
        out = []
        for key, t in zip(keys, tensors):
            shards = self._shards(torch, t, tp_size, split_dim)
            if shards is None:
                out.append(self._bad(f"{key!r}: cannot split dim {split_dim} of shape "
                                     f"{tuple(t.shape)} into {tp_size} shards"))
                continue
            # Mooncake's shard header: the full shape, one TP axis per shard.
            layouts = [(list(t.shape), [(_AXIS_TP, 0, r, tp_size, split_dim, 0,
                                         sh.shape[split_dim])]) for r, sh in enumerate(shards)]
            res = self._put_tensors([self._tp_key(key, r) for r in range(tp_size)],
                                    shards, replace, config, layouts)
            bad = [r for r in res if r < 0]
            out.append(bad[0] if bad else OK)
        return out

    def put_tensor_with_tp(self, key: str, tensor: Any, tp_rank: int = 0, tp_size: int = 1,
                           split_dim: int = 0) -> int:
        """Split tensor along split_dim into tp_size shards stored as key_tp_<rank>."""
        return self._put_tp([key], [tensor], tp_size, split_dim, None)[0]

    def batch_put_tensor_with_tp(self, base_keys: Sequence[str], tensors_list: Sequence[Any],
                                 tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0) -> List[int]:
        return self._put_tp(list(base_keys), list(tensors_list), tp_size, split_dim, None)

    def pub_tensor_with_tp(self, key: str, tensor: Any, config: Optional[ReplicateConfig] = None,
                           tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0) -> int:
        return self._put_tp([key], [tensor], tp_size, split_dim, config)[0]

    def batch_pub_tensor_with_tp(self, base_keys: Sequence[str], tensors_list: Sequence[Any],
                                 config: Optional[ReplicateConfig] = None, tp_rank: int = 0,
                                 tp_size: int = 1, split_dim: int = 0) -> List[int]:
        return self._put_tp(list(base_keys), list(tensors_list), tp_size, split_dim, config)

    def get_tensor_with_tp(self, key: str, tp_rank: int = 0, tp_size: int = 1,
                           split_dim: int = 0) -> Any:
        """Rank tp_rank's shard (key_tp_<rank>), or None."""
        return self.get_tensor(self._tp_key(key, tp_rank))

    def batch_get_tensor_with_tp(self, base_keys: Sequence[str], tp_rank: int = 0,
                                 tp_size: int = 1) -> List[Any]:
        return self.batch_get_tensor([self._tp_key(k, tp_rank) for k in base_keys])

    def _get_tensors_into(self, keys: List[str], ptrs: List[int], sizes: List[int]) -> List[Any]:
        """Per key a tensor over its buffer, or None (missing, too small). As Mooncake's,
        a call that is wrong as a whole (before setup, list lengths differ, a null
        pointer) returns INVALID_PARAMS for every key instead."""
        torch = self._need_torch()
        if self._store is None or len(ptrs) != len(keys) or len(sizes) != len(keys) \
                or any(not p for p in ptrs):
            self._bad(f"{len(keys)} keys, {len(ptrs)} pointers, {len(sizes)} sizes, "
                      f"or a null pointer, or not set up")
            return [INVALID_PARAMS] * len(keys)
        res = self.batch_get_into(keys, ptrs, sizes)
        out: List[Any] = []
        for p, n, r in zip(ptrs, sizes, res):
            if r < 0:
                out.append(None)
                continue
            view = (ctypes.c_char * n).from_address(p)
            out.append(_tensor_from_bytes(torch, view))
        return out

    def get_tensor_into(self, key: str, buffer_ptr: int, size: int) -> Any:
        """Read [header][data] into the registered buffer; a tensor viewing it, or None."""
        got = self._get_tensors_into([key], [buffer_ptr], [size])[0]
        return None if isinstance(got, int) else got

    def batch_get_tensor_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                              sizes: Sequence[int]) -> List[Any]:
        return self._get_tensors_into(list(keys), list(buffer_ptrs), list(sizes))

    def get_tensor_with_tp_into(self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0,
                                tp_size: int = 1, split_dim: int = 0) -> Any:
        return self.get_tensor_into(self._tp_key(key, tp_rank), buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys: Sequence[str], buffer_ptrs: Sequence[int],
                                      sizes: Sequence[int], tp_rank: int = 0,
                                      tp_size: int = 1) -> List[Any]:
        return self.batch_get_tensor_into([self._tp_key(k, tp_rank) for k in base_keys],
                                          buffer_ptrs, sizes)

    def get_tensor_into_cuda(self, key: str, tensor: Any) -> int:
        """Copy the stored tensor's bytes into tensor (any device): its byte count, or a
        negative code (INVALID_PARAMS when sizes or dtypes differ)."""
        return self.batch_get_tensor_into_cuda([key], [tensor])[0]

    def batch_get_tensor_into_cuda(self, keys: Sequence[str], tensors_list: Sequence[Any]) -> List[int]:
        self._need_torch()
        got = self.batch_get_tensor(list(keys))
        out = []
        for key, src, dst in zip(keys, got, tensors_list):
            if src is None:
                out.append(OBJECT_NOT_FOUND)
            elif src.dtype != dst.dtype or src.numel() != dst.numel():
                out.append(self._bad(f"{key!r}: stored {src.dtype}{tuple(src.shape)} does not "
                                     f"fit {dst.dtype}{tuple(dst.shape)}"))
            else:
                dst.copy_(src.reshape(dst.shape))
                out.append(src.numel() * src.element_size())
        return out

    def _put_from_tensor_buffers(self, keys: List[str], ptrs: List[int], sizes: List[int],
                                 replace: bool) -> List[int]:
        """Store buffers that already hold [header][data] (get_tensor_into's layout)."""
        out = [INVALID_PARAMS] * len(keys)
        good = []
        for i, (p, n) in enumerate(zip(ptrs, sizes)):
            if not self._registered(p, n):
                self._bad(f"{keys[i]!r}: buffer outside every registered buffer")
                continue
            hdr = parse_header(ctypes.string_at(p, min(n, TENSOR_HEADER_SIZE)))
            if hdr is None or hdr[3] + hdr[2] > n:
                self._bad(f"{keys[i]!r}: buffer does not start with a tensor header")
                continue
            good.append(i)
        if good:
            k = [keys[i] for i in good]
            res = (self.batch_upsert_from if replace else self.batch_put_from)(
                k, [ptrs[i] for i in good], [sizes[i] for i in good])
            for i, r in zip(good, res):
                out[i] = r
        return out

    def put_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        return self._put_from_tensor_buffers([key], [buffer_ptr], [size], False)[0]

    def batch_put_tensor_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                              sizes: Sequence[int]) -> List[int]:
        return self._put_from_tensor_buffers(list(keys), list(buffer_ptrs), list(sizes), False)

    def upsert_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        return self._put_from_tensor_buffers([key], [buffer_ptr], [size], True)[0]

    def batch_upsert_tensor_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                                 sizes: Sequence[int]) -> List[int]:
        return self._put_from_tensor_buffers(list(keys), list(buffer_ptrs), list(sizes), True)

    def put_tensor_with_tp_from(self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0,
                                tp_size: int = 1, split_dim: int = 0) -> int:
        return self.batch_put_tensor_with_tp_from([key], [buffer_ptr], [size], tp_rank,
                                                  tp_size, split_dim)[0]

    def batch_put_tensor_with_tp_from(self, base_keys: Sequence[str], buffer_ptrs: Sequence[int],
                                      sizes: Sequence[int], tp_rank: int = 0, tp_size: int = 1,
                                      split_dim: int = 0) -> List[int]:
        """Each buffer holds a whole tensor ([header][data]); stored split as key_tp_<r>."""
        torch = self._need_torch()
        out = []
        for key, p, n in zip(base_keys, buffer_ptrs, sizes):
            if not self._registered(p, n):
                out.append(self._bad(f"{key!r}: buffer outside every registered buffer"))
                continue
            t = _tensor_from_bytes(torch, (ctypes.c_char * n).from_address(p))
            if t is None:
                out.append(self._bad(f"{key!r}: buffer does not start with a tensor header"))
                continue
            out.append(self._put_tp([key], [t], tp_size, split_dim, None)[0])
        return out

    # -- *_with_parallelism: whole tensors; a layout spec is refused -------------------------
    # Mooncake routes these calls by their spec; with none (parallelism, writer_partition
    # and target all None) the tensor is written or read whole, as put_tensor /
    # get_tensor do, and so here. ParallelAxis / TensorParallelism / ReadTarget sharding
    # (Mooncake's sharded tensor metadata) is not implemented: NOT_SUPPORTED.

    def _spec_refused(self, what: str, *specs: Any) -> bool:
        if all(x is None for x in specs):
            return False
        self._bad(f"{what}: a parallelism / writer-partition / read-target spec is not "
                  f"supported by tide (docs/MOONCAKE.md); None writes or reads whole tensors",
                  NOT_SUPPORTED)
        return True

    def get_tensor_with_parallelism(self, key: str, target: Any = None) -> Any:
        if self._spec_refused("get_tensor_with_parallelism", target):
            return None
        return self.get_tensor(key)

    def batch_get_tensor_with_parallelism(self, keys: Sequence[str], targets: Any = None) -> List[Any]:
        keys = list(keys)
        if targets is not None and any(t is not None for t in targets):
            self._spec_refused("batch_get_tensor_with_parallelism", targets)
            return [None] * len(keys)
        return self.batch_get_tensor(keys)

    def get_tensor_with_parallelism_into(self, key: str, buffer_ptr: int, size: int,
                                         target: Any = None) -> Any:
        if self._spec_refused("get_tensor_with_parallelism_into", target):
            return None
        return self.get_tensor_into(key, buffer_ptr, size)

    def batch_get_tensor_with_parallelism_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                                               sizes: Sequence[int], targets: Any = None) -> List[Any]:
        keys = list(keys)
        if targets is not None and any(t is not None for t in targets):
            self._spec_refused("batch_get_tensor_with_parallelism_into", targets)
            return [None] * len(keys)
        return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)

    def _batch_specs_refused(self, what: str, n: int, *spec_lists: Any) -> bool:
        for specs in spec_lists:
            if specs is not None and any(x is not None for x in specs):
                self._spec_refused(what, specs)
                return True
        return False

    def put_tensor_with_parallelism(self, key: str, tensor: Any, parallelism: Any = None,
                                    config: Optional[ReplicateConfig] = None,
                                    writer_partition: Any = None) -> int:
        if self._spec_refused("put_tensor_with_parallelism", parallelism, writer_partition):
            return NOT_SUPPORTED
        return self._put_tensors([key], [tensor], False, config)[0]

    def batch_put_tensor_with_parallelism(self, keys: Sequence[str], tensors_list: Sequence[Any],
                                          parallelisms: Any = None,
                                          config: Optional[ReplicateConfig] = None,
                                          writer_partitions: Any = None) -> List[int]:
        keys = list(keys)
        if self._batch_specs_refused("batch_put_tensor_with_parallelism", len(keys),
                                     parallelisms, writer_partitions):
            return [NOT_SUPPORTED] * len(keys)
        return self._put_tensors(keys, list(tensors_list), False, config)

    def put_tensor_with_parallelism_from(self, key: str, buffer_ptr: int, size: int,
                                         parallelism: Any = None,
                                         config: Optional[ReplicateConfig] = None,
                                         writer_partition: Any = None) -> int:
        if self._spec_refused("put_tensor_with_parallelism_from", parallelism, writer_partition):
            return NOT_SUPPORTED
        rc = self._check_config(config)
        return rc if rc != OK else self.put_tensor_from(key, buffer_ptr, size)

    def batch_put_tensor_with_parallelism_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                                               sizes: Sequence[int], parallelisms: Any = None,
                                               config: Optional[ReplicateConfig] = None,
                                               writer_partitions: Any = None) -> List[int]:
        keys = list(keys)
        if self._batch_specs_refused("batch_put_tensor_with_parallelism_from", len(keys),
                                     parallelisms, writer_partitions):
            return [NOT_SUPPORTED] * len(keys)
        rc = self._check_config(config)
        if rc != OK:
            return [rc] * len(keys)
        return self.batch_put_tensor_from(keys, buffer_ptrs, sizes)

    def upsert_tensor_with_parallelism(self, key: str, tensor: Any, parallelism: Any = None,
                                       config: Optional[ReplicateConfig] = None,
                                       writer_partition: Any = None) -> int:
        if self._spec_refused("upsert_tensor_with_parallelism", parallelism, writer_partition):
            return NOT_SUPPORTED
        return self._put_tensors([key], [tensor], True, config)[0]

    def upsert_tensor_with_parallelism_from(self, key: str, buffer_ptr: int, size: int,
                                            parallelism: Any = None,
                                            config: Optional[ReplicateConfig] = None,
                                            writer_partition: Any = None) -> int:
        if self._spec_refused("upsert_tensor_with_parallelism_from", parallelism, writer_partition):
            return NOT_SUPPORTED
        rc = self._check_config(config)
        return rc if rc != OK else self.upsert_tensor_from(key, buffer_ptr, size)

    def batch_upsert_tensor_with_parallelism(self, keys: Sequence[str], tensors_list: Sequence[Any],
                                             parallelisms: Any = None,
                                             config: Optional[ReplicateConfig] = None,
                                             writer_partitions: Any = None) -> List[int]:
        keys = list(keys)
        if self._batch_specs_refused("batch_upsert_tensor_with_parallelism", len(keys),
                                     parallelisms, writer_partitions):
            return [NOT_SUPPORTED] * len(keys)
        return self._put_tensors(keys, list(tensors_list), True, config)

    def batch_upsert_tensor_with_parallelism_from(self, keys: Sequence[str],
                                                  buffer_ptrs: Sequence[int], sizes: Sequence[int],
                                                  parallelisms: Any = None,
                                                  config: Optional[ReplicateConfig] = None,
                                                  writer_partitions: Any = None) -> List[int]:
        keys = list(keys)
        if self._batch_specs_refused("batch_upsert_tensor_with_parallelism_from", len(keys),
                                     parallelisms, writer_partitions):
            return [NOT_SUPPORTED] * len(keys)
        rc = self._check_config(config)
        if rc != OK:
            return [rc] * len(keys)
        return self.batch_upsert_tensor_from(keys, buffer_ptrs, sizes)

    # -- safetensors files ---------------------------------------------------------------------

    def save_tensor_to_safetensor(self, key: str, file_name: Optional[str] = None) -> int:
        """Write the tensor under key to a safetensors file (file_name, else the key),
        as Mooncake does: 0; FILE_NOT_FOUND when the key holds no tensor;
        INVALID_PARAMS before setup or when safetensors cannot write it."""
        if self._store is None:
            return self._bad("save_tensor_to_safetensor: setup() has not succeeded")
        tensor = self.get_tensor(key)
        if tensor is None:
            return self._bad(f"save_tensor_to_safetensor: no tensor under {key!r}", FILE_NOT_FOUND)
        try:
            from safetensors.torch import save_file  # noqa: PLC0415

            save_file({key: tensor.contiguous()}, key if file_name is None else file_name)
        except Exception as e:  # ImportError, OSError, safetensors' own errors
            return self._bad(f"save_tensor_to_safetensor: {type(e).__name__}: {e}")
        return OK

    def load_tensor_from_safetensor(self, key: Optional[str] = None, file_name: str = "") -> Any:
        """Read a safetensors file and store its tensor under key (else the file name):
        the entry named key, else the first. The tensor, or None on any failure."""
        if self._store is None:
            self._bad("load_tensor_from_safetensor: setup() has not succeeded")
            return None
        try:
            from safetensors.torch import load_file  # noqa: PLC0415

            loaded = load_file(file_name)
        except Exception as e:
            self._bad(f"load_tensor_from_safetensor: {file_name!r}: {type(e).__name__}: {e}")
            return None
        if not loaded:
            self._bad(f"load_tensor_from_safetensor: no tensors in {file_name!r}")
            return None
        target = file_name if key is None else key
        entry = target if key is not None and target in loaded else next(iter(loaded))
        tensor = loaded[entry]
        if self.put_tensor(target, tensor) != OK:
            return None
        return tensor
