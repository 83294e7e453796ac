"""kmock's Kubernetes emulator in-process, with the resources the operator and the fleet agent use,
and the small JSON-over-HTTP client both the agent and the demo talk to it with (as a kubelet or
kubectl would: they never reach into the emulator's memory).

The emulator's gaps shape what is here: it assigns no uid, resourceVersion or generation (`seeded`
adds them, or kopf's patches fail), has no selectors (`list` filters by label itself), no garbage
collector (the agent deletes the pods it created) and no validation. It ignores
`metadata.generateName`, so every kopf Event got the same empty name and all but the first were
refused with a 409: `NamingEmulator` names them as the API server would.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import kmock

Obj = dict[str, Any]

INFERENCE_DEPLOYMENTS = "infertune.io/v1alpha1/inferencedeployments"
SERVING_POLICIES = "infertune.io/v1alpha1/servingpolicies"
DEPLOYMENTS = "apps/v1/deployments"
PODS = "v1/pods"

# (group/version/plural, kind, namespaced, subresources)
_RESOURCES: tuple[tuple[str, str, bool, set[str]], ...] = (
    (INFERENCE_DEPLOYMENTS, "InferenceDeployment", True, {"status", "scale"}),
    (SERVING_POLICIES, "ServingPolicy", False, set()),
    (DEPLOYMENTS, "Deployment", True, {"status", "scale"}),
    (PODS, "Pod", True, {"status"}),
    ("v1/services", "Service", True, set()),
    ("leaderworkerset.x-k8s.io/v1/leaderworkersets", "LeaderWorkerSet", True, {"status"}),
    ("v1/configmaps", "ConfigMap", True, set()),
    ("v1/events", "Event", True, set()),
    # kopf's backbone: it discovers CRDs and namespaces before it starts watching anything.
    ("apiextensions.k8s.io/v1/customresourcedefinitions", "CustomResourceDefinition", False, set()),
    ("v1/namespaces", "Namespace", False, set()),
)
_VERBS = {"get", "list", "watch", "create", "patch", "delete"}
_uids = itertools.count(1)


class NamingEmulator(kmock.KubernetesEmulator):
    """kmock's emulator, plus the API server's `generateName`: a create with no name gets the prefix
    and a unique suffix (kopf posts every Event this way)."""

    # kmock has no hook before its object store (reactions run after it), so this wraps its private
    # `_handle`; tests/e2e/test_demo_spike.py fails (one Event stored) if a kmock release renames it.
    async def _handle(self, request: Any) -> Any:
        body = request.data
        if request.action == kmock.action.CREATE and isinstance(body, dict):
            meta = body.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{next(_uids):06d}"
        return await super()._handle(request)


def declare(emulator: Any) -> None:
    for path, kind, namespaced, subresources in _RESOURCES:
        emulator.resources[path] = kmock.ResourceInfo(kind=kind, namespaced=namespaced, verbs=_VERBS,
                                                      subresources=subresources)


def seeded(obj: Obj) -> Obj:
    """The object with the uid, resourceVersion and generation a real API server would assign."""
    meta = obj.setdefault("metadata", {})
    meta.setdefault("uid", f"uid-{meta.get('name', 'object')}-{next(_uids)}")
    meta.setdefault("resourceVersion", "1")
    meta.setdefault("generation", 1)
    return obj


def path_of(resource: str, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
    """The REST path of `group/version/plural` (core resources: `v1/plural`)."""
    group_version, _, plural = resource.rpartition("/")
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    ns = f"/namespaces/{namespace}" if namespace else ""
    tail = f"/{name}" if name else ""
    return f"{base}{ns}/{plural}{tail}" + (f"/{sub}" if sub else "")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message[:300]}")
        self.status = status


@dataclass
class KubeHttp:
    """The verbs the agent and the demo need, as plain JSON over HTTP."""

    base_url: str
    session: aiohttp.ClientSession

    async def _call(self, method: str, path: str, body: Obj | None = None,
                    content_type: str = "application/json") -> Any:
        async with self.session.request(method, self.base_url + path, json=body,
                                        headers={"Content-Type": content_type}) as response:
            text = await response.text()
            if response.status >= 400:
                raise ApiError(response.status, text)
            return await response.json(content_type=None) if text else None

    async def list(self, resource: str, namespace: str | None = None,
                   labels: Mapping[str, str] | None = None) -> list[Obj]:
        """Objects of a resource; `labels` must all match (the emulator ignores labelSelector)."""
        found = await self._call("GET", path_of(resource, namespace))
        items: list[Obj] = list((found or {}).get("items", []))
        wanted = dict(labels or {})
        return [o for o in items if wanted.items() <= ((o.get("metadata") or {}).get("labels") or {}).items()]

    async def get(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        try:
            found: Obj = await self._call("GET", path_of(resource, namespace, name))
            return found
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, resource: str, obj: Obj) -> Obj:
        created: Obj = await self._call("POST", path_of(resource, obj["metadata"].get("namespace")), seeded(obj))
        return created

    async def patch(self, resource: str, namespace: str | None, name: str, body: Obj, sub: str = "") -> Obj:
        patched: Obj = await self._call("PATCH", path_of(resource, namespace, name, sub), body,
                                        "application/merge-patch+json")
        return patched

    async def delete(self, resource: str, namespace: str | None, name: str) -> None:
        with contextlib.suppress(ApiError):  # already gone is what we wanted
            await self._call("DELETE", path_of(resource, namespace, name))


@contextlib.asynccontextmanager
async def emulated_cluster() -> AsyncIterator[KubeHttp]:
    """An in-process Kubernetes API on a free loopback port, with every resource declared."""
    async with NamingEmulator() as emulator, kmock.Server(emulator) as server, \
            aiohttp.ClientSession() as session:
        declare(emulator)
        yield KubeHttp(str(server.url).rstrip("/"), session)
