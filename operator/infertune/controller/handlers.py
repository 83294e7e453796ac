"""The kopf handlers: thin adapters from kopf's calls to the Reconciler (controller/reconciler.py).
Each gathers the resource kopf hands over, runs the reconciler off the event loop, reports through
kopf's patch and Events, and maps errors onto kopf's protocol; none of them decides anything."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from infertune.actuate.workload import DEPLOYMENT_LABEL, MANAGED_BY
from infertune.api.policy import POLICY_PLURAL
from infertune.api.spec import GROUP, PLURAL, VERSION
from infertune.controller.context import OperatorContext
from infertune.controller.reconciler import Resource
from infertune.controller.status import WorkloadState
from infertune.errors import ApiError, OwnershipError, PendingError, SpecError

# Events carry at most this much of a message (the API server refuses longer ones).
EVENT_MESSAGE_MAX = 1000
# How soon converge tries again while a ServingPolicy or ConfigMap it names does not exist yet, and
# while an object of its name belongs to someone else.
PENDING_RETRY_SECONDS = 5.0
CONFLICT_RETRY_SECONDS = 30.0


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=dict)) if value is not None else {}


def resource_of(body: Any) -> Resource:
    meta = body.get("metadata") or {}
    return Resource(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                    uid=str(meta.get("uid", "")), spec=_plain(dict(body.get("spec") or {})),
                    status=_plain(dict(body.get("status") or {})), generation=meta.get("generation"),
                    annotations=dict(meta.get("annotations") or {}))


class KopfReport:
    """Writes only the status fields that differ (an unchanged status is never patched), and posts
    Events after the reconciler returns, on the event loop."""

    def __init__(self, body: Any, patch: kopf.Patch, current: Mapping[str, Any]) -> None:
        self.body, self.patch, self.current = body, patch, current
        self.events: list[tuple[str, str, str]] = []

    def status(self, new: Mapping[str, Any]) -> None:
        for key, value in new.items():
            if self.current.get(key) != value:
                self.patch.status[key] = value

    def event(self, kind: str, reason: str, message: str) -> None:
        self.events.append((kind, reason, message[:EVENT_MESSAGE_MAX]))

    def post(self) -> None:
        for kind, reason, message in self.events:
            kopf.event(self.body, type=kind, reason=reason, message=message)


async def _visit(ctx: OperatorContext, body: Any, patch: kopf.Patch, work: str) -> None:
    resource = resource_of(body)
    report = KopfReport(body, patch, resource.status)
    method = getattr(ctx.reconciler, work)
    try:
        with ctx.telemetry.reconcile.time():
            await asyncio.to_thread(method, resource, report)
    except SpecError as exc:
        if work == "converge":
            raise kopf.PermanentError(str(exc)) from None
    except PendingError as exc:  # a policy or ConfigMap applied after the resource: retried until it exists
        raise kopf.TemporaryError(str(exc), delay=PENDING_RETRY_SECONDS) from None
    except OwnershipError as exc:  # someone else's object of the same name: retried until it is gone
        raise kopf.TemporaryError(str(exc), delay=CONFLICT_RETRY_SECONDS) from None
    except ApiError as exc:
        if exc.retryable:
            raise kopf.TemporaryError(str(exc), delay=exc.retry_after) from None
        raise kopf.PermanentError(str(exc)) from None
    finally:
        report.post()


def build_registry(cycle_seconds: float = 30.0) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def configure(*, settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
        settings.persistence.finalizer = "infertune.io/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="infertune.io")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="infertune.io", key="last-handled-configuration")
        settings.posting.level = logging.WARNING  # our own Events carry the reasons; not kopf's chatter
        # No settings.peering.name here: `infertune run --peering NAME` sets it before startup, and a
        # name set here would win over it.
        # Always: resources may name their own Prometheus, or the Pods source, without a default one.
        memo.poller = asyncio.create_task(memo.ctx.poller.run_forever())

    @kopf.on.cleanup(registry=registry)
    async def stop(*, memo: Any, **_: Any) -> None:
        """Cancels every poll in flight and closes the sources' sessions: nothing waits on a peer."""
        poller = getattr(memo, "poller", None)
        if poller is not None:
            poller.cancel()
        await memo.ctx.poller.aclose()

    @kopf.index(GROUP, VERSION, POLICY_PLURAL, registry=registry, id="policies")
    def policies(*, name: Any, spec: Any, **_: Any) -> dict[str, Any]:
        return {name: _plain(dict(spec))}

    @kopf.index("apps", "v1", "deployments", registry=registry, id="workloads",
                labels={MANAGED_BY: "infertune", DEPLOYMENT_LABEL: kopf.PRESENT})
    def workloads(*, namespace: Any, labels: Any, body: Any, **_: Any) -> dict[Any, WorkloadState]:
        """The owned Deployments' rollout, watched rather than fetched per cycle."""
        return {(namespace, labels[DEPLOYMENT_LABEL]): WorkloadState.from_object(_plain(dict(body)))}

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry, id="converge")
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry, id="converge")
    @kopf.on.update(GROUP, VERSION, PLURAL, registry=registry, id="converge", field="spec")
    async def converge(*, body: Any, patch: Any, memo: Any, policies: Any = None, workloads: Any = None,
                       **_: Any) -> None:
        """Renders and applies the workload for the running (or starting) layout; sets every condition."""
        memo.ctx.cluster.watch(policies, workloads)
        await _visit(memo.ctx, body, patch, "converge")

    @kopf.timer(GROUP, VERSION, PLURAL, registry=registry, interval=cycle_seconds, initial_delay=cycle_seconds,
                id="tune")
    async def tune(*, body: Any, patch: Any, memo: Any, policies: Any = None, workloads: Any = None,
                   **_: Any) -> None:
        """One tuning cycle: observation -> fit -> plan -> guardrails -> act per mode -> report."""
        memo.ctx.cluster.watch(policies, workloads)
        await _visit(memo.ctx, body, patch, "tune")

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, optional=True, id="forget")
    async def forget(*, namespace: Any, name: Any, memo: Any, **_: Any) -> None:
        """Owner references let the garbage collector remove the workload; only memory is ours."""
        memo.ctx.reconciler.forget((namespace, name))

    return registry
