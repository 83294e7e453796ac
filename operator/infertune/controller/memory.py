"""In-memory ports for the Reconciler: a Cluster over dicts and a Report that keeps the status. The
lab drives the operator's reconciler with these (its twin fleet behind the Cluster), and the unit
tests run every mode on fake time with them; kmock's emulator serves the tests that need an API
server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from infertune.actuate.apply import ownership_conflict
from infertune.actuate.workload import INPUT_HASH, WorkloadKind, layout_of_workload, rollout_strategy_of
from infertune.controller.status import WorkloadState, owner_uid
from infertune.errors import OwnershipError

Key = tuple[str, str]
Obj = dict[str, Any]


class MemoryCluster:
    """Objects are kept as applied. A workload reports every desired pod ready and updated (a
    controller that rolls out at once) unless `ready` names fewer for its key."""

    def __init__(self, policies: Mapping[str, Mapping[str, Any]] | None = None,
                 config_maps: Mapping[tuple[str, str], Mapping[str, str]] | None = None) -> None:
        self.policies = {name: dict(spec) for name, spec in (policies or {}).items()}
        self.config_maps = {key: dict(data) for key, data in (config_maps or {}).items()}
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.ready: dict[Key, int] = {}
        self.applied: list[Obj] = []  # every object applied, in order

    def workload(self, key: Key, kind: WorkloadKind) -> WorkloadState | None:
        obj = self.objects.get((kind.value, *key))
        layout = None if obj is None else layout_of_workload(obj)
        if obj is None or layout is None:
            return None
        ready = min(self.ready.get(key, layout.replicas), layout.replicas)
        surge, unavailable = rollout_strategy_of(obj)
        return WorkloadState(desired=layout.replicas, ready=ready, updated=ready, layout=layout,
                             max_surge=surge, max_unavailable=unavailable, owner=owner_uid(obj))

    def serving_policy(self, name: str) -> Mapping[str, Any] | None:
        return self.policies.get(name)

    def config_map_value(self, namespace: str, name: str, key: str) -> str | None:
        data = self.config_maps.get((namespace, name))
        if data is None:
            return None
        return data[key]

    def apply(self, objects: Sequence[Obj]) -> bool:
        """As the API server port does: nothing is applied when any live object is someone else's."""
        def where(obj: Obj) -> tuple[str, str, str]:
            meta = obj["metadata"]
            return str(obj["kind"]), str(meta.get("namespace", "")), str(meta["name"])

        conflicts = [why for obj in objects if (why := ownership_conflict(self.objects.get(where(obj)), obj))]
        if conflicts:
            raise OwnershipError("; ".join(conflicts))
        changed = False
        for obj in objects:
            meta = obj["metadata"]
            live = self.objects.get(where(obj))
            wanted = (meta.get("annotations") or {}).get(INPUT_HASH)
            if live is not None and wanted and (live["metadata"].get("annotations") or {}).get(INPUT_HASH) == wanted:
                continue
            self.objects[where(obj)] = obj
            self.applied.append(obj)
            changed = True
        return changed


class MemoryReport:
    """The Report port: the status as the next visit would read it (each write a merge patch of its
    top-level fields, as kopf's status patch is) and the Events posted."""

    def __init__(self, status: Mapping[str, Any] | None = None) -> None:
        self.current: dict[str, Any] = dict(status or {})
        self.events: list[tuple[str, str, str]] = []

    def status(self, new: Mapping[str, Any]) -> None:
        self.current = {**self.current, **new}

    def event(self, kind: str, reason: str, message: str) -> None:
        self.events.append((kind, reason, message))
