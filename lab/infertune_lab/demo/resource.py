"""The demo's InferenceDeployment and ServingPolicy: the repository's Kimi K2.6 on B200 example and
its coding-agent policy, with time compressed so a day's decisions fit in minutes.

The SLA is the coding-agent policy's own (>= 25 tok/s per stream, TTFT p95 <= 3 s, 10% KV headroom).
What is compressed: the model load (spec.engine.startupSeconds, which the fleet agent also uses as
its load delay), the tuning interval and the cooldowns. The pool is 32 B200s, so up to eight TP4 or
four TP8 replicas.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infertune_lab.demo.cluster import seeded

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "kimi-k2.6-b200.yaml"
POLICIES = ROOT / "policies"


@dataclass(frozen=True)
class Compression:
    """How the demo shortens time. Real: 900 s load, 30 s cycles, 1 m / 5 m / 30 m cooldowns.

    The scale-up cooldown is a fifteenth of a real load; compressed less than the load it would make
    each scale-up of a spike wait most of one, a lag production does not have (docs/demo.md), so it
    is the tuning interval here."""

    startup_seconds: int = 15
    interval: str = "2s"
    scale_up: str = "2s"
    scale_down: str = "30s"
    relayout: str = "30s"
    stabilization: str = "20s"
    stale_after: str = "20s"


def _load(path: Path) -> Obj:
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: the demo runs from a source checkout of infertune")
    doc: Obj = yaml.safe_load(path.read_text())
    return doc


def policies() -> list[Obj]:
    return [seeded(_load(p)) for p in sorted(POLICIES.glob("*.yaml"))]


def demo_resource(port: int, prometheus_url: str | None, *, mode: str = "Auto", name: str = "kimi-k2",
                  namespace: str = "inference", compression: Compression = Compression(),
                  max_replicas: int = 8) -> Obj:
    """The example resource, pointed at the demo's Prometheus (or the pods) and its free port."""
    doc = copy.deepcopy(_load(EXAMPLE))
    doc["metadata"] = {"name": name, "namespace": namespace}
    spec = doc["spec"]
    spec["engine"] |= {"port": port, "startupSeconds": compression.startup_seconds}
    spec["hardware"]["poolGpus"] = 32
    spec["tuning"] |= {
        "mode": mode, "interval": compression.interval, "staleAfter": compression.stale_after,
        "replicas": {"min": 1, "max": max_replicas},
        "cooldowns": {"scaleUp": compression.scale_up, "scaleDown": compression.scale_down,
                      "relayout": compression.relayout, "scaleDownStabilization": compression.stabilization},
    }
    if prometheus_url is None:
        spec["metrics"] = {"source": "Pods"}
    else:
        spec["metrics"] = {"source": "Prometheus", "prometheus": {"url": prometheus_url, "timeout": "2s"}}
    return seeded(doc)
