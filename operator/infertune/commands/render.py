"""`infertune render -f deployment.yaml`: prints, as YAML, exactly the objects the operator would
apply for a resource (at the starting layout, or at --tp/--max-num-seqs/--replicas)."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from infertune.actuate.workload import Owner, desired_objects
from infertune.api.formats import shown
from infertune.api.names import name_refusal, namespace_refusal
from infertune.api.policy import POLICY_KIND, ServingPolicySpec, parse_policy
from infertune.api.schema import CONCURRENCY_MAX
from infertune.api.spec import API_VERSION, KIND, InferenceDeploymentSpec, parse_spec
from infertune.commands._inputs import number, parse_json, path
from infertune.errors import UserError
from infertune.planner.request import Resolved, resolve, starting_layout
from infertune.planner.types import Layout, PlanRequest
from infertune.textfile import read_text

PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
# What metadata.uid may hold: the API server writes a UUID; printable ASCII without a space covers it and any other
# string an owner reference can carry in one line.
UID = re.compile(r"[!-~]{1,128}")


class _Refused(yaml.YAMLError):
    """YAML that parses but that no resource holds; the message names its line."""


class _DuplicateKey(_Refused):
    def __init__(self, key: object, line: int) -> None:
        super().__init__(f"line {line}: key {key!r} is given twice in one mapping")


class _StrictLoader(yaml.SafeLoader):
    """PyYAML keeps the last of a key given twice; kubectl's strict field validation refuses such a
    document, and which of the two the user meant is not ours to guess. Merge keys (`<<`) still
    override, as YAML defines."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key is refused by the constructor itself
                continue
            if duplicate:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """An integer, or a refusal naming its line: past 4,300 digits Python will not read one (a
        ValueError), and no field's range comes near it."""
        try:
            return int(super().construct_yaml_int(node))
        except ValueError:
            digits = sum(c.isdigit() for c in str(node.value))
            raise _Refused(f"line {node.start_mark.line + 1}: an integer of {digits:,} digits, past the range of "
                           "every field") from None

    def construct_document(self, node: yaml.Node) -> Any:
        _check_expansion(node)
        return super().construct_document(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)

# How many values one document may hold once its aliases are expanded. A resource holds hundreds. Nine aliases of
# nine ("billion laughs") expand to a billion: PyYAML builds them in a moment as shared references, but the first
# str() of one (a refusal quoting apiVersion or metadata.name, the owner reference rendered from metadata.uid)
# walked them for ever. sigs.k8s.io/yaml refuses such a document ("excessive aliasing"), so kubectl never sends it.
EXPANDED_VALUES_MAX = 1_000_000


def _check_expansion(root: yaml.Node) -> None:
    """Refuses a document whose aliases expand it past EXPANDED_VALUES_MAX values, or one whose alias holds the
    node it names (go-yaml: "anchor 'a' value contains itself"), naming the line. Each node is sized once, so a
    billion-value document is judged in as many steps as it has values written."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # on the path from the root: met again below itself, it holds itself
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, closing = stack.pop()
        key = id(node)
        if closing:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > EXPANDED_VALUES_MAX:
                raise _Refused(f"line {node.start_mark.line + 1}: its aliases expand it to more than "
                               f"{EXPANDED_VALUES_MAX:,} values (a 'billion laughs'); no resource holds that many")
        elif key in open_nodes:
            raise _Refused(f"line {node.start_mark.line + 1}: an alias names a node that holds itself")
        elif key not in sizes:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []

# YAML 1.1's base-60 numbers: PyYAML reads `startupSeconds: 15:00` as 900 and `1:30.5` as 90.5. kubectl and the
# API server (sigs.k8s.io/yaml) read both as strings, which a number field refuses; so the commands read them as
# strings too, and a field refuses them in its own words. PyYAML's int and float patterns, less that form:
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_WITHOUT_BASE_60 = {
    _INT: re.compile(r"""^(?:[-+]?0b[0-1_]+
                    |[-+]?0[0-7_]+
                    |[-+]?(?:0|[1-9][0-9_]*)
                    |[-+]?0x[0-9a-fA-F_]+)$""", re.X),
    _FLOAT: re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X),
}
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, _WITHOUT_BASE_60.get(tag, regexp)) for tag, regexp in resolvers]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _yaml_documents(path: Path, flag: str) -> list[Any]:
    text = read_text(path, flag)
    try:
        return [d for d in yaml.load_all(text, Loader=_StrictLoader) if d]
    except _Refused as exc:
        raise UserError(f"{flag}: {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{flag}: {path}: not YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:  # the YAML reader recurses once per level of nesting
        raise UserError(f"{flag}: {path}: nested too deeply to be a resource") from None


def load_resource(path: Path) -> dict[str, Any]:
    docs = _yaml_documents(path, "--file")
    found = [d for d in docs if isinstance(d, dict) and d.get("kind") == KIND]
    if not found:
        raise UserError(f"{path}: no {KIND} ({API_VERSION}) in the file")
    if len(found) > 1:  # which one was meant is not ours to guess
        raise UserError(f"{path}: {len(found)} {KIND} documents in the file; give a file with exactly one")
    _check_api_version(path, found[0])
    _check_metadata(path, found[0])
    return found[0]


def _check_api_version(path: Path | str, document: dict[str, Any]) -> None:
    """A document that names another version of the API is refused: `infertune.io/v9` was read as this
    version's spec, whose fields it may not share. One without an apiVersion is read as this one's."""
    version = document.get("apiVersion", API_VERSION)
    if version != API_VERSION:
        raise UserError(f"{path}: apiVersion {shown(version)}; this infertune reads {API_VERSION}")


def _check_metadata(path: Path, resource: dict[str, Any]) -> None:
    """The name and namespace must be ones the API server takes for the objects rendered from them:
    it would refuse them, so printing or planning them would only show what can never run."""
    meta = resource.get("metadata")
    if meta is None:
        return
    if not isinstance(meta, dict):
        raise UserError(f"{path}: metadata must be a mapping (with a name), got {type(meta).__name__}")
    for key, refusal in (("name", name_refusal), ("namespace", namespace_refusal)):
        why = refusal(meta[key]) if key in meta else None
        if why is not None:
            raise UserError(f"{path}: {why}")
    uid = meta.get("uid", PLACEHOLDER_UID)
    if not (isinstance(uid, str) and UID.fullmatch(uid)):
        # It goes into every rendered object's owner reference as str() made it: '[1, 2]', 'None', ''.
        raise UserError(f"{path}: metadata.uid {shown(uid)} is not a UID: 1 to 128 printable ASCII characters "
                        "(the API server's, such as 4f9c1a2e-7b3d-4e8f-9a0b-1c2d3e4f5a6b; or leave it out)")


def load_policy(spec: InferenceDeploymentSpec, path: Path | None) -> ServingPolicySpec | None:
    if spec.policy_ref is None:
        return None
    candidate = path or Path("policies") / f"{spec.policy_ref.name}.yaml"
    if not candidate.exists():
        raise UserError(f"spec.policyRef: ServingPolicy {spec.policy_ref.name!r} not found at {candidate}; "
                        "pass --policy FILE")
    flag = "--policy" if path else "spec.policyRef"  # the default file was not named by a flag
    docs = _yaml_documents(candidate, flag)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise UserError(f"{flag}: {candidate}: expected one ServingPolicy document (a mapping with a spec)")
    kind = docs[0].get("kind", POLICY_KIND)
    if kind != POLICY_KIND:  # another resource's spec would be read as a policy's, all defaults
        raise UserError(f"{flag}: {candidate} is a {kind}, not a {POLICY_KIND}")
    _check_api_version(f"{flag}: {candidate}", docs[0])
    policy = docs[0].get("spec")
    if not isinstance(policy, dict):
        # parse_policy reads a missing, empty or list spec as all defaults (no SLO, no workload); the CRD requires
        # a spec that is an object, so the API server refuses such a ServingPolicy.
        got = "none" if policy is None else type(policy).__name__
        raise UserError(f"{flag}: {candidate}: a ServingPolicy's spec must be a mapping (`spec: {{}}` for all the "
                        f"defaults), got {got}")
    return parse_policy(policy)


def resolve_file(args: argparse.Namespace) -> tuple[dict[str, Any], Resolved]:
    resource = load_resource(args.file)
    spec = parse_spec(resource.get("spec"))
    _check_refs(args, spec)
    config = read_text(args.config_json, "--config-json") if args.config_json else None
    if config is not None:
        # What json.loads raises besides a syntax error is refused here; a syntax error the planner words
        # for the ConfigMap, as the operator does.
        with contextlib.suppress(json.JSONDecodeError):
            parse_json(config, f"--config-json: {args.config_json}")
    return resource, resolve(spec, load_policy(spec, args.policy), config)


def _check_refs(args: argparse.Namespace, spec: InferenceDeploymentSpec) -> None:
    """A file given for a reference the resource does not make would be ignored without a word."""
    if args.policy is not None and spec.policy_ref is None:
        raise UserError(f"--policy: {args.file} has no spec.policyRef, so no ServingPolicy is read; add one to "
                        "the resource or drop --policy")
    if args.config_json is not None and spec.model.config_map_ref is None:
        raise UserError(f"--config-json: {args.file} has no spec.model.configMapRef (its model is named another "
                        "way), so no config.json is read; drop --config-json")


def add_resource_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--file", type=path, required=True, help="an InferenceDeployment YAML")
    parser.add_argument("--policy", type=path, help="the ServingPolicy YAML its policyRef names "
                        "(default: policies/<name>.yaml)")
    parser.add_argument("--config-json", type=path, help="config.json for a spec.model.configMapRef")


def register(sub: Any) -> None:
    parser = sub.add_parser("render", help="print the workload the operator would apply")
    add_resource_args(parser)
    parser.add_argument("--tp", type=number(1, 64, integer=True), help="tensor-parallel size (default: the plan's)")
    parser.add_argument("--max-num-seqs", type=number(1, CONCURRENCY_MAX, integer=True),
                        help="max concurrency per replica (default: the plan's)")
    parser.add_argument("--replicas", type=number(0, 1024, integer=True), help="replica count (default: the plan's)")
    parser.set_defaults(func=handle)


def _check_the_resource_allows(args: argparse.Namespace, request: PlanRequest, layout: Layout) -> None:
    """A layout the flags ask for that the operator would never apply to this resource is refused, as a
    TP it does not allow is: the command prints what the operator would apply."""
    if args.max_num_seqs is not None and not request.concurrency_min <= args.max_num_seqs <= request.concurrency_max:
        raise UserError(f"--max-num-seqs: {args.max_num_seqs} is outside the resource's spec.tuning.concurrency "
                        f"({request.concurrency_min}..{request.concurrency_max})")
    if args.replicas is not None and args.replicas > request.replicas_max:
        raise UserError(f"--replicas: {args.replicas} is more than the resource's spec.tuning.replicas.max "
                        f"({request.replicas_max})")
    if (args.replicas is not None or args.tp is not None) and request.pool_gpus is not None \
            and layout.gpus > request.pool_gpus:
        flag = "--replicas" if args.replicas is not None else "--tp"  # the flag that made the layout too large
        raise UserError(f"{flag}: {layout.replicas} x TP{layout.tensor_parallel_size} is {layout.gpus} GPUs, more "
                        f"than the resource's spec.hardware.poolGpus ({request.pool_gpus})")


def handle(args: argparse.Namespace) -> int:
    resource, resolved = resolve_file(args)
    layout, _ = starting_layout(resolved, time.time())
    request = resolved.request
    if args.tp is not None and args.tp not in request.tp_sizes:
        raise UserError(f"--tp: {args.tp} is not one of the resource's tensorParallelSizes "
                        f"({', '.join(str(t) for t in request.tp_sizes)})")
    layout = replace(layout, tensor_parallel_size=args.tp or layout.tensor_parallel_size,
                     max_num_seqs=args.max_num_seqs or layout.max_num_seqs,
                     replicas=layout.replicas if args.replicas is None else args.replicas)
    _check_the_resource_allows(args, request, layout)
    meta = resource.get("metadata") or {}
    owner = Owner(str(meta.get("name", "unnamed")), str(meta.get("namespace", "default")),
                  str(meta.get("uid", PLACEHOLDER_UID)))
    objects = desired_objects(owner, resolved.spec, layout, resolved.gpu.gpus_per_node)
    print(yaml.safe_dump_all(objects, sort_keys=False, width=100), end="")
    return 0
