"""The generated CRDs: no drift from the models, every shipped example and policy accepted by the
OpenAPI schema (jsonschema) and the CEL rules (cel-python), and each class of bad spec rejected."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml

from infertune.commands.crds import reference, render_all

ROOT = Path(__file__).resolve().parents[2]
CRDS = {p.name: yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))}
_CEL = celpy.Environment()


def _schema(kind: str) -> dict[str, Any]:
    for crd in CRDS.values():
        if crd["spec"]["names"]["kind"] == kind:
            return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    raise AssertionError(f"no CRD for {kind}")


def _defaulted(schema: dict[str, Any], obj: Any) -> Any:
    """Structural defaulting as the API server does it: defaults fill absent fields, recursively."""
    if isinstance(obj, dict) and schema.get("type") == "object":
        out = dict(obj)
        for name, prop in schema.get("properties", {}).items():
            if name not in out and "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
            if name in out:
                out[name] = _defaulted(prop, out[name])
        return out
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [_defaulted(schema["items"], item) for item in obj]
    return obj


def _cel_errors(schema: dict[str, Any], obj: Any, path: str = "") -> list[str]:
    errors = []
    for entry in schema.get("x-kubernetes-validations", []):
        program = _CEL.program(_CEL.compile(entry["rule"]))
        if not bool(program.evaluate({"self": celpy.json_to_cel(obj)})):
            errors.append(f"{path}{entry.get('fieldPath', '')}: {entry['message']}")
    if isinstance(obj, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in obj:
                errors += _cel_errors(prop, obj[name], f"{path}.{name}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            errors += _cel_errors(schema["items"], item, f"{path}[{i}]")
    return errors


def admission_errors(doc: dict[str, Any]) -> list[str]:
    """What the API server would say about this object: schema errors, then CEL errors."""
    schema = _schema(doc["kind"])
    body = {k: v for k, v in doc.items() if k in ("spec", "status")}
    errors = [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
              for e in jsonschema.Draft7Validator(schema).iter_errors(body)]
    if errors:
        return errors
    return _cel_errors(schema, _defaulted(schema, body))


def _docs(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("*.yaml"))


def test_crds_directory_matches_the_models() -> None:
    written = {p.name: p.read_text() for p in (ROOT / "crds").glob("*.yaml")}
    assert written == render_all(), "crds/ is stale: run `infertune crds --out crds`"


def test_crd_reference_matches_the_models() -> None:
    assert (ROOT / "docs/crd-reference.md").read_text() == reference(), (
        "docs/crd-reference.md is stale: run `infertune crds --out crds --reference docs/crd-reference.md`")


def test_crds_have_short_names_columns_and_subresources() -> None:
    infd = CRDS["infertune.io_inferencedeployments.yaml"]["spec"]
    version = infd["versions"][0]
    assert infd["names"]["shortNames"] == ["infd"]
    assert [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")] == [
        "TP", "MaxSeqs", "Replicas", "KV%", "TPS/Stream", "TTFT", "Ready", "Age"]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert version["subresources"]["scale"]["statusReplicasPath"] == ".status.replicas"
    assert "status" in version["subresources"]
    svpol = CRDS["infertune.io_servingpolicies.yaml"]["spec"]
    assert svpol["scope"] == "Cluster" and svpol["names"]["shortNames"] == ["svpol"]


def _assert_structural(node: Any, path: str = "") -> None:
    if isinstance(node, dict):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
        if "properties" in node or "items" in node:
            assert "type" in node, f"{path} has no type"
        for key, value in node.items():
            _assert_structural(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _assert_structural(item, f"{path}[{i}]")


@pytest.mark.parametrize("name", sorted(CRDS))
def test_schemas_are_structural(name: str) -> None:
    schema = CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    _assert_structural(schema)
    jsonschema.Draft7Validator.check_schema(schema)


def test_spec_has_no_floats() -> None:
    spec = _schema("InferenceDeployment")["properties"]["spec"]

    def walk(node: dict[str, Any], path: str) -> None:
        assert node.get("type") != "number", f"{path} is a float"
        for name, prop in node.get("properties", {}).items():
            walk(prop, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(spec, "spec")


@pytest.mark.parametrize("path", _docs("examples") + _docs("policies"), ids=lambda p: p.name)
def test_shipped_resources_are_admitted(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        assert admission_errors(doc) == []


def _kimi() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / "kimi-k2.6-b200.yaml").read_text())


def _with(change: dict[str, Any]) -> dict[str, Any]:
    doc = _kimi()

    def merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
        for k, v in src.items():
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            else:
                dst[k] = v

    merge(doc["spec"], change)
    return doc


@pytest.mark.parametrize(("change", "expected"), [
    ({"tuning": {"concurrency": {"min": 64, "max": 8}}}, "concurrency: min must be <= max"),
    ({"tuning": {"replicas": {"min": 5, "max": 2}}}, "replicas: min must be <= max"),
    ({"hardware": {"gpu": "a100-40gb"}}, "is not one of"),
    ({"tuning": {"tensorParallelSizes": [3, 8]}}, "tensorParallelSizes: each must be one of"),
    ({"tuning": {"mode": "auto"}}, "'auto' is not one of"),
    ({"tuning": {"kvHeadroomPercent": 150}}, "150 is greater than the maximum of 90"),
    ({"tuning": {"burstPercentile": 100}}, "100 is greater than the maximum of 99"),
    ({"engine": {"extraArgs": ["--max-num-seqs=512"]}}, "extraArgs must not set flags the operator owns"),
    ({"engine": {"extraArgs": ["--tensor-parallel-size", "16"]}}, "must not set flags the operator owns"),
    ({"engine": {"kind": "sglang", "extraArgs": ["--tp-size=2"]}}, "must not set flags the operator owns"),
    ({"model": {"architecture": {"layers": 1, "hiddenSize": 8, "attentionHeads": 1, "ffnWidth": 8,
                                 "totalParams": 10, "activeParams": 10, "kvHeads": 1, "headDim": 8}}},
     "exactly one of profile, architecture or configMapRef"),
    ({"hardware": {"pricePerGpuHour": 6.5}}, "6.5 is not of type 'string'"),
    ({"slo": {"ttft": {"limit": "3 seconds"}}}, "does not match"),
])
def test_bad_specs_are_rejected_on_admission(change: dict[str, Any], expected: str) -> None:
    errors = admission_errors(_with(change))
    assert any(expected in e for e in errors), errors


def test_a_user_arg_the_operator_does_not_own_passes() -> None:
    args = ["--max-model-len=65536", "--num-seqs-note"]
    assert admission_errors(_with({"engine": {"extraArgs": args}})) == []
