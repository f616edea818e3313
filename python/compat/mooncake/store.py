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
    _deserialize_tensor,
    _serialize_tensor,
    _tensor_metadata_size,
)
