"""The kopf handlers, kept thin: gather -> decide -> apply -> report. Everything they decide comes
from `cycle.run_cycle` (pure) and `actuate` (builders); here are only I/O and kopf's error protocol."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
import structlog
import urllib3

from infertune.actuate.apply import KubeApiError
from infertune.actuate.request import Resolved, SpecError, pinned, starting_layout
from infertune.actuate.workload import (
    DEPLOYMENT_LABEL,
    LWS_API,
    MANAGED_BY,
    Owner,
    desired_objects,
    selector_string,
)
from infertune.api.conditions import (
    Condition,
    ConditionType,
    ConditionUpdate,
    Reason,
    initial_conditions,
    merge_conditions,
)
from infertune.api.policy import POLICY_PLURAL
from infertune.api.quantities import parse_duration
from infertune.api.spec import GROUP, PLURAL, VERSION
from infertune.controller.context import OperatorContext
from infertune.controller.cycle import CycleInput, run_cycle
from infertune.controller.status import WorkloadState, iso, layout_of, ready_condition
from infertune.observe.figures import Expected
from infertune.observe.fitmemory import FitMemory
from infertune.planner.types import Layout

PAUSED = "infertune.io/paused"
log = structlog.get_logger("infertune.controller")


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=dict)) if value is not None else {}


def _policies(index: Any) -> Mapping[str, Any]:
    """kopf's index maps a key to a store of values; one ServingPolicy per name."""
    return {} if index is None else {name: next(iter(store)) for name, store in index.items() if len(store)}


def _changed(current: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in new.items() if current.get(k) != v}


def _write_status(patch: kopf.Patch, current: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Patches only the fields that differ: an unchanged status is never written."""
    diff = _changed(current, new)
    for key, value in diff.items():
        patch.status[key] = value
    return bool(diff)


def _invalid(patch: kopf.Patch, body: Any, status: Mapping[str, Any], message: str, now: float,
             generation: int | None) -> None:
    old = [Condition.from_wire(c) for c in status.get("conditions", [])] or initial_conditions(iso(now), generation)
    conditions = merge_conditions(old, [
        ConditionUpdate(ConditionType.INVALID_SPEC.value, "True", Reason.INVALID_SPEC.value, message),
        ConditionUpdate(ConditionType.READY.value, "False", Reason.INVALID_SPEC.value, message),
    ], iso(now), generation)
    new = {"conditions": [c.wire() for c in conditions], "observedGeneration": generation}
    if _write_status(patch, status, new):
        kopf.event(body, type="Warning", reason=Reason.INVALID_SPEC.value, message=message[:1000])


async def _apply(ctx: OperatorContext, objects: list[dict[str, Any]]) -> bool:
    """Applies each object unless unchanged; maps API failures onto kopf's retry protocol."""
    changed = False
    try:
        for obj in objects:
            changed |= await asyncio.to_thread(ctx.kube.apply_if_changed, obj)
    except KubeApiError as exc:
        if exc.conflict or exc.status == 429 or exc.status >= 500:
            raise kopf.TemporaryError(f"apply: {exc}", delay=2) from None
        raise kopf.PermanentError(f"apply rejected: {exc}") from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise kopf.TemporaryError(f"apply: the API server is unreachable: {exc}", delay=5) from None
    return changed


def _paused(meta: Mapping[str, Any]) -> bool:
    return str((meta.get("annotations") or {}).get(PAUSED, "")).lower() == "true"


def build_registry(cycle_seconds: float = 30.0) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def configure(*, settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
        settings.persistence.finalizer = "infertune.io/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="infertune.io")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="infertune.io", key="last-handled-configuration")
        settings.posting.level = logging.WARNING  # our own Events carry the reasons; not kopf's chatter
        ctx: OperatorContext = memo.ctx
        # Always: resources may name their own Prometheus, or the Pods source, without a default one.
        memo.poller = asyncio.create_task(ctx.poll_forever())

    @kopf.on.cleanup(registry=registry)
    async def stop(*, memo: Any, **_: Any) -> None:
        poller = getattr(memo, "poller", None)
        if poller is not None:
            poller.cancel()
        await asyncio.to_thread(memo.ctx.sources.close)

    @kopf.index(GROUP, VERSION, POLICY_PLURAL, registry=registry, id="policies")
    def policies(*, name: Any, spec: Any, **_: Any) -> dict[str, Any]:
        return {name: _plain(dict(spec))}

    @kopf.index("apps", "v1", "deployments", registry=registry, id="workloads",
                labels={MANAGED_BY: "infertune", DEPLOYMENT_LABEL: kopf.PRESENT})
    def workloads(*, namespace: Any, labels: Any, body: Any, **_: Any) -> dict[Any, WorkloadState]:
        """The owned Deployments' rollout (ready replicas), watched rather than fetched per cycle."""
        return {(namespace, labels[DEPLOYMENT_LABEL]): WorkloadState.from_object(_plain(dict(body)))}

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry, id="converge")
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry, id="converge")
    @kopf.on.update(GROUP, VERSION, PLURAL, registry=registry, id="converge", field="spec")
    async def converge(*, body: Any, meta: Any, namespace: Any, name: Any, uid: Any, patch: Any,
                       memo: Any, policies: Any = None, workloads: Any = None, **_: Any) -> None:
        """Renders and applies the workload for the current (or starting) layout; sets every condition."""
        ctx: OperatorContext = memo.ctx
        key, now, generation = (namespace, name), ctx.clock(), meta.get("generation")
        status = _plain(dict(body.get("status") or {}))
        logger = log.bind(namespace=namespace, name=name)
        with ctx.telemetry.reconcile.time():
            try:
                resolved = await ctx.resolve(key, _plain(dict(body["spec"])), generation, _policies(policies))
            except (SpecError, ValueError) as exc:
                logger.warning("invalid spec", error=str(exc))
                _invalid(patch, body, status, str(exc), now, generation)
                raise kopf.PermanentError(str(exc)) from None
            applied = layout_of(status.get("applied"))
            held = applied is not None and (_paused(meta) or resolved.spec.tuning.mode == "Off")
            if applied is None:
                layout, _first = starting_layout(resolved, now)
            else:
                layout = pinned(applied, resolved.spec)
            changed = False
            if not held:
                objects = desired_objects(Owner(name, namespace, uid), resolved.spec, layout,
                                          resolved.gpu.gpus_per_node)
                changed = await _apply(ctx, objects)
            workload = await _workload(ctx, workloads, key, resolved, layout)
            ctx.expected[key] = _expected(workload)
            old = [Condition.from_wire(c) for c in status.get("conditions", [])] or initial_conditions(
                iso(now), generation)
            conditions = merge_conditions(old, [
                ConditionUpdate(ConditionType.INVALID_SPEC.value, "False", Reason.SPEC_VALID.value,
                                "the spec is valid"),
                ready_condition(None if changed else workload, applied=True),
                ConditionUpdate(ConditionType.PROGRESSING.value, "True" if changed else "False",
                                Reason.ROLLING_OUT.value if changed else Reason.STABLE.value,
                                "applied a changed workload" if changed else "the workload is up to date"),
            ], iso(now), generation)
            new = {"conditions": [c.wire() for c in conditions], "observedGeneration": generation,
                   "selector": selector_string(name), "replicas": layout.replicas,
                   "applied": _applied(layout, resolved.gpu.gpus_per_node, status.get("applied"), now, changed)}
            _write_status(patch, status, new)
            if changed:
                logger.info("workload applied", tp=layout.tensor_parallel_size, max_num_seqs=layout.max_num_seqs,
                            replicas=layout.replicas)
                kopf.event(body, type="Normal", reason=Reason.APPLIED.value,
                           message=f"TP{layout.tensor_parallel_size} max-num-seqs {layout.max_num_seqs} "
                                   f"x{layout.replicas}")

    @kopf.timer(GROUP, VERSION, PLURAL, registry=registry, interval=cycle_seconds, initial_delay=cycle_seconds,
                id="tune")
    async def tune(*, body: Any, meta: Any, namespace: Any, name: Any, uid: Any, patch: Any, memo: Any,
                   policies: Any = None, workloads: Any = None, **_: Any) -> None:
        """One tuning cycle: observation -> fit -> plan -> guardrails -> act per mode -> report."""
        ctx: OperatorContext = memo.ctx
        key, now, generation = (namespace, name), ctx.clock(), meta.get("generation")
        status = _plain(dict(body.get("status") or {}))
        if not status.get("applied"):
            return  # the create/resume handler has not applied a workload yet
        try:
            resolved = await ctx.resolve(key, _plain(dict(body["spec"])), generation, _policies(policies))
        except (SpecError, ValueError) as exc:
            _invalid(patch, body, status, str(exc), now, generation)
            return  # the workload stays as it is; the condition says why
        if not ctx.due(key, parse_duration(resolved.spec.tuning.interval), now):
            return
        with ctx.telemetry.reconcile.time():
            applied = layout_of(status.get("applied"))
            workload = await _workload(ctx, workloads, key, resolved, applied)
            ctx.expected[key] = _expected(workload)
            obs = ctx.observation(key)
            warning = ctx.warning(key, obs, resolved.request.kv_headroom, now)
            memory = _fit_memory(ctx, key, status, log.bind(namespace=namespace, name=name))
            since = _timestamp((status.get("applied") or {}).get("appliedAt"))
            samples = ctx.take_fit_backlog(key, since)
            if applied is not None and not (workload is not None and workload.mid_rollout):
                memory.add(applied.tensor_parallel_size, samples, now)
            outcome = run_cycle(CycleInput(namespace, name, generation, _paused(meta), resolved, status, obs,
                                           memory.fits(), now, warning, workload, memory.to_status()))
            if outcome.apply is not None:
                objects = desired_objects(Owner(name, namespace, uid), resolved.spec, outcome.apply,
                                          resolved.gpu.gpus_per_node)
                await _apply(ctx, objects)
                ctx.expected[key] = ctx.expected[key].after_scaling_to(outcome.apply.replicas)
            _write_status(patch, status, outcome.status)
            ctx.telemetry.record(namespace, name, outcome, obs, now, warning)
            for kind, reason, message in outcome.events:
                kopf.event(body, type=kind, reason=reason, message=message[:1000])
            log.bind(namespace=namespace, name=name).info(
                "cycle", action=outcome.action, reason=outcome.reason,
                recommended=None if outcome.decision.recommended is None else str(outcome.decision.recommended))

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, optional=True, id="forget")
    async def forget(*, namespace: Any, name: Any, memo: Any, **_: Any) -> None:
        """Owner references let the garbage collector remove the workload; only memory is ours."""
        memo.ctx.forget((namespace, name))

    return registry


def _fit_memory(ctx: OperatorContext, key: tuple[str, str], status: Mapping[str, Any], logger: Any) -> FitMemory:
    """The resource's fit memory; after a restart it is rebuilt from status, so nothing learned is lost."""
    memory = ctx.fit_memories.get(key)
    if memory is None:
        try:
            memory = FitMemory.from_status(status.get("fitSamples"))
        except ValueError as exc:  # a hand-edited status: start learning again rather than crash-loop
            logger.warning("ignoring unreadable status.fitSamples", error=str(exc))
            memory = FitMemory()
        ctx.fit_memories[key] = memory
    return memory


def _timestamp(text: Any) -> float:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


async def _workload(ctx: OperatorContext, index: Any, key: tuple[str, str], resolved: Resolved,
                    layout: Layout | None) -> WorkloadState | None:
    """The owned workload's rollout: a Deployment from the watched index; a LeaderWorkerSet (whose CRD
    may be absent, so it is not watched) by one GET, only for the resources that run one."""
    if layout is not None and layout.tensor_parallel_size > resolved.gpu.gpus_per_node:
        try:
            found = await asyncio.to_thread(ctx.kube.get, LWS_API, "LeaderWorkerSet", key[0], key[1])
        except (KubeApiError, urllib3.exceptions.HTTPError, OSError) as exc:
            log.bind(namespace=key[0], name=key[1]).warning("reading the LeaderWorkerSet failed", error=str(exc))
            return None
        return None if found is None else WorkloadState.from_object(found)
    store = None if index is None else index.get(key)
    return next(iter(store), None) if store else None


def _expected(workload: WorkloadState | None) -> Expected:
    """Only ready replicas are expected to report: a loading replica is not a missing one."""
    return Expected(replicas=workload.ready) if workload is not None and workload.current else Expected()


def _applied(layout: Layout, gpus_per_node: int, current: Mapping[str, Any] | None, now: float,
             changed: bool) -> dict[str, Any]:
    kind = "LeaderWorkerSet" if layout.tensor_parallel_size > gpus_per_node else "Deployment"
    stamp = iso(now) if changed or not current else current.get("appliedAt", iso(now))
    return {"tensorParallelSize": layout.tensor_parallel_size, "maxNumSeqs": layout.max_num_seqs,
            "replicas": layout.replicas, "workloadKind": kind, "appliedAt": stamp}
