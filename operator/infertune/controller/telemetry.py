"""The operator's own /metrics (prometheus-client), on a registry of its own so that several
operators in one process (tests) do not collide. Names are the project's fixed contract."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from infertune.api.observation import Observation
from infertune.controller.cycle import CycleOutcome
from infertune.model.early_warning import CliffWarning

LABELS = ("namespace", "name")
_GAUGES = {
    "kv_headroom_ratio": "1 - KV pressure of the fullest replica (observed use or predicted working set)",
    "time_to_cliff_seconds": "Seconds until the working set reaches the KV capacity (+Inf when not approaching)",
    "planned_kv_headroom_ratio": "1 - the recommended layout's predicted working set / KV capacity",
    "kv_usage_ratio": "Observed KV cache use, max over replicas",
    "observed_ttft_p95_seconds": "Observed TTFT p95",
    "observed_stream_tps": "Observed per-stream decode tokens/s",
    "slo_max_ttft_seconds": "The SLO's TTFT limit",
    "slo_min_stream_tps": "The SLO's per-stream decode floor",
    "capacity_shortfall_gpus": "GPUs the plan needs beyond the pool",
    "metrics_available": "1 when the metrics are trusted",
    "metrics_age_seconds": "Age of the newest sample",
    "replicas": "Applied replicas",
    "tensor_parallel_size": "Applied tensor-parallel size",
    "max_num_seqs": "Applied max concurrency per replica",
    "fit_r2": "R^2 of the fitted per-pass line at the applied TP",
    "fit_samples": "Samples behind the fitted line",
}


@dataclass
class Telemetry:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.gauges = {k: Gauge(f"infertune_{k}", doc, LABELS, registry=self.registry) for k, doc in _GAUGES.items()}
        self.decisions = Counter("infertune_decisions", "Decisions by action and reason",
                                 (*LABELS, "action", "reason"), registry=self.registry)
        self.reconcile = Histogram("infertune_reconcile_duration_seconds", "Seconds per reconcile or cycle",
                                   registry=self.registry,
                                   buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)

    def exposition(self) -> str:
        """What /metrics serves."""
        return generate_latest(self.registry).decode()

    def _set(self, key: str, ns: str, name: str, value: float | None) -> None:
        if value is None:
            # Absent, not zero: a missing figure must not draw a flat line at 0 on a dashboard.
            self.gauges[key].remove(ns, name) if (ns, name) in self._children(key) else None
        else:
            self.gauges[key].labels(ns, name).set(value)

    def _children(self, key: str) -> set[tuple[str, ...]]:
        # prometheus-client keeps no public list of a metric's label sets.
        return {tuple(k) for k in self.gauges[key]._metrics}

    def record(self, ns: str, name: str, outcome: CycleOutcome, obs: Observation | None, now: float,
               warning: CliffWarning | None = None) -> None:
        self.decisions.labels(ns, name, outcome.action, outcome.reason).inc()
        status, choice = outcome.status, outcome.plan.choice
        applied = status.get("applied") or {}
        self._set("replicas", ns, name, applied.get("replicas"))
        self._set("tensor_parallel_size", ns, name, applied.get("tensorParallelSize"))
        self._set("max_num_seqs", ns, name, applied.get("maxNumSeqs"))
        self._set("capacity_shortfall_gpus", ns, name, outcome.plan.capacity_shortfall_gpus)
        slo = outcome.plan.table
        self._set("slo_max_ttft_seconds", ns, name, slo.max_ttft_seconds)
        self._set("slo_min_stream_tps", ns, name, slo.min_stream_tps)
        planned = None if choice is None else 1.0 - choice.kv_working_set_fraction
        self._set("planned_kv_headroom_ratio", ns, name, planned if planned is None or math.isfinite(planned) else None)
        self._set("kv_headroom_ratio", ns, name, None if warning is None else warning.headroom_ratio)
        self._set("time_to_cliff_seconds", ns, name, None if warning is None else warning.time_to_cliff_seconds)
        available = obs is not None and obs.available
        self._set("metrics_available", ns, name, 1.0 if available else 0.0)
        self._set("metrics_age_seconds", ns, name, None if obs is None else max(now - obs.sample_time, 0.0))
        self._set("kv_usage_ratio", ns, name, obs.kv_usage if available and obs else None)
        self._set("observed_ttft_p95_seconds", ns, name, obs.ttft_p95_seconds if available and obs else None)
        self._set("observed_stream_tps", ns, name, obs.stream_tps if available and obs else None)
        fit = status.get("fit") or {}
        self._set("fit_r2", ns, name, fit.get("r2"))
        self._set("fit_samples", ns, name, fit.get("samples"))

    def forget(self, ns: str, name: str) -> None:
        """A deleted resource's series go, so its alerts stop firing and dashboards stop drawing it."""
        for key in self.gauges:
            self._set(key, ns, name, None)
        for labels in [k for k in self.decisions._metrics if tuple(k[:2]) == (ns, name)]:
            self.decisions.remove(*labels)
