"""The Cluster port over the API server: the owned Deployments from kopf's watched index (so a cycle
costs no GET), a LeaderWorkerSet by one GET (its CRD may be absent, so it is not watched), the
ServingPolicies from their index, ConfigMaps, and server-side apply. Blocking: the reconciler runs
off the event loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import urllib3

from infertune.actuate.apply import KubeClient
from infertune.actuate.workload import LWS_API, WorkloadKind
from infertune.controller.status import WorkloadState
from infertune.errors import ApiError

Key = tuple[str, str]


def _first(index: Any, key: Any) -> Any:
    """kopf's index maps a key to a store of values; the first, or None."""
    store = None if index is None else index.get(key)
    return next(iter(store), None) if store else None


class KubeCluster:
    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self._policies: Any = None
        self._workloads: Any = None

    def watch(self, policies: Any, workloads: Any) -> None:
        """kopf hands its indices to every handler call; they are live views, kept for the reconciler."""
        self._policies, self._workloads = policies, workloads

    def workload(self, key: Key, kind: WorkloadKind) -> WorkloadState | None:
        if kind is WorkloadKind.DEPLOYMENT:
            found: WorkloadState | None = _first(self._workloads, key)
            return found
        obj = self._call(self.kube.get, LWS_API, "LeaderWorkerSet", key[0], key[1])
        return None if obj is None else WorkloadState.from_object(obj)

    def serving_policy(self, name: str) -> Mapping[str, Any] | None:
        found: Mapping[str, Any] | None = _first(self._policies, name)
        return found

    def config_map_value(self, namespace: str, name: str, key: str) -> str | None:
        found = self._call(self.kube.get, "v1", "ConfigMap", namespace, name)
        if found is None:
            return None
        data = found.get("data") or {}
        if key not in data:
            raise KeyError(key)
        return str(data[key])

    def apply(self, objects: Sequence[dict[str, Any]]) -> bool:
        changed = False
        for obj in objects:
            changed |= bool(self._call(self.kube.apply_if_changed, obj))
        return changed

    @staticmethod
    def _call(method: Any, *args: Any) -> Any:
        try:
            return method(*args)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, f"the API server is unreachable: {exc}") from None
