"""The scheduler's per-step jobs as they travel to the workers: the bytes of
``tide_connector_meta_serialize``, parsed back through libtide."""

from __future__ import annotations

import ctypes
from typing import Any, Union

from .. import _lib, errors
from ._base import KVConnectorMetadata

class TideConnectorMetadata(KVConnectorMetadata):
    """One step's jobs from the scheduler to every worker: the bytes of
    ``tide_connector_meta_serialize``, parsed by each worker. Picklable (vLLM sends it to
    worker processes with the scheduler output)."""

    def __init__(
        self, data: Union[bytes, bytearray, memoryview] = b"", fence: bool = False
    ) -> None:
        self.data = bytes(data)
        #: The workers must let every save queued in earlier steps read its blocks before
        #: this step's forward pass runs (handle_preemptions): blocks those saves read may
        #: have been freed and handed to another request (a preemption; blocks leaving a
        #: sliding window or a Mamba group's older states).
        self.fence = bool(fence)

    def __repr__(self) -> str:
        return f"TideConnectorMetadata({len(self.data)} bytes{', fence' if self.fence else ''})"

    def __reduce__(self) -> tuple[type[TideConnectorMetadata], tuple[bytes, bool]]:
        return (TideConnectorMetadata, (self.data, self.fence))

    def describe(self) -> dict[str, Any]:
        """The jobs and finished ids, read back through libtide: ``{"jobs": [{"kind":
        "load"|"save", "req_id", "start_tokens", "end_tokens", "blocks": [(group,
        block_id, end_token, hash), ...]}], "finished": [ids]}`` (for logs and tests)."""
        L = _lib.lib()
        m = parse_meta(L, self.data)
        try:
            jobs: list[dict[str, Any]] = []
            for i in range(L.tide_connector_meta_num_jobs(m)):
                job = _lib.ConnectorJob()
                _check_meta(L.tide_connector_meta_job(m, i, ctypes.byref(job)))
                blocks: list[tuple[int, int, int, bytes]] = []
                for k in range(job.nblocks):
                    b = _lib.ConnectorBlock()
                    _check_meta(L.tide_connector_meta_block(m, i, k, ctypes.byref(b)))
                    blocks.append(
                        (b.group, b.block_id, b.end_token, ctypes.string_at(b.hash, b.hash_len))
                    )
                jobs.append(
                    {
                        "kind": "load" if job.kind == _lib.CONNECTOR_LOAD else "save",
                        "req_id": job.req_id.decode("utf-8"),
                        "start_tokens": job.start_tokens,
                        "end_tokens": job.end_tokens,
                        "blocks": blocks,
                    }
                )
            finished = [
                L.tide_connector_meta_finished(m, i).decode("utf-8")
                for i in range(L.tide_connector_meta_num_finished(m))
            ]
            return {"jobs": jobs, "finished": finished}
        finally:
            L.tide_connector_meta_free(m)


def _check_meta(rc: int) -> None:
    if rc < 0:
        raise errors.make_error(rc, errors.last_message(None) or errors.strerror(rc))


def parse_meta(L: Any, data: bytes) -> Any:
    m = _lib.ConnectorMetaPtr()
    buf = ctypes.create_string_buffer(data, len(data)) if data else None
    rc = L.tide_connector_meta_parse(buf, len(data), ctypes.byref(m))
    if rc < 0:
        raise errors.make_error(rc, errors.last_message(None) or "malformed connector metadata")
    return m
