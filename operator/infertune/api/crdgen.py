"""CustomResourceDefinitions generated from the pydantic models: structural OpenAPI v3 schemas with
the models' CEL rules, defaults, printer columns and the status and scale subresources.

Pure: catalog names (for the GPU enum) are passed in, because api/ sits below the model catalog.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from infertune.api.formats import FORMATS, TEXT, anchored
from infertune.api.names import NAME_RULE
from infertune.api.policy import POLICY_KIND, POLICY_PLURAL, ServingPolicySpec
from infertune.api.quantities import DECIMAL_PATTERN, DURATION_PATTERN
from infertune.api.spec import GROUP, KIND, PLURAL, VERSION, InferenceDeploymentSpec
from infertune.api.status import InferenceDeploymentStatus

Schema = dict[str, Any]
# The reference names a format's pattern instead of printing it.
_PATTERN_NAMES = {DURATION_PATTERN: "duration", DECIMAL_PATTERN: "decimal string", anchored(TEXT): "no NUL character",
                  **{anchored(f.pattern): f.name for f in FORMATS}}
# Keys pydantic emits that a structural CRD schema must not carry.
_DROP = {"title", "additionalProperties_false", "$defs"}


def _resolve(node: Any, defs: dict[str, Schema]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return _resolve({**target, **extra}, defs)
    if "anyOf" in node:
        # Optional[X] is `anyOf: [X, null]`; structural schemas express optional by omission.
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            return _resolve({**options[0], **rest}, defs)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROP or (key == "default" and value is None):
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "description" and isinstance(value, str):
            # A docstring's line breaks are not the reader's: `kubectl explain` wraps the text itself.
            out[key] = " ".join(value.split())
            continue
        out[key] = _resolve(value, defs)
    return out


def _object_defaults(schema: Schema) -> Schema:
    """Gives optional object fields whose members have defaults `default: {}`, so the API server
    fills nested defaults in even when the user omits the whole block."""
    props = schema.get("properties", {})
    required = set(schema.get("required", ()))
    for name, prop in props.items():
        _object_defaults(prop)
        if prop.get("type") == "array" and isinstance(prop.get("items"), dict):
            _object_defaults(prop["items"])
        if (prop.get("type") == "object" and name not in required and "default" not in prop
                and not prop.get("required")
                and any("default" in p for p in prop.get("properties", {}).values())):
            prop["default"] = {}
    return schema


def model_schema(model: type[BaseModel]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    return _object_defaults(_resolve(raw, defs))


def _columns() -> list[Schema]:
    return [
        {"name": "Mode", "type": "string", "jsonPath": ".spec.tuning.mode", "priority": 1},
        {"name": "TP", "type": "integer", "jsonPath": ".status.applied.tensorParallelSize"},
        {"name": "MaxSeqs", "type": "integer", "jsonPath": ".status.applied.maxNumSeqs"},
        {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
        {"name": "KV%", "type": "integer", "jsonPath": ".status.observed.kvUsagePercent"},
        {"name": "TPS/Stream", "type": "number", "jsonPath": ".status.observed.streamTokensPerSecond"},
        {"name": "TTFT", "type": "number", "jsonPath": ".status.observed.ttftSeconds",
         "description": "Observed TTFT in seconds at the SLO's percentile"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def _crd(kind: str, plural: str, short: str, scope: str, spec: Schema, status: Schema | None,
         columns: list[Schema], subresources: Schema, rules: Sequence[Schema] = ()) -> Schema:
    properties: Schema = {"spec": spec}
    if status is not None:
        properties["status"] = status
    root: Schema = {"type": "object", "required": ["spec"], "properties": properties}
    if rules:
        root["x-kubernetes-validations"] = list(rules)
    version: Schema = {
        "name": VERSION, "served": True, "storage": True,
        "schema": {"openAPIV3Schema": root},
        "additionalPrinterColumns": columns,
    }
    if subresources:
        version["subresources"] = subresources
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP, "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "shortNames": [short],
                      "listKind": f"{kind}List", "categories": ["infertune"]},
            "versions": [version],
        },
    }


def inference_deployment_crd(gpu_names: Sequence[str] = ()) -> Schema:
    spec = model_schema(InferenceDeploymentSpec)
    if gpu_names:
        spec["properties"]["hardware"]["properties"]["gpu"]["enum"] = sorted(gpu_names)
    status = model_schema(InferenceDeploymentStatus)
    subresources = {"status": {}, "scale": {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector"}}
    return _crd(KIND, PLURAL, "infd", "Namespaced", spec, status, _columns(), subresources, [NAME_RULE])


def serving_policy_crd() -> Schema:
    columns = [
        {"name": "TPS/Stream", "type": "integer", "jsonPath": ".spec.slo.minStreamTokensPerSecond"},
        {"name": "TTFT", "type": "string", "jsonPath": ".spec.slo.ttft.limit"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd(POLICY_KIND, POLICY_PLURAL, "svpol", "Cluster", model_schema(ServingPolicySpec), None,
                columns, {})


def all_crds(gpu_names: Sequence[str] = ()) -> dict[str, Schema]:
    """File name -> CRD document, as `infertune crds` writes them."""
    return {
        f"{GROUP}_{PLURAL}.yaml": inference_deployment_crd(gpu_names),
        f"{GROUP}_{POLICY_PLURAL}.yaml": serving_policy_crd(),
    }


def _pattern_name(pattern: str) -> str:
    return _PATTERN_NAMES.get(pattern, f"pattern `{pattern}`")


def _reference_rows(schema: Schema, path: str, required: bool, rows: list[str]) -> None:
    kind = schema.get("type", "")
    if kind == "array" and isinstance(schema.get("items"), dict):
        kind = f"array of {schema['items'].get('type', '')}"
    bounds = []
    if "enum" in schema:
        bounds.append("one of " + ", ".join(f"`{v}`" if v != "" else '`""`' for v in schema["enum"]))
    if "minimum" in schema or "maximum" in schema:
        bounds.append(f"{schema.get('minimum', '')}..{schema.get('maximum', '')}")
    if "pattern" in schema:
        bounds.append(_pattern_name(schema["pattern"]))
    if "maxLength" in schema:
        bounds.append(f"at most {schema['maxLength']} characters")
    if "maxProperties" in schema:
        bounds.append(f"at most {schema['maxProperties']} entries")
    values = schema.get("additionalProperties")
    if isinstance(values, dict) and "pattern" in values:
        bounds.append(f"values: {_pattern_name(values['pattern'])}")
    for entry in schema.get("x-kubernetes-validations", []):
        bounds.append(f"rule: {entry['message']}")
    default = f"`{schema['default']}`" if "default" in schema and schema["default"] != {} else ""
    text = " ".join(str(schema.get("description", "")).split()).replace("|", "\\|")
    if path:
        checks = "; ".join(bounds).replace("|", "\\|")
        rows.append(f"| `{path}` | {kind} | {'yes' if required else ''} | {default} | {checks} | {text} |")
    props = schema.get("properties", {})
    needed = set(schema.get("required", ()))
    for name, prop in props.items():
        _reference_rows(prop, f"{path}.{name}" if path else name, name in needed, rows)
    items = schema.get("items")
    if isinstance(items, dict) and items.get("properties"):
        for name, prop in items["properties"].items():
            _reference_rows(prop, f"{path}[].{name}", name in set(items.get("required", ())), rows)


def reference_markdown(crds: dict[str, Schema]) -> str:
    """A field table per kind, generated from the same schemas the CRDs carry."""
    out = ["# CRD reference", "", "Generated by `infertune crds --reference docs/crd-reference.md` from "
           "`operator/infertune/api`; a test fails when it drifts.", ""]
    for crd in crds.values():
        names = crd["spec"]["names"]
        root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        out += [f"## {names['kind']} ({crd['spec']['group']}/{VERSION}, {crd['spec']['scope']}, "
                f"short name `{names['shortNames'][0]}`)", ""]
        for part in ("spec", "status"):
            if part not in root:
                continue
            rows: list[str] = []
            _reference_rows(root[part], part, False, rows)
            out += [f"### {part}", "", "| field | type | required | default | validation | description |",
                    "|---|---|---|---|---|---|", *rows, ""]
    return "\n".join(out)
