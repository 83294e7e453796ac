"""The planner's inputs and outputs: frozen dataclasses, no behaviour beyond small derivations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from infertune.model.catalog import GpuSpec, ModelProfile
from infertune.model.forecast import BURST_QUANTILE
from infertune.model.kv import CapacityAssumptions
from infertune.model.perf import AnyFit
from infertune.model.roofline import NapkinAssumptions
from infertune.model.workload import Workload


@dataclass(frozen=True)
class SloTarget:
    """Per-stream decode speed and TTFT are separate SLAs (docs/sources.md#separate-slas): never one number."""

    min_stream_tps: float | None = None
    max_ttft_seconds: float | None = None
    ttft_percentile: int = 95


@dataclass(frozen=True)
class Guardrails:
    scale_up_cooldown_s: float = 60.0
    scale_down_cooldown_s: float = 300.0
    relayout_cooldown_s: float = 1800.0
    # Scale down only to the highest replica count recommended within this window (HPA's rule).
    scale_down_stabilization_s: float = 300.0
    max_step_replicas: int = 4
    # A scale-up may instead add this share of the running count, when that is more: HPA's default scale-up
    # (100% or 4 pods, whichever is more). With a model load of minutes a pod ordered a decision late serves
    # that much later, while one ordered too early is released by the scale-down window. 0 when the user
    # set a step, which then bounds both ways.
    scale_up_share: float = 1.0
    # Ignore replica changes smaller than this fraction of the current count (and < 1 replica).
    hysteresis: float = 0.10
    # How far the demand's figures vouch for a re-layout: a rollout that gives way must end within it, and a
    # shape left as unsafe is remembered for as long.
    relayout_horizon_s: float = 3600.0
    # A re-layout must save more over this span than its rollout costs. Longer than the horizon: the shape a
    # re-layout brings runs for hours, and at one hour a move that saved a fifth of a 40-GPU fleet waited
    # because its 15-minute overlap cost 10 GPU-h, so a step met the dearer shape's lower ceiling on a full
    # pool (docs/bench-history.md, "A re-layout's saving weighed over two hours").
    relayout_payback_s: float = 7200.0
    model_load_seconds: float = 600.0
    # Older metrics than this hold every decision.
    stale_after_s: float = 120.0


def stabilization_window(rails: Guardrails) -> float:
    """HPA's window, but never shorter than a model load: a replica released on a dip takes that long
    to come back, so only demand that stayed low for as long is worth releasing it for."""
    return max(rails.scale_down_stabilization_s, rails.model_load_seconds)


def window_maxima(recommended: tuple[tuple[float, int], ...]) -> tuple[tuple[float, int], ...]:
    """The [time, replicas] entries a stabilisation window can still need, oldest first: only its highest
    count is ever read, so an entry with a later one as high is never the answer, for any window length.
    What is left falls strictly with time, so it holds at most one entry per replica count however fast
    the cycle runs (a day's window at a 30 s cycle was 2,880 entries in status, at --cycle-seconds 0.1
    past what etcd stores in one object)."""
    kept: list[tuple[float, int]] = []
    for at, replicas in recommended:
        while kept and kept[-1][1] <= replicas:
            kept.pop()
        kept.append((at, replicas))
    return tuple(kept)


@dataclass(frozen=True)
class PlanRequest:
    model: ModelProfile
    gpu: GpuSpec
    workload: Workload
    slo: SloTarget
    tp_sizes: tuple[int, ...] = (1, 2, 4, 8)
    concurrency_min: int = 1
    concurrency_max: int = 256
    replicas_min: int = 1
    replicas_max: int = 64
    pool_gpus: int | None = None
    kv_headroom: float = 0.10
    price_per_gpu_hour: float | None = None
    # Requests/s to serve; the observation's arrival rate replaces it once metrics exist.
    demand_rps: float | None = None
    # Keep this fraction of capacity spare when sizing replicas.
    demand_headroom: float = 0.15
    # The share of recent demand bins the burst figure covers (model/forecast.py).
    burst_quantile: float = BURST_QUANTILE
    guardrails: Guardrails = Guardrails()
    napkin: NapkinAssumptions = NapkinAssumptions()
    capacity: CapacityAssumptions = CapacityAssumptions()
    # Per TP: live samples with their contexts, a physics fit, or a measured line (model/perf.py).
    fits: Mapping[int, AnyFit] = field(default_factory=dict)
    measured_points: Mapping[int, tuple[float, float]] = field(default_factory=dict)
    observed_capacity_tokens: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Layout:
    tensor_parallel_size: int
    max_num_seqs: int
    replicas: int

    @property
    def gpus(self) -> int:
        return self.tensor_parallel_size * self.replicas

    def same_shape(self, other: Layout) -> bool:
        return (self.tensor_parallel_size, self.max_num_seqs) == (other.tensor_parallel_size, other.max_num_seqs)


class DecisionReason(StrEnum):
    """Why the guardrails decided what they did: the reason of the one check that held a change, or
    of the change made. Shared by status.decisions, Events and the decisions counter."""

    CHEAPER_LAYOUT = "CheaperLayout"
    CURRENT_LAYOUT_UNSAFE = "CurrentLayoutUnsafe"
    DEMAND_FALLING = "DemandFalling"
    DEMAND_RISING = "DemandRising"
    INITIAL_LAYOUT = "InitialLayout"
    METRICS_FRESH = "MetricsFresh"
    METRICS_STALE = "MetricsStale"
    METRICS_UNAVAILABLE = "MetricsUnavailable"
    NO_DEMAND_FIGURE = "NoDemandFigure"
    NO_FEASIBLE_LAYOUT = "NoFeasibleLayout"
    PASS_TIME_UNMEASURED = "PassTimeUnmeasured"
    PASSED = "Passed"
    PLAN_FEASIBLE = "PlanFeasible"
    RELAYOUT_COOLDOWN = "RelayoutCooldown"
    RELAYOUT_IN_PROGRESS = "RelayoutInProgress"
    RELAYOUT_NOT_WORTH_IT = "RelayoutNotWorthIt"
    RELAYOUT_PAYS_BACK = "RelayoutPaysBack"
    RELAYOUT_WOULD_DROP_CAPACITY = "RelayoutWouldDropCapacity"
    ROLLOUT_IN_PROGRESS = "RolloutInProgress"
    SLO_MISSED = "SLOMissed"
    SCALE_DOWN_COOLDOWN = "ScaleDownCooldown"
    SCALE_DOWN_STABILIZING = "ScaleDownStabilizing"
    SCALE_UP_COOLDOWN = "ScaleUpCooldown"
    SCALE_UP_LOADING = "ScaleUpLoading"
    UP_TO_DATE = "UpToDate"
    WITHIN_HYSTERESIS = "WithinHysteresis"
    WORKING_SET_ABOVE_PLAN = "WorkingSetAbovePlan"
    WORKING_SET_UNSETTLED = "WorkingSetUnsettled"


@dataclass(frozen=True)
class LeftUnsafe:
    """The running shape the last unsafe re-layout left (its replicas dropped), the working set's level then
    (the KV a running stream held, planner/running.py `working_set_level`), and when (Unix s)."""

    tensor_parallel_size: int
    max_num_seqs: int
    stream_tokens: float
    at: float


class Action(StrEnum):
    NONE = "None"
    HOLD = "Hold"
    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    RELAYOUT = "Relayout"


@dataclass(frozen=True)
class PlannerState:
    """What the guardrails remember between cycles; persisted in the resource's status."""

    applied: Layout | None = None
    last_scale_up_at: float | None = None
    last_scale_down_at: float | None = None
    last_relayout_at: float | None = None
    # (time, replicas) of recent recommendations, for scale-down stabilisation.
    recent_recommendations: tuple[tuple[float, int], ...] = ()
    # Old pods still serve beside the applied shape's: read from the workload every cycle, not persisted.
    rolling_out: bool = False
    # The maxSurge the workload rolls with: how many pods over its count a rollout holds at once.
    rollout_surge: int = 1
    # Its maxUnavailable: more than 0 only after a rollout that gave old pods up (planner/rollout.py).
    rollout_unavailable: int = 0
    # The shape the last re-layout rolled from, at the old pods it kept: while it rolls, those pods hold
    # their GPUs beside the new ones, so a scale-up must leave them room (persisted in status).
    rolled_from: Layout | None = None
    # The workload's ready pods, read from it every cycle (not persisted); None when unknown.
    ready_replicas: int | None = None
    # Pods of the shape rolled from still live, read from the workload every cycle (not persisted); None
    # when unknown. A rollout frees the old pods' GPUs as it goes, so room for a scale-up is judged on these.
    old_pods: int | None = None
    # The last shape left as unsafe and the working set that sent it away (persisted in status): for one
    # re-layout horizon a move for cost is judged at no less than that working set.
    left_unsafe: LeftUnsafe | None = None
