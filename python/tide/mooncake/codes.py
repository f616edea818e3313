"""Mooncake's ErrorCode values (mooncake-store/include/types.h), its health_check
results, and the mapping from tide's codes: shared by tide.mooncake and its tensor mixin."""

from __future__ import annotations

from .. import errors

OK = 0
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
SEGMENT_NOT_FOUND = -101
NO_AVAILABLE_HANDLE = -200
INVALID_KEY = -400
WRITE_FAIL = -500
INVALID_PARAMS = -600
INVALID_WRITE = -700
INVALID_READ = -701
REPLICA_IS_NOT_READY = -703
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
TRANSFER_FAIL = -800
CHECKSUM_MISMATCH = -801
RPC_FAIL = -900
RPC_TIMEOUT = -901
UNAVAILABLE_IN_CURRENT_STATUS = -1010
UNAVAILABLE_IN_CURRENT_MODE = -1011
NOT_SUPPORTED = -1012
FILE_NOT_FOUND = -1100

# health_check() results (mooncake-store/include/pyclient.h HealthCheckStatus).
HC_HEALTHY = 0
HC_NOT_INITIALIZED = 1
HC_MASTER_UNREACHABLE = 2


_FROM_TIDE = {
    errors.ENOTFOUND: OBJECT_NOT_FOUND,
    errors.ECHECKSUM: CHECKSUM_MISMATCH,
    errors.EKEYEMPTY: INVALID_KEY,
    errors.EKEYLONG: INVALID_KEY,
    errors.EVALEMPTY: INVALID_PARAMS,
    errors.EVALBIG: NO_AVAILABLE_HANDLE,
    errors.ENOSPACE: NO_AVAILABLE_HANDLE,
    errors.EBUFSMALL: INVALID_PARAMS,
    errors.EBUSY: REPLICA_IS_NOT_READY,
    errors.ELIMIT: INVALID_PARAMS,
    errors.ECLOSED: UNAVAILABLE_IN_CURRENT_STATUS,
    errors.EPROTO: RPC_FAIL,
    errors.ESERVER: RPC_FAIL,
    errors.EUNSUPPORTED: NOT_SUPPORTED,
}


def mooncake_code(tide_code: int) -> int:
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


