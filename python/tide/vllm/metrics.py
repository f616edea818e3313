"""tide's connector figures in vLLM's metrics: ``KVConnectorStats`` (what each worker and the
scheduler report per interval, summed by vLLM across ranks) and the Prometheus counters
vLLM's /metrics serves (``vllm:tide_*``, one series per operation).

The figures are libtide's (``tide_connector_get_stats``): per operation — lookup_exists,
save_exists, save_put, load_get — calls, keys, bytes, failed keys, failed calls and time,
plus the connector's counters (hit tokens, saved and loaded objects, load errors, saves
skipped under store pressure). A connector reports the difference since its last report.
"""

from __future__ import annotations

from typing import Any, Optional

from ._base import HAVE_VLLM

#: Figures as TideStoreConnector.stats() returns them, and as TideConnectorStats carries
#: them ({"ops": {op: {field: n}}, "counters": {name: n}}).
Figures = dict[str, Any]

OPS = ("lookup_exists", "save_exists", "save_put", "load_get")
OP_FIELDS = ("calls", "keys", "bytes", "failed_keys", "errors", "ns")
COUNTERS = ("lookups", "lookup_hit_tokens", "saved_objects", "loaded_objects", "load_errors",
            "pressure_skipped_jobs", "dedup_skipped")

try:  # pragma: no cover - exercised only where vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
        KVConnectorPromMetrics,
        KVConnectorStats,
    )
except ImportError:
    from dataclasses import dataclass, field

    @dataclass
    class KVConnectorStats:  # type: ignore[no-redef]
        """Stand-in for vLLM's KVConnectorStats (a dict of figures)."""

        data: dict[str, Any] = field(default_factory=dict)

    class KVConnectorPromMetrics:  # type: ignore[no-redef]
        """Stand-in for vLLM's KVConnectorPromMetrics."""

        def __init__(self, vllm_config: Any, metric_types: dict[Any, Any],
                     labelnames: list[str], per_engine_labelvalues: Any) -> None:
            self._counter_cls = metric_types["Counter"]
            self._labelnames = labelnames
            self.per_engine_labelvalues = per_engine_labelvalues


def _since(now: int, before: int) -> int:
    """A total's growth; a total below the last one was restarted (a new C connector after
    a reconnection) and counts from zero."""
    now, before = int(now), int(before)
    return now - before if now >= before else now


def delta(now: Figures, before: Optional[Figures]) -> Figures:
    """The figures of ``now`` minus ``before`` (dicts from TideStoreConnector.stats()), in
    the shape TideConnectorStats carries: ``{"ops": {op: {field: n}}, "counters": {...}}``."""
    before = before or {}
    ops: dict[str, dict[str, int]] = {}
    for op in OPS:
        cur, old = now.get(op, {}), before.get(op, {})
        d = {f: _since(cur.get(f, 0), old.get(f, 0)) for f in OP_FIELDS}
        if any(d.values()):
            ops[op] = d
    counters: dict[str, int] = {}
    for c in COUNTERS:
        grew = _since(now.get(c, 0), before.get(c, 0))
        if grew:
            counters[c] = grew
    return {"ops": ops, "counters": counters}


class TideConnectorStats(KVConnectorStats):
    """One interval of tide's connector figures; vLLM sums them over the ranks."""

    data: Figures  # vLLM's dataclass field

    def __post_init__(self) -> None:
        self.data.setdefault("ops", {})
        self.data.setdefault("counters", {})

    def reset(self) -> None:
        self.data = {"ops": {}, "counters": {}}

    def is_empty(self) -> bool:
        return not self.data["ops"] and not self.data["counters"]

    def aggregate(self, other: TideConnectorStats) -> TideConnectorStats:
        for op, figures in other.data.get("ops", {}).items():
            mine = self.data["ops"].setdefault(op, {f: 0 for f in OP_FIELDS})
            for f, n in figures.items():
                mine[f] = mine.get(f, 0) + n
        for c, n in other.data.get("counters", {}).items():
            self.data["counters"][c] = self.data["counters"].get(c, 0) + n
        return self

    def reduce(self) -> dict[str, Any]:
        """What vLLM's log line shows: per operation calls, keys, MiB, failures and GB/s."""
        out: dict[str, Any] = {}
        for op, f in sorted(self.data["ops"].items()):
            out[f"{op}_calls"] = f.get("calls", 0)
            out[f"{op}_keys"] = f.get("keys", 0)
            out[f"{op}_MiB"] = round(f.get("bytes", 0) / (1 << 20), 3)
            out[f"{op}_failed_keys"] = f.get("failed_keys", 0)
            if f.get("ns") and f.get("bytes"):
                out[f"{op}_GBps"] = round(f["bytes"] / f["ns"], 3)
        out.update(sorted(self.data["counters"].items()))
        return out


class TidePromMetrics(KVConnectorPromMetrics):
    """``vllm:tide_operations_total``, ``..._keys_total``, ``..._bytes_total``,
    ``..._failed_keys_total``, ``..._errors_total``, ``..._seconds_total`` by operation, and
    ``vllm:tide_<counter>_total`` for the connector's counters."""

    def __init__(self, vllm_config: Any, metric_types: dict[Any, Any], labelnames: list[str],
                 per_engine_labelvalues: Any) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        names = labelnames + ["operation"]
        doc = {
            "calls": ("vllm:tide_operations_total", "tide store operations by the connector"),
            "keys": ("vllm:tide_operation_keys_total", "keys in tide store operations"),
            "bytes": ("vllm:tide_operation_bytes_total", "bytes tide store operations moved"),
            "failed_keys": ("vllm:tide_operation_failed_keys_total",
                            "keys that failed in tide store operations"),
            "errors": ("vllm:tide_operation_errors_total",
                       "tide store operations that failed whole"),
            "ns": ("vllm:tide_operation_seconds_total", "time in tide store operations"),
        }
        self._ops = {f: self._counter_cls(name=n, documentation=d, labelnames=names)
                     for f, (n, d) in doc.items()}
        self._counters = {
            c: self._counter_cls(name=f"vllm:tide_{c}_total",
                                 documentation=f"tide connector: {c.replace('_', ' ')}",
                                 labelnames=labelnames)
            for c in COUNTERS
        }
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, key: tuple[Any, ...], values: list[str]) -> Any:
        if key not in self._children:
            self._children[key] = metric.labels(*values)
        return self._children[key]

    def observe(self, transfer_stats_data: Optional[Figures], engine_idx: int = 0) -> None:
        if not transfer_stats_data:
            return
        engine = self.per_engine_labelvalues[engine_idx]
        for op, figures in transfer_stats_data.get("ops", {}).items():
            for f, n in figures.items():
                if f in self._ops and n > 0:
                    child = self._child(self._ops[f], (engine_idx, op, f), engine + [op])
                    child.inc(n / 1e9 if f == "ns" else n)
        for c, n in transfer_stats_data.get("counters", {}).items():
            if c in self._counters and n > 0:
                self._child(self._counters[c], (engine_idx, c), engine).inc(n)


__all__ = ["TideConnectorStats", "TidePromMetrics", "delta", "HAVE_VLLM"]
