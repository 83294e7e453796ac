"""One tuning cycle for one resource, as a pure function: observation -> plan -> guardrails -> the
mode's action -> the new status. The Reconciler (controller/reconciler.py) wraps it with I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from infertune.actuate.workload import selector_string
from infertune.api.conditions import (
    Condition,
    ConditionType,
    ConditionUpdate,
    Reason,
    merge_conditions,
)
from infertune.api.observation import MetricsFault, Observation
from infertune.api.schema import TuningMode
from infertune.controller import status as st
from infertune.model.early_warning import CliffWarning
from infertune.model.forecast import DemandPoint, SeasonalProfile, outlook
from infertune.model.perf import AnyFit, PerformanceModel
from infertune.planner import Decision, Plan, decide, next_state, plan
from infertune.planner.request import Resolved, pinned
from infertune.planner.types import Action, DecisionReason, Layout

Event = tuple[str, str, str]  # (type, reason, message)
# A cycle ends for a guardrail's reason, a metrics fault's, or the mode's (Paused, TuningOff, Recommended).
OutcomeReason = DecisionReason | MetricsFault | Reason
_WARN_WHEN_FALSE = {ConditionType.SLO_MET.value, ConditionType.CACHE_HEADROOM.value,
                    ConditionType.METRICS_AVAILABLE.value, ConditionType.READY.value}


@dataclass(frozen=True)
class CycleInput:
    namespace: str
    name: str
    generation: int | None
    paused: bool
    resolved: Resolved
    status: Mapping[str, Any]
    observation: Observation | None
    fits: Mapping[int, AnyFit]  # FitMemory.fits(): live samples with their contexts, per TP
    now: float
    warning: CliffWarning | None = None  # the cliff early warning from the pressure history
    workload: st.WorkloadState | None = None  # the owned workload's rollout, for Ready
    fit_samples: Mapping[str, Any] | None = None  # FitMemory.to_status(), kept across restarts
    demand_points: tuple[DemandPoint, ...] = ()  # the demand each recent poll saw (the hub's)
    profile: SeasonalProfile | None = None  # the demand learnt by hour and day
    profile_status: Mapping[str, Any] | None = None  # written to status when given (not every cycle)
    arrival_points: tuple[DemandPoint, ...] = ()  # the arrival rate alone each recent poll saw (the hub's)


@dataclass(frozen=True)
class CycleOutcome:
    plan: Plan
    decision: Decision
    apply: Layout | None  # the layout to apply now (Auto mode only), None to leave the workload be
    max_surge: int  # the rollout strategy to render it with
    max_unavailable: int
    action: Action  # what the operator did: the decision's action, or Hold when the mode held it
    reason: OutcomeReason
    status: dict[str, Any]
    events: tuple[Event, ...]


@dataclass(frozen=True)
class ModeAction:
    """What the resource's mode makes of a decision."""

    action: Action
    reason: OutcomeReason
    message: str
    target: Layout | None  # what to apply now; None leaves the workload be


def _mode_action(inp: CycleInput, decision: Decision) -> ModeAction:
    spec = inp.resolved.spec
    held = Action.HOLD if decision.target is not None else decision.action
    if inp.paused:
        return ModeAction(held, Reason.PAUSED, "infertune.io/paused is \"true\"; holding", None)
    if spec.tuning.mode is TuningMode.OFF:
        return ModeAction(held, Reason.TUNING_OFF, "spec.tuning.mode is Off; holding", None)
    if spec.tuning.mode is TuningMode.RECOMMEND:
        reason = Reason.RECOMMENDED if decision.target is not None else decision.reason
        return ModeAction(held, reason, decision.message, None)
    target = pinned(decision.target, spec) if decision.target is not None else None
    return ModeAction(decision.action, decision.reason, decision.message, target)


def _condition_events(old: list[Condition], new: list[Condition]) -> list[Event]:
    before = {c.type: c.status for c in old}
    events = []
    for c in new:
        if before.get(c.type) != c.status and c.status != "Unknown":
            kind = "Warning" if c.status == "False" and c.type in _WARN_WHEN_FALSE else "Normal"
            events.append((kind, c.reason, f"{c.type}={c.status}: {c.message}"))
    return events


def run_cycle(inp: CycleInput) -> CycleOutcome:
    request = inp.resolved.request
    if inp.fits:  # the fleet's own samples replace a declared load test at the TP they measured
        request = replace(request, fits={**request.fits, **inp.fits})
    workload = inp.workload
    state = replace(st.state_from_status(inp.status, inp.now),
                    rolling_out=workload is not None and workload.mid_rollout,
                    rollout_surge=1 if workload is None else workload.max_surge,
                    rollout_unavailable=0 if workload is None else workload.max_unavailable,
                    ready_replicas=None if workload is None else workload.ready,
                    old_pods=None if workload is None else workload.old_pods)
    obs = inp.observation
    current = None if obs is None else obs.demand_read
    look = None if current is None else outlook(current, inp.demand_points, inp.profile, inp.now,
                                                request.guardrails.model_load_seconds, inp.arrival_points,
                                                request.burst_quantile)
    the_plan = plan(request, inp.observation, inp.now, look)
    decision = decide(the_plan, state, inp.observation, request.guardrails, inp.now)
    mode = _mode_action(inp, decision)
    target = mode.target
    new_state = next_state(state, decision, request.guardrails, applied=target is not None)
    if target is not None:
        new_state = replace(new_state, applied=target)

    applied = inp.status.get("applied")
    if target is not None:
        applied = st.applied_status(target, inp.resolved.gpu.gpus_per_node, st.iso(inp.now))
    held = mode.action is Action.HOLD
    slo = request.slo
    updates = [
        st.metrics_condition(obs), st.slo_condition(obs, slo), st.headroom_condition(obs, inp.warning),
        ConditionUpdate(ConditionType.PROGRESSING.value, "True" if target else "False",
                        Reason.ROLLING_OUT.value if target else (mode.reason if held else Reason.STABLE.value),
                        mode.message if target or held else "no change"),
        st.ready_condition(replace(inp.workload, desired=target.replicas) if target and inp.workload
                           else inp.workload, bool(applied)),
        ConditionUpdate(ConditionType.INVALID_SPEC.value, "False", Reason.SPEC_VALID.value, "the spec is valid"),
    ]
    old = [Condition.from_wire(dict(c)) for c in st.records(inp.status, "conditions")]
    conditions = merge_conditions(old, updates, st.iso(inp.now), inp.generation)
    fields: dict[str, Any] = {
        "conditions": [c.wire() for c in conditions], "observedGeneration": inp.generation,
        "selector": selector_string(inp.name), "recommendation": st.recommendation(the_plan, decision, look),
        "observed": st.observed(obs, slo, inp.warning),
        "decisions": st.log_decision(st.records(inp.status, "decisions"), inp.now, mode.action, mode.reason,
                                     mode.message),
        "guardrails": st.state_to_status(new_state),
    }
    if applied:
        fields["applied"] = applied
    if target is not None:
        fields["replicas"] = target.replicas
    applied_tp = (st.layout_of(applied) or Layout(0, 0, 0)).tensor_parallel_size
    # The same cached fit the plan used (model/passfit.py caches by the samples' content).
    perf = PerformanceModel(request.model, request.gpu, the_plan.workload, request.napkin, fits=request.fits)
    fit = st.fitted(perf.pass_fit(applied_tp) if applied_tp in request.fits else None, applied_tp,
                    load_test=applied_tp not in inp.fits)
    if fit is not None:
        fields["fit"] = fit
    if inp.fit_samples:
        fields["fitSamples"] = dict(inp.fit_samples)
    if inp.profile_status:
        fields["demandProfile"] = dict(inp.profile_status)
    events = _condition_events(old, conditions)
    if target is not None:
        events.append(("Normal", mode.reason, f"applying TP{target.tensor_parallel_size} max-num-seqs "
                                              f"{target.max_num_seqs} x{target.replicas}: {mode.message}"))
    rollout = decision.rollout if target is not None else None
    surge = (decision.max_surge or state.rollout_surge) if rollout is None else rollout.max_surge
    unavailable = state.rollout_unavailable if rollout is None else rollout.max_unavailable
    return CycleOutcome(the_plan, decision, target, surge, unavailable, mode.action, mode.reason,
                        st.wire_status(fields), tuple(events))
