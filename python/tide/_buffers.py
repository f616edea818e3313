"""Raw addresses of Python buffers, without copies.

libtide reads and writes caller memory through plain pointers. Any object with the buffer
protocol works: bytes, bytearray, memoryview, array.array, mmap, numpy arrays. The
binding takes the object's buffer with ``PyObject_GetBuffer`` (through ctypes.pythonapi)
so that read-only buffers (bytes, read-only views and arrays) are passed as they are, and
holds it until the C call returns, which also keeps a bytearray from being resized or an
exporter from freeing the memory meanwhile.

Buffers must be C-contiguous: libtide sees one run of bytes, and a strided view (a numpy
slice such as ``a[:, ::2]``) is not one. Such buffers, buffers that must be written but
are read-only, and objects without the buffer protocol raise ``InvalidBuffer``.
"""

import ctypes
import errno
from types import TracebackType
from typing import Any, Literal, Optional, Sequence

from . import errors

#: Anything with the buffer protocol (bytes, bytearray, memoryview, array.array, mmap,
#: numpy arrays). Python 3.11's typing has no name for it (3.12 adds
#: collections.abc.Buffer), so it is Any to a type checker and checked at run time.
BufferLike = Any

_PyBUF_SIMPLE = 0
_PyBUF_WRITABLE = 0x0001


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer (part of the stable ABI since 3.11)."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_GetBuffer = ctypes.pythonapi.PyObject_GetBuffer
_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_GetBuffer.restype = ctypes.c_int
_Release = ctypes.pythonapi.PyBuffer_Release
_Release.argtypes = [ctypes.POINTER(_PyBuffer)]
_Release.restype = None


def _describe(obj: object) -> str:
    t = type(obj)
    name = t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"
    shape = getattr(obj, "shape", None)
    return f"{name} of shape {tuple(shape)}" if shape is not None else name


def view(obj: BufferLike, writable: bool, what: str = "buffer") -> memoryview:
    """A memoryview of obj after the checks every buffer passes: it has the buffer
    protocol, it is C-contiguous, and it is writable when it must be. `what` names the
    argument in messages ("value 3", "buffer 2 of key 5")."""
    if isinstance(obj, str):
        raise errors.InvalidBuffer(
            -errno.EINVAL, f"{what}: expected a bytes-like object, got str (encode it first)"
        )
    try:
        mv = memoryview(obj)
    except TypeError:
        raise errors.InvalidBuffer(
            -errno.EINVAL,
            f"{what}: expected an object with the buffer protocol (bytes, bytearray, "
            f"memoryview, numpy array), got {_describe(obj)}",
        ) from None
    if not mv.c_contiguous:
        raise errors.InvalidBuffer(
            -errno.EINVAL,
            f"{what}: {_describe(obj)} is not C-contiguous (a strided view); libtide needs "
            f"one run of bytes: pass a contiguous array or a per-block list of contiguous "
            f"pieces",
        )
    if writable and mv.readonly:
        raise errors.InvalidBuffer(
            -errno.EINVAL, f"{what}: {_describe(obj)} is read-only and cannot receive a value"
        )
    return mv


_Byte = ctypes.c_char
_addressof = ctypes.addressof


class Pinned:
    """Buffers held for the length of one C call: ``add`` returns (address, nbytes);
    ``release`` (or leaving the ``with`` block) lets them go.

    A writable, non-empty buffer is held by a ctypes object made with ``from_buffer``: it
    holds the buffer export (as PyObject_GetBuffer does) until it is dropped, and costs no
    foreign call, which matters for batches of many buffers. Read-only and empty buffers
    take the PyObject_GetBuffer path."""

    def __init__(self) -> None:
        self._held: list[_PyBuffer] = []
        self._views: list[ctypes.Array[ctypes.c_char] | ctypes.c_char] = []

    def add(self, obj: BufferLike, writable: bool, what: str = "buffer") -> tuple[int, int]:
        mv = view(obj, writable, what)
        if not mv.readonly and mv.nbytes:
            c = _Byte.from_buffer(mv)
            self._views.append(c)
            return _addressof(c), mv.nbytes
        pb = _PyBuffer()
        _GetBuffer(mv, ctypes.byref(pb), _PyBUF_WRITABLE if writable else _PyBUF_SIMPLE)
        self._held.append(pb)
        return (pb.buf or 0), pb.len

    def add_words(self, objs: Sequence[BufferLike], writable: bool) -> list[int]:
        """add() for each of objs: their (address, nbytes) pairs as one flat list of words
        [a0, n0, a1, n1, ...]. The common case (a writable, contiguous, non-empty buffer)
        is handled inline; any other object goes through add(), which raises the usual
        InvalidBuffer naming it "buffer I" (the caller may name it better on error)."""
        out: list[int] = []
        push = out.append
        held = self._views.append
        mview, frombuf, addr = memoryview, _Byte.from_buffer, _addressof
        for i, obj in enumerate(objs):
            if type(obj) is not str:
                try:
                    mv = mview(obj)
                except TypeError:
                    mv = None
                if mv is not None and mv.c_contiguous and not mv.readonly and mv.nbytes:
                    c = frombuf(mv)
                    held(c)
                    push(addr(c))
                    push(mv.nbytes)
                    continue
            out.extend(self.add(obj, writable, f"buffer {i}"))
        return out

    def release(self) -> None:
        self._views.clear()
        while self._held:
            _Release(ctypes.byref(self._held.pop()))

    def __enter__(self) -> "Pinned":
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Literal[False]:
        self.release()
        return False
