"""The Cluster port over the API server: the owned Deployments from kopf's watched index (so a cycle
costs no GET), a LeaderWorkerSet by one GET (its CRD may be absent, so it is not watched), the
ServingPolicies from their index, ConfigMaps, and server-side apply. Blocking: the reconciler runs
off the event loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import urllib3

from infertune.actuate.apply import KubeClient, ownership_conflict
from infertune.actuate.workload import INPUT_HASH, LWS_API, WorkloadKind
from infertune.controller.status import WorkloadState
from infertune.errors import ApiError, OwnershipError

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
        """Applies each object unless the live one carries its input hash; raises OwnershipError, having
        applied nothing, when any live object of the same name is not this resource's."""
        lives = [self._call(self.kube.get, obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"),
                            obj["metadata"]["name"]) for obj in objects]
        conflicts = [why for why in map(ownership_conflict, lives, objects) if why is not None]
        if conflicts:
            raise OwnershipError("; ".join(conflicts))
        changed = False
        for obj, live in zip(objects, lives, strict=True):
            wanted = (obj["metadata"].get("annotations") or {}).get(INPUT_HASH)
            if live is not None and wanted and ((live.get("metadata") or {}).get("annotations") or {}).get(
                    INPUT_HASH) == wanted:
                continue
            self._call(self.kube.apply, obj)
            changed = True
        return changed

    @staticmethod
    def _call(method: Any, *args: Any) -> Any:
        try:
            return method(*args)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(0, f"the API server is unreachable: {exc}") from None
