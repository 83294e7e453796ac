"""`infertune bench` end to end on a short spike: the JSON a user scripts against, and the headline
comparison with KEDA (fewer GPU-hours at no worse SLA attainment)."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from infertune.cli import main

FIELDS = {"sla_attainment_ttft", "sla_attainment_tps", "ttft_p95_seconds", "per_stream_tps_p5", "gpu_hours",
          "cost_per_million_tokens", "goodput_tokens_per_gpu_hour", "preemptions", "seconds_past_cliff", "relayouts"}


@pytest.fixture(scope="module")
def spike(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two hours of the spike scenario, every policy, as a user would run it."""
    report = tmp_path_factory.mktemp("bench")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["bench", "--scenario", "spike", "--duration", "7200", "--output", "json", "--report",
                     str(report)])
    assert code == 0
    doc: dict[str, Any] = json.loads(stdout.getvalue())
    doc["_report"] = sorted(p.name for p in report.iterdir())
    return doc


def test_json_names_every_policy_and_every_field(spike: dict[str, Any]) -> None:
    assert spike["scenario"] == "spike"
    assert list(spike["policies"]) == ["infertune", "static", "hpa-kv", "keda-queue", "keda-slo", "oracle"]
    for name, figures in spike["policies"].items():
        assert set(figures) >= FIELDS, name
        assert 0.0 <= figures["sla_attainment_ttft"] <= 1.0
        assert figures["gpu_hours"] > 0
    assert spike["_report"] == ["bench-spike.png", "bench.md"]


def test_the_oracle_meets_the_sla_and_static_pays_for_the_peak(spike: dict[str, Any]) -> None:
    oracle, static = spike["policies"]["oracle"], spike["policies"]["static"]
    assert oracle["sla_attainment_ttft"] >= 0.99 and oracle["sla_attainment_tps"] >= 0.99
    assert static["gpu_hours"] > oracle["gpu_hours"]
    assert static["relayouts"] == 0


@pytest.mark.xfail(strict=True, reason="on the spike infertune's TTFT attainment is far above keda-queue's (which "
                                       "misses on a third of requests), but it sizes for random arrivals and cannot "
                                       "scale ahead of a 900 s model load, so it pays more GPU-hours; docs/bench.md")
def test_infertune_uses_fewer_gpu_hours_than_keda_at_no_worse_attainment(spike: dict[str, Any]) -> None:
    ours, keda = spike["policies"]["infertune"], spike["policies"]["keda-queue"]
    assert ours["gpu_hours"] < keda["gpu_hours"]
    assert ours["sla_attainment_ttft"] >= keda["sla_attainment_ttft"]
    assert ours["sla_attainment_tps"] >= keda["sla_attainment_tps"]
