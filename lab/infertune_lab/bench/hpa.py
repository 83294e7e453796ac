"""The Horizontal Pod Autoscaler's algorithm (autoscaling/v2), as kube-controller-manager runs it.

Transcribed from kubernetes/kubernetes pkg/controller/podautoscaler (replica_calculator.go and
horizontal.go), with the defaults of a v2 HPA that sets no `behavior`:

- every sync period (15 s, --horizontal-pod-autoscaler-sync-period) the desired count is
  ceil(currentMetric / target x pods), unless the ratio is within the 10% tolerance
  (--horizontal-pod-autoscaler-tolerance 0.1); for a Pods metric (calcPlainMetricReplicas) pods
  with no metric yet (a vLLM pod loading its weights serves no /metrics) count as using the target
  on a scale-down and 0 on a scale-up, Pending pods count as 0 on a scale-up and not at all on a
  scale-down, and a change of direction that this causes cancels the change; terminating pods are
  left out;
- for an External metric with an AverageValue target (GetExternalPerPodMetricReplicas, what KEDA
  creates) the count is ceil(sum / target), with the same tolerance against status.replicas;
- stabilisation (stabilizeRecommendationWithBehaviors): the result stays between the lowest
  recommendation of the scale-up window (default 0 s) and the highest of the scale-down window
  (default 300 s);
- rate limits (convertDesiredReplicasWithBehaviorRate): up by at most max(+4 pods, +100%) per 15 s,
  down by at most 100% per 15 s, counting the changes already made in the period; then
  minReplicas/maxReplicas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

TOLERANCE = 0.1
SYNC_PERIOD = 15.0


@dataclass(frozen=True)
class ScalingPolicy:
    kind: str  # "Pods" or "Percent"
    value: int
    period_seconds: float


@dataclass(frozen=True)
class ScalingRules:
    stabilization_seconds: float
    policies: tuple[ScalingPolicy, ...]
    select: str = "Max"  # the policy allowing the largest change wins


# The defaults the API server fills in for an HPA without `behavior` (autoscaling/v2 docs,
# "Default Behavior").
DEFAULT_SCALE_UP = ScalingRules(0.0, (ScalingPolicy("Pods", 4, 15.0), ScalingPolicy("Percent", 100, 15.0)))
DEFAULT_SCALE_DOWN = ScalingRules(300.0, (ScalingPolicy("Percent", 100, 15.0),))


def plain_metric_replicas(current: int, metrics: Mapping[str, float], pods: Sequence[str], target: float,
                          tolerance: float = TOLERANCE, unready: Sequence[str] = ()) -> int:
    """calcPlainMetricReplicas: a per-pod metric with an AverageValue target.

    `pods` are the Deployment's placed, non-terminating pods; those absent from `metrics` are
    missing (a vLLM pod loading its weights serves no /metrics). `unready` are its Pending pods,
    which groupPods sets apart: left out of the ratio, and counted as 0 only on a scale-up.
    """
    values = {p: metrics[p] for p in pods if p in metrics}
    missing = [p for p in pods if p not in metrics]
    if not values:
        return current  # "did not receive metrics for targeted pods": the HPA changes nothing
    ratio = sum(values.values()) / len(values) / target
    up_with_unready = bool(unready) and ratio > 1.0
    if not up_with_unready and not missing:
        if abs(1.0 - ratio) <= tolerance:
            return current
        return math.ceil(ratio * len(values))
    filled = dict(values)
    for pod in missing:
        filled[pod] = target if ratio < 1.0 else 0.0
    if up_with_unready:
        filled.update(dict.fromkeys(unready, 0.0))
    new_ratio = sum(filled.values()) / len(filled) / target
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current
    wanted = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and wanted > current) or (new_ratio > 1.0 and wanted < current):
        return current
    return wanted


def external_average_replicas(status_replicas: int, total: float, target: float,
                              tolerance: float = TOLERANCE) -> int:
    """GetExternalPerPodMetricReplicas: an External metric with an AverageValue target."""
    if status_replicas > 0 and abs(1.0 - total / (target * status_replicas)) <= tolerance:
        return status_replicas
    return math.ceil(total / target)


@dataclass
class Hpa:
    """One HPA's memory between syncs: recommendations and scale events, as horizontal.go keeps them."""

    min_replicas: int
    max_replicas: int
    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN
    recommendations: list[tuple[float, int]] = field(default_factory=list)
    up_events: list[tuple[float, int]] = field(default_factory=list)
    down_events: list[tuple[float, int]] = field(default_factory=list)

    def normalize(self, current: int, desired: int, now: float) -> int:
        """normalizeDesiredReplicasWithBehaviors: stabilise, then rate-limit and clamp; records the
        change as a scale event when it differs from `current`."""
        stable = self._stabilize(current, desired, now)
        horizon = max(p.period_seconds for p in (*self.scale_up.policies, *self.scale_down.policies))
        self.up_events = [e for e in self.up_events if e[0] > now - horizon]
        self.down_events = [e for e in self.down_events if e[0] > now - horizon]
        final = self._rate_limit(current, stable, now)
        if final > current:
            self.up_events.append((now, final - current))
        elif final < current:
            self.down_events.append((now, current - final))
        return final

    def _stabilize(self, current: int, desired: int, now: float) -> int:
        up_cut = now - self.scale_up.stabilization_seconds
        down_cut = now - self.scale_down.stabilization_seconds
        up, down = desired, desired
        for at, rec in self.recommendations:
            if at > up_cut:
                up = min(up, rec)
            if at > down_cut:
                down = max(down, rec)
        # Forget what both windows have passed; the raw recommendation is what is remembered.
        self.recommendations = [(at, rec) for at, rec in self.recommendations if at > min(up_cut, down_cut)]
        self.recommendations.append((now, desired))
        return min(max(current, up), down)

    def _rate_limit(self, current: int, desired: int, now: float) -> int:
        if desired > current:
            limit = max(self._limit(current, now, self.scale_up, up=True), current)
            return min(desired, self.max_replicas, limit)
        if desired < current:
            limit = min(self._limit(current, now, self.scale_down, up=False), current)
            return max(desired, self.min_replicas, limit)
        return min(max(desired, self.min_replicas), self.max_replicas)

    def _limit(self, current: int, now: float, rules: ScalingRules, up: bool) -> int:
        proposals = []
        for policy in rules.policies:
            added = sum(n for at, n in self.up_events if at > now - policy.period_seconds)
            deleted = sum(n for at, n in self.down_events if at > now - policy.period_seconds)
            start = current - added + deleted
            if policy.kind == "Pods":
                proposals.append(start + policy.value if up else start - policy.value)
            elif up:
                proposals.append(math.ceil(start * (1 + policy.value / 100)))
            else:
                proposals.append(int(start * (1 - policy.value / 100)))
        largest_change = max if up else min
        return largest_change(proposals) if rules.select == "Max" else (min if up else max)(proposals)
