"""tide.vllm: vLLM's KV connector interface (KVConnectorBase_V1) over tide's C connector.

Run vLLM with tide as its KV-cache store::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "TideStoreConnector",
        "kv_connector_module_path": "tide.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"url": "tide://127.0.0.1:7474"}}'

Every decision — what a lookup hits, which blocks a step saves or loads, when a finished
request's blocks may be freed, what failed to load — is made by libtide's connector
(``tide_connector_*``, docs/CONNECTOR.md). This module only marshals: it turns vLLM's
objects (requests, block tables, scheduler outputs, paged KV tensors) into the C calls'
arguments and the C results back into what vLLM expects. The scheduler's per-step jobs
travel to the workers as the bytes of ``tide_connector_meta_serialize``.

How vLLM's calls map (scheduler process / each worker process):

==============================  ============================================================
``get_num_new_matched_tokens``  ``tide_connector_lookup`` -> (new tokens, load_async)
``update_state_after_alloc``    ``tide_connector_update_after_alloc`` (the block table)
``build_connector_meta``        ``request_preempted`` / ``request_step`` per request, then
                                ``build_meta`` -> ``TideConnectorMetadata`` (bytes)
``request_finished``            ``tide_connector_request_finished`` (1 = keep the blocks)
``reset_cache``                 ``tide_connector_reset(clear_store=1)``
``register_kv_caches``          ``tide_connector_register_region`` per tensor
``get_finished``                ``meta_parse`` + ``start_jobs``, then ``get_finished``
``get_block_ids_with_...``      ``tide_connector_get_load_errors``
==============================  ============================================================

``start_load_kv``, ``wait_for_layer_load``, ``save_kv_layer`` and ``wait_for_save`` do
nothing (no layer-wise mode, as vLLM's MooncakeStoreConnector): the I/O of a step is queued
in ``get_finished``, after the forward pass, on libtide's background threads. The one
exception is ``load_async: false``: a request then runs in the step its load is planned in,
so ``start_load_kv`` loads before the forward pass and waits.

The class subclasses vLLM's ``KVConnectorBase_V1`` (and ``SupportsHMA``, for hybrid
models) when vLLM can be imported (tested versions: ``SUPPORTED_VLLM``); otherwise a
stand-in base with the same method names, so the module is usable and testable without
vLLM. The configuration comes from vLLM's config
objects (see ``config_from_vllm``), or is given as a dict or JSON text in the schema of
docs/CONNECTOR_CONFIG.md.

The store URL is ``kv_connector_extra_config["url"]``, else ``$TIDE_URL``, else
``mem://``. vLLM runs its scheduler and each worker in separate processes, and a mem://
store is private to its process: a deployment needs ``tide://host:port`` or
``unix:///path`` to a tided that every process (and every engine sharing the cache)
reaches. mem:// is for tests that pass one ``tide.Store`` to every connector.

KV caches in host memory (vLLM's CPU backend) are read and written by the CPU; CUDA
tensors (vLLM's GPU workers) are registered as device regions, and the GPU's copy engine
moves their pages straight between GPU memory and tide's pool (registered once as pinned
memory: use ``unix://`` to a tided on the same host). The saves of a step wait, on the GPU,
for the forward pass queued on the current CUDA stream; a load is reported only once its
bytes are in the pages. libtide loads the CUDA runtime itself; without one (or without a
GPU) a CUDA tensor fails at ``register_kv_caches`` with ``tide.DeviceError`` saying why.
Tensors on other devices are refused.

The package's modules, one job each: ``_base`` (vLLM's base classes or stand-ins, the
version check), ``config`` (vLLM's config objects -> the C configuration), ``metadata``
(per-step jobs as bytes), ``arguments`` (requests and block tables -> C arguments),
``regions`` (paged KV tensors -> registered regions), ``connector`` (the class itself).
"""

from ._base import (
    HAVE_VLLM,
    SUPPORTED_VLLM,
    KVConnectorMetadata,
    KVConnectorRole,
    check_vllm,
    vllm_version,
)
from .config import UnsupportedConfiguration, config_from_vllm
from .connector import TideStoreConnector
from .metadata import TideConnectorMetadata

__all__ = [
    "TideStoreConnector",
    "TideConnectorMetadata",
    "UnsupportedConfiguration",
    "KVConnectorRole",
    "KVConnectorMetadata",
    "config_from_vllm",
    "HAVE_VLLM",
    "SUPPORTED_VLLM",
    "check_vllm",
    "vllm_version",
]
