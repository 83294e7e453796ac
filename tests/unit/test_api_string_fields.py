"""Every string a resource or a policy states is refused when Kubernetes, the container runtime or the
engine could not take it: a NUL anywhere (no argument, environment variable or object name carries one),
and, where the field has a Kubernetes format (an image reference, a label key or value, an object name,
a ConfigMap or Secret key, a resource name or quantity), anything that format does not allow, control
characters included. The models, the CRDs and `infertune plan -f` refuse the same values, in one line
that names the field; before, each of these was taken as given and failed only when the API server or
the kubelet was handed the rendered workload (or, for a policyRef, read `policies/<name>.yaml` from
wherever the name pointed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import re2
import yaml

from infertune.api import formats
from infertune.api.formats import anchored
from infertune.api.policy import parse_policy
from infertune.api.spec import parse_spec
from infertune.errors import SpecError
from tests.unit.test_api_physical_bounds import EXAMPLE, POLICY, _load, _refused, _with
from tests.unit.test_cli_inputs import run
from tests.unit.test_crds_schema import admission_errors

DIGEST = "sha256:" + "0123456789abcdef" * 4
CONFIG_MAP_MODEL = {"weights": "org/model", "configMapRef": {"name": "model-config", "key": "config.json"}}
PROM = "spec.metrics.prometheus"

# (dotted path into the example resource, value, the field as the message names it, a word the message says)
RESOURCE_CASES = [
    ("spec.engine.image", "vllm/vllm-openai:v0.11.0\x00--privileged", "spec.engine.image", "NUL character"),
    ("spec.engine.image", "vllm/vllm-openai:v0.11.0\n--privileged", "spec.engine.image", "control character"),
    ("spec.engine.image", "vllm/vllm openai:v0.11.0", "spec.engine.image", "image reference"),
    ("spec.engine.image", "vllm/VLLM-openai:v0.11.0", "spec.engine.image", "image reference"),
    ("spec.engine.image", "vllm/vllm-openai:", "spec.engine.image", "image reference"),
    ("spec.engine.image", "vllm/vllm-openai@sha256:abc", "spec.engine.image", "image reference"),
    ("spec.engine.image", "r.io/" + "a" * 251 + ":v1", "spec.engine.image", "255"),
    ("spec.model.weights", "moonshotai/Kimi-K2\x00-Instruct", "spec.model.weights", "NUL character"),
    ("spec.model.profile", "kimi-k2.6\x00", "spec.model.profile", "NUL character"),
    ("spec.model.profile", "kimi-k2.6\x1b[2J", "spec.model.profile", "control character"),
    ("spec.hardware.gpu", "b200\x00", "spec.hardware.gpu", "NUL character"),
    ("spec.model", {**CONFIG_MAP_MODEL, "configMapRef": {"name": "model\x00config"}},
     "spec.model.configMapRef.name", "NUL character"),
    ("spec.model", {**CONFIG_MAP_MODEL, "configMapRef": {"name": "Model_Config"}},
     "spec.model.configMapRef.name", "DNS subdomain"),
    ("spec.model", {**CONFIG_MAP_MODEL, "configMapRef": {"name": "m" * 254}},
     "spec.model.configMapRef.name", "253"),
    ("spec.model", {**CONFIG_MAP_MODEL, "configMapRef": {"name": "model-config", "key": "config\x00.json"}},
     "spec.model.configMapRef.key", "NUL character"),
    ("spec.model", {**CONFIG_MAP_MODEL, "configMapRef": {"name": "model-config", "key": "../config.json"}},
     "spec.model.configMapRef.key", "key"),
    ("spec.policyRef.name", "coding-agent\x00", "spec.policyRef.name", "NUL character"),
    ("spec.policyRef.name", "../../etc/passwd", "spec.policyRef.name", "DNS subdomain"),
    # A final newline: Python's re.search lets `$` match before it, RE2 (the API server's) does not.
    ("spec.policyRef.name", "coding-agent\n", "spec.policyRef.name", "control character"),
    ("spec.model", {**CONFIG_MAP_MODEL, "configMapRef": {"name": "model-config\n"}},
     "spec.model.configMapRef.name", "control character"),
    ("spec.hardware.nodeSelector", {"nvidia.com/gpu.product": "NVIDIA-B200\n"}, "spec.hardware.nodeSelector",
     "control character"),
    ("spec.hardware.nodeSelector", {"nvidia.com/gpu.product": "NVIDIA\x00B200"}, "spec.hardware.nodeSelector",
     "NUL character"),
    ("spec.hardware.nodeSelector", {"nvidia.com/gpu\x00.product": "NVIDIA-B200"}, "spec.hardware.nodeSelector",
     "NUL character"),
    ("spec.hardware.nodeSelector", {"nvidia.com/gpu.product": "NVIDIA B200"}, "spec.hardware.nodeSelector",
     "label value"),
    ("spec.hardware.nodeSelector", {"nvidia.com/gpu.product": "x" * 64}, "spec.hardware.nodeSelector",
     "label value"),
    ("spec.hardware.nodeSelector", {"a/b/c": "x"}, "spec.hardware.nodeSelector", "label key"),
    ("spec.hardware.nodeSelector", {"p" * 254 + "/gpu": "x"}, "spec.hardware.nodeSelector", "label key"),
    ("spec.hardware.tolerations.0.key", "nvidia.com/gpu\x00", "spec.hardware.tolerations[0].key", "NUL character"),
    ("spec.hardware.tolerations.0.key", "nvidia.com/gpu\nx", "spec.hardware.tolerations[0].key", "control character"),
    ("spec.hardware.tolerations.0", {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present\x00"},
     "spec.hardware.tolerations[0].value", "NUL character"),
    ("spec.hardware.tolerations.0", {"key": "nvidia.com/gpu", "operator": "Equal", "value": "a b"},
     "spec.hardware.tolerations[0].value", "label value"),
    ("spec.engine.env", [{"name": "HF\nHOME", "value": "/models"}], "spec.engine.env[0].name", "control character"),
    ("spec.engine.env", [{"name": "HF=HOME", "value": "/models"}], "spec.engine.env[0].name", "'='"),
    ("spec.engine.resources", {"requests": {"cpu": "16\x00"}}, "spec.engine.resources.requests", "NUL character"),
    ("spec.engine.resources", {"limits": {"memory\x00": "256Gi"}}, "spec.engine.resources.limits", "NUL character"),
    ("spec.engine.resources", {"requests": {"cpu": "lots"}}, "spec.engine.resources.requests", "quantity"),
    ("spec.engine.resources", {"requests": {"cpu": "-16"}}, "spec.engine.resources.requests", "quantity"),
    ("spec.engine.resources", {"limits": {"my gpu": "1"}}, "spec.engine.resources.limits", "resource name"),
    (f"{PROM}.url", "http://prometheus\x00.monitoring:9090", f"{PROM}.url", "NUL character"),
    (f"{PROM}.url", "http://prometheus\x7f.monitoring:9090", f"{PROM}.url", "control character"),
    (f"{PROM}.url", "https://prometheus.monitoring/a\x01b", f"{PROM}.url", "control character"),
    # Unicode's spaces, which Python's `\\s` matches and RE2's does not; and any other non-ASCII character.
    (f"{PROM}.url", "http://prometheus\xa0.monitoring:9090", f"{PROM}.url", "Prometheus URL"),
    (f"{PROM}.url", "https://prometheus.monitoring/api\u2028", f"{PROM}.url", "Prometheus URL"),
    (f"{PROM}.url", "https://prometheus.example.com/métriques", f"{PROM}.url", "Prometheus URL"),
    (f"{PROM}.bearerTokenSecretRef", {"name": "prom\x00token", "key": "token"},
     f"{PROM}.bearerTokenSecretRef.name", "NUL character"),
    (f"{PROM}.caSecretRef", {"name": "prom-ca", "key": "ca\x00.crt"}, f"{PROM}.caSecretRef.key", "NUL character"),
    (f"{PROM}.caConfigMapRef", {"name": "Prom CA", "key": "ca.crt"}, f"{PROM}.caConfigMapRef.name", "DNS subdomain"),
]
_ids = [f"{c[2].removeprefix('spec.')}-{i}" for i, c in enumerate(RESOURCE_CASES)]

POLICY_CASES = [
    ("spec.description", "coding agents\x00", "ServingPolicy spec.description", "NUL character"),
]


def _resource(path: str, value: Any) -> dict[str, Any]:
    doc = _with(_load(EXAMPLE), path, value)
    if path.startswith(f"{PROM}.") and not path.endswith(".url"):
        doc["spec"]["metrics"]["prometheus"]["url"] = "https://prometheus-operated.monitoring:9090"
    return doc


# --- the API models (what the operator reads) ------------------------------------------------------------
@pytest.mark.parametrize(("path", "value", "field", "says"), RESOURCE_CASES, ids=_ids)
def test_the_spec_model_refuses_the_string_naming_its_field(path: str, value: Any, field: str, says: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(_resource(path, value)["spec"])
    message = str(info.value)
    assert message.startswith(f"{field}: ") and says in message, message
    assert message.isprintable(), message  # one line: no newline, no NUL, no escape sequence of the value's


@pytest.mark.parametrize(("path", "value", "field", "says"), POLICY_CASES)
def test_the_policy_model_refuses_a_nul_in_its_description(path: str, value: Any, field: str, says: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_policy(_with(_load(POLICY), path, value)["spec"])
    message = str(info.value)
    assert message.startswith(f"{field}: ") and says in message and message.isprintable(), message


# --- the CRDs (what the API server checks) -------------------------------------------------------------
def _crd_path(field: str) -> str:
    """The field as the API server's error names it: dotted, without list indices."""
    return field.removeprefix("ServingPolicy ").replace("[0]", "")


@pytest.mark.parametrize(("path", "value", "field", "says"), RESOURCE_CASES, ids=_ids)
def test_the_api_server_refuses_the_string_naming_its_field(path: str, value: Any, field: str, says: str) -> None:
    errors = admission_errors(_resource(path, value))
    assert errors, f"{field}: {value!r} admitted"
    assert any(_crd_path(field) in e.replace("[0]", "").replace(".0.", ".").lstrip(".") for e in errors), errors


@pytest.mark.parametrize(("path", "value", "field", "says"), POLICY_CASES)
def test_the_api_server_refuses_a_nul_in_a_policy(path: str, value: Any, field: str, says: str) -> None:
    errors = admission_errors(_with(_load(POLICY), path, value))
    assert any(_crd_path(field) in e for e in errors), errors


# --- the CLI (what `infertune plan -f` says) ----------------------------------------------------------
@pytest.mark.parametrize(("path", "value", "field", "says"), RESOURCE_CASES, ids=_ids)
def test_plan_refuses_the_string_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, path: str,
                                             value: Any, field: str, says: str) -> None:
    resource = tmp_path / "resource.yaml"
    resource.write_text(yaml.safe_dump(_resource(path, value)))
    code, out, err = run(capsys, "plan", "-f", str(resource), "--policy", str(POLICY))
    assert _refused(code, out, err, f"{field}: ", says), (code, err)
    assert "\x00" not in err, err


@pytest.mark.parametrize(("path", "value", "field", "says"), POLICY_CASES)
def test_plan_refuses_a_policy_string_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, path: str,
                                                  value: Any, field: str, says: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(_with(_load(POLICY), path, value)))
    code, out, err = run(capsys, "plan", "-f", str(EXAMPLE), "--policy", str(policy))
    assert _refused(code, out, err, f"{field}: ", says), (code, err)


# --- what Kubernetes takes is still taken -------------------------------------------------------------
@pytest.mark.parametrize(("path", "value"), [
    ("spec.engine.image", "lmsysorg/sglang:v0.5.19-cu129"),
    ("spec.engine.image", "nvcr.io/nvidia/tritonserver:24.01-py3"),
    ("spec.engine.image", "registry.example.com:5000/team/vllm__fork/vllm-openai:v0.11.0_rc1"),
    ("spec.engine.image", f"ghcr.io/infertune/vllm@{DIGEST}"),
    ("spec.engine.image", f"localhost:5000/vllm:v0.11.0@{DIGEST}"),
    ("spec.engine.image", "[::1]:5000/vllm"),
    ("spec.engine.image", "vllm"),
    ("spec.engine.image", "r.io/" + "a" * 250 + ":" + "t" * 128),
    ("spec.model.weights", "/models/Kimi K2 (int4)/"),
    ("spec.model.weights", "x; touch PWNED #"),
    ("spec.model", {**CONFIG_MAP_MODEL, "configMapRef": {"name": "m." + "m" * 251, "key": ".config_json-2"}}),
    ("spec.policyRef.name", "coding-agent.v2"),
    ("spec.hardware.nodeSelector", {"p" * 253 + "/" + "n" * 63: "v" * 63, "gpu": "", "Zone_1.a": "A-b_c.9"}),
    ("spec.hardware.tolerations", [{"operator": "Exists"}, {"key": "", "operator": "Exists"},
                                   {"key": "example.com/dedicated", "operator": "Equal", "value": "inference"}]),
    ("spec.engine.env", [{"name": "HF_HOME", "value": "/models"}, {"name": "my.var-1", "value": "a\tb\nc"}]),
    ("spec.engine.resources", {"requests": {"cpu": "16", "memory": "256Gi", "ephemeral-storage": "1.5e3"},
                               "limits": {"example.com/rdma": "1", "hugepages-2Mi": "1Gi", "cpu": "500m"}}),
    (f"{PROM}.url", "https://prometheus.example.com:9443/prom/api"),
    (f"{PROM}.url", "https://prometheus.example.com/m%C3%A9triques"),
    (f"{PROM}.caConfigMapRef", {"name": "kube-root-ca.crt", "key": "ca.crt"}),
], ids=lambda v: str(v)[:30])
def test_what_kubernetes_takes_is_taken_by_the_model_and_the_api_server(path: str, value: Any) -> None:
    doc = _resource(path, value)
    parse_spec(doc["spec"])
    assert admission_errors(doc) == []


def test_a_policy_description_may_run_over_several_lines() -> None:
    doc = _with(_load(POLICY), "spec.description", "coding agents:\n\t>= 25 tok/s per stream\r\n")
    parse_policy(doc["spec"])
    assert admission_errors(doc) == []


# --- one definition, two engines ------------------------------------------------------------------------
# A string of each format, and what is put before, inside and after it: RE2 (the API server's, searching the
# CRD's anchored pattern) and Python's re.fullmatch (the models') must take and refuse the same.
FORMAT_EXAMPLES = {
    "OBJECT_NAME": "model-config", "DATA_KEY": "config.json", "LABEL_KEY": "nvidia.com/gpu.product",
    "LABEL_VALUE": "NVIDIA-B200", "TAINT_KEY": "nvidia.com/gpu", "RESOURCE_NAME": "example.com/rdma",
    "QUANTITY": "256Gi", "IMAGE": f"ghcr.io/infertune/vllm:v0.11.0@{DIGEST}", "ENV_NAME": "HF_HOME",
    "ARGUMENT": "--max-model-len=65536", "ENV_VALUE": "/models", "DESCRIPTION": "coding agents",
    "CATALOG_NAME": "kimi-k2.6", "PROMETHEUS_URL": "https://prometheus.monitoring:9090/prom",
}
ODD = ["", "\n", "\r\n", " ", "\t", "\x00", "\x7f", "\x85", "\xa0", "\u2028", "\u3000", "é", "/", "$"]


def test_every_format_has_an_example() -> None:
    assert sorted(FORMAT_EXAMPLES) == sorted(n for n, v in vars(formats).items() if isinstance(v, formats.Format))


@pytest.mark.parametrize("name", sorted(FORMAT_EXAMPLES))
def test_re2_and_python_read_each_format_alike(name: str) -> None:
    fmt, example = getattr(formats, name), FORMAT_EXAMPLES[name]
    assert fmt.refusal(example) is None, fmt.refusal(example)
    probes = [p for odd in ODD for p in (example + odd, odd + example, example[:3] + odd + example[3:])]
    for pattern in (fmt.pattern, *fmt.limits):
        differ = [t for t in probes if bool(re2.search(anchored(pattern), t)) != bool(re.fullmatch(pattern, t))]
        assert differ == [], (name, pattern)
