"""Status pieces from one cycle's observation, plan and decision: conditions, the recommendation,
observed figures, the fitted model and the decision log. Pure; `cycle` assembles them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from infertune.actuate.workload import layout_of_workload, layout_read_back, rollout_strategy_of, workload_kind
from infertune.api.conditions import ConditionType, ConditionUpdate, Reason
from infertune.api.observation import Observation
from infertune.api.schema import REPLICAS_MAX, REQUESTS_PER_SECOND_MAX
from infertune.api.status import MAX_DECISIONS, InferenceDeploymentStatus, LeftUnsafeShape
from infertune.model.early_warning import CliffReason, CliffWarning
from infertune.model.forecast import DemandOutlook, SeasonalProfile
from infertune.model.passfit import PassFit
from infertune.planner import Decision, Plan, PlannerState
from infertune.planner.types import Layout, LeftUnsafe, SloTarget


def iso(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def metrics_condition(obs: Observation | None) -> ConditionUpdate:
    kind = ConditionType.METRICS_AVAILABLE.value
    if obs is None:
        return ConditionUpdate(kind, "Unknown", Reason.WAITING_FOR_METRICS.value, "no metrics snapshot yet")
    if obs.available:
        return ConditionUpdate(kind, "True", obs.fault.value, obs.message or "fresh samples from every replica")
    return ConditionUpdate(kind, "False", obs.fault.value, obs.message or "metrics are not trusted")


def slo_condition(obs: Observation | None, slo: SloTarget) -> ConditionUpdate:
    kind = ConditionType.SLO_MET.value
    if slo.min_stream_tps is None and slo.max_ttft_seconds is None:
        return ConditionUpdate(kind, "True", Reason.NO_SLO.value, "no SLO set")
    if obs is None or not obs.available:
        return ConditionUpdate(kind, "Unknown", Reason.WAITING_FOR_METRICS.value, "no trusted metrics")
    misses, known = [], 0
    ttft, tps = obs.ttft_at(slo.ttft_percentile), obs.stream_tps
    if slo.max_ttft_seconds is not None and ttft is not None:
        known += 1
        if ttft > slo.max_ttft_seconds:
            misses.append(f"TTFT p{slo.ttft_percentile} {ttft:.2f} s > {slo.max_ttft_seconds:g} s")
    if slo.min_stream_tps is not None and tps is not None:
        known += 1
        if tps < slo.min_stream_tps:
            misses.append(f"{tps:.1f} tok/s per stream < {slo.min_stream_tps:g}")
    if misses:
        return ConditionUpdate(kind, "False", Reason.SLO_MISSED.value, "; ".join(misses))
    if not known:
        return ConditionUpdate(kind, "Unknown", Reason.WAITING_FOR_METRICS.value, "no TTFT or decode figures")
    return ConditionUpdate(kind, "True", Reason.SLO_MET.value, "within the SLO")


_CLIFF_REASONS = {
    CliffReason.OK: Reason.HEADROOM_OK, CliffReason.APPROACHING: Reason.APPROACHING_CLIFF,
    CliffReason.PAST: Reason.PAST_CLIFF, CliffReason.PREEMPTING: Reason.PREEMPTING,
    CliffReason.UNKNOWN: Reason.WAITING_FOR_METRICS,
}


def headroom_condition(obs: Observation | None, warning: CliffWarning | None) -> ConditionUpdate:
    """CacheHeadroom from the early warning: the pressure trend and preemptions, not one instant."""
    kind = ConditionType.CACHE_HEADROOM.value
    if obs is None or not obs.available or warning is None:
        return ConditionUpdate(kind, "Unknown", Reason.WAITING_FOR_METRICS.value, "no trusted KV figures")
    return ConditionUpdate(kind, warning.status, _CLIFF_REASONS[warning.reason].value, warning.message)


@dataclass(frozen=True)
class WorkloadState:
    """The owned workload's rollout as its controller reports it (Deployment or LeaderWorkerSet status)."""

    desired: int
    ready: int
    updated: int | None = None  # pods of the current template, loading or ready (updatedReplicas)
    # Every live pod of every template, loading or ready (status.replicas: a terminating pod is not
    # counted); None when the status does not say.
    pods: int | None = None
    current: bool = True  # the controller has observed the latest generation
    # What the workload runs, read from its replicas and its pod template's layout annotations: the
    # truth the operator acts from, whatever its status last recorded.
    layout: Layout | None = None
    max_surge: int = 1  # the rollout strategy it rolls with
    max_unavailable: int = 0
    # The uid of the object that controls it ("" for none); None when the port does not say.
    owner: str | None = None

    def foreign_to(self, uid: str) -> bool:
        """Controlled by something other than the resource with this uid (or by nothing)."""
        return self.owner is not None and self.owner != uid

    @property
    def old_pods(self) -> int | None:
        """Pods of an earlier template still live: what a rollout has yet to replace. None when the
        status does not say, or says it of a template before the last applied (its controller has not
        observed the latest generation: every pod of the template just replaced still counts as updated)."""
        if self.pods is None or self.updated is None or not self.current:
            return None
        return max(0, self.pods - self.updated)

    @property
    def mid_rollout(self) -> bool:
        """Old pods still live beside new ones (a fit window would mix two layouts). Read from the pods
        of each template, not from the ready ones: once the new pods, loading ones included, are as many
        as the ready ones, a Deployment's updatedReplicas is no longer below its readyReplicas though old
        pods still serve."""
        old = self.old_pods
        if old is not None:
            return old > 0
        return self.updated is not None and self.updated < self.ready

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> WorkloadState:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        surge, unavailable = rollout_strategy_of(dict(obj))
        generation = (obj.get("metadata") or {}).get("generation")
        seen = status.get("observedGeneration")
        return cls(desired=int(spec.get("replicas", 1) or 0), ready=_pod_count(status.get("readyReplicas")) or 0,
                   updated=_pod_count(status.get("updatedReplicas")), pods=_pod_count(status.get("replicas")),
                   current=generation is None or seen is None or int(seen) >= int(generation),
                   layout=layout_of_workload(dict(obj)), max_surge=surge, max_unavailable=unavailable,
                   owner=owner_uid(obj))


def _pod_count(value: Any) -> int | None:
    """A pod count from a workload's status; None when it is absent or not a count (a controller that
    writes something else is not read as a rollout)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def owner_uid(obj: Mapping[str, Any]) -> str:
    """The uid of the object's controller owner; "" when nothing controls it."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    found = next((r for r in refs if isinstance(r, Mapping) and r.get("controller")), None)
    return "" if found is None else str(found.get("uid", ""))


def ready_condition(workload: WorkloadState | None, applied: bool) -> ConditionUpdate:
    """Ready follows the workload's ready replicas, as a Deployment's Available does with
    maxUnavailable 0: every desired replica must be ready, so a scale-up is not Ready until it lands."""
    kind = ConditionType.READY.value
    if not applied:
        return ConditionUpdate(kind, "False", Reason.FIRST_VISIT.value, "no workload applied yet")
    if workload is None:
        return ConditionUpdate(kind, "False", Reason.WORKLOAD_PENDING.value,
                               "the workload is applied; its controller has not reported status yet")
    counts = f"{workload.ready}/{workload.desired} replicas ready"
    if workload.current and workload.mid_rollout:
        # As `kubectl rollout status` waits: the ready count includes old pods still serving beside the new
        # ones, so it reaches the desired count before the layout applied is the one that serves.
        old = workload.old_pods
        still = "" if old is None else f", {old} pod(s) of the layout before still serve"
        return ConditionUpdate(kind, "False", Reason.ROLLING_OUT.value, f"{counts}{still}")
    if workload.ready >= workload.desired and workload.current:
        return ConditionUpdate(kind, "True", Reason.WORKLOAD_READY.value, counts)
    return ConditionUpdate(kind, "False", Reason.REPLICAS_NOT_READY.value, counts)


def demand_figures(outlook: DemandOutlook) -> dict[str, Any]:
    figures = {"currentRps": _r(outlook.current), "burstRps": _r(outlook.burst), "trendRps": _r(outlook.trend),
               "seasonalRps": _r(outlook.seasonal), "sizedRps": _r(outlook.sized), "drivenBy": outlook.driver,
               "horizonSeconds": _r(outlook.horizon_s, 0), "recentPeakRps": _r(outlook.recent_peak)}
    return {k: v for k, v in figures.items() if v is not None}


def profile_to_status(profile: SeasonalProfile, now: float) -> dict[str, Any]:
    return {"daily": [round(v, 4) for v in profile.daily], "dailySamples": list(profile.daily_samples),
            "weekly": [round(v, 4) for v in profile.weekly], "weeklySamples": list(profile.weekly_samples),
            "updatedAt": iso(now)}


def profile_from_status(raw: Mapping[str, Any] | None) -> SeasonalProfile:
    """The learnt profile kept in status; an empty one when there is none or it cannot be read."""
    if not raw:
        return SeasonalProfile()
    try:
        daily = tuple(float(v) for v in raw["daily"])
        daily_n = tuple(int(v) for v in raw["dailySamples"])
        weekly = tuple(float(v) for v in raw["weekly"])
        weekly_n = tuple(int(v) for v in raw["weeklySamples"])
    except (KeyError, TypeError, ValueError):
        return SeasonalProfile()
    values = (*daily, *weekly)
    # A mean demand above what any resource may state (REQUESTS_PER_SECOND_MAX) was never learnt from a
    # fleet: read, one such hour would size the seasonal forecast for it.
    if (len(daily), len(daily_n), len(weekly), len(weekly_n)) != (24, 24, 7, 7) or not all(
            0 <= v <= REQUESTS_PER_SECOND_MAX for v in values) or min(*daily_n, *weekly_n) < 0:
        return SeasonalProfile()
    return SeasonalProfile(daily, daily_n, weekly, weekly_n)


def recommendation(plan: Plan, decision: Decision, outlook: DemandOutlook | None = None) -> dict[str, Any]:
    layout, choice = plan.layout, plan.choice or plan.closest
    out: dict[str, Any] = {"feasible": plan.feasible, "reason": decision.reason, "message": plan.reason[:1000]}
    if layout is not None:
        out |= {"tensorParallelSize": layout.tensor_parallel_size, "maxNumSeqs": layout.max_num_seqs,
                "replicas": layout.replicas}
    if choice is not None:
        predictions = {
            "streamTokensPerSecond": _r(choice.per_stream_tps, 2), "ttftSeconds": _r(choice.ttft_seconds),
            "kvWorkingSetPercent": round(choice.kv_working_set_fraction * 100)
            if math.isfinite(choice.kv_working_set_fraction) else None,
            "cliffConcurrency": _r(choice.cliff_concurrency, 1),
            "costPerMillionTokens": _r(choice.cost_per_million_tokens, 4), "region": choice.region.value,
        }
        out["predictions"] = {k: v for k, v in predictions.items() if v is not None}
    out["neededGpus"] = plan.needed_gpus
    out["capacityShortfallGpus"] = plan.capacity_shortfall_gpus
    out["burstHeadroomGpus"] = plan.headroom_gpus
    if outlook is not None:
        out["demand"] = demand_figures(outlook)
    return out


def observed(obs: Observation | None, slo: SloTarget, warning: CliffWarning | None = None) -> dict[str, Any]:
    if obs is None:
        return {"metricsAvailable": False}
    out: dict[str, Any] = {"metricsAvailable": obs.available, "sampleTime": iso(obs.sample_time)}
    if not obs.available:
        return out
    figures = {
        "kvUsagePercent": None if obs.kv_usage is None else round(obs.kv_usage * 100),
        "ttftSeconds": _r(obs.ttft_at(slo.ttft_percentile)), "streamTokensPerSecond": _r(obs.stream_tps, 2),
        "running": _r(obs.running, 2), "waiting": _r(obs.waiting, 2), "requestsPerSecond": _r(obs.arrival_rate),
    }
    if warning is not None and warning.headroom_ratio is not None:
        figures["kvHeadroomPercent"] = round(warning.headroom_ratio * 100)
        figures["timeToCliffSeconds"] = _r(warning.time_to_cliff_seconds, 0)
    return out | {k: v for k, v in figures.items() if v is not None}


def fitted(fit: PassFit | None, tp: int, load_test: bool = False) -> dict[str, Any] | None:
    """The applied layout's per-pass fit: each napkin term's coefficient (1 = the napkin's own), R^2, the
    batches and contexts its samples span, and whether they are the fleet's or a declared load test's."""
    if fit is None:
        return None
    return {"tensorParallelSize": tp, "terms": {name: round(value, 4) for name, value in fit.terms},
            "r2": round(fit.r2, 4), "samples": fit.samples, "batchMin": round(fit.batch_min, 2),
            "batchMax": round(fit.batch_max, 2), "contextMin": round(fit.context_min),
            "contextMax": round(fit.context_max), "source": "LoadTest" if load_test else "Fleet"}


def wire_status(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The status fields as the CRD's schema has them: validated by the pydantic model that generates
    it (api/status.py), so what the operator writes cannot drift from what the API server accepts."""
    model = InferenceDeploymentStatus.model_validate(dict(fields))
    wired: dict[str, Any] = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return wired


def section(status: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """status[key] as the object the operator writes there (applied, guardrails, policy, ...); empty when absent
    or not an object (a status written with no schema behind it)."""
    part = status.get(key)
    return part if isinstance(part, Mapping) else {}


def records(status: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """status[key] as the list of objects the operator writes there (conditions, decisions): a field that
    is no list, or an entry that is no object, is not read (a status written with no schema behind it)."""
    raw = status.get(key)
    return [entry for entry in raw if isinstance(entry, Mapping)] if isinstance(raw, list) else []


def log_decision(log: list[Mapping[str, Any]], now: float, action: str, reason: str,
                 message: str) -> list[Mapping[str, Any]]:
    """Appends only a new kind of decision, so a steady state does not rewrite status every cycle."""
    if log and (log[-1].get("action"), log[-1].get("reason")) == (action, reason):
        return log
    return [*log, {"time": iso(now), "action": action, "reason": reason, "message": message[:500]}][-MAX_DECISIONS:]


def applied_status(layout: Layout, gpus_per_node: int, applied_at: str) -> dict[str, Any]:
    """status.applied: the layout that runs, its workload kind, and when it was applied."""
    return {"tensorParallelSize": layout.tensor_parallel_size, "maxNumSeqs": layout.max_num_seqs,
            "replicas": layout.replicas, "workloadKind": workload_kind(layout, gpus_per_node).value,
            "appliedAt": applied_at}


def layout_of(raw: Any) -> Layout | None:
    """status.applied (or guardrails.rolledFrom) as a layout; None when absent or not one the operator
    could have applied (the CRD's schema leaves status.applied's counts unbounded)."""
    if not isinstance(raw, Mapping):
        return None
    return layout_read_back(raw.get("tensorParallelSize"), raw.get("maxNumSeqs"), raw.get("replicas"))


def state_from_status(status: Mapping[str, Any], now: float | None = None) -> PlannerState:
    """The guardrails' memory from status. Only the operator writes it, but anyone with access to the status
    subresource can edit it, and its schema bounds little: what is not a figure the operator could have
    written is not trusted (`now`, when given, is the latest time a record may bear)."""
    memory = section(status, "guardrails")
    return PlannerState(
        applied=layout_of(status.get("applied")),
        last_scale_up_at=_recorded_time(memory.get("lastScaleUpAt"), now),
        last_scale_down_at=_recorded_time(memory.get("lastScaleDownAt"), now),
        last_relayout_at=_recorded_time(memory.get("lastRelayoutAt"), now),
        recent_recommendations=_recommendations(memory.get("recentRecommendations"), now),
        rolled_from=layout_of(memory.get("rolledFrom")), left_unsafe=left_unsafe_of(memory.get("leftUnsafe")),
    )


def _recorded_time(value: Any, now: float | None) -> float | None:
    """A guardrail's time (Unix seconds); None when absent. One that no clock of ours wrote (not a finite
    number, before 1970, after `now`) reads as `now`: its cooldown restarts once, where a time in the year
    3000 would hold every scale for ever and a garbled one would lift the guardrail or end the cycle."""
    if value is None:
        return None
    trusted = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        and value >= 0 and (now is None or value <= now)
    if trusted:
        return float(value)
    return now if now is not None else None


def _recommendations(raw: Any, now: float | None) -> tuple[tuple[float, int], ...]:
    """guardrails.recentRecommendations: each [time, replicas] the operator wrote. An entry of another shape
    or a count no resource may have is dropped (the stabilisation window then seeds itself from what runs
    when none is left); a time after `now` reads as `now`, so that an entry dated in the future cannot hold
    its count for ever."""
    if not isinstance(raw, list):
        return ()
    out = []
    for entry in raw:
        if not isinstance(entry, list) or len(entry) != 2:
            continue
        time_, count = _recorded_time(entry[0], now), entry[1]
        if isinstance(count, float) and math.isfinite(count) and count.is_integer():
            count = int(count)  # the status model keeps the pair as numbers: 4 comes back as 4.0
        if time_ is None or isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= REPLICAS_MAX:
            continue
        out.append((time_, count))
    return tuple(out)


def left_unsafe_of(raw: Mapping[str, Any] | None) -> LeftUnsafe | None:
    """status.guardrails.leftUnsafe, or None when absent or not a shape the schema allows (an edited status
    loses only this memory: the working set is then judged on what the history measures)."""
    if not raw:
        return None
    try:
        left = LeftUnsafeShape.model_validate(raw)
    except ValidationError:
        return None
    return LeftUnsafe(left.tensor_parallel_size, left.max_num_seqs, left.stream_tokens, left.at)


def state_to_status(state: PlannerState) -> dict[str, Any]:
    out: dict[str, Any] = {"recentRecommendations": [[round(t, 1), r] for t, r in state.recent_recommendations]}
    if state.rolled_from is not None:
        old = state.rolled_from
        out["rolledFrom"] = {"tensorParallelSize": old.tensor_parallel_size, "maxNumSeqs": old.max_num_seqs,
                             "replicas": old.replicas}
    if state.left_unsafe is not None:
        left = state.left_unsafe
        out["leftUnsafe"] = {"tensorParallelSize": left.tensor_parallel_size, "maxNumSeqs": left.max_num_seqs,
                             "streamTokens": round(left.stream_tokens, 1), "at": round(left.at, 1)}
    for key, value in (("lastScaleUpAt", state.last_scale_up_at), ("lastScaleDownAt", state.last_scale_down_at),
                       ("lastRelayoutAt", state.last_relayout_at)):
        if value is not None:
            out[key] = round(value, 1)
    return out


