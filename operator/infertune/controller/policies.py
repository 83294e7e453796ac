"""A resource's ServingPolicy as resolution finds it: live, or, once deleted, its last known spec.

A policy deleted under a running resource must not change how it is tuned (the tuning it gave would
silently fall back to the defaults), so the spec last seen is kept: in memory, and in
status.policy so that a restarted operator still has it. The PolicyResolved condition says which.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from infertune.api.conditions import Condition, ConditionType, ConditionUpdate, Reason, merge_conditions
from infertune.api.policy import ServingPolicySpec, parse_policy
from infertune.api.status import PolicySnapshot
from infertune.controller.status import iso, records, section
from infertune.errors import PendingError, SpecError

Key = tuple[str, str]


@dataclass(frozen=True)
class PolicyState:
    """What resolution found of the resource's ServingPolicy: the PolicyResolved condition (none
    without a policyRef) and the status.policy snapshot to keep (none: keep what status has)."""

    condition: ConditionUpdate | None = None
    snapshot: dict[str, Any] | None = None

    @property
    def updates(self) -> list[ConditionUpdate]:
        return [] if self.condition is None else [self.condition]

    @property
    def fields(self) -> dict[str, Any]:
        return {} if self.snapshot is None else {"policy": self.snapshot}

    def into(self, status: Mapping[str, Any], now: float, generation: int | None) -> dict[str, Any]:
        """`status` (a cycle's) with this condition merged in and the snapshot set."""
        out = {**status, **self.fields}
        if self.condition is not None:
            current = [Condition.from_wire(dict(c)) for c in records(status, "conditions")]
            out["conditions"] = [c.wire() for c in merge_conditions(current, self.updates, iso(now), generation)]
        return out


class PolicyMemory:
    """The ServingPolicies resources name, as last seen per resource."""

    def __init__(self) -> None:
        self._seen: dict[Key, tuple[str, dict[str, Any]]] = {}

    def resolve(self, key: Key, status: Mapping[str, Any], name: str | None,
                live: Callable[[str], Mapping[str, Any] | None], now: float,
                ) -> tuple[ServingPolicySpec | None, Mapping[str, Any] | None, PolicyState]:
        """The ServingPolicy `name` as it is (`live`), or as it was last seen (in memory, else in
        status.policy). Raises PendingError when it has never been seen, SpecError when it is invalid."""
        if name is None:
            return None, None, PolicyState()
        spec = live(name)
        if spec is not None:
            policy = parse_policy(dict(spec))
            self._seen[key] = (name, dict(spec))
            known = section(status, "policy")
            wire = policy.wire()
            seen_at = str(known.get("seenAt") or iso(now)) if (known.get("name"), known.get("spec")) == (
                name, wire) else iso(now)
            snapshot = PolicySnapshot.model_validate({"name": name, "spec": wire, "seenAt": seen_at}).wire()
            return policy, spec, PolicyState(ConditionUpdate(
                ConditionType.POLICY_RESOLVED.value, "True", Reason.POLICY_FOUND.value,
                f"ServingPolicy {name!r} applies"), snapshot)
        last = self._last(key, status, name)
        if last is None:
            raise PendingError(f"spec.policyRef.name: ServingPolicy {name!r} does not exist (yet); waiting for it",
                               Reason.POLICY_NOT_FOUND)
        raw, seen_at = last
        return parse_policy(raw), raw, PolicyState(ConditionUpdate(
            ConditionType.POLICY_RESOLVED.value, "False", Reason.POLICY_DELETED.value,
            f"ServingPolicy {name!r} was deleted; tuning with its last known spec (seen {seen_at})"))

    def _last(self, key: Key, status: Mapping[str, Any], name: str) -> tuple[dict[str, Any], str] | None:
        seen = self._seen.get(key)
        known = section(status, "policy")
        seen_at = str(known.get("seenAt") or "before this operator started")
        if seen is not None and seen[0] == name:
            return seen[1], seen_at
        if known.get("name") == name and isinstance(known.get("spec"), dict):
            try:
                parse_policy(known["spec"])
            except SpecError:  # a hand-edited status: nothing trustworthy is known
                return None
            return dict(known["spec"]), seen_at
        return None

    def forget(self, key: Key) -> None:
        self._seen.pop(key, None)
