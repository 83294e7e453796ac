"""Render the Helm chart in-process (helm-python-sdk, Helm's own Go engine) for the chart tests."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import helm_python
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "infertune"
# The values reference is generated into the install page; the alerts' runbooks have a page of their own.
VALUES_DOC = REPO / "docs" / "install.md"
RUNBOOKS = REPO / "docs" / "runbooks.md"
SCENARIOS = sorted(p.name.removesuffix("-values.yaml") for p in (CHART / "ci").glob("*-values.yaml"))
RELEASE = "infertune"
NAMESPACE = "infertune-system"


@functools.cache
def _chart() -> helm_python.Chart:
    return helm_python.Chart.load(CHART)


def scenario_values(scenario: str) -> dict[str, Any]:
    return yaml.safe_load((CHART / "ci" / f"{scenario}-values.yaml").read_text()) or {}


def render_files(values: dict[str, Any] | None = None) -> dict[str, str]:
    """Template path -> rendered text; raises helm_python.HelmError on a failed render."""
    return _chart().render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)


@functools.cache
def _render_cached(values_json: str) -> tuple[dict[str, Any], ...]:
    docs: list[dict[str, Any]] = []
    for path, text in sorted(render_files(json.loads(values_json)).items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("__template__", path)
                docs.append(doc)
    return tuple(docs)


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every rendered object; each carries the template it came from under `__template__`."""
    return [json.loads(json.dumps(d)) for d in _render_cached(json.dumps(values or {}, sort_keys=True))]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]


def rule_groups(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The alert groups of the rendered PrometheusRule, as a Prometheus rules file holds them."""
    groups: list[dict[str, Any]] = one(render(values), "PrometheusRule")["spec"]["groups"]
    return groups
