"""Where a paged KV tensor lives (memory kind and device, base address, extent, shape,
strides, element size), read from a torch tensor or a numpy array, for
``tide_connector_register_region`` (host memory) or ``tide_connector_register_device_region``
(a CUDA device: the pointer is the device's, and libtide moves the pages with the GPU's copy
engine)."""

from __future__ import annotations

import errno
from typing import Any

from .. import _lib, errors


class Region:
    """Where one paged KV tensor lives: base address, bytes from base to the end of its
    storage, shape and strides in elements, element size — read by duck typing from a
    torch tensor (data_ptr(), stride(), element_size(), untyped_storage()) or a numpy array
    (__array_interface__, strides, itemsize)."""

    def __init__(self, name: str, t: Any, whole_storage: bool = False) -> None:
        self.name = name
        self.kind, self.device = _lib.MEM_HOST, 0
        self.base = self.nbytes = self.elem = 0
        self.storage_base = self.storage_end = 0
        self.shape: tuple[int, ...] = ()
        self.strides: tuple[int, ...] = ()
        if callable(getattr(t, "data_ptr", None)):
            self._from_torch(t)
        elif hasattr(t, "__array_interface__"):
            self._from_numpy(t)
        else:
            raise errors.InvalidBuffer(
                -errno.EINVAL,
                f"TideStoreConnector: KV cache {name!r}: expected a torch tensor or a numpy "
                f"array, got {type(t).__name__}",
            )
        if whole_storage:  # Mamba: every state of a block in one page of the raw storage
            self.base, self.nbytes = self.storage_base, self.storage_end - self.storage_base
            self.shape = self.strides = ()

    def _from_torch(self, t: Any) -> None:
        device = getattr(t, "device", None)
        dtype = getattr(device, "type", "cpu") if device is not None else "cpu"
        if dtype == "cuda":
            index = getattr(device, "index", None)
            self.kind, self.device = _lib.MEM_CUDA, int(index) if index is not None else 0
        elif dtype != "cpu":
            raise errors.InvalidArgument(
                -errno.EINVAL,
                f"TideStoreConnector: KV cache {self.name!r} is on {device}: libtide moves "
                f"block pages in host memory or on CUDA devices only",
            )
        self.base = int(t.data_ptr())
        self.elem = int(t.element_size())
        self.shape = tuple(int(s) for s in t.shape)
        self.strides = tuple(int(t.stride(d)) for d in range(len(self.shape)))
        try:
            st = t.untyped_storage()
            self.storage_base, self.storage_end = int(st.data_ptr()), int(st.data_ptr()) + int(
                st.nbytes()
            )
        except AttributeError:
            self.storage_base = self.base
            self.storage_end = self.base + self._span()
        self.nbytes = self.storage_end - self.base

    def _from_numpy(self, a: Any) -> None:
        ai = a.__array_interface__
        ptr, readonly = ai["data"]
        if readonly:
            raise errors.InvalidBuffer(
                -errno.EINVAL,
                f"TideStoreConnector: KV cache {self.name!r} is read-only; loads write it",
            )
        self.base = int(ptr)
        self.elem = int(a.itemsize)
        self.shape = tuple(int(s) for s in a.shape)
        strides = a.strides
        for d, s in enumerate(strides):
            if s % self.elem:
                raise errors.InvalidBuffer(
                    -errno.EINVAL,
                    f"TideStoreConnector: KV cache {self.name!r}: stride {s} of dimension {d} "
                    f"is not a whole number of {self.elem}-byte elements",
                )
        self.strides = tuple(int(s) // self.elem for s in strides)
        root = a
        while getattr(root, "base", None) is not None and hasattr(root.base, "__array_interface__"):
            root = root.base
        rptr = int(root.__array_interface__["data"][0])
        rbytes = int(getattr(root, "nbytes", 0))
        if rptr <= self.base < rptr + rbytes:
            self.storage_base, self.storage_end = rptr, rptr + rbytes
        else:  # a base that is not an array (mmap, bytes): the view's own extent
            self.storage_base, self.storage_end = self.base, self.base + self._span()
        self.nbytes = self.storage_end - self.base

    def _span(self) -> int:
        if not self.shape:
            return self.elem
        return self.elem * (1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides)))

    def num_blocks_guess(self) -> int:
        """The block dimension when the configuration does not say: dimension 1 of a
        (2, num_blocks, ...) K/V layout, else dimension 0."""
        s, st = self.shape, self.strides
        if len(s) >= 2 and s[0] == 2 and st[0] >= s[1] * st[1]:
            return s[1]
        return s[0] if s else 0

    def for_c(self, num_blocks: int) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
        """``(base, nbytes, shape, strides)`` as ``tide_connector_register_region`` reads
        them, for a tensor whose blocks are ``num_blocks``.

        Dimensions are put in memory order (largest stride first, size-1 dimensions
        dropped), so the C side finds the dimensions outside the block dimension (K/V
        planes; heads laid out outside the blocks) ahead of it whatever order the tensor's
        logical shape has; a block dimension split into kernel blocks (vLLM's
        ``num_blocks * ratio`` first dimension) is regrouped. The extent is the tensor's
        own when it splits into ``num_blocks`` pages (vLLM >= 0.32 views every layer of
        one shared allocation, so the storage's end says nothing about one layer); else,
        for blocks padded past their last element, ``num_blocks`` block strides (padding
        included, as vLLM's store connector reads them); else the storage's end from the
        tensor's start (older layouts)."""
        shape, strides = list(self.shape), list(self.strides)
        if not shape:
            return self.base, self.nbytes, (), ()
        if num_blocks > 0 and shape[0] != num_blocks and shape[0] % num_blocks == 0:
            ratio = shape[0] // num_blocks
            shape[0:1] = [num_blocks, ratio]
            strides[0:1] = [strides[0] * ratio, strides[0]]
        dims = sorted(
            (d for d in range(len(shape)) if shape[d] > 1 or len(shape) == 1),
            key=lambda d: -strides[d],
        )
        out_shape = tuple(shape[d] for d in dims)
        out_strides = tuple(strides[d] for d in dims)
        span = self.elem * (1 + sum((n - 1) * st for n, st in zip(out_shape, out_strides)))
        nbytes = self.nbytes
        if num_blocks > 0 and span % num_blocks == 0:
            nbytes = span
        elif num_blocks > 0 and out_shape[0] == num_blocks:
            # Blocks padded past their last element (vLLM pads a Mamba state, or an
            # attention page, to the group's page size): a page is the block stride.
            padded = num_blocks * out_strides[0] * self.elem
            if self.base + padded <= self.storage_end:
                nbytes = padded
        return self.base, nbytes, out_shape, out_strides
