"""The demo's figures, kept apart (docs/sources.md#separate-slas) (throughput and latency are never folded into one
number): SLA attainment for TTFT and for per-stream speed separately, time past the cliff and over
the headroom line, preemptions, and the decisions the operator took.

Attainment is per request: the share of finished requests whose TTFT is within the limit, and the
share whose per-stream decode speed meets the floor. Windows (for the plots and for ordering checks)
take TTFT by arrival and speed by finish.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from infertune.planner.types import SloTarget
from infertune_lab.demo.measure import Decision, Recorder, Sample
from infertune_lab.sim.records import RequestRecord


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    ttft_p95: float | None  # of requests that arrived in the window
    stream_tps_mean: float | None  # of requests that finished in the window
    stream_tps_p5: float | None


@dataclass(frozen=True)
class Summary:
    scenario: str
    metrics_source: str
    traffic_seconds: float
    wall_seconds: float
    requests: int
    sla_attainment_ttft: float | None
    sla_attainment_tps: float | None
    ttft_p95_seconds: float | None
    stream_tps_p5: float | None
    seconds_past_cliff: int
    seconds_over_headroom: int
    preemptions: int
    peak_replicas: int
    final_layout: str
    decisions: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def quantile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile; None for no values (never a zero that looks like a measurement)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _decoding(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.spec.output_tokens > 1]


def windows(records: Sequence[RequestRecord], origin: float, end: float, width: float = 10.0) -> list[Window]:
    out = []
    start = 0.0
    while start < end:
        stop = start + width
        arrived = [r.ttft for r in records if start <= r.spec.arrival - origin < stop]
        finished = [r.stream_tps for r in _decoding(records) if start <= r.finish - origin < stop]
        out.append(Window(start, stop, quantile(arrived, 0.95),
                          sum(finished) / len(finished) if finished else None, quantile(finished, 0.05)))
        start = stop
    return out


def first_breach(wins: Sequence[Window], slo: SloTarget) -> float | None:
    """Start of the first window whose TTFT p95 or mean stream speed misses the SLA."""
    for w in wins:
        slow_ttft = slo.max_ttft_seconds is not None and w.ttft_p95 is not None and w.ttft_p95 > slo.max_ttft_seconds
        slow_tps = (slo.min_stream_tps is not None and w.stream_tps_mean is not None
                    and w.stream_tps_mean < slo.min_stream_tps)
        if slow_ttft or slow_tps:
            return w.start
    return None


def _share(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def summarize(recorder: Recorder, slo: SloTarget, headroom: float, scenario: str, source: str,
              wall_seconds: float) -> Summary:
    records = recorder.requests()
    decoding = _decoding(records)
    samples: list[Sample] = recorder.samples
    ttft_ok = sum(r.ttft <= (slo.max_ttft_seconds or math.inf) for r in records)
    tps_ok = sum(r.stream_tps >= (slo.min_stream_tps or 0.0) for r in decoding)
    last = samples[-1] if samples else None
    final = (f"TP{last.tp} max-num-seqs {last.max_num_seqs} x{last.replicas_wanted}"
             if last is not None and last.tp is not None else "none")
    p95, p5 = quantile([r.ttft for r in records], 0.95), quantile([r.stream_tps for r in decoding], 0.05)
    return Summary(
        scenario=scenario, metrics_source=source, traffic_seconds=round(last.t if last else 0.0, 1),
        wall_seconds=round(wall_seconds, 1), requests=len(records),
        sla_attainment_ttft=_share(ttft_ok, len(records)), sla_attainment_tps=_share(tps_ok, len(decoding)),
        ttft_p95_seconds=None if p95 is None else round(p95, 3), stream_tps_p5=None if p5 is None else round(p5, 2),
        seconds_past_cliff=sum(s.past_cliff for s in samples),
        seconds_over_headroom=sum(s.kv_max > 1.0 - headroom for s in samples),
        preemptions=recorder.preemptions, peak_replicas=max((s.serving for s in samples), default=0),
        final_layout=final, decisions=[_decision(d) for d in recorder.decisions],
    )


def _decision(d: Decision) -> dict[str, Any]:
    return {"t": round(d.t, 1), "time": d.time, "action": d.action, "reason": d.reason, "message": d.message}
