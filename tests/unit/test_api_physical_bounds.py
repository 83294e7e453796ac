"""Every number a resource or a policy states has a physical range, in the API models and in the CRDs
generated from them: a value outside it is refused in one line that names the field, the value and the
range, by `render`, `plan` and `explain` as by the operator and the API server, never taken silently nor
ended in an internal error (a pool of 2**63 GPUs once overflowed numpy in the planner). A NUL character,
which no argument or environment variable can carry, is refused the same way."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from infertune.api.policy import apply_policy, parse_policy
from infertune.api.schema import (
    CONTEXT_TOKENS_MAX,
    DECIMAL_MAX_LENGTH,
    POOL_GPUS_MAX,
    PRICE_PER_GPU_HOUR_MAX,
    REPLICAS_MAX,
    REQUESTS_PER_SECOND_MAX,
    STARTUP_SECONDS_MAX,
    STREAM_TOKENS_PER_SECOND_MAX,
    TOLERATION_SECONDS_MAX,
)
from infertune.api.spec import parse_spec
from infertune.errors import SpecError
from tests.unit.test_cli_inputs import run
from tests.unit.test_crds_schema import CRDS, admission_errors

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kimi-k2.6-b200.yaml"
POLICY = ROOT / "policies" / "coding-agent.yaml"
HUGE_DURATION = "99999999999999999999h"


def _load(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


def _with(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `doc` with the field at dotted `path` (a number indexes a list) set to `value`."""
    out = copy.deepcopy(doc)
    node: Any = out
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    last = parts[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return out


def _refused(code: int, out: str, err: str, *says: str) -> bool:
    """Exit 2, nothing on stdout, one line on stderr with no traceback, saying each of `says`."""
    return (code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
            and "internal error" not in err and all(s in err for s in says))


def _refused_on_admission(doc: dict[str, Any]) -> bool:
    """The API server refuses the object: a schema or CEL error, or a CEL rule that cannot be evaluated
    (duration() of more hours than Go's time.Duration holds), which the API server reports as a refusal."""
    try:
        return admission_errors(doc) != []
    except celpy.CELEvalError:
        return True


# (document, dotted path, value, the field as the message names it, the allowed range it states)
RESOURCE_CASES = [
    ("spec.hardware.poolGpus", 2**63, "spec.hardware.poolGpus", f"1..{POOL_GPUS_MAX}"),
    ("spec.hardware.poolGpus", 10**12, "spec.hardware.poolGpus", f"1..{POOL_GPUS_MAX}"),
    ("spec.hardware.poolGpus", 1e23, "spec.hardware.poolGpus", f"1..{POOL_GPUS_MAX}"),
    ("spec.engine.startupSeconds", 10**23, "spec.engine.startupSeconds", f"1..{STARTUP_SECONDS_MAX}"),
    ("spec.hardware.tolerations.0.tolerationSeconds", -1, "spec.hardware.tolerations[0].tolerationSeconds",
     f"0..{TOLERATION_SECONDS_MAX}"),
    ("spec.hardware.tolerations.0.tolerationSeconds", 10**23, "spec.hardware.tolerations[0].tolerationSeconds",
     f"0..{TOLERATION_SECONDS_MAX}"),
    ("spec.workload.freshTokens", 10**23, "spec.workload.freshTokens", f"0..{CONTEXT_TOKENS_MAX}"),
    ("spec.workload.cachedTokens", 10**23, "spec.workload.cachedTokens", f"0..{CONTEXT_TOKENS_MAX}"),
    ("spec.workload.outputTokens", 10**23, "spec.workload.outputTokens", f"1..{CONTEXT_TOKENS_MAX}"),
    ("spec.workload", {"freshTokens": 4_000_000, "cachedTokens": 6_000_000, "outputTokens": 1},
     "spec.workload", f"0..{CONTEXT_TOKENS_MAX}"),
    ("spec.slo.minStreamTokensPerSecond", 10**23, "spec.slo.minStreamTokensPerSecond",
     f"0..{STREAM_TOKENS_PER_SECOND_MAX}"),
    ("spec.slo.ttft.limit", HUGE_DURATION, "spec.slo.ttft.limit", "1ms..24h"),
    ("spec.slo.ttft.limit", "0ms", "spec.slo.ttft.limit", "1ms..24h"),
    ("spec.tuning.maxReplicaStep", 10**23, "spec.tuning.maxReplicaStep", f"1..{REPLICAS_MAX}"),
    ("spec.tuning.cooldowns.scaleUp", HUGE_DURATION, "spec.tuning.cooldowns.scaleUp", "0s..720h"),
    ("spec.tuning.cooldowns.scaleDown", "721h", "spec.tuning.cooldowns.scaleDown", "0s..720h"),
    ("spec.tuning.cooldowns.relayout", HUGE_DURATION, "spec.tuning.cooldowns.relayout", "0s..720h"),
    ("spec.tuning.cooldowns.scaleDownStabilization", "25h", "spec.tuning.cooldowns.scaleDownStabilization",
     "0s..24h"),
    ("spec.tuning.interval", HUGE_DURATION, "spec.tuning.interval", "0s..24h"),
    ("spec.tuning.staleAfter", "9999999h", "spec.tuning.staleAfter", "0s..24h"),
    # A rate past int64 once sized one replica for it; a price past a float's range once costed at $inf.
    ("spec.workload.expectedRequestsPerSecond", "1000000000000000000", "spec.workload.expectedRequestsPerSecond",
     f"0..{REQUESTS_PER_SECOND_MAX:.0f}"),
    ("spec.workload.expectedRequestsPerSecond", "1000000.5", "spec.workload.expectedRequestsPerSecond",
     f"0..{REQUESTS_PER_SECOND_MAX:.0f}"),
    ("spec.hardware.pricePerGpuHour", "10000.01", "spec.hardware.pricePerGpuHour",
     f"0..{PRICE_PER_GPU_HOUR_MAX:.0f}"),
]
POLICY_CASES = [
    ("spec.slo.minStreamTokensPerSecond", 10**23, "ServingPolicy spec.slo.minStreamTokensPerSecond",
     f"0..{STREAM_TOKENS_PER_SECOND_MAX}"),
    ("spec.slo.ttft.limit", HUGE_DURATION, "ServingPolicy spec.slo.ttft.limit", "1ms..24h"),
    ("spec.workload.freshTokens", 10**23, "ServingPolicy spec.workload.freshTokens", f"0..{CONTEXT_TOKENS_MAX}"),
    ("spec.tuning.maxReplicaStep", 10**23, "ServingPolicy spec.tuning.maxReplicaStep", f"1..{REPLICAS_MAX}"),
    ("spec.tuning.cooldowns.scaleUp", HUGE_DURATION, "ServingPolicy spec.tuning.cooldowns.scaleUp", "0s..720h"),
    ("spec.tuning.cooldowns.scaleDown", HUGE_DURATION, "ServingPolicy spec.tuning.cooldowns.scaleDown",
     "0s..720h"),
    ("spec.tuning.cooldowns.relayout", HUGE_DURATION, "ServingPolicy spec.tuning.cooldowns.relayout", "0s..720h"),
    ("spec.tuning.cooldowns.scaleDownStabilization", HUGE_DURATION,
     "ServingPolicy spec.tuning.cooldowns.scaleDownStabilization", "0s..24h"),
    ("spec.tuning.staleAfter", HUGE_DURATION, "ServingPolicy spec.tuning.staleAfter", "0s..24h"),
    ("spec.workload.expectedRequestsPerSecond", "100000000000000000000",
     "ServingPolicy spec.workload.expectedRequestsPerSecond", f"0..{REQUESTS_PER_SECOND_MAX:.0f}"),
]
_ids = [f"{c[0].rsplit('.', 1)[-1]}={str(c[1])[:12]}" for c in RESOURCE_CASES]
_policy_ids = [f"{c[0].rsplit('.', 1)[-1]}={str(c[1])[:12]}" for c in POLICY_CASES]


def _shown(value: Any) -> str:
    """How the message shows the value: a number or a duration as written."""
    return str(value) if not isinstance(value, dict) else ""


# --- the CLI --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["render", "plan", "explain"])
@pytest.mark.parametrize(("path", "value", "field", "bounds"), RESOURCE_CASES, ids=_ids)
def test_the_cli_refuses_a_resource_figure_outside_its_range(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                             command: str, path: str, value: Any, field: str,
                                                             bounds: str) -> None:
    resource = tmp_path / "resource.yaml"
    resource.write_text(yaml.safe_dump(_with(_load(EXAMPLE), path, value)))
    code, out, err = run(capsys, command, "-f", str(resource), "--policy", str(POLICY))
    assert _refused(code, out, err, f"{field}: ", bounds), (code, err)
    if isinstance(value, int | str):
        assert _shown(value) in err, err


@pytest.mark.parametrize("command", ["render", "plan", "explain"])
@pytest.mark.parametrize(("path", "value", "field", "bounds"), POLICY_CASES, ids=_policy_ids)
def test_the_cli_refuses_a_policy_figure_outside_its_range(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                           command: str, path: str, value: Any, field: str,
                                                           bounds: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(_with(_load(POLICY), path, value)))
    code, out, err = run(capsys, command, "-f", str(EXAMPLE), "--policy", str(policy))
    assert _refused(code, out, err, f"{field}: ", _shown(value), bounds), (code, err)


@pytest.mark.parametrize("command", ["render", "plan", "explain"])
def test_the_cli_refuses_a_decimal_longer_than_any_figure_needs(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                command: str) -> None:
    # 310 digits: as a float it is inf, and every cost read from it was "$inf/M tokens".
    resource = tmp_path / "resource.yaml"
    resource.write_text(yaml.safe_dump(_with(_load(EXAMPLE), "spec.hardware.pricePerGpuHour", "1" + "0" * 309)))
    code, out, err = run(capsys, command, "-f", str(resource), "--policy", str(POLICY))
    assert _refused(code, out, err, "spec.hardware.pricePerGpuHour: ", f"at most {DECIMAL_MAX_LENGTH} characters")


@pytest.mark.parametrize(("path", "value", "field"), [
    ("spec.engine.extraArgs", ["--trust-remote-code", "--served-model-name=a\x00b"], "spec.engine.extraArgs[1]"),
    ("spec.engine.env", [{"name": "HF_HOME", "value": "/models\x00/x"}], "spec.engine.env[0].value"),
    ("spec.engine.env", [{"name": "HF\x00HOME", "value": "/models"}], "spec.engine.env[0].name"),
], ids=["extraArgs", "env-value", "env-name"])
def test_the_cli_refuses_a_nul_character_the_engine_cannot_be_given(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path, path: str, value: Any,
                                                                    field: str) -> None:
    resource = tmp_path / "resource.yaml"
    resource.write_text(yaml.safe_dump(_with(_load(EXAMPLE), path, value)))
    for command in ("render", "plan", "explain"):
        code, out, err = run(capsys, command, "-f", str(resource), "--policy", str(POLICY))
        assert _refused(code, out, err, f"{field}: ", "NUL character"), (command, code, err)


# --- the API models (what the operator reads) ------------------------------------------------------------
@pytest.mark.parametrize(("path", "value", "field", "bounds"), RESOURCE_CASES, ids=_ids)
def test_the_spec_model_refuses_a_figure_outside_its_range(path: str, value: Any, field: str, bounds: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(_with(_load(EXAMPLE), path, value)["spec"])
    message = str(info.value)
    assert message.startswith(f"{field}: ") and bounds in message and "\n" not in message, message


@pytest.mark.parametrize(("path", "value", "field", "bounds"), POLICY_CASES, ids=_policy_ids)
def test_the_policy_model_refuses_a_figure_outside_its_range(path: str, value: Any, field: str,
                                                             bounds: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_policy(_with(_load(POLICY), path, value)["spec"])
    message = str(info.value)
    assert message.startswith(f"{field}: ") and _shown(value) in message and bounds in message, message


def test_a_context_longer_than_any_model_holds_is_refused_when_the_policy_and_resource_combine() -> None:
    """Each part within range, the sum past it: caught where the policy's cached tokens meet the
    resource's fresh ones."""
    policy = parse_policy(_with(_load(POLICY), "spec.workload.cachedTokens", 8_000_000)["spec"])
    spec = parse_spec(_with(_load(EXAMPLE), "spec.workload", {"freshTokens": 3_000_000})["spec"])
    with pytest.raises(SpecError, match=rf"spec.workload: .*outside the allowed range 0..{CONTEXT_TOKENS_MAX}"):
        apply_policy(spec, policy)


@pytest.mark.parametrize(("path", "value"), [
    ("spec.hardware.poolGpus", POOL_GPUS_MAX),
    ("spec.engine.startupSeconds", STARTUP_SECONDS_MAX),
    ("spec.hardware.tolerations.0", {"key": "nvidia.com/gpu", "effect": "NoExecute", "tolerationSeconds": 0}),
    ("spec.hardware.tolerations.0", {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute",
                                     "tolerationSeconds": TOLERATION_SECONDS_MAX}),
    ("spec.workload", {"freshTokens": 2_000_000, "cachedTokens": 7_999_000, "outputTokens": 1_000}),
    ("spec.slo", {"minStreamTokensPerSecond": STREAM_TOKENS_PER_SECOND_MAX, "ttft": {"limit": "24h"}}),
    ("spec.slo.ttft", {"limit": "1ms"}),
    ("spec.tuning.maxReplicaStep", REPLICAS_MAX),
    ("spec.tuning.cooldowns", {"scaleUp": "0s", "scaleDown": "720h", "relayout": "719h59m59s",
                               "scaleDownStabilization": "24h"}),
    ("spec.tuning.interval", "24h"),
    ("spec.tuning.staleAfter", "1.5h"),
    ("spec.workload.expectedRequestsPerSecond", "1000000"),
    ("spec.hardware.pricePerGpuHour", "10000"),
    ("spec.hardware.pricePerGpuHour", "0"),
    ("spec.engine.env", [{"name": "A", "value": "line one\nline two\t(tabs and newlines are fine)"}]),
], ids=lambda v: str(v)[:30])
def test_a_figure_at_the_edge_of_its_range_is_taken_by_the_model_and_the_api_server(path: str, value: Any) -> None:
    doc = _with(_load(EXAMPLE), path, value)
    parse_spec(doc["spec"])
    assert admission_errors(doc) == []


# --- the CRDs (what the API server checks) -------------------------------------------------------------
@pytest.mark.parametrize(("path", "value", "field", "bounds"), RESOURCE_CASES, ids=_ids)
def test_the_api_server_refuses_a_resource_figure_outside_its_range(path: str, value: Any, field: str,
                                                                    bounds: str) -> None:
    assert _refused_on_admission(_with(_load(EXAMPLE), path, value))


@pytest.mark.parametrize(("path", "value", "field", "bounds"), POLICY_CASES, ids=_policy_ids)
def test_the_api_server_refuses_a_policy_figure_outside_its_range(path: str, value: Any, field: str,
                                                                  bounds: str) -> None:
    assert _refused_on_admission(_with(_load(POLICY), path, value))


@pytest.mark.parametrize(("path", "value", "says"), [
    ("spec.engine.extraArgs", ["--served-model-name=a\x00b"], "extraArgs: no argument may hold a NUL character"),
    ("spec.engine.env", [{"name": "A", "value": "\x00"}], "env: no name or value may hold a NUL character"),
    ("spec.engine.env", [{"name": "A\x00"}], "env: no name or value may hold a NUL character"),
])
def test_the_api_server_refuses_a_nul_character(path: str, value: Any, says: str) -> None:
    errors = admission_errors(_with(_load(EXAMPLE), path, value))
    assert any(f"spec.engine{path.removeprefix('spec.engine')}: {says}" in e for e in errors), errors


def _node(kind: str, path: str) -> dict[str, Any]:
    for crd in CRDS.values():
        if crd["spec"]["names"]["kind"] == kind:
            node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            for part in path.split("."):
                node = node["items"] if part == "[]" else node["properties"][part]
            return dict(node)
    raise AssertionError(kind)


@pytest.mark.parametrize(("kind", "path", "least", "most"), [
    ("InferenceDeployment", "spec.hardware.poolGpus", 1, POOL_GPUS_MAX),
    ("InferenceDeployment", "spec.engine.startupSeconds", 1, STARTUP_SECONDS_MAX),
    ("InferenceDeployment", "spec.hardware.tolerations.[].tolerationSeconds", 0, TOLERATION_SECONDS_MAX),
    ("InferenceDeployment", "spec.workload.freshTokens", 0, CONTEXT_TOKENS_MAX),
    ("InferenceDeployment", "spec.workload.cachedTokens", 0, CONTEXT_TOKENS_MAX),
    ("InferenceDeployment", "spec.workload.outputTokens", 1, CONTEXT_TOKENS_MAX),
    ("InferenceDeployment", "spec.slo.minStreamTokensPerSecond", 0, STREAM_TOKENS_PER_SECOND_MAX),
    ("InferenceDeployment", "spec.tuning.maxReplicaStep", 1, REPLICAS_MAX),
    ("ServingPolicy", "spec.workload.freshTokens", 0, CONTEXT_TOKENS_MAX),
    ("ServingPolicy", "spec.slo.minStreamTokensPerSecond", 0, STREAM_TOKENS_PER_SECOND_MAX),
    ("ServingPolicy", "spec.tuning.maxReplicaStep", 1, REPLICAS_MAX),
])
def test_the_crds_carry_the_models_ranges(kind: str, path: str, least: int, most: int) -> None:
    node = _node(kind, path)
    assert (node.get("minimum"), node.get("maximum")) == (least, most)


# --- what ships still validates ---------------------------------------------------------------------------
SHIPPED = sorted((ROOT / "examples").glob("*.yaml")) + sorted((ROOT / "policies").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_the_shipped_examples_and_policies_stay_within_every_range(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc["kind"] == "ServingPolicy":
            parse_policy(doc["spec"])
        else:
            parse_spec(doc["spec"])
        assert admission_errors(doc) == []


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_examples_still_render(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                           path: Path) -> None:
    monkeypatch.chdir(ROOT)  # a policyRef is read from policies/<name>.yaml
    code, _, err = run(capsys, "render", "-f", str(path))
    assert code == 0, err


@pytest.mark.parametrize(("path", "value", "says"), [
    ("spec.tuning.hysteresisPercent", 150, "spec.tuning.hysteresisPercent: 150 is outside the allowed range 0..100"),
    ("spec.engine.port", 10**500, "spec.engine.port: 1000000000"),
])
def test_every_bounded_number_is_told_with_its_value_and_range_in_one_short_line(path: str, value: Any,
                                                                                 says: str) -> None:
    """The message comes from the field's own ge/le, a Percent inside Optional included; a value of 500
    digits is cut short, not printed whole."""
    with pytest.raises(SpecError) as info:
        parse_spec(_with(_load(EXAMPLE), path, value)["spec"])
    message = str(info.value)
    assert message.startswith(says) and "allowed range" in message and len(message) < 200, message
