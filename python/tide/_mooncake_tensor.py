"""The tensor helpers of tide.mooncake.MooncakeDistributedStore (Mooncake's put_tensor,
get_tensor_into, *_with_tp, *_with_parallelism without a layout spec, safetensors files).

A mixin: MooncakeDistributedStore inherits it and supplies the helpers it calls
(``_call``, ``_bad``, ``_check_config``, ``_upsert_many``, ``_registered``,
``batch_get_into``, ``batch_put_from``, ``batch_upsert_from``). torch is imported only
when a helper runs; without it the helpers raise ImportError saying so (the safetensors calls also need the
safetensors package).

Object layout: [magic "TIDT" u32, version u32, dtype i32 (Mooncake's dtype numbering),
ndim i32, dims i64 x 8, data bytes u64] then the tensor's bytes. Mooncake's own header
differs; a tide store is not read by Mooncake, so only put_tensor_from <-> get_tensor_into
agreement counts.
"""

from __future__ import annotations

import ctypes
import struct
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from ._mooncake_codes import (
    FILE_NOT_FOUND,
    INVALID_PARAMS,
    NOT_SUPPORTED,
    OBJECT_NOT_FOUND,
    OK,
    mooncake_code,
)

if TYPE_CHECKING:
    from .mooncake import ReplicateConfig

_TMAGIC = 0x54444954
_THDR = struct.Struct("<IIii8qQ")
TENSOR_HEADER_SIZE = _THDR.size
_TDTYPES = (
    "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
    "int64", "uint64", "bool", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
)


def _torch() -> Any:
    """torch, or None when it cannot be imported."""
    try:
        import torch  # noqa: PLC0415

        return torch
    except ImportError:
        return None


def _tensor_header(torch: Any, t: Any) -> bytes:
    name = str(t.dtype).replace("torch.", "")
    if name not in _TDTYPES:
        raise TypeError(f"tide: tensor dtype {t.dtype} is not one Mooncake stores")
    if t.dim() > 8:
        raise TypeError(f"tide: tensor of {t.dim()} dimensions (at most 8)")
    dims = list(t.shape) + [-1] * (8 - t.dim())
    return _THDR.pack(_TMAGIC, 1, _TDTYPES.index(name), t.dim(), *dims, t.numel() * t.element_size())


def _parse_header(raw: bytes) -> Optional[Tuple[str, List[int], int]]:
    if len(raw) < TENSOR_HEADER_SIZE:
        return None
    f = _THDR.unpack_from(raw)
    magic, dt, ndim, dims, nbytes = f[0], f[2], f[3], f[4:12], f[12]
    if magic != _TMAGIC or not 0 <= dt < len(_TDTYPES) or not 0 <= ndim <= 8:
        return None
    return _TDTYPES[dt], list(dims[:ndim]), nbytes


def _tensor_from_bytes(torch: Any, raw: Any, offset: int = 0) -> Any:
    """A tensor over raw[offset:] (a writable buffer): shares memory with raw."""
    mv = memoryview(raw)[offset:]
    hdr = _parse_header(bytes(mv[:TENSOR_HEADER_SIZE]))
    if hdr is None:
        return None
    name, dims, nbytes = hdr
    if len(mv) < TENSOR_HEADER_SIZE + nbytes:
        return None
    dtype = getattr(torch, name)
    data = mv[TENSOR_HEADER_SIZE:TENSOR_HEADER_SIZE + nbytes]
    if nbytes == 0:
        return torch.empty(dims, dtype=dtype)
    t = torch.frombuffer(data, dtype=torch.uint8)
    return t.view(dtype).reshape(dims)



# -- mooncake.store's module-level tensor codec (used by Mooncake's Python helpers) --------


def _tensor_metadata_size() -> int:
    """Bytes of the header put before a tensor's bytes."""
    return TENSOR_HEADER_SIZE


def _serialize_tensor(tensor: Any) -> Tuple[bytes, int, int, Any]:
    """(header, data address, data bytes, owner) for a tensor: the owner (a contiguous
    CPU tensor, a copy when the tensor was elsewhere or strided) holds the bytes at
    that address. ValueError for a tensor Mooncake could not store either."""
    torch = _torch()
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


def _deserialize_tensor(payload: bytes) -> Any:
    """The tensor in header + bytes (a copy it owns); ValueError when malformed."""
    torch = _torch()
    if torch is None:
        raise ImportError("tide.mooncake: _deserialize_tensor needs torch, which does not import")
    t = _tensor_from_bytes(torch, bytearray(payload))
    if t is None:
        raise ValueError("invalid serialized Mooncake tensor payload")
    return t

class TensorHelpers:
    """Mooncake's tensor methods; see the module docstring."""

    def _need_torch(self) -> Any:
        torch = _torch()
        if torch is None:
            raise ImportError("tide.mooncake: the tensor helpers need torch, which does not import")
        return torch

    def _tensor_blob(self, torch: Any, t: Any) -> List[Any]:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"expected a torch.Tensor, got {type(t).__name__}")
        c = t.detach().to("cpu").contiguous()
        hdr = _tensor_header(torch, c)
        data = c.view(torch.uint8).reshape(-1).numpy() if c.numel() else b""
        return [hdr, data, c]  # c keeps data's memory alive

    def _put_tensors(self, keys: List[str], tensors: List[Any], replace: bool,
                     config: Optional[ReplicateConfig] = None) -> List[int]:
        torch = self._need_torch()
        if len(keys) != len(tensors):
            self._bad(f"{len(keys)} keys, {len(tensors)} tensors")
            return [INVALID_PARAMS] * len(keys)
        rc = self._check_config(config)
        if rc != OK:
            return [rc] * len(keys)
        blobs = [self._tensor_blob(torch, t) for t in tensors]
        lists = [[b[0], b[1]] if len(b[1]) else [b[0]] for b in blobs]
        if replace:
            return self._upsert_many(keys, lambda s, k: s.put_many_iov(k, lists))
        res = self._call(lambda s: s.put_many_iov(keys, lists), None)
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
        vals = self._call(lambda s: s.get_many(keys), [None] * len(keys))
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
            res = self._put_tensors([self._tp_key(key, r) for r in range(tp_size)],
                                    shards, replace, config)
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
        out = []
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
            hdr = _parse_header(ctypes.string_at(p, min(n, TENSOR_HEADER_SIZE)))
            if hdr is None or TENSOR_HEADER_SIZE + hdr[2] > n:
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
