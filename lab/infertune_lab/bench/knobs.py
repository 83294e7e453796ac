"""Each policy's own knob, and the few settings of it that its frontier sweeps.

A policy judged at one setting is judged on how well someone chose that setting; swept over its
knob, it shows what it can buy at each price (docs/bench.md, "Frontiers"). The sweeps are lean on
purpose, three points or so a knob, because every point is a full run:

- infertune: `spec.tuning.burstHeadroomPercent`, the capacity kept spare above the measured demand
  when replicas are sized (default 15), and `spec.tuning.burstPercentile`, the share of recent bursts
  that capacity holds (default 98): the settings below run from the least capacity to the most;
- static: the layout (the load test's hand pick, TP4 c=8, and the layout that serves the run's
  heaviest window on the fewest GPUs) and its replicas (sized for the peak, and 25% fewer or more);
- hpa-kv: the HPA's AverageValue target on `vllm:kv_cache_usage_perc` (default 0.8);
- keda-queue: the ScaledObject's threshold on `vllm:num_requests_waiting` (default 5);
- keda-slo: the guide's band θ_up/θ_dn (default 0.55/0.40), moved together;
- oracle: none (hindsight has no knob).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from infertune.planner.request import DEFAULT_BURST_HEADROOM_PERCENT, DEFAULT_BURST_PERCENTILE
from infertune.planner.types import Layout
from infertune_lab.bench.capacity import HAND_PICKED, CapacitySweep
from infertune_lab.bench.cases import peak_demand
from infertune_lab.bench.keda import THRESHOLD
from infertune_lab.bench.keda_slo import Band, KedaSlo
from infertune_lab.bench.oracle import Window, static_layout
from infertune_lab.bench.policies import KV_TARGET, HpaKv, KedaQueue, Oracle, Policy, Static
from infertune_lab.bench.runner import RunSetup
from infertune_lab.bench.tuned import BenchResource, Infertune, bench_resource

# (burstPercentile, burstHeadroomPercent), from the least capacity to the most.
INFERTUNE_KNOB = ((90, 0), (DEFAULT_BURST_PERCENTILE, 0), (DEFAULT_BURST_PERCENTILE, DEFAULT_BURST_HEADROOM_PERCENT),
                  (DEFAULT_BURST_PERCENTILE, 40))
STATIC_SCALE = (0.75, 1.0, 1.25)
KV_TARGETS = (0.4, 0.6, KV_TARGET)
QUEUE_THRESHOLDS = (1.0, THRESHOLD, 20.0)
SLO_BANDS = (Band(0.35, 0.25), Band(), Band(0.80, 0.60))


@dataclass(frozen=True)
class Setting:
    """One point of a policy's knob: its name in the tables and whether it is the policy's default."""

    policy: str
    label: str
    default: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.policy, self.label


@dataclass(frozen=True)
class Context:
    """What every policy's settings are built from: the run, the capacity table, the hindsight windows."""

    setup: RunSetup
    sweep: CapacitySweep
    windows: Sequence[Window]
    pool_gpus: int
    arrivals: Sequence[float]


Built = tuple[Setting, Policy]


def settings(name: str, ctx: Context, frontier: bool) -> list[Built]:
    """The policy at its default setting, or (`frontier`) at every setting its frontier sweeps."""
    built = _BUILDERS[name](ctx)
    return built if frontier else [b for b in built if b[0].default]


def infertune_resource(setup: RunSetup, arrivals: Sequence[float], first_window_end: float,
                       burst_headroom_percent: int | None = None,
                       burst_percentile: int | None = None) -> BenchResource:
    """The resource infertune runs: the example, declaring what a model team knows of its traffic before
    it serves any (the first window's busiest five minutes and its mean request)."""
    return bench_resource(setup.pool_gpus, setup.load_seconds, peak_demand(arrivals, 0.0, first_window_end),
                          burst_headroom_percent=burst_headroom_percent,
                          expected_shape=setup.case.request_shape(0.0, first_window_end),
                          burst_percentile=burst_percentile)


def infertune_label(percentile: int, headroom: int) -> str:
    """A setting's name: the headroom alone at the default percentile (the tables before the percentile
    was a knob), both otherwise."""
    burst = f"burst {headroom}%"
    return burst if percentile == DEFAULT_BURST_PERCENTILE else f"p{percentile} {burst}"


def _infertune(ctx: Context) -> list[Built]:
    out: list[Built] = []
    for percentile, headroom in INFERTUNE_KNOB:
        resource = infertune_resource(ctx.setup, ctx.arrivals, ctx.windows[0].end, headroom, percentile)
        default = (percentile, headroom) == (DEFAULT_BURST_PERCENTILE, DEFAULT_BURST_HEADROOM_PERCENT)
        out.append((Setting("infertune", infertune_label(percentile, headroom), default), Infertune(resource)))
    return out


def _scaled(layout: Layout, scale: float, pool_gpus: int) -> Layout:
    replicas = min(max(1, math.ceil(layout.replicas * scale - 1e-9)), max(1, pool_gpus // layout.tensor_parallel_size))
    return replace(layout, replicas=replicas)


def _static(ctx: Context) -> list[Built]:
    picked = ctx.sweep.measure(ctx.setup.case.shape_at(0.0), *HAND_PICKED)
    sized = static_layout(picked, max(w.demand_rps for w in ctx.windows), ctx.pool_gpus)
    heaviest = max(ctx.windows, key=lambda w: w.demand_rps).layout
    out: list[Built] = []
    seen: set[Layout] = set()
    for base in (sized, heaviest):
        for scale in STATIC_SCALE:
            layout = _scaled(base, scale, ctx.pool_gpus)
            if layout in seen:
                continue
            seen.add(layout)
            label = f"TP{layout.tensor_parallel_size} c={layout.max_num_seqs} x{layout.replicas}"
            out.append((Setting("static", label, layout == sized), Static(layout)))
    return out


def _first(ctx: Context) -> Layout:
    """The hand-picked layout the autoscalers scale, starting at the first window's size."""
    picked = ctx.sweep.measure(ctx.setup.case.shape_at(0.0), *HAND_PICKED)
    return Layout(*HAND_PICKED, static_layout(picked, ctx.windows[0].demand_rps, ctx.pool_gpus).replicas)


def _max_replicas(ctx: Context) -> int:
    return ctx.pool_gpus // HAND_PICKED[0]


def _hpa_kv(ctx: Context) -> list[Built]:
    return [(Setting("hpa-kv", f"target {t:.2f}", t == KV_TARGET), HpaKv(_first(ctx), _max_replicas(ctx), target=t))
            for t in KV_TARGETS]


def _keda_queue(ctx: Context) -> list[Built]:
    return [(Setting("keda-queue", f"threshold {t:g}", t == THRESHOLD),
             KedaQueue(_first(ctx), _max_replicas(ctx), threshold=t)) for t in QUEUE_THRESHOLDS]


def _keda_slo(ctx: Context) -> list[Built]:
    return [(Setting("keda-slo", f"band {band}", band == Band()),
             KedaSlo(_first(ctx), _max_replicas(ctx), ctx.setup.slo, band=band)) for band in SLO_BANDS]


def _oracle(ctx: Context) -> list[Built]:
    return [(Setting("oracle", "hindsight", True), Oracle(ctx.windows, ctx.setup.load_seconds))]


_BUILDERS: dict[str, Callable[[Context], list[Built]]] = {
    "infertune": _infertune,
    "static": _static,
    "hpa-kv": _hpa_kv,
    "keda-queue": _keda_queue,
    "keda-slo": _keda_slo,
    "oracle": _oracle,
}
POLICIES = tuple(_BUILDERS)
