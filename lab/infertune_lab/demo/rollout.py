"""The Deployment controller's arithmetic, as the fleet agent applies it: which pods to start and
which to drain so that `replicas` pods of the current template run, rolling with `maxSurge` and
`maxUnavailable` as Kubernetes does. Pure; the agent does the starting and draining."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PodState:
    name: str
    template: str  # the template hash the pod was started from
    ready: bool


@dataclass(frozen=True)
class Step:
    start: int  # pods of the current template to start
    drain: tuple[str, ...]  # pods to take out of service


@dataclass(frozen=True)
class Strategy:
    max_surge: int = 1
    max_unavailable: int = 0

    @staticmethod
    def of(deployment_spec: Mapping[str, Any]) -> Strategy:
        """Integer surge/unavailable from a Deployment spec (percentages are not used here)."""
        rolling = (deployment_spec.get("strategy") or {}).get("rollingUpdate") or {}
        surge, unavailable = rolling.get("maxSurge", 1), rolling.get("maxUnavailable", 0)
        if not isinstance(surge, int) or not isinstance(unavailable, int):
            raise ValueError("the fleet agent reads integer maxSurge/maxUnavailable only")
        # Both zero would never move; Kubernetes rejects it, the agent surges by one instead.
        return Strategy(surge if surge or unavailable else 1, unavailable)


def template_hash(template: Mapping[str, Any]) -> str:
    """What Kubernetes' pod-template-hash stands for: any change to the template is a new revision."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def rollout_step(pods: Sequence[PodState], template: str, replicas: int, strategy: Strategy) -> Step:
    """One reconcile: scale the current revision towards `replicas` and retire old revisions while
    at least `replicas - maxUnavailable` pods stay ready. Call again as pods become ready."""
    new = [p for p in pods if p.template == template]
    old = [p for p in pods if p.template != template]
    if not old:
        if len(new) < replicas:
            return Step(replicas - len(new), ())
        unready_first = [p for p in new if not p.ready] + [p for p in reversed(new) if p.ready]
        return Step(0, tuple(p.name for p in unready_first[:len(new) - replicas]))
    start = max(0, min(replicas - len(new), replicas + strategy.max_surge - len(pods)))
    # Old pods that are not ready serve no one: they go at once, as Kubernetes scales them first.
    drain = [p.name for p in old if not p.ready]
    ready = sum(p.ready for p in pods)
    floor = max(replicas - strategy.max_unavailable, 0)
    spare = ready - floor
    for p in old:
        if p.ready and spare > 0:
            drain.append(p.name)
            spare -= 1
    return Step(start, tuple(drain))
