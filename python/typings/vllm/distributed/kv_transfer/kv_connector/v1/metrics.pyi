# What tide.vllm uses of vLLM's connector metrics classes (python/typings/README.md).
from typing import Any

class KVConnectorStats:
    data: dict[str, Any]
    def __init__(self, data: dict[str, Any] = ...) -> None: ...

class KVConnectorPromMetrics:
    _counter_cls: Any
    _labelnames: list[str]
    per_engine_labelvalues: Any
    def __init__(
        self,
        vllm_config: Any,
        metric_types: dict[Any, Any],
        labelnames: list[str],
        per_engine_labelvalues: Any,
    ) -> None: ...
