"""Operator cost: CPU per tuning cycle for 1, 100 and 1,000 InferenceDeployments, and RSS.

Each resource goes through the operator's own `Reconciler.tune` (resolve from cache, read the hub,
fit memory, plan, guardrails, status, telemetry) with the in-memory ports, as the kopf timer drives
it; API I/O is excluded (one status PATCH per changed resource, and one metrics poll for all of them
whatever their number). Target: <= 5 ms CPU per resource per cycle.
"""

from __future__ import annotations

import copy
import resource
import time
from pathlib import Path
from typing import Any

import structlog
import yaml

from infertune.api.observation import Observation
from infertune.controller.hub import MetricsHub
from infertune.controller.memory import MemoryCluster, MemoryReport
from infertune.controller.reconciler import Reconciler, Resource
from infertune.observe.snapshot import Snapshot

ROOT = Path(__file__).resolve().parents[1]
TARGET_MS = 5.0
CYCLE_SECONDS = 30.0


class _Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _fleet(n: int) -> tuple[Reconciler, list[tuple[Resource, MemoryReport]], MetricsHub, _Clock]:
    example = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())
    policy = yaml.safe_load((ROOT / "policies/coding-agent.yaml").read_text())
    clock, hub = _Clock(), MetricsHub()
    reconciler = Reconciler(MemoryCluster({"coding-agent": policy["spec"]}), hub, clock,
                            logger=structlog.wrap_logger(structlog.ReturnLogger()))
    resources = []
    for i in range(n):
        spec: dict[str, Any] = copy.deepcopy(example["spec"])
        spec["tuning"]["mode"] = "Recommend"
        report = MemoryReport()
        item = Resource("bench", f"d{i}", f"uid-{i}", spec, report.current, 1)
        reconciler.converge(item, report)
        resources.append((item, report))
    return reconciler, resources, hub, clock


def _observe(hub: MetricsHub, n: int, now: float) -> None:
    observations = {}
    for i in range(n):
        observations[("bench", f"d{i}")] = Observation(
            namespace="bench", deployment=f"d{i}", sample_time=now, available=True, running=8.0 + i % 5,
            waiting=float(i % 3), kv_usage=0.5 + (i % 40) / 100, arrival_rate=0.3 + (i % 10) / 10,
            completion_rate=0.3 + (i % 10) / 10, ttft_p95_seconds=1.8, mean_inter_token_seconds=0.021,
            mean_prompt_tokens=84_000, mean_cached_tokens=71_000, mean_generated_tokens=1_056)
    for source in hub.by_source():
        hub.ingest(source, Snapshot(time=now, observations=observations))


def _cycle(reconciler: Reconciler, resources: list[tuple[Resource, MemoryReport]], hub: MetricsHub,
           clock: _Clock) -> float:
    clock.now += CYCLE_SECONDS
    _observe(hub, len(resources), clock.now)
    start = time.process_time()
    for item, report in resources:
        reconciler.tune(Resource(item.namespace, item.name, item.uid, item.spec, report.current, 1), report)
    return (time.process_time() - start) * 1000


def run() -> None:
    print(f"{'resources':>10} {'CPU ms/cycle':>13} {'CPU ms/resource':>16} {'target':>8} {'RSS MB':>8}")
    for n in (1, 100, 1000):
        fleet = _fleet(n)
        _cycle(*fleet)  # warm caches and imports
        cycles = 3 if n < 1000 else 1
        ms = min(_cycle(*fleet) for _ in range(cycles))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        per = ms / n
        verdict = "ok" if per <= TARGET_MS else "MISSED"
        print(f"{n:>10} {ms:>13.1f} {per:>16.2f} {verdict:>8} {rss:>8.0f}")


if __name__ == "__main__":
    run()
