"""spec.hardware.tolerations as Kubernetes' Pod validation takes them (ValidateTolerations, k8s.io/kubernetes
pkg/apis/core/validation/validation.go): an empty key tolerates every taint, so it needs operator Exists;
Exists matches any value, so it takes none; tolerationSeconds is how long a pod stays once a NoExecute taint
appears, so it needs effect NoExecute; the operator is Equal, Exists or empty (Equal), the effect NoSchedule,
PreferNoSchedule, NoExecute or empty (every effect). The model, the CRD and `infertune plan -f` refuse what
the API server would refuse of the rendered Deployment, in one line naming the toleration; before, each was
taken and the Deployment refused on every apply. Every combination Kubernetes takes is still taken."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from infertune.api.schema import TOLERATIONS_MAX
from infertune.api.spec import parse_spec
from infertune.errors import SpecError
from tests.unit.test_api_physical_bounds import EXAMPLE, POLICY, _load, _node, _refused, _with
from tests.unit.test_cli_inputs import run
from tests.unit.test_crds_schema import admission_errors, schema_errors

GPU = "nvidia.com/gpu"
KEYS = (None, "", GPU)
OPERATORS = (None, "", "Equal", "Exists")
VALUES = (None, "", "present")
EFFECTS = (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute")
SECONDS = (None, 0, 3600)


def kubernetes_refusal(toleration: dict[str, Any]) -> str | None:
    """What ValidateTolerations says of one toleration whose key and value are well formed (an unset string
    is empty to it), or None where it takes it."""
    key, operator, value, effect = (toleration.get(f) or "" for f in ("key", "operator", "value", "effect"))
    if not key and operator != "Exists":
        return "operator must be Exists when `key` is empty"
    if "tolerationSeconds" in toleration and effect != "NoExecute":
        return "effect must be 'NoExecute' when `tolerationSeconds` is set"
    if operator not in ("", "Equal", "Exists"):
        return "operator: Unsupported value"
    if operator == "Exists" and value:
        return "value must be empty when `operator` is 'Exists'"
    if effect and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        return "effect: Unsupported value"
    return None


def _combinations() -> list[dict[str, Any]]:
    """Every toleration of these keys, operators, values, effects and seconds, unset ones left out."""
    fields = ("key", "operator", "value", "effect", "tolerationSeconds")
    return [{f: v for f, v in zip(fields, values, strict=True) if v is not None}
            for values in itertools.product(KEYS, OPERATORS, VALUES, EFFECTS, SECONDS)]


TAKEN = [t for t in _combinations() if kubernetes_refusal(t) is None]
REFUSED = [t for t in _combinations() if kubernetes_refusal(t) is not None]


_EXAMPLE = _load(EXAMPLE)
# The CRD's schema of one toleration: the sweeps below check every combination against it alone (the whole
# resource's CEL rules take ~0.1 s a document under cel-python); CASES go through the whole resource.
_ITEM = _node("InferenceDeployment", "spec.hardware.tolerations.[]")


def _resource(toleration: dict[str, Any]) -> dict[str, Any]:
    """The example with `toleration` second, after its own (so the message must name index 1)."""
    return _with(_EXAMPLE, "spec.hardware.tolerations", [*_EXAMPLE["spec"]["hardware"]["tolerations"], toleration])


def _model_refusal(doc: dict[str, Any]) -> str | None:
    try:
        parse_spec(doc["spec"])
    except SpecError as exc:
        return str(exc)
    return None


# (the toleration, what the message says)
CASES = [
    ({"operator": "Equal", "value": "present", "effect": "NoSchedule"}, "operator must be Exists when key is empty"),
    ({"effect": "NoSchedule"}, "operator must be Exists when key is empty"),
    ({"key": "", "operator": "", "value": ""}, "operator must be Exists when key is empty"),
    ({"key": GPU, "operator": "Exists", "value": "present"}, "value must be empty when operator is Exists"),
    ({"key": GPU, "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60},
     "tolerationSeconds needs effect NoExecute"),
    ({"key": GPU, "operator": "Exists", "tolerationSeconds": 0}, "tolerationSeconds needs effect NoExecute"),
    ({"key": GPU, "value": "present", "effect": "", "tolerationSeconds": 60},
     "tolerationSeconds needs effect NoExecute"),
    ({"key": GPU, "operator": "In", "value": "present"}, "operator"),
    ({"key": GPU, "operator": "exists"}, "operator"),
    ({"key": GPU, "operator": "Exists", "effect": "NoScheduleNoAdmit"}, "effect"),
]
_ids = [f"{i}-{c[1].split(' ')[0]}" for i, c in enumerate(CASES)]


def test_the_reference_sorts_both_ways() -> None:
    # Of the 540 combinations Kubernetes takes 105: with the key 3 operators x 3 values and with Exists 2
    # values, each with 5 effects and no seconds or NoExecute and 2 seconds; without a key only Exists. A test
    # that took or refused everything would prove nothing.
    assert len(TAKEN) == (3 * 3 + 2) * 7 + 2 * 2 * 7 == 105 and len(REFUSED) == 540 - 105


# --- the API model (what the operator reads) -------------------------------------------------------------
def test_the_model_takes_every_toleration_kubernetes_takes() -> None:
    refused = {str(t): why for t in TAKEN if (why := _model_refusal(_resource(t))) is not None}
    assert refused == {}


def test_the_model_refuses_every_toleration_kubernetes_refuses() -> None:
    taken = [t for t in REFUSED if _model_refusal(_resource(t)) is None]
    assert taken == []


@pytest.mark.parametrize(("toleration", "says"), CASES, ids=_ids)
def test_the_model_names_the_toleration_in_one_line(toleration: dict[str, Any], says: str) -> None:
    message = _model_refusal(_resource(toleration))
    assert message is not None, toleration
    assert message.startswith("spec.hardware.tolerations[1]") and says in message, message
    assert message.isprintable(), message


# --- the CRD (what the API server checks) -----------------------------------------------------------------
def test_the_api_server_takes_every_toleration_kubernetes_takes() -> None:
    refused = {str(t): errors for t in TAKEN if (errors := schema_errors(_ITEM, t))}
    assert refused == {}
    for start in range(0, len(TAKEN), TOLERATIONS_MAX):  # and in a resource, as many as one may hold
        doc = _with(_EXAMPLE, "spec.hardware.tolerations", TAKEN[start:start + TOLERATIONS_MAX])
        assert admission_errors(doc) == []


def test_the_api_server_refuses_every_toleration_kubernetes_refuses() -> None:
    taken = [t for t in REFUSED if not schema_errors(_ITEM, t)]
    assert taken == []


@pytest.mark.parametrize(("toleration", "says"), CASES, ids=_ids)
def test_the_api_server_names_the_toleration(toleration: dict[str, Any], says: str) -> None:
    errors = admission_errors(_resource(toleration))
    # jsonschema names a list item `.1.`, the CEL rules `[1]`.
    named = [e.replace(".1.", "[1].").lstrip(".") for e in errors]
    assert any(e.startswith("spec.hardware.tolerations[1]") for e in named), errors
    if " " in says:  # a CEL rule's message (an operator or effect outside the enum is the schema's)
        assert any(says in e for e in errors), errors


# --- the CLI (what `infertune plan -f` says) ----------------------------------------------------------------
@pytest.mark.parametrize(("toleration", "says"), CASES, ids=_ids)
def test_plan_refuses_the_toleration_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 toleration: dict[str, Any], says: str) -> None:
    resource = tmp_path / "resource.yaml"
    resource.write_text(yaml.safe_dump(_resource(toleration)))
    code, out, err = run(capsys, "plan", "-f", str(resource), "--policy", str(POLICY))
    assert _refused(code, out, err, "spec.hardware.tolerations[1]", says), (code, err)


# --- how many: enough for any pod, few enough that the CEL rules on each stay within the API server's cost ----
def test_a_pod_may_carry_as_many_tolerations_as_the_bound() -> None:
    many = [{"key": f"example.com/taint-{i}", "operator": "Exists"} for i in range(TOLERATIONS_MAX)]
    doc = _with(_load(EXAMPLE), "spec.hardware.tolerations", many)
    assert _model_refusal(doc) is None and admission_errors(doc) == []
    doc = _with(doc, "spec.hardware.tolerations", [*many, {"operator": "Exists"}])
    message = _model_refusal(doc)
    assert message is not None and message.startswith("spec.hardware.tolerations: "), message
    assert admission_errors(doc), "admitted"
