"""Condition types and reasons (metav1.Condition style), and the pure rule for updating them: a
condition's lastTransitionTime moves only when its status flips, and an unchanged set means no patch."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum


class ConditionType(StrEnum):
    READY = "Ready"
    SLO_MET = "SLOMet"
    CACHE_HEADROOM = "CacheHeadroom"
    METRICS_AVAILABLE = "MetricsAvailable"
    PROGRESSING = "Progressing"
    INVALID_SPEC = "InvalidSpec"
    POLICY_RESOLVED = "PolicyResolved"  # only with a policyRef


ALL_TYPES: tuple[ConditionType, ...] = tuple(ConditionType)


class Reason(StrEnum):
    """CamelCase reasons shared by conditions and Events."""

    FIRST_VISIT = "FirstVisit"
    APPLIED = "WorkloadApplied"
    WORKLOAD_READY = "WorkloadReady"
    REPLICAS_NOT_READY = "ReplicasNotReady"
    WORKLOAD_PENDING = "WorkloadPending"
    ROLLING_OUT = "RollingOut"
    STABLE = "Stable"
    SPEC_VALID = "SpecValid"
    INVALID_SPEC = "InvalidSpec"
    WAITING_FOR_METRICS = "WaitingForMetrics"
    SLO_MET = "SLOMet"
    SLO_MISSED = "SLOMissed"
    NO_SLO = "NoSLO"
    HEADROOM_OK = "HeadroomOK"
    HEADROOM_LOW = "HeadroomLow"
    APPROACHING_CLIFF = "ApproachingCliff"
    PAST_CLIFF = "PastCliff"
    PREEMPTING = "Preempting"
    INFEASIBLE = "NoFeasibleLayout"
    RECOMMENDED = "Recommended"
    PAUSED = "Paused"
    TUNING_OFF = "TuningOff"
    APPLY_FAILED = "ApplyFailed"
    POLICY_FOUND = "PolicyFound"
    POLICY_NOT_FOUND = "PolicyNotFound"
    POLICY_DELETED = "PolicyDeleted"
    CONFIG_MAP_NOT_FOUND = "ConfigMapNotFound"
    OWNERSHIP_CONFLICT = "OwnershipConflict"


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str
    last_transition_time: str
    observed_generation: int | None = None

    def wire(self) -> dict[str, object]:
        out: dict[str, object] = {
            "type": self.type, "status": self.status, "reason": self.reason, "message": self.message,
            "lastTransitionTime": self.last_transition_time,
        }
        if self.observed_generation is not None:
            out["observedGeneration"] = self.observed_generation
        return out

    @staticmethod
    def from_wire(raw: dict[str, object]) -> Condition:
        generation = raw.get("observedGeneration")
        return Condition(
            type=str(raw.get("type", "")), status=str(raw.get("status", "Unknown")),
            reason=str(raw.get("reason", "")), message=str(raw.get("message", "")),
            last_transition_time=str(raw.get("lastTransitionTime", "")),
            observed_generation=int(generation) if isinstance(generation, int) else None,
        )


@dataclass(frozen=True)
class ConditionUpdate:
    type: str
    status: str
    reason: str
    message: str = ""


def status_word(value: bool | None) -> str:
    return "Unknown" if value is None else ("True" if value else "False")


def merge_conditions(
    current: Sequence[Condition], updates: Iterable[ConditionUpdate], now_iso: str, generation: int | None,
) -> list[Condition]:
    """Applies updates; keeps lastTransitionTime unless the status flips; keeps unrelated conditions."""
    by_type = {c.type: c for c in current}
    for update in updates:
        old = by_type.get(update.type)
        moved = old is None or old.status != update.status
        by_type[update.type] = Condition(
            type=update.type, status=update.status, reason=update.reason, message=update.message,
            last_transition_time=now_iso if moved or old is None else old.last_transition_time,
            observed_generation=generation,
        )
    order = {t.value: i for i, t in enumerate(ALL_TYPES)}
    return sorted(by_type.values(), key=lambda c: (order.get(c.type, len(order)), c.type))


def initial_conditions(now_iso: str, generation: int | None) -> list[Condition]:
    """Every condition Unknown on the first visit, so `kubectl wait` and dashboards see them all
    (InvalidSpec and PolicyResolved appear once there is something to say)."""
    return merge_conditions([], (
        ConditionUpdate(t.value, "Unknown", Reason.FIRST_VISIT.value, "not evaluated yet")
        for t in ALL_TYPES if t not in (ConditionType.INVALID_SPEC, ConditionType.POLICY_RESOLVED)
    ), now_iso, generation)
