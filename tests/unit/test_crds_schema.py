"""The generated CRDs: no drift from the models, every shipped example and policy accepted by the
OpenAPI schema (jsonschema) and the CEL rules (cel-python), and each class of bad spec rejected."""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import re2  # Google's RE2, the API server's regular expressions (cel-python needs it too, for matches())
import yaml

from infertune.api.quantities import format_duration
from infertune.api.spec import parse_spec
from infertune.commands.crds import reference, render_all
from infertune.model import workload_preset
from infertune.planner.request import DEFAULT_TP_SIZES, resolve

ROOT = Path(__file__).resolve().parents[2]
CRDS = {p.name: yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))}
_CEL = celpy.Environment()


def _re2_pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    """OpenAPI `pattern` as the API server checks it: an RE2 search, where `$` is the end of the string.
    jsonschema's own uses Python's re.search, whose `$` also matches before a final newline (and whose `\\s`
    is Unicode's whitespace, RE2's only ASCII's), so it would admit "name\\n" that the API server refuses."""
    if validator.is_type(instance, "string") and not re2.search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_VALIDATOR = jsonschema.validators.extend(jsonschema.Draft7Validator, {"pattern": _re2_pattern})


@functools.cache
def _program(rule: str) -> Any:
    return _CEL.program(_CEL.compile(rule))


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
        program = _program(entry["rule"])
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


def schema_errors(schema: dict[str, Any], obj: Any) -> list[str]:
    """What the API server would say about `obj` under `schema` (a CRD's, or one of its nodes'): schema
    errors, then CEL errors."""
    errors = [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
              for e in _VALIDATOR(schema).iter_errors(obj)]
    if errors:
        return errors
    return _cel_errors(schema, _defaulted(schema, obj))


def admission_errors(doc: dict[str, Any]) -> list[str]:
    """What the API server would say about this object: schema errors, then CEL errors. The server
    has already checked metadata.name as an object name, so a document without one is given one."""
    body = {"metadata": {"name": "unnamed"}, **{k: v for k, v in doc.items() if k in ("metadata", "spec", "status")}}
    return schema_errors(_schema(doc["kind"]), body)


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


def _fields(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every field under a schema node, through objects' properties and arrays' items, as (path, schema)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for name, prop in node.get("properties", {}).items():
        found += [(f"{path}.{name}", prop), *_fields(prop, f"{path}.{name}")]
    if isinstance(node.get("items"), dict):
        found += _fields(node["items"], f"{path}[]")
    return found


@pytest.mark.parametrize(("kind", "part"), [
    ("InferenceDeployment", "spec"), ("InferenceDeployment", "status"), ("ServingPolicy", "spec")])
def test_every_field_has_a_description(kind: str, part: str) -> None:
    """What `kubectl explain` prints: no field of either CRD may have nothing to say."""
    root = _schema(kind)["properties"][part]
    blank = [path for path, node in [(part, root), *_fields(root, part)]
             if not str(node.get("description", "")).strip()]
    assert blank == [], f"{kind} fields without a description (api/*.py, then `make crds`): {', '.join(blank)}"


def _description(kind: str, path: str) -> str:
    node = _schema(kind)
    for name in path.split("."):
        node = node["properties"][name]
    return str(node.get("description", ""))


def test_the_defaults_the_descriptions_state_are_the_planners() -> None:
    """The tuning defaults live in the planner, which api/ cannot import: the descriptions state them in
    words, and this keeps the words true."""
    spec = parse_spec({"model": {"weights": "w", "profile": "kimi-k2.6"}, "slo": {"ttft": {"limit": "3s"}}})
    request = resolve(spec).request
    rails = request.guardrails
    stated = {
        "spec.tuning.cooldowns.scaleUp": format_duration(rails.scale_up_cooldown_s),
        "spec.tuning.cooldowns.scaleDown": format_duration(rails.scale_down_cooldown_s),
        "spec.tuning.cooldowns.relayout": format_duration(rails.relayout_cooldown_s),
        "spec.tuning.cooldowns.scaleDownStabilization": format_duration(rails.scale_down_stabilization_s),
        "spec.tuning.staleAfter": format_duration(rails.stale_after_s),
        "spec.tuning.hysteresisPercent": f"{rails.hysteresis * 100:g}",
        "spec.tuning.kvHeadroomPercent": f"{request.kv_headroom * 100:g}",
        "spec.tuning.burstHeadroomPercent": f"{request.demand_headroom * 100:g}",
        "spec.tuning.burstPercentile": f"{request.burst_quantile * 100:g}",
        "spec.tuning.concurrency.min": str(request.concurrency_min),
        "spec.tuning.replicas.min": str(request.replicas_min),
        "spec.slo.ttft.percentile": str(request.slo.ttft_percentile),
    }
    for path, default in stated.items():
        assert f"Default {default}." in _description("InferenceDeployment", path), path
    step = _description("InferenceDeployment", "spec.tuning.maxReplicaStep")
    assert rails.scale_up_share == 1.0 and (
        f"Unset: {rails.max_step_replicas} down, and up {rails.max_step_replicas} or as many as run" in step)
    assert f"Default {request.concurrency_max}, " in _description("InferenceDeployment", "spec.tuning.concurrency.max")
    assert f"Default {request.replicas_max}, " in _description("InferenceDeployment", "spec.tuning.replicas.max")
    assert request.workload == workload_preset("chat")
    assert "Default chat." in _description("InferenceDeployment", "spec.workload.preset")
    sizes = " and ".join([", ".join(map(str, DEFAULT_TP_SIZES[:-1])), str(DEFAULT_TP_SIZES[-1])])
    assert f"Default: those of {sizes} the model allows." in _description(
        "InferenceDeployment", "spec.tuning.tensorParallelSizes")


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


def test_an_sglang_engine_without_an_image_is_rejected_not_run_on_vllms() -> None:
    """The default image is vLLM's: under SGLang's command it would crash-loop every pod."""
    bare = _with({"engine": {"kind": "sglang"}})
    del bare["spec"]["engine"]["image"]
    assert any("kind sglang needs an image" in e for e in admission_errors(bare)), admission_errors(bare)
    assert admission_errors(_with({"engine": {"kind": "sglang", "image": "lmsysorg/sglang:v0.5.19-cu129"}})) == []
    vllm = _with({})
    del vllm["spec"]["engine"]["image"]
    assert admission_errors(vllm) == []


@pytest.mark.parametrize("name", ["my.model", "Kimi", "9kimi", "kimi-", "k" * 64])
def test_a_name_that_cannot_name_the_service_is_rejected_on_admission(name: str) -> None:
    """The object name rule admits a dot or 253 characters; the Service the operator creates under the
    same name would then be refused, and the resource never serve."""
    doc = _kimi()
    doc["metadata"]["name"] = name
    assert any("RFC 1035 label" in e for e in admission_errors(doc)), admission_errors(doc)
    doc["metadata"]["name"] = "kimi-k2-6" + "k" * 54
    assert admission_errors(doc) == []


def test_a_user_arg_the_operator_does_not_own_passes() -> None:
    args = ["--max-model-len=65536", "--num-seqs-note"]
    assert admission_errors(_with({"engine": {"extraArgs": args}})) == []
