"""What the handlers share: the Kubernetes client, the one metrics poller's latest snapshot, the
per-resource fit memories and resolved specs, telemetry. Passed to kopf as its `memo`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from infertune.actuate.apply import KubeClient
from infertune.actuate.request import Resolved, SpecError, resolve
from infertune.api.observation import Observation
from infertune.api.policy import ServingPolicySpec, parse_policy
from infertune.api.spec import parse_spec
from infertune.controller.telemetry import Telemetry
from infertune.observe.figures import Expected
from infertune.observe.fitmemory import FitMemory
from infertune.observe.snapshot import MetricsSource, Snapshot

Key = tuple[str, str]
log = structlog.get_logger("infertune.controller")


@dataclass
class OperatorContext:
    kube: KubeClient
    source: MetricsSource | None = None
    poll_seconds: float = 15.0
    cycle_seconds: float = 30.0
    clock: Callable[[], float] = time.time
    telemetry: Telemetry = field(default_factory=Telemetry)
    snapshot: Snapshot | None = None
    expected: dict[Key, Expected] = field(default_factory=dict)
    fit_memories: dict[Key, FitMemory] = field(default_factory=dict)
    _resolved: dict[Key, tuple[str, Resolved]] = field(default_factory=dict)
    _last_cycle: dict[Key, float] = field(default_factory=dict)

    def observation(self, key: Key) -> Observation | None:
        return None if self.snapshot is None else self.snapshot.get(*key)

    async def poll_forever(self) -> None:
        """The one poller: one query per metric for every deployment, off the event loop."""
        assert self.source is not None
        while True:
            try:
                self.snapshot = await asyncio.to_thread(self.source.poll, dict(self.expected), self.clock())
            except Exception as exc:  # a source bug must not kill the poller; timers then hold
                log.warning("metrics poll failed", error=str(exc))
            await asyncio.sleep(self.poll_seconds)

    def due(self, key: Key, interval: float, now: float) -> bool:
        last = self._last_cycle.get(key)
        if last is not None and now - last < interval * 0.9:
            return False
        self._last_cycle[key] = now
        return True

    def forget(self, key: Key) -> None:
        for store in (self.expected, self.fit_memories, self._resolved, self._last_cycle):
            store.pop(key, None)

    async def resolve(self, key: Key, spec: Mapping[str, Any], generation: Any,
                      policies: Mapping[str, Any]) -> Resolved:
        """The effective spec and plan request; cached per spec generation and policy content.
        Raises SpecError (or ValueError) naming the field."""
        parsed = parse_spec(dict(spec))
        policy: ServingPolicySpec | None = None
        policy_raw: Any = None
        if parsed.policy_ref is not None:
            policy_raw = policies.get(parsed.policy_ref.name)
            if policy_raw is None:
                raise SpecError(f"spec.policyRef.name: ServingPolicy {parsed.policy_ref.name!r} not found")
            policy = parse_policy(policy_raw)
        token = repr((generation, spec, policy_raw))
        cached = self._resolved.get(key)
        if cached is not None and cached[0] == token:
            return cached[1]
        config = None
        ref = parsed.model.config_map_ref
        if ref is not None:
            cm = await asyncio.to_thread(self.kube.get, "v1", "ConfigMap", key[0], ref.name)
            config = None if cm is None else (cm.get("data") or {}).get(ref.key)
            if cm is not None and config is None:
                raise SpecError(f"spec.model.configMapRef.key: ConfigMap {ref.name} has no key {ref.key!r}")
        resolved = resolve(parsed, policy, config)
        self._resolved[key] = (token, resolved)
        return resolved
