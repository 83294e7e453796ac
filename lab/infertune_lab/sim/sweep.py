"""The closed-loop concurrency sweep: one replica, each level holding that many sessions in flight.

Every level is a fresh replica and a fresh `ClosedLoop`; the first `warmup` virtual seconds are
discarded and the figures come from the next `duration` seconds. Nothing here draws the curve:
the climb, the bend, the plateau and the cliff are whatever the scheduler produced.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from infertune.api.quantities import format_figure
from infertune_lab.sim.config import ReplicaConfig
from infertune_lab.sim.fleet import Fleet
from infertune_lab.sim.records import RequestRecord
from infertune_lab.sim.traffic import ClosedLoop, SessionShape


@dataclass(frozen=True)
class SweepRow:
    concurrency: int
    aggregate_tps: float  # output tokens per second, the whole replica
    per_stream_tps: float  # mean decode rate of the requests that finished
    ttft_p50_seconds: float
    ttft_p95_seconds: float
    kv_usage: float  # time-averaged share of the KV pool in use
    preemptions: int
    prefix_hit_rate: float  # cached prompt tokens over prompt tokens looked up
    requests: int

    def as_json(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_level(config: ReplicaConfig, workload: SessionShape, concurrency: int, warmup: float = 300.0,
              duration: float = 900.0, seed: int = 0, think: float | None = 0.0,
              sample_interval: float = 1.0) -> SweepRow:
    fleet = Fleet(ClosedLoop(workload, concurrency, seed=seed, think=think), seed=seed,
                  sample_interval=sample_interval)
    name = fleet.add_replica(config)
    engine = fleet.replicas[name].engine
    fleet.run_until(warmup)
    before = (engine.meters.generation_tokens, engine.meters.preemptions, engine.meters.prefix_hits,
              engine.meters.prefix_queries, len(engine.samples))
    records: list[RequestRecord] = fleet.run_until(warmup + duration)
    m = engine.meters
    window = [r for r in records if r.first_token >= warmup]
    # First tokens seen in the window, including those of requests still decoding at its end.
    ttfts = [r.ttft for r in window]
    streams = [r.stream_tps for r in records if r.spec.output_tokens > 1]
    samples = engine.samples[before[4]:]
    queries = m.prefix_queries - before[3]
    return SweepRow(
        concurrency=concurrency,
        aggregate_tps=(m.generation_tokens - before[0]) / duration,
        per_stream_tps=sum(streams) / len(streams) if streams else math.nan,
        ttft_p50_seconds=_quantile(ttfts, 0.5),
        ttft_p95_seconds=_quantile(ttfts, 0.95),
        kv_usage=sum(s.kv_usage for s in samples) / len(samples) if samples else math.nan,
        preemptions=m.preemptions - before[1],
        prefix_hit_rate=(m.prefix_hits - before[2]) / queries if queries else math.nan,
        requests=len(records),
    )


def sweep(config: ReplicaConfig, workload: SessionShape, concurrencies: Sequence[int], warmup: float = 300.0,
          duration: float = 900.0, seed: int = 0, think: float | None = 0.0) -> list[SweepRow]:
    return [run_level(config, workload, c, warmup, duration, seed, think) for c in concurrencies]


def format_table(rows: Sequence[SweepRow]) -> str:
    head = f"{'CONC':>5} {'AGG TPS':>9} {'TPS/STREAM':>10} {'TTFT P50':>9} {'TTFT P95':>9} {'KV':>6} " \
           f"{'PREEMPT':>8} {'PREFIX HIT':>10}"
    lines = [head]
    for r in rows:
        # A level where nothing finished, or nothing was looked up, has no figure: "-", never "nan".
        tps, kv, hits = (format_figure(r.per_stream_tps, ".1f"), format_figure(r.kv_usage, ".1%"),
                         format_figure(r.prefix_hit_rate, ".1%"))
        lines.append(f"{r.concurrency:>5} {r.aggregate_tps:>9.1f} {tps:>10} "
                     f"{_seconds(r.ttft_p50_seconds):>9} {_seconds(r.ttft_p95_seconds):>9} "
                     f"{kv:>6} {r.preemptions:>8} {hits:>10}")
    return "\n".join(lines)


def _seconds(value: float) -> str:
    return format_figure(value, ".2f") + "s" if math.isfinite(value) else "-"


def plot(rows: Sequence[SweepRow], path: str | Path, title: str) -> None:
    """Aggregate and per-stream TPS, TTFT p95 and KV use against concurrency, in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = [r.concurrency for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    top.plot(c, [r.aggregate_tps for r in rows], "o-", color="tab:blue", label="aggregate output tok/s")
    top.set_ylabel("aggregate tok/s", color="tab:blue")
    right = top.twinx()
    right.plot(c, [r.per_stream_tps for r in rows], "s--", color="tab:orange", label="per-stream tok/s")
    right.set_ylabel("per-stream tok/s", color="tab:orange")
    top.set_title(title)
    top.grid(alpha=0.3)
    bottom.semilogy(c, [max(r.ttft_p95_seconds, 1e-3) for r in rows], "o-", color="tab:red", label="TTFT p95")
    bottom.set_ylabel("TTFT p95 (s)", color="tab:red")
    bottom.set_xlabel("concurrency (sessions in flight)")
    bottom.grid(alpha=0.3)
    kv = bottom.twinx()
    kv.plot(c, [r.kv_usage for r in rows], "^:", color="tab:green", label="mean KV use")
    kv.plot(c, [r.prefix_hit_rate for r in rows], "v:", color="tab:purple", label="prefix hit rate")
    kv.set_ylim(0, 1.05)
    kv.set_ylabel("share")
    kv.legend(loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
