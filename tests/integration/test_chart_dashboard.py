"""The Grafana dashboard: generated, shipped for the sidecar, and every query is PromQL Prometheus accepts."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.chart_support import CHART, one, render

pytestmark = pytest.mark.integration

# The operator's metric names (the shared contract); a dashboard query naming any other is a typo.
OPERATOR_METRICS = {
    "infertune_kv_headroom_ratio", "infertune_time_to_cliff_seconds", "infertune_kv_usage_ratio",
    "infertune_observed_ttft_p95_seconds", "infertune_observed_stream_tps", "infertune_slo_max_ttft_seconds",
    "infertune_slo_min_stream_tps", "infertune_capacity_shortfall_gpus", "infertune_metrics_available",
    "infertune_metrics_age_seconds", "infertune_replicas", "infertune_tensor_parallel_size",
    "infertune_max_num_seqs", "infertune_fit_r2", "infertune_fit_samples", "infertune_decisions_total",
    "infertune_reconcile_duration_seconds",
}


def _dashboard() -> dict[str, Any]:
    config_map = one(render(), "ConfigMap")
    board: dict[str, Any] = json.loads(config_map["data"]["infertune.json"])
    return board


def _exprs(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def test_shipped_json_is_the_generator_output() -> None:
    spec = importlib.util.spec_from_file_location("dashboard_gen", CHART / "hack" / "dashboard.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped = (CHART / "files" / "dashboards" / "infertune.json").read_text()
    assert shipped == module.render(), "run `python charts/infertune/hack/dashboard.py`"
    assert _dashboard() == json.loads(shipped)


def test_configmap_is_picked_up_by_the_grafana_sidecar() -> None:
    config_map = one(render(), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    moved = one(render({"dashboard": {"namespace": "monitoring"}}), "ConfigMap")
    assert moved["metadata"]["namespace"] == "monitoring"


def test_dashboard_is_per_deployment_and_shows_the_four_views() -> None:
    board = _dashboard()
    variables = {v["name"] for v in board["templating"]["list"]}
    assert {"namespace", "deployment"} <= variables
    titles = " | ".join(p["title"] for p in board["panels"])
    for view in ("running batch", "KV-cache usage against the cliff", "TTFT p95 against the SLO",
                 "Per-stream tok/s against the SLO", "Decisions"):
        assert view in titles
    for expr in _exprs(board):
        if "infertune_" in expr:
            assert 'name="$deployment"' in expr, expr
        elif "vllm:" in expr:
            assert 'deployment="$deployment"' in expr, expr
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])


def test_queries_name_only_operator_metrics_that_exist() -> None:
    named = {m for e in _exprs(_dashboard()) for m in re.findall(r"\binfertune_[a-z0-9_]+", e)}
    assert named and named <= OPERATOR_METRICS, named - OPERATOR_METRICS


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing: run `make system-deps`")
def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    exprs = [e.replace("$__rate_interval", "2m").replace("$namespace", "ns").replace("$deployment", "dep")
             for e in _exprs(_dashboard())]
    rules = [{"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]
    groups = {"groups": [{"name": "dashboard", "rules": rules}]}
    (tmp_path / "queries.yaml").write_text(yaml.safe_dump(groups))
    result = subprocess.run(["promtool", "check", "rules", "queries.yaml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout
