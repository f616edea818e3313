"""``mooncake.store`` for code written against Mooncake's Python API: tide.mooncake."""

from tide.mooncake import (  # noqa: F401
    BufferHandle,
    Descriptor,
    DiskDescriptor,
    MemoryDescriptor,
    MooncakeDistributedStore,
    MooncakeHostMemAllocator,
    ObjectDataType,
    ReplicaDescriptor,
    ReplicaStatus,
    ReplicateConfig,
    SoftPinAction,
    TaskStatus,
    TaskType,
)
from tide.mooncake import deserialize_tensor as _deserialize_tensor  # noqa: F401
from tide.mooncake import serialize_tensor as _serialize_tensor  # noqa: F401
from tide.mooncake import tensor_metadata_size as _tensor_metadata_size  # noqa: F401
