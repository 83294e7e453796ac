"""Every policy judged on its frontier: attainment against GPU-hours over the settings of its knob.

A policy's attainment is the lower of its TTFT and per-stream TPS attainment (a request must meet
both SLAs for a user to be served as promised; each is still reported on its own). One frontier
dominates another when every point of the other has a point of the first with attainment no lower
and GPU-hours no higher. The cheapest setting that reaches the target on both SLAs is what a team
sweeping the knob would deploy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from infertune_lab.bench.metrics import PolicyResult

TARGET_ATTAINMENT = 0.99
# What infertune's frontier must dominate: today's practice. The oracle is hindsight, a yardstick.
BASELINES = ("static", "hpa-kv", "keda-queue", "keda-slo")


@dataclass(frozen=True)
class FrontierPoint:
    """One setting of a policy's knob and what the policy achieved with it."""

    setting: str
    result: PolicyResult
    default: bool = False

    @property
    def attainment(self) -> float:
        return attainment_of(self.result)

    @property
    def gpu_hours(self) -> float:
        return self.result.gpu_hours

    def as_json(self) -> dict[str, object]:
        r = self.result
        return {"setting": self.setting, "sla_attainment_ttft": _finite(r.sla_attainment_ttft),
                "sla_attainment_tps": _finite(r.sla_attainment_tps), "gpu_hours": r.gpu_hours,
                "seconds_past_cliff": r.seconds_past_cliff, "peak_gpus": r.peak_gpus, "default": self.default}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def attainment_of(result: PolicyResult) -> float:
    """The lower of TTFT and TPS attainment; 0 for a run without requests (nothing was served)."""
    low = min(result.sla_attainment_ttft, result.sla_attainment_tps)
    return low if math.isfinite(low) else 0.0


def covers(ours: FrontierPoint, theirs: FrontierPoint) -> bool:
    """Whether `ours` is at least as good as `theirs` on both axes."""
    return ours.attainment >= theirs.attainment and ours.gpu_hours <= theirs.gpu_hours


def uncovered(ours: Sequence[FrontierPoint], theirs: Sequence[FrontierPoint]) -> list[FrontierPoint]:
    """The points of `theirs` that no point of `ours` covers."""
    return [b for b in theirs if not any(covers(a, b) for a in ours)]


def dominates(ours: Sequence[FrontierPoint], theirs: Sequence[FrontierPoint]) -> bool:
    """For every setting of theirs, one of ours with attainment no lower and GPU-hours no higher."""
    return not uncovered(ours, theirs)


def cheapest_meeting(points: Sequence[FrontierPoint], target: float = TARGET_ATTAINMENT) -> FrontierPoint | None:
    """The setting with the fewest GPU-hours that reaches `target` on TTFT and on TPS; None if none does."""
    meeting = [p for p in points if p.attainment >= target]
    return min(meeting, key=lambda p: p.gpu_hours, default=None)


def efficient(points: Sequence[FrontierPoint]) -> list[FrontierPoint]:
    """The points no other point of the same set covers strictly better, by GPU-hours: the curve drawn."""
    ordered = sorted(points, key=lambda p: (p.gpu_hours, -p.attainment))
    front: list[FrontierPoint] = []
    for point in ordered:
        if not front or point.attainment > front[-1].attainment:
            front.append(point)
    return front
