"""Prefix hashing and the small utilities of libtide: block hashes, hex, sizes, version.

The hash chain is the one include/tide.h specifies (a 16-byte parent, the block's token
count and token ids as little-endian uint32, then the extra-key bytes), computed in C.
Token ids may be given as a list of ints, any iterable of ints, or a buffer of uint32
(``array.array('I')``, a numpy uint32 array), which is passed without a copy.
"""

import array
import ctypes
import errno
from collections.abc import Iterable
from typing import Any, Optional, Union, cast

from . import _buffers, _lib, errors

#: Token ids: a list or other iterable of ints, or a buffer of uint32.
Tokens = Union[Iterable[int], _buffers.BufferLike]
#: A hash algorithm: "xxh3" or "sha256" (any case), or tide's HASH_XXH3 / HASH_SHA256.
Algo = Union[str, int]
#: Extra-key bytes (a cache salt): bytes, str (UTF-8), any buffer, or None.
Extra = Union[bytes, str, _buffers.BufferLike, None]

_ALGOS = {"xxh3": _lib.HASH_XXH3, "sha256": _lib.HASH_SHA256}


def _algo(algo: Algo) -> int:
    if isinstance(algo, str) and algo.lower() in _ALGOS:
        return _ALGOS[algo.lower()]
    if algo in _ALGOS.values() and not isinstance(algo, bool):
        return int(algo)
    raise errors.InvalidArgument(
        -errno.EINVAL, f"unknown hash algorithm {algo!r} (expected 'xxh3' or 'sha256')"
    )


def _extra(extra: Extra) -> tuple[Optional[bytes], int]:
    if extra is None:
        return None, 0
    if isinstance(extra, str):
        extra = extra.encode("utf-8")
    if not isinstance(extra, bytes):
        extra = bytes(_buffers.view(extra, False, "extra"))
    return extra, len(extra)


def _tokens(pinned: _buffers.Pinned, tokens: Tokens) -> tuple[int, int]:
    """(address, count) of tokens as uint32, pinned or converted."""
    try:
        mv = memoryview(cast(Any, tokens))  # a list of ints raises TypeError here
    except TypeError:
        mv = None
    if mv is not None and mv.ndim <= 1 and mv.itemsize == 4 and mv.format in ("I", "=I", "<I"):
        addr, nbytes = pinned.add(tokens, False, "tokens")
        return addr, nbytes // 4
    if mv is not None and mv.format not in ("b", "B", "h", "H", "i", "l", "L", "q", "Q", "n", "N"):
        raise errors.InvalidBuffer(
            -errno.EINVAL,
            f"tokens: expected integer token ids, got a buffer of format {mv.format!r}",
        )
    try:
        arr = array.array("I", tokens)
    except OverflowError:
        raise errors.InvalidArgument(
            -errno.EINVAL, "tokens: token ids must lie in 0..2**32-1"
        ) from None
    except TypeError as e:
        raise errors.InvalidArgument(-errno.EINVAL, f"tokens: expected integers ({e})") from None
    addr, nbytes = pinned.add(arr, False, "tokens")
    return addr, nbytes // 4


def _check(rc: int, what: str) -> int:
    if rc < 0:
        raise errors.make_error(rc, f"{what}: {errors.strerror(rc)}")
    return rc


def prefix_hashes(
    tokens: Tokens,
    block_tokens: int,
    algo: Algo = "xxh3",
    extra: Extra = None,
    max_hashes: Optional[int] = None,
) -> list[bytes]:
    """The chained 16-byte hashes of the full blocks of a token sequence:
    len(tokens) // block_tokens of them (at most max_hashes), a partial tail ignored.
    `extra` (bytes or str: a cache salt) enters the first block's hash only."""
    a = _algo(algo)
    if not isinstance(block_tokens, int) or block_tokens <= 0:
        raise errors.InvalidArgument(
            -errno.EINVAL, f"block_tokens must be a positive int, got {block_tokens!r}"
        )
    ex, exlen = _extra(extra)
    L = _lib.lib()
    with _buffers.Pinned() as pin:
        addr, n = _tokens(pin, tokens)
        count = n // block_tokens
        if max_hashes is not None:
            count = min(count, max(0, int(max_hashes)))
        out = (ctypes.c_uint8 * (_lib.HASH_BYTES * max(1, count)))()
        rc = L.tide_prefix_hashes(a, addr or None, n, block_tokens, ex, exlen, out, count)
    got = _check(rc, "prefix_hashes")
    raw = bytes(out)
    return [raw[i * _lib.HASH_BYTES : (i + 1) * _lib.HASH_BYTES] for i in range(got)]


def block_hash(
    tokens: Tokens,
    parent: Optional[_buffers.BufferLike] = None,
    algo: Algo = "xxh3",
    extra: Extra = None,
) -> bytes:
    """The 16-byte hash of one block given its parent's hash (None for the first)."""
    a = _algo(algo)
    par: Any = None
    if parent is not None:
        pb = bytes(parent)
        if len(pb) != _lib.HASH_BYTES:
            raise errors.InvalidArgument(
                -errno.EINVAL, f"parent must be {_lib.HASH_BYTES} bytes, got {len(pb)}"
            )
        par = (ctypes.c_uint8 * _lib.HASH_BYTES).from_buffer_copy(pb)
    ex, exlen = _extra(extra)
    out = (ctypes.c_uint8 * _lib.HASH_BYTES)()
    L = _lib.lib()
    with _buffers.Pinned() as pin:
        addr, n = _tokens(pin, tokens)
        rc = L.tide_block_hash(a, par, addr or None, n, ex, exlen, out)
    _check(rc, "block_hash")
    return bytes(out)


def hash_hex(h: _buffers.BufferLike) -> str:
    """The 32 lowercase hex digits of a 16-byte hash (as key names carry them)."""
    hb = bytes(h)
    if len(hb) != _lib.HASH_BYTES:
        raise errors.InvalidArgument(
            -errno.EINVAL, f"a hash is {_lib.HASH_BYTES} bytes, got {len(hb)}"
        )
    out = ctypes.create_string_buffer(33)
    _lib.lib().tide_hash_hex((ctypes.c_uint8 * _lib.HASH_BYTES).from_buffer_copy(hb), out)
    return out.value.decode("ascii")


def size_parse(text: str) -> int:
    """Bytes in a size string: "4096", "512MB", "1GiB", "1.5 GiB". Raises ConfigError."""
    if not isinstance(text, str):
        raise errors.InvalidArgument(
            -errno.EINVAL, f"size_parse: expected str, got {type(text).__name__}"
        )
    v = ctypes.c_uint64(0)
    rc = _lib.lib().tide_size_parse(text.encode("utf-8"), ctypes.byref(v))
    if rc < 0:
        raise errors.make_error(
            rc,
            f"cannot parse size {text!r}: expected a number with an optional unit "
            f"(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)",
        )
    return int(v.value)


def version() -> str:
    """libtide's version, "MAJOR.MINOR.PATCH"."""
    return str(_lib.lib().tide_version().decode("ascii"))
