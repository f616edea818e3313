"""tide's error codes and the exceptions that carry them.

Every failing libtide call returns a negative code: one of tide's own (the TIDE_E* values
of include/tide.h's TIDE_ERRNO_MAP, mirrored below without the TIDE_ prefix;
tests/python/test_binding.py fails when the two lists differ) or a negative errno passed
through. The binding raises it as an ``Error`` subclass chosen by the code, carrying

- ``code``: the negative number,
- ``name``: ``tide_errname(code)``, e.g. ``"TIDE_ENOTFOUND"`` or ``"ENOMEM"``,
- ``message``: the detailed text libtide left for the failing call (``tide_errmsg``), or
  one the binding wrote when it refused an argument before calling C.

Several classes also derive from the built-in exception a Python programmer would
expect: ``NotFound`` is a ``KeyError``, argument errors are ``ValueError``s, transport
failures are ``ConnectionError``s. ``str(e)`` is the message followed by the name.
"""

import ctypes
import errno as _errno
import re
from typing import Any, Optional

from . import _lib

OK = 0
ERRBASE = 1000
ENOTFOUND = -1001
EKEYEMPTY = -1002
EKEYLONG = -1003
EVALEMPTY = -1004
EVALBIG = -1005
EBUFSMALL = -1006
ESCHEME = -1007
EOPTION = -1008
ESIZE = -1009
ENOSPACE = -1010
ECHECKSUM = -1011
EURL = -1012
EPROTO = -1013
EAUTH = -1014
ECONFIG = -1015
EUNSUPPORTED = -1016
EBUSY = -1017
ELIMIT = -1018
ECLOSED = -1019
ESERVER = -1020
EPARSE = -1021
EPARTIALTAIL = -1022
EDEVICE = -1023
ERRLAST = -1023

#: Every tide code by its header name, e.g. CODES["TIDE_ENOTFOUND"] == -1001.
CODES: dict[str, int] = {
    "TIDE_" + k: v
    for k, v in dict(globals()).items()
    if k.startswith("E") and k not in ("ERRBASE", "ERRLAST") and isinstance(v, int)
}
CODES["TIDE_OK"] = OK


class Error(Exception):
    """A libtide failure: ``code`` (negative), ``name`` and ``message``."""

    def __init__(self, code: int, message: str = "") -> None:
        self.code = code
        self.name = errname(code)
        self.message = redact(message) if message else strerror(code)
        super().__init__(code, self.message)

    def __str__(self) -> str:
        return f"{self.message} [{self.name}]"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message))


class NotFound(Error, KeyError):
    """The key is not in the store (TIDE_ENOTFOUND)."""


class InvalidArgument(Error, ValueError):
    """An argument libtide or the binding refused (-EINVAL and the classes below)."""


class InvalidKey(InvalidArgument):
    """An empty key or one longer than tide.KEY_MAX bytes (TIDE_EKEYEMPTY, TIDE_EKEYLONG)."""


class InvalidValue(InvalidArgument):
    """An empty value or one larger than the store accepts (TIDE_EVALEMPTY, TIDE_EVALBIG)."""


class InvalidBuffer(InvalidArgument):
    """An object without the buffer protocol, a read-only buffer where one must be
    written, a non-contiguous array, or an array of the wrong dtype (-EINVAL)."""


class BufferTooSmall(Error):
    """The caller's buffer is smaller than the value (TIDE_EBUFSMALL); ``needed`` is the
    value's size when libtide reported it, else None."""

    def __init__(self, code: int, message: str = "", needed: Optional[int] = None) -> None:
        super().__init__(code, message)
        self.needed = needed

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message, self.needed))


class ConfigError(Error, ValueError):
    """A URL, option, size or document that is invalid (TIDE_ESCHEME, TIDE_EURL,
    TIDE_EOPTION, TIDE_ESIZE, TIDE_ECONFIG, TIDE_EPARSE)."""


class PartialTailError(Error, ValueError):
    """Partial-tail offloads of one request name different boundaries (TIDE_EPARTIALTAIL;
    vLLM raises ValueError with the same message)."""


class DeviceError(Error):
    """Device memory (a GPU KV cache) could not be used: no CUDA runtime, memory that is not
    the device's, a failed copy (TIDE_EDEVICE)."""


class NoSpace(Error):
    """No room in the store even after evicting everything evictable (TIDE_ENOSPACE)."""


class ChecksumError(Error):
    """Stored bytes failed their checksum (TIDE_ECHECKSUM)."""


class ProtocolError(Error):
    """A peer broke the wire protocol (TIDE_EPROTO)."""


class AuthError(Error):
    """Authentication failed (TIDE_EAUTH)."""


class UnsupportedError(Error):
    """A combination or operation that is not supported (TIDE_EUNSUPPORTED)."""


class Busy(Error):
    """The key is being written by someone else (TIDE_EBUSY)."""


class LimitExceeded(Error):
    """A batch, frame or connection limit was exceeded (TIDE_ELIMIT)."""


class ClosedError(Error):
    """The store or its connection is closed (TIDE_ECLOSED)."""


class ServerError(Error):
    """A server reported an internal failure (TIDE_ESERVER)."""


class TransportError(Error, ConnectionError):
    """A network failure passed through as a negative errno (timeouts, refused or reset
    connections, unreachable hosts)."""


class OutOfMemory(Error, MemoryError):
    """-ENOMEM."""


_BY_CODE: dict[int, type[Error]] = {
    ENOTFOUND: NotFound,
    EKEYEMPTY: InvalidKey,
    EKEYLONG: InvalidKey,
    EVALEMPTY: InvalidValue,
    EVALBIG: InvalidValue,
    EBUFSMALL: BufferTooSmall,
    ESCHEME: ConfigError,
    EURL: ConfigError,
    EOPTION: ConfigError,
    ESIZE: ConfigError,
    ECONFIG: ConfigError,
    EPARSE: ConfigError,
    EPARTIALTAIL: PartialTailError,
    EDEVICE: DeviceError,
    ENOSPACE: NoSpace,
    ECHECKSUM: ChecksumError,
    EPROTO: ProtocolError,
    EAUTH: AuthError,
    EUNSUPPORTED: UnsupportedError,
    EBUSY: Busy,
    ELIMIT: LimitExceeded,
    ECLOSED: ClosedError,
    ESERVER: ServerError,
    -_errno.EINVAL: InvalidArgument,
    -_errno.ENOMEM: OutOfMemory,
}
for _e in (
    "ETIMEDOUT",
    "ECONNREFUSED",
    "ECONNRESET",
    "EPIPE",
    "EHOSTUNREACH",
    "ENETUNREACH",
    "ENOTCONN",
):
    _BY_CODE[-getattr(_errno, _e)] = TransportError


def error_class(code: int) -> type[Error]:
    """The Error subclass that represents `code`."""
    return _BY_CODE.get(code, Error)


def make_error(code: int, message: str = "", **extra: Any) -> Error:
    """An exception instance for `code`, of the class error_class(code) picks."""
    cls = error_class(code)
    if cls is BufferTooSmall:
        return BufferTooSmall(code, message, extra.get("needed"))
    return cls(code, message)


def errname(code: int) -> str:
    """``tide_errname(code)``: "TIDE_ENOTFOUND", "ENOMEM", ...; falls back to the table
    above when libtide cannot be loaded."""
    try:
        return str(_lib.lib().tide_errname(code).decode())
    except _lib.LibraryNotFound:
        for name, value in CODES.items():
            if value == code:
                return name
        return "UNKNOWN"


def strerror(code: int) -> str:
    """``tide_strerror(code)``: a one-line description of a code."""
    try:
        return str(_lib.lib().tide_strerror(code).decode())
    except _lib.LibraryNotFound:
        return f"error {code}"


_REDACT_NO_LIB = (
    (re.compile(r"://[^/\s@'\"<>]*@"), "://***@"),
    (re.compile(r"\?[^\s'\"<>]*"), "?***"),
)


def redact(text: str) -> str:
    """``tide_redact(text)``: text with every secret masked as ``***`` (URL options named
    *token, *password or *secret, a URL's user:password@, the token in $TIDE_AUTH_TOKEN):
    what every exception message and repr of this package shows in place of a URL. When
    libtide cannot be loaded (or lacks tide_redact) it masks more, not less: every URL's
    user information and everything after a '?'."""
    try:
        loaded: Optional[Any] = _lib.lib()
    except _lib.LibraryNotFound:
        loaded = None
    if loaded is None or "tide_redact" in loaded.missing:
        for pattern, mask in _REDACT_NO_LIB:
            text = pattern.sub(mask, text)
        return text
    raw = text.encode("utf-8", "surrogateescape")
    cap = len(raw) + 64  # masks are 3 bytes: the result is at most a little longer
    while True:
        out = ctypes.create_string_buffer(cap)
        need = int(loaded.tide_redact(raw, out, cap))
        if need < cap:
            return out.value.decode("utf-8", "replace")
        cap = need + 1


def last_message(handle: Any = None) -> str:
    """``tide_errmsg(handle)``: the calling thread's last message for handle (any call
    when handle is None)."""
    raw = _lib.lib().tide_errmsg(handle)
    return str(raw.decode("utf-8", "replace")) if raw else ""


def _missing_symbol(name: str, path: str, message: str) -> Exception:
    return UnsupportedError(EUNSUPPORTED, message)


# A call to a C function the loaded libtide lacks raises UnsupportedError naming it.
_lib.set_missing_symbol_error(_missing_symbol)


#: The public names, which the ``tide`` package re-exports (written out for readers and
#: type checkers; tests/python/test_install.py checks it against the module's contents).
__all__ = [
    "CODES",
    "error_class",
    "make_error",
    "errname",
    "strerror",
    "OK",
    "ERRBASE",
    "ENOTFOUND",
    "EKEYEMPTY",
    "EKEYLONG",
    "EVALEMPTY",
    "EVALBIG",
    "EBUFSMALL",
    "ESCHEME",
    "EOPTION",
    "ESIZE",
    "ENOSPACE",
    "ECHECKSUM",
    "EURL",
    "EPROTO",
    "EAUTH",
    "ECONFIG",
    "EUNSUPPORTED",
    "EBUSY",
    "ELIMIT",
    "ECLOSED",
    "ESERVER",
    "EPARSE",
    "EPARTIALTAIL",
    "EDEVICE",
    "ERRLAST",
    "Error",
    "NotFound",
    "InvalidArgument",
    "InvalidKey",
    "InvalidValue",
    "InvalidBuffer",
    "BufferTooSmall",
    "ConfigError",
    "PartialTailError",
    "DeviceError",
    "NoSpace",
    "ChecksumError",
    "ProtocolError",
    "AuthError",
    "UnsupportedError",
    "Busy",
    "LimitExceeded",
    "ClosedError",
    "ServerError",
    "TransportError",
    "OutOfMemory",
]
