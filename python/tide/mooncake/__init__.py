"""tide.mooncake: a drop-in for Mooncake Store's Python API (``mooncake.store``) over tide.

``python/compat/mooncake`` re-exports this package as ``mooncake.store``, so code written
against Mooncake (vLLM's MooncakeStoreConnector worker, LMCache's and SGLang HiCache's
Mooncake backends) runs on tide; docs/MOONCAKE.md says what each method does here.

The package's modules, one job each: ``client`` (MooncakeDistributedStore), ``values``
(Mooncake's enums and value types), ``address`` (which tide store a setup() means),
``codes`` (Mooncake's ErrorCode values and the mapping from tide's codes), ``tensor`` (the
tensor methods, a mixin of the class, and Mooncake's tensor object codec).
"""

from .address import DEFAULT_MASTER, SetupError, parse_size, resolve_url
from .client import MooncakeDistributedStore
from .codes import (
    BUFFER_OVERFLOW,
    CHECKSUM_MISMATCH,
    FILE_NOT_FOUND,
    HC_HEALTHY,
    HC_MASTER_UNREACHABLE,
    HC_NOT_INITIALIZED,
    INTERNAL_ERROR,
    INVALID_KEY,
    INVALID_PARAMS,
    INVALID_READ,
    INVALID_WRITE,
    NO_AVAILABLE_HANDLE,
    NOT_SUPPORTED,
    OBJECT_ALREADY_EXISTS,
    OBJECT_NOT_FOUND,
    OK,
    REPLICA_IS_NOT_READY,
    RPC_FAIL,
    RPC_TIMEOUT,
    SEGMENT_NOT_FOUND,
    TRANSFER_FAIL,
    UNAVAILABLE_IN_CURRENT_MODE,
    UNAVAILABLE_IN_CURRENT_STATUS,
    WRITE_FAIL,
    mooncake_code,
)
from .tensor import (
    TENSOR_HEADER_SIZE,
    deserialize_tensor,
    serialize_tensor,
    tensor_metadata_size,
)
from .values import (
    BufferHandle,
    Descriptor,
    DiskDescriptor,
    MemoryDescriptor,
    MooncakeHostMemAllocator,
    ObjectDataType,
    ReplicaDescriptor,
    ReplicaStatus,
    ReplicateConfig,
    SoftPinAction,
    TaskStatus,
    TaskType,
)

# Mooncake's mooncake.store names its tensor codec with a leading underscore; code written
# for it calls these.
_serialize_tensor = serialize_tensor
_deserialize_tensor = deserialize_tensor
_tensor_metadata_size = tensor_metadata_size

__all__ = [
    "BUFFER_OVERFLOW", "CHECKSUM_MISMATCH", "DEFAULT_MASTER", "FILE_NOT_FOUND", "HC_HEALTHY",
    "HC_MASTER_UNREACHABLE", "HC_NOT_INITIALIZED", "INTERNAL_ERROR", "INVALID_KEY",
    "INVALID_PARAMS", "INVALID_READ", "INVALID_WRITE", "NO_AVAILABLE_HANDLE", "NOT_SUPPORTED",
    "OBJECT_ALREADY_EXISTS", "OBJECT_NOT_FOUND", "OK", "REPLICA_IS_NOT_READY", "RPC_FAIL",
    "RPC_TIMEOUT", "SEGMENT_NOT_FOUND", "TENSOR_HEADER_SIZE", "TRANSFER_FAIL",
    "UNAVAILABLE_IN_CURRENT_MODE", "UNAVAILABLE_IN_CURRENT_STATUS", "WRITE_FAIL",
    "BufferHandle", "Descriptor", "DiskDescriptor", "MemoryDescriptor",
    "MooncakeDistributedStore", "MooncakeHostMemAllocator", "ObjectDataType",
    "ReplicaDescriptor", "ReplicaStatus", "ReplicateConfig", "SetupError", "SoftPinAction",
    "TaskStatus", "TaskType", "deserialize_tensor", "mooncake_code", "parse_size",
    "resolve_url", "serialize_tensor", "tensor_metadata_size",
]
