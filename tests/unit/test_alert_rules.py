"""The chart's alerts under `promtool test rules`: each fires when it should, silent when it should not.

The rules come from the rendered PrometheusRule (not a copy), so the test covers the template too.
Only `summary` is compared among the annotations: promtool compares annotations exactly, and the
summary is where the alert's value is formatted for a person; the rest is checked by `promtool check rules`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.chart_support import RELEASE, RUNBOOKS, rule_groups

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None,
                                reason="promtool missing: run `make system-deps`")

JOB = f"{RELEASE}-metrics"
INF_X20 = " ".join(["+Inf"] * 21)  # not approaching the ceiling; promtool has no `Inf x20`
STALE = "the operator has no fresh metrics"
OBJ = 'namespace="llm", name="{}"'
POD = 'namespace="llm", deployment="{}", pod="{}-0"'


def _alert(severity: str, summary: str, **labels: str) -> dict[str, Any]:
    return {"exp_labels": {"severity": severity, **labels}, "exp_annotations": {"summary": summary}}


def _case(series: dict[str, str], checks: list[tuple[str, str, list[dict[str, Any]]]]) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "alert_rule_test": [{"eval_time": t, "alertname": a, "exp_alerts": exp} for t, a, exp in checks],
    }


# Each case: input series (1-minute samples) and, at a time, the exact alerts expected.
CASES: dict[str, dict[str, Any]] = {
    "InfertuneKVCliffImminent": _case(
        {
            f"infertune_time_to_cliff_seconds{{{OBJ.format('kimi')}}}": "600x20",
            f"infertune_time_to_cliff_seconds{{{OBJ.format('steady')}}}": INF_X20,
            f"infertune_time_to_cliff_seconds{{{OBJ.format('far')}}}": "7200x20",
        },
        [
            ("1m", "InfertuneKVCliffImminent", []),  # still pending (for: 2m)
            ("5m", "InfertuneKVCliffImminent", [_alert(
                "warning",
                "llm/kimi: KV-cache working set reaches the VRAM ceiling in 10m 0s",
                namespace="llm", name="kimi")]),
        ],
    ),
    "InfertuneKVCacheNearlyFull": _case(
        {
            f"vllm:kv_cache_usage_perc{{{POD.format('kimi', 'kimi')}}}": "0.95x30",
            'vllm:kv_cache_usage_perc{namespace="llm", deployment="kimi", pod="kimi-1"}': "0.40x30",
            f"vllm:gpu_cache_usage_perc{{{POD.format('old', 'old')}}}": "0.97x30",  # vLLM < 0.10
            f"sglang:token_usage{{{POD.format('sg', 'sg')}}}": "0.99x30",
            f"vllm:kv_cache_usage_perc{{{POD.format('chat', 'chat')}}}": "0.85x30",
            f"vllm:kv_cache_usage_perc{{{POD.format('spiky', 'spiky')}}}": "0.95x5 0.50x25",
            'vllm:kv_cache_usage_perc{namespace="other", pod="unmanaged-0"}': "0.99x30",
        },
        [
            ("5m", "InfertuneKVCacheNearlyFull", []),  # held only 5 of 10 minutes so far
            ("15m", "InfertuneKVCacheNearlyFull", [
                _alert("warning", "llm/kimi: KV cache 95% full", namespace="llm", deployment="kimi"),
                _alert("warning", "llm/old: KV cache 97% full", namespace="llm", deployment="old"),
                _alert("warning", "llm/sg: KV cache 99% full", namespace="llm", deployment="sg"),
            ]),
        ],
    ),
    "InfertunePreemptionsRising": _case(
        {
            f"vllm:num_preemptions_total{{{POD.format('kimi', 'kimi')}}}": "0+6x30",  # 0.1/s
            f"sglang:num_retracted_requests_total{{{POD.format('sg', 'sg')}}}": "0+12x30",  # 0.2/s
            f"vllm:num_preemptions_total{{{POD.format('calm', 'calm')}}}": "0+1x30",  # 0.017/s
            f"vllm:num_preemptions_total{{{POD.format('flat', 'flat')}}}": "100x30",
        },
        [
            ("15m", "InfertunePreemptionsRising", [
                _alert("warning", "llm/kimi: 0.10 preemptions/s", namespace="llm", deployment="kimi"),
                _alert("warning", "llm/sg: 0.20 preemptions/s", namespace="llm", deployment="sg"),
            ]),
        ],
    ),
    "InfertuneTTFTSLOBreached": _case(
        {
            f"infertune_observed_ttft_p95_seconds{{{OBJ.format('kimi')}}}": "4x30",
            f"infertune_slo_max_ttft_seconds{{{OBJ.format('kimi')}}}": "3x30",
            f"infertune_observed_ttft_p95_seconds{{{OBJ.format('chat')}}}": "0.8x30",
            f"infertune_slo_max_ttft_seconds{{{OBJ.format('chat')}}}": "1x30",
            f"infertune_observed_ttft_p95_seconds{{{OBJ.format('nolimit')}}}": "50x30",
            f"infertune_slo_max_ttft_seconds{{{OBJ.format('nolimit')}}}": "0x30",
            f"infertune_slo_max_ttft_seconds{{{OBJ.format('idle')}}}": "1x30",  # nothing observed
        },
        [
            ("5m", "InfertuneTTFTSLOBreached", []),
            ("15m", "InfertuneTTFTSLOBreached", [_alert(
                "warning", "llm/kimi: TTFT p95 4s is over its SLO", namespace="llm", name="kimi")]),
        ],
    ),
    "InfertuneStreamTPSSLOBreached": _case(
        {
            f"infertune_observed_stream_tps{{{OBJ.format('kimi')}}}": "20x30",
            f"infertune_slo_min_stream_tps{{{OBJ.format('kimi')}}}": "25x30",
            f"infertune_observed_stream_tps{{{OBJ.format('chat')}}}": "40x30",
            f"infertune_slo_min_stream_tps{{{OBJ.format('chat')}}}": "30x30",
            f"infertune_observed_stream_tps{{{OBJ.format('batch')}}}": "5x30",
            f"infertune_slo_min_stream_tps{{{OBJ.format('batch')}}}": "0x30",  # batch has no TPS floor
        },
        [
            ("15m", "InfertuneStreamTPSSLOBreached", [_alert(
                "warning", "llm/kimi: 20 tok/s per stream is under its SLO", namespace="llm", name="kimi")]),
        ],
    ),
    "InfertuneCapacityExhausted": _case(
        {
            f"infertune_capacity_shortfall_gpus{{{OBJ.format('kimi')}}}": "8x30",
            f"infertune_capacity_shortfall_gpus{{{OBJ.format('fits')}}}": "0x30",
            f"infertune_capacity_shortfall_gpus{{{OBJ.format('blip')}}}": "8x5 0x25",
        },
        [
            ("10m", "InfertuneCapacityExhausted", []),  # for: 15m
            ("20m", "InfertuneCapacityExhausted", [_alert(
                "critical", "llm/kimi needs 8 more GPUs than its pool has", namespace="llm", name="kimi")]),
        ],
    ),
    "InfertuneMetricsStale": _case(
        {
            f"infertune_metrics_available{{{OBJ.format('blind')}}}": "0x20",
            f"infertune_metrics_available{{{OBJ.format('laggy')}}}": "1x20",
            f"infertune_metrics_age_seconds{{{OBJ.format('laggy')}}}": "600x20",
            f"infertune_metrics_available{{{OBJ.format('fine')}}}": "1x20",
            f"infertune_metrics_age_seconds{{{OBJ.format('fine')}}}": "20x20",
        },
        [
            ("10m", "InfertuneMetricsStale", [
                _alert("warning", f"llm/blind: {STALE}", namespace="llm", name="blind"),
                _alert("warning", f"llm/laggy: {STALE}", namespace="llm", name="laggy"),
            ]),
        ],
    ),
    "InfertuneOperatorDown": _case(
        {
            f'up{{job="{JOB}", instance="10.0.0.1:9090"}}': "0x20",
        },
        [
            ("3m", "InfertuneOperatorDown", []),
            ("10m", "InfertuneOperatorDown", [_alert(
                "critical", "The infertune operator is down", job=JOB)]),
        ],
    ),
    "InfertuneOperatorDown/absent": _case(
        {'up{job="something-else", instance="x"}': "1x20"},
        [("10m", "InfertuneOperatorDown", [_alert("critical", "The infertune operator is down", job=JOB)])],
    ),
    "InfertuneOperatorDown/standby-up": _case(
        {
            f'up{{job="{JOB}", instance="10.0.0.1:9090"}}': "0x20",
            f'up{{job="{JOB}", instance="10.0.0.2:9090"}}': "1x20",
        },
        [("10m", "InfertuneOperatorDown", [])],
    ),
}


def _summary_only(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for group in groups:
        rules = [{**r, "annotations": {"summary": r["annotations"]["summary"]}} for r in group["rules"]]
        out.append({**group, "rules": rules})
    return out


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_rendered_rules_pass_promtool_check(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    result = _promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_every_alert_has_a_case() -> None:
    alerts = {r["alert"] for g in rule_groups() for r in g["rules"]}
    assert alerts == {name.split("/")[0] for name in CASES}


@pytest.mark.parametrize("case", sorted(CASES))
def test_alert_fires_only_when_it_should(case: str, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": _summary_only(rule_groups())}))
    spec = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [CASES[case]]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = _promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_thresholds_come_from_values(tmp_path: Path) -> None:
    """A lower KV threshold from values makes the 'chat' replica at 85% fire as well."""
    groups = _summary_only(rule_groups({"prometheusRule": {"kvUsageRatio": 0.8, "kvUsageFor": "5m"}}))
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    case = _case(
        {f"vllm:kv_cache_usage_perc{{{POD.format('chat', 'chat')}}}": "0.85x30"},
        [("8m", "InfertuneKVCacheNearlyFull", [
            _alert("warning", "llm/chat: KV cache 85% full", namespace="llm", deployment="chat")])],
    )
    spec = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [case]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = _promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_links_its_runbook_section() -> None:
    runbooks = RUNBOOKS.read_text()
    for group in rule_groups():
        for rule in group["rules"]:
            name, notes = rule["alert"], rule["annotations"]
            assert notes["summary"] and notes["description"], name
            assert notes["runbook_url"] == ("https://github.com/infertune/infertune/blob/main/docs/runbooks.md"
                                            f"#runbook-{name.lower()}")
            assert f"## Runbook: {name}\n" in runbooks, f"docs/runbooks.md has no runbook section for {name}"

