"""Operator cost: CPU per tuning cycle for 1, 100 and 1,000 InferenceDeployments, and RSS.

Each resource runs the controller's pure cycle (observation -> plan -> guardrails -> status) on a
fresh observation, as the kopf timer does; API I/O is excluded (one status PATCH per changed
resource, and one metrics poll for all of them whatever their number). Target: <= 5 ms CPU per
resource per cycle.
"""

from __future__ import annotations

import resource
import time
from dataclasses import replace
from pathlib import Path

import yaml

from infertune.actuate.request import resolve
from infertune.api.observation import Observation
from infertune.api.policy import parse_policy
from infertune.api.spec import parse_spec
from infertune.controller.cycle import CycleInput, run_cycle

ROOT = Path(__file__).resolve().parents[1]
TARGET_MS = 5.0


def _resources(n: int) -> list[CycleInput]:
    spec = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())["spec"]
    spec["tuning"]["mode"] = "Recommend"
    policy = parse_policy(yaml.safe_load((ROOT / "policies/coding-agent.yaml").read_text())["spec"])
    resolved = resolve(parse_spec(spec), policy)
    now = time.time()
    status = {"applied": {"tensorParallelSize": 4, "maxNumSeqs": 8, "replicas": 2}}
    inputs = []
    for i in range(n):
        obs = Observation(namespace="bench", deployment=f"d{i}", sample_time=now, available=True,
                          running=8.0 + i % 5, waiting=float(i % 3), kv_usage=0.5 + (i % 40) / 100,
                          arrival_rate=0.3 + (i % 10) / 10, ttft_p95_seconds=1.8, mean_inter_token_seconds=0.021,
                          mean_prompt_tokens=84_000, mean_cached_tokens=71_000, mean_generated_tokens=1_056)
        inputs.append(CycleInput("bench", f"d{i}", 1, False, replace(resolved), status, obs, {}, now))
    return inputs


def _cycle(inputs: list[CycleInput]) -> float:
    start = time.process_time()
    for inp in inputs:
        run_cycle(inp)
    return (time.process_time() - start) * 1000


def run() -> None:
    print(f"{'resources':>10} {'CPU ms/cycle':>13} {'CPU ms/resource':>16} {'target':>8} {'RSS MB':>8}")
    for n in (1, 100, 1000):
        inputs = _resources(n)
        _cycle(inputs[: min(n, 10)])  # warm caches and imports
        cycles = 3 if n < 1000 else 1
        ms = min(_cycle(inputs) for _ in range(cycles))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        per = ms / n
        verdict = "ok" if per <= TARGET_MS else "MISSED"
        print(f"{n:>10} {ms:>13.1f} {per:>16.2f} {verdict:>8} {rss:>8.0f}")


if __name__ == "__main__":
    run()
