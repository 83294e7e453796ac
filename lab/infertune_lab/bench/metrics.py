"""What the benchmark reports per policy, and how each figure is defined.

Throughput and latency are never folded into one number (docs/sources.md#separate-slas): TTFT and per-stream speed
each have their own attainment, and cost and goodput stand beside them.

- sla_attainment_ttft: share of requests whose TTFT <= the SLO's limit;
- sla_attainment_tps: share of requests whose mean decode rate after the first token >= the floor
  (one-token answers have no decode and count as meeting it);
- requests that arrived but never finished count as missing both;
- gpu_hours: every replica that exists (loading, serving, draining) x its TP, over the run;
- cost_per_million_tokens: gpu_hours x price per GPU-hour / output tokens x 1e6;
- goodput_tokens_per_gpu_hour: output tokens of requests meeting both SLOs / gpu_hours;
- seconds_past_cliff: seconds in which any replica had KV usage >= 0.98 or preempted;
- peak_gpus: the most GPUs held at once by pods that exist and are not Pending (never more than
  the pool); peak_pending_gpus: the most GPUs Pending pods waited for at once (what was asked
  beyond the pool's room).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from infertune.model.early_warning import CLIFF_USAGE
from infertune_lab.sim import Fleet, RequestRecord


@dataclass(frozen=True)
class Slo:
    ttft_seconds: float
    min_stream_tps: float


def meets_ttft(record: RequestRecord, slo: Slo) -> bool:
    return record.ttft <= slo.ttft_seconds


def first_load_bound(records: Sequence[RequestRecord], requests: int, slo: Slo, begin: float,
                     load_seconds: float) -> float:
    """The most TTFT attainment any policy can reach from the start these records were served by, on a
    full pool: one minus the share of the run's `requests` that missed their TTFT with a first token
    before the first model load after `begin` ended (less capacity there queues no fewer)."""
    missed = sum(1 for r in records if r.first_token - begin < load_seconds and not meets_ttft(r, slo))
    return 1.0 - missed / requests if requests > 0 else 1.0


def meets_tps(record: RequestRecord, slo: Slo) -> bool:
    return record.spec.output_tokens <= 1 or record.stream_tps >= slo.min_stream_tps


def attainment(records: Sequence[RequestRecord], slo: Slo, unfinished: int = 0) -> tuple[float, float]:
    """(TTFT attainment, per-stream TPS attainment); NaN when there were no requests."""
    total = len(records) + unfinished
    if total == 0:
        return math.nan, math.nan
    return (sum(meets_ttft(r, slo) for r in records) / total, sum(meets_tps(r, slo) for r in records) / total)


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class CliffMeter:
    """Seconds in which any replica was past the cliff, from the engines' periodic samples."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._bins: set[int] = set()
        self._preemptions: dict[str, int] = {}

    def consume(self, fleet: Fleet, count: bool = True) -> None:
        """Reads and drops the samples taken since the last call (a day of them would not fit);
        `count=False` only drops them (the warm-up is not scored)."""
        for replica in fleet.replicas.values():
            engine = replica.engine
            before = self._preemptions.get(replica.name, 0)
            for sample in engine.samples:
                if count and (sample.kv_usage >= CLIFF_USAGE or sample.preemptions > before):
                    self._bins.add(math.floor(sample.time / self.interval))
                before = sample.preemptions
            self._preemptions[replica.name] = before
            engine.samples.clear()

    @property
    def seconds(self) -> float:
        return len(self._bins) * self.interval


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    requests: int
    unfinished: int
    sla_attainment_ttft: float
    sla_attainment_tps: float
    ttft_p50_seconds: float
    ttft_p95_seconds: float
    ttft_p99_seconds: float
    per_stream_tps_p5: float
    gpu_hours: float
    cost_per_million_tokens: float
    goodput_tokens_per_gpu_hour: float
    preemptions: int
    seconds_past_cliff: float
    relayouts: int
    output_tokens: int
    peak_gpus: int
    wall_seconds: float
    peak_pending_gpus: int = 0

    def as_json(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items() if k != "policy"}


def summarize(policy: str, records: Iterable[RequestRecord], unfinished: int, slo: Slo, gpu_seconds: float,
              price_per_gpu_hour: float, seconds_past_cliff: float, relayouts: int, peak_gpus: int,
              wall_seconds: float, peak_pending_gpus: int = 0) -> PolicyResult:
    recs = list(records)
    ttft_share, tps_share = attainment(recs, slo, unfinished)
    ttfts = [r.ttft for r in recs]
    streams = [r.stream_tps for r in recs if r.spec.output_tokens > 1]
    output = sum(r.spec.output_tokens for r in recs)
    good = sum(r.spec.output_tokens for r in recs if meets_ttft(r, slo) and meets_tps(r, slo))
    gpu_hours = gpu_seconds / 3600.0
    return PolicyResult(
        policy=policy, requests=len(recs) + unfinished, unfinished=unfinished,
        sla_attainment_ttft=ttft_share, sla_attainment_tps=tps_share,
        ttft_p50_seconds=quantile(ttfts, 0.50), ttft_p95_seconds=quantile(ttfts, 0.95),
        ttft_p99_seconds=quantile(ttfts, 0.99), per_stream_tps_p5=quantile(streams, 0.05),
        gpu_hours=gpu_hours,
        cost_per_million_tokens=gpu_hours * price_per_gpu_hour / output * 1e6 if output else math.inf,
        goodput_tokens_per_gpu_hour=good / gpu_hours if gpu_hours > 0 else 0.0,
        preemptions=sum(r.preemptions for r in recs), seconds_past_cliff=seconds_past_cliff,
        relayouts=relayouts, output_tokens=output, peak_gpus=peak_gpus, wall_seconds=wall_seconds,
        peak_pending_gpus=peak_pending_gpus,
    )
