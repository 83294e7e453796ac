"""The chart's CRDs are the repository's `crds/`, with only labels and the keep policy added."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.chart_support import CHART, REPO, of_kind, render, scenario_values

pytestmark = pytest.mark.integration
KEEP = {"helm.sh/resource-policy": "keep"}


def _load_dir(directory: Path) -> dict[str, dict[str, Any]]:
    docs = [d for p in sorted(directory.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    return {d["metadata"]["name"]: d for d in docs}


def _without_chart_metadata(crd: dict[str, Any]) -> dict[str, Any]:
    crd = copy.deepcopy(crd)
    crd.pop("__template__", None)
    meta = crd["metadata"]
    for key in ("labels", "annotations"):
        meta.pop(key, None)
    return crd


def _infertune_crds(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in of_kind(docs, "CustomResourceDefinition")
            if c["spec"]["group"] == "infertune.io"}


def test_chart_copy_matches_the_generated_crds() -> None:
    generated = _load_dir(REPO / "crds")
    assert generated, "crds/ is empty: run `make crds`"
    assert _load_dir(CHART / "files" / "crds") == generated, "chart copy of crds/ drifted: run `make crds`"


def test_rendered_crds_equal_crds_dir_apart_from_added_metadata() -> None:
    rendered = _infertune_crds(render())
    generated = _load_dir(REPO / "crds")
    names = {"inferencedeployments.infertune.io", "servingpolicies.infertune.io"}
    assert set(rendered) == set(generated) == names
    for name, crd in rendered.items():
        assert _without_chart_metadata(crd) == _without_chart_metadata(generated[name]), name
        assert crd["metadata"]["annotations"] == KEEP
        assert crd["metadata"]["labels"]["app.kubernetes.io/part-of"] == "infertune"


def test_keep_false_lets_uninstall_remove_the_crds() -> None:
    for crd in _infertune_crds(render(scenario_values("namespaced"))).values():
        assert "helm.sh/resource-policy" not in crd["metadata"].get("annotations", {})


def test_crds_disabled_renders_none() -> None:
    assert of_kind(render(scenario_values("no-crds")), "CustomResourceDefinition") == []


def test_kopf_peering_crds_only_with_peering() -> None:
    def kopf_kinds(docs: list[dict[str, Any]]) -> set[str]:
        return {c["spec"]["names"]["kind"] for c in of_kind(docs, "CustomResourceDefinition")
                if c["spec"]["group"] == "kopf.dev"}

    assert kopf_kinds(render()) == set()
    assert kopf_kinds(render(scenario_values("ha"))) == {"ClusterKopfPeering", "KopfPeering"}
