"""Generate the chart's Grafana dashboard (`files/dashboards/infertune.json`) from one readable table.

Run `python charts/infertune/hack/dashboard.py` after editing; a test fails when the JSON drifts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "files" / "dashboards" / "infertune.json"

# vLLM series carry the PodMonitor's `deployment` label; the operator's own series carry `name`.
POD = 'namespace="$namespace", deployment="$deployment"'
OBJ = 'namespace="$namespace", name="$deployment"'
RATE = "$__rate_interval"
ITL = "vllm:inter_token_latency_seconds"
STREAM_TPS = (f"1 / (sum by (pod) (rate({ITL}_sum{{{POD}}}[{RATE}]))"
              f" / sum by (pod) (rate({ITL}_count{{{POD}}}[{RATE}])))")
TTFT_P95 = (f"histogram_quantile(0.95, sum by (le) "
            f"(rate(vllm:time_to_first_token_seconds_bucket{{{POD}}}[{RATE}])))")

Target = tuple[str, str]  # (PromQL, legend)


def _targets(targets: list[Target]) -> list[dict[str, Any]]:
    return [
        {"refId": chr(ord("A") + i), "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "expr": expr, "legendFormat": legend, "range": True}
        for i, (expr, legend) in enumerate(targets)
    ]


def _panel(kind: str, title: str, desc: str, grid: tuple[int, int, int, int], targets: list[Target],
           unit: str = "short", **extra: Any) -> dict[str, Any]:
    x, y, w, h = grid
    panel: dict[str, Any] = {
        "type": kind, "title": title, "description": desc,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "targets": _targets(targets),
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
    }
    panel.update(extra)
    return panel


def _dashed(name: str, color: str) -> dict[str, Any]:
    """A reference line (SLO, cliff) drawn dashed so nobody mistakes it for a measurement."""
    return {"matcher": {"id": "byName", "options": name}, "properties": [
        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
        {"id": "color", "value": {"mode": "fixed", "fixedColor": color}},
    ]}


def _row(title: str, y: int) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
            "panels": []}


def _layout_stats(y: int) -> list[dict[str, Any]]:
    stats = [
        ("Tensor parallel", f"max(infertune_tensor_parallel_size{{{OBJ}}})", "short"),
        ("Max num seqs", f"max(infertune_max_num_seqs{{{OBJ}}})", "short"),
        ("Replicas", f"max(infertune_replicas{{{OBJ}}})", "short"),
        ("KV headroom", f"min(infertune_kv_headroom_ratio{{{OBJ}}})", "percentunit"),
        ("Time to cliff", f"min(infertune_time_to_cliff_seconds{{{OBJ}}})", "s"),
        ("GPU shortfall", f"max(infertune_capacity_shortfall_gpus{{{OBJ}}})", "short"),
    ]
    return [_panel("stat", title, f"{title}, as the operator last reported it.",
                   (4 * i, y, 4, 4), [(expr, title)], unit)
            for i, (title, expr, unit) in enumerate(stats)]


def _region_panels(y: int) -> list[dict[str, Any]]:
    batch = f"avg(vllm:num_requests_running{{{POD}}})"
    curve = _panel(
        "xychart", "Four regions: tok/s against running batch",
        "Each point is one moment: x = running batch per replica, y = aggregate output tok/s per replica "
        "and per-stream tok/s. Climb: aggregate rises, per-stream flat. Bend: per-stream falls. Plateau: "
        "aggregate flat. Cliff: both drop as preemptions start.",
        (0, y, 12, 10),
        [(batch, "running batch"),
         (f"sum(rate(vllm:generation_tokens_total{{{POD}}}[{RATE}]))"
          f" / count(vllm:num_requests_running{{{POD}}})",
          "aggregate tok/s per replica"),
         (f"avg({STREAM_TPS})", "per-stream tok/s")],
        transformations=[{"id": "joinByField", "options": {"byField": "Time", "mode": "outer"}}],
        options={"seriesMapping": "auto", "dims": {"frame": 0, "x": "running batch"},
                 "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"}},
    )
    over_time = _panel(
        "timeseries", "Throughput and running batch", "Aggregate output tok/s and per-stream tok/s "
        "(left), running and waiting requests (right).", (12, y, 12, 10),
        [(f"sum(rate(vllm:generation_tokens_total{{{POD}}}[{RATE}]))", "aggregate tok/s"),
         (f"avg({STREAM_TPS})", "per-stream tok/s"),
         (f"sum(vllm:num_requests_running{{{POD}}})", "running"),
         (f"sum(vllm:num_requests_waiting{{{POD}}})", "waiting")],
    )
    over_time["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byRegexp", "options": "running|waiting"},
         "properties": [{"id": "custom.axisPlacement", "value": "right"}, {"id": "unit", "value": "short"}]},
    ]
    return [curve, over_time]


def _kv_panels(y: int) -> list[dict[str, Any]]:
    kv = _panel(
        "timeseries", "KV-cache usage against the cliff",
        "Observed KV-cache usage per replica, the operator's predicted working set of the fullest "
        "replica, and the ceiling (1.0) where preemption starts.", (0, y, 16, 9),
        [(f"max by (pod) (vllm:kv_cache_usage_perc{{{POD}}})", "{{pod}}"),
         (f"1 - min(infertune_kv_headroom_ratio{{{OBJ}}})", "predicted working set"),
         ("vector(1)", "cliff (KV full)")],
        unit="percentunit",
    )
    kv["fieldConfig"]["defaults"].update({"min": 0, "max": 1.05})
    kv["fieldConfig"]["overrides"] = [_dashed("cliff (KV full)", "red"),
                                      _dashed("predicted working set", "orange")]
    preempt = _panel(
        "timeseries", "Preemptions", "Requests evicted from the KV cache and recomputed, per second.",
        (16, y, 8, 9), [(f"sum by (pod) (rate(vllm:num_preemptions_total{{{POD}}}[{RATE}]))", "{{pod}}")],
        unit="reqps",
    )
    return [kv, preempt]


def _slo_panels(y: int) -> list[dict[str, Any]]:
    ttft = _panel(
        "timeseries", "TTFT p95 against the SLO", "Time to first token, p95: from vLLM's histogram, "
        "as the operator observes it, and the SLO line.", (0, y, 12, 8),
        [(TTFT_P95, "TTFT p95 (vLLM)"),
         (f"max(infertune_observed_ttft_p95_seconds{{{OBJ}}})", "observed p95"),
         (f"max(infertune_slo_max_ttft_seconds{{{OBJ}}})", "SLO max TTFT")],
        unit="s",
    )
    ttft["fieldConfig"]["overrides"] = [_dashed("SLO max TTFT", "red")]
    tps = _panel(
        "timeseries", "Per-stream tok/s against the SLO", "Decode speed each stream sees, and the "
        "SLO minimum.", (12, y, 12, 8),
        [(f"avg({STREAM_TPS})", "per-stream tok/s"),
         (f"max(infertune_observed_stream_tps{{{OBJ}}})", "observed (operator)"),
         (f"max(infertune_slo_min_stream_tps{{{OBJ}}})", "SLO min tok/s")],
    )
    tps["fieldConfig"]["overrides"] = [_dashed("SLO min tok/s", "red")]
    return [ttft, tps]


def _decision_panels(y: int) -> list[dict[str, Any]]:
    decisions = _panel(
        "timeseries", "Decisions", "The operator's decisions by action and reason.", (0, y, 12, 8),
        [(f"sum by (action, reason) (increase(infertune_decisions_total{{{OBJ}}}[{RATE}])) > 0",
          "{{action}} {{reason}}")],
    )
    decisions["fieldConfig"]["defaults"]["custom"] = {"drawStyle": "bars", "fillOpacity": 80}
    layout = _panel(
        "timeseries", "Layout over time", "Tensor parallel size, max concurrency and replicas applied.",
        (12, y, 12, 8),
        [(f"max(infertune_tensor_parallel_size{{{OBJ}}})", "TP"),
         (f"max(infertune_max_num_seqs{{{OBJ}}})", "max_num_seqs"),
         (f"max(infertune_replicas{{{OBJ}}})", "replicas")],
    )
    layout["fieldConfig"]["defaults"]["custom"] = {"lineInterpolation": "stepAfter"}
    return [decisions, layout]


def _variables() -> dict[str, Any]:
    def query(name: str, label: str, q: str) -> dict[str, Any]:
        return {"name": name, "label": label, "type": "query", "refresh": 2, "sort": 1,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "query": {"query": q, "refId": name}, "definition": q}

    return {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"},
        query("namespace", "Namespace", "label_values(infertune_replicas, namespace)"),
        query("deployment", "InferenceDeployment",
              'label_values(infertune_replicas{namespace="$namespace"}, name)'),
    ]}


def build() -> dict[str, Any]:
    panels: list[dict[str, Any]] = [_row("Layout", 0), *_layout_stats(1),
                                    _row("Throughput curve", 5), *_region_panels(6),
                                    _row("KV cache", 16), *_kv_panels(17),
                                    _row("SLO", 26), *_slo_panels(27),
                                    _row("Decisions", 35), *_decision_panels(36)]
    for i, panel in enumerate(panels, start=1):
        panel["id"] = i
    return {
        "uid": "infertune-deployment", "title": "infertune / InferenceDeployment",
        "description": "One InferenceDeployment: where it sits on the throughput curve, its KV-cache "
                       "headroom, its SLO and the operator's decisions.",
        "tags": ["infertune", "llm", "vllm"], "timezone": "browser", "editable": True,
        "schemaVersion": 39, "version": 1, "refresh": "30s", "time": {"from": "now-3h", "to": "now"},
        "templating": _variables(), "annotations": {"list": []}, "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    sys.stdout.write(f"wrote {OUT}\n")
