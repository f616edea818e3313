"""Mooncake's enums and value types (mooncake.store's ReplicateConfig, descriptors, buffer
handles, the host-memory allocator), as tide's MooncakeDistributedStore takes and returns them."""

from __future__ import annotations

import ctypes
import enum
from typing import Any, Dict, List, Optional

from .codes import INVALID_PARAMS, OK


class SoftPinAction(enum.IntEnum):
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(enum.IntEnum):
    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class ReplicaStatus(enum.IntEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class TaskType(enum.IntEnum):
    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(enum.IntEnum):
    PENDING = 0
    PROCESSING = 1
    SUCCESS = 2
    FAILED = 3


class ReplicateConfig:
    """Mooncake's per-put replication settings. tide validates the soft-pin pair as
    Mooncake's master does (a TTL needs ENABLE) and otherwise ignores them: a tide key
    has one copy per node it is placed on (R replicas are the cluster URL's choice),
    and eviction is tided's, so pins and preferred segments have nothing to act on."""

    def __init__(self) -> None:
        self.replica_num: int = 1
        self.nof_replica_num: int = 0
        self.dfs_replica_num: int = 0
        self.soft_pin_action: SoftPinAction = SoftPinAction.PRESERVE
        self._soft_pin_ttl_ms: Optional[int] = None
        self.with_hard_pin: bool = False
        self.preferred_segments: List[str] = []
        self.preferred_nof_segments: List[str] = []
        self.preferred_segment: str = ""
        self.prefer_alloc_in_same_node: bool = False
        self.data_type: ObjectDataType = ObjectDataType.UNKNOWN
        self.group_ids: Optional[List[str]] = None

    @property
    def soft_pin_ttl_ms(self) -> Optional[int]:
        """None (the master's default TTL) or milliseconds, an unsigned 64-bit int."""
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, ms: Optional[int]) -> None:
        if ms is not None and (not isinstance(ms, int) or isinstance(ms, bool)
                               or not 0 <= ms < 1 << 64):
            raise TypeError(f"soft_pin_ttl_ms: expected None or an unsigned 64-bit int, got {ms!r}")
        self._soft_pin_ttl_ms = ms

    # Older Mooncake releases had a boolean; it maps onto soft_pin_action.
    @property
    def with_soft_pin(self) -> bool:
        return self.soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, on: bool) -> None:
        self.soft_pin_action = SoftPinAction.ENABLE if on else SoftPinAction.PRESERVE

    def check(self) -> int:
        """0, or INVALID_PARAMS for settings Mooncake's master refuses."""
        if self.soft_pin_ttl_ms is not None and self.soft_pin_action != SoftPinAction.ENABLE:
            return INVALID_PARAMS
        if not isinstance(self.replica_num, int) or self.replica_num < 1:
            return INVALID_PARAMS
        return OK

    def __repr__(self) -> str:
        return (
            f"ReplicateConfig(replica_num={self.replica_num}, "
            f"soft_pin_action={self.soft_pin_action.name}, "
            f"soft_pin_ttl_ms={self.soft_pin_ttl_ms}, with_hard_pin={self.with_hard_pin}, "
            f"preferred_segments={self.preferred_segments})"
        )

    __str__ = __repr__


class MemoryDescriptor:
    """Where a memory replica lives: tide reports the node URL and the value's size."""

    def __init__(self, endpoint: str, size: int) -> None:
        self.buffer_descriptor = Descriptor(size, 0, endpoint)


class DiskDescriptor:
    def __init__(self) -> None:
        self.file_path = ""
        self.object_size = 0


class Descriptor:
    """Mooncake's AllocatedBuffer descriptor (size, address, endpoint)."""

    def __init__(self, size: int = 0, buffer_address: int = 0, transport_endpoint: str = "") -> None:
        self.size = size
        self.buffer_address = buffer_address
        self.transport_endpoint = transport_endpoint

    def __repr__(self) -> str:
        return (
            f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
            f"transport_endpoint={self.transport_endpoint}>"
        )


class ReplicaDescriptor:
    """One replica of a key: in tide always a complete memory replica held by tided."""

    def __init__(self, endpoint: str, size: int) -> None:
        self.status = ReplicaStatus.COMPLETE
        self._mem = MemoryDescriptor(endpoint, size)

    def is_memory_replica(self) -> bool:
        return True

    def is_disk_replica(self) -> bool:
        return False

    def is_local_disk_replica(self) -> bool:
        return False

    def get_memory_descriptor(self) -> MemoryDescriptor:
        return self._mem

    def get_disk_descriptor(self) -> DiskDescriptor:
        raise RuntimeError("tide: this replica is a memory replica, it has no disk descriptor")


class BufferHandle(bytearray):
    """A value read by get_buffer / batch_get_buffer: the bytes (the buffer protocol,
    len()) plus Mooncake's ``ptr()`` (address of the first byte) and ``size()``."""

    def ptr(self) -> int:
        if not len(self):
            return 0
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))

    def size(self) -> int:
        return len(self)


class MooncakeHostMemAllocator:
    """SGLang's host-pool allocator: page-aligned host memory, freed by free() or at
    exit. tide needs no special memory; this is plain anonymous memory."""

    def __init__(self) -> None:
        self._blocks: Dict[int, Any] = {}

    def alloc(self, size: int) -> int:
        import mmap

        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"MooncakeHostMemAllocator.alloc: size {size!r} is not a size")
        m = mmap.mmap(-1, size)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        self._blocks[addr] = m
        return addr

    def free(self, ptr: int) -> int:
        m = self._blocks.pop(ptr, None)
        if m is None:
            return INVALID_PARAMS
        try:
            m.close()
        except BufferError:  # still viewed (e.g. by a tensor): freed when the view goes
            self._blocks[ptr] = m
            return INVALID_PARAMS
        return OK
