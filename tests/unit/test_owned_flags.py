"""Owned flags stay owned: every spelling the engines accept of a flag the operator sets (`_` for `-`,
`--flag value` and `--flag=value`, argparse's abbreviations) is refused by the operator and by the
CRD's CEL rule alike, whatever else passes; and no user string reaches a shell as syntax (the
multi-node leader's command is run by /bin/sh here, with the weights and args a hostile user wrote)."""

from __future__ import annotations

import argparse
import copy
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infertune.actuate.workload import VLLM_MULTI_NODE_SCRIPT, Owner, make_leader_worker_set
from infertune.api.flags import OWNED_ARGS, owned_flag, owned_flag_regex
from infertune.api.spec import parse_spec
from infertune.errors import SpecError
from infertune.planner.types import Layout
from tests.unit.test_crds_schema import admission_errors

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())
LEGIT = ["--enable-prefix-caching", "--max-num-batched-tokens", "8192", "--served-model-name", "kimi",
         "--config-format", "hf", "--kv-cache-dtype", "fp8", "-O3", "--max-model-len=65536",
         "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}', "--trust-remote-code"]


def _doc(kind: str, args: list[str]) -> dict[str, Any]:
    doc = copy.deepcopy(EXAMPLE)
    doc["spec"]["engine"] = {**doc["spec"].get("engine", {}), "kind": kind, "extraArgs": args}
    return doc


def _refused(kind: str, args: list[str]) -> tuple[bool, bool]:
    """(the operator refuses it, the API server's CEL rule refuses it)."""
    try:
        parse_spec(_doc(kind, args)["spec"])
        operator = False
    except SpecError as exc:
        operator = "owned by the operator" in str(exc)
    return operator, any("flags the operator owns" in e for e in admission_errors(_doc(kind, args)))


@pytest.mark.parametrize("kind, args", [
    ("vllm", ["--tensor_parallel_size=16"]),
    ("vllm", ["--max_num_seqs", "1000"]),
    ("vllm", ["--max-num-seqs=1000"]),
    ("vllm", ["--max-num-seq", "1000"]),  # argparse's abbreviation
    ("vllm", ["--tensor", "16"]),
    ("vllm", ["-t", "16"]),  # abbreviates -tp
    ("vllm", ["--gpu_memory_utilization=0.99"]),
    ("vllm", ["--config", "/etc/engine.yaml"]),  # a file may set any flag
    ("vllm", ["--pipeline-parallel-size", "2"]),  # more GPUs per replica than the operator requests
    ("vllm", ["--port=9000"]),
    ("sglang", ["--tp_size", "8"]),
    ("sglang", ["--mem-fraction-static=0.95"]),
    ("sglang", ["--max_running_requests", "4096"]),
    ("sglang", ["--host", "127.0.0.1"]),
])
def test_every_spelling_of_an_owned_flag_is_refused(kind: str, args: list[str]) -> None:
    assert _refused(kind, args) == (True, True)


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_flags_the_operator_does_not_own_pass(kind: str) -> None:
    assert _refused(kind, LEGIT) == (False, False)


def _spelling(flag: str, cut: int, underscores: list[bool], value: str | None) -> str:
    """`flag` cut to a prefix of at least one letter, some of its inner dashes written as `_`."""
    dashes = "--" if flag.startswith("--") else "-"
    body = flag[len(dashes):][:max(1, cut)]
    if dashes == "--":
        body = "".join("_" if c == "-" and underscores[i % len(underscores)] else c for i, c in enumerate(body))
    return dashes + body + ("" if value is None else f"={value}")


owned = st.sampled_from([(kind, flag) for kind, flags in OWNED_ARGS.items() for flag in flags])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(owned, st.integers(1, 40), st.lists(st.booleans(), min_size=1, max_size=8),
       st.one_of(st.none(), st.text(max_size=12)))
def test_any_spelling_of_any_owned_flag_is_refused_by_both(pair: tuple[str, str], cut: int,
                                                           underscores: list[bool], value: str | None) -> None:
    kind, flag = pair
    arg = _spelling(flag, cut, underscores, value)
    assert owned_flag(kind, arg) is not None
    assert _refused(kind, [arg]) == (True, True)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(sorted(OWNED_ARGS)), st.text(alphabet="-_=abcdefghijklmnopqrstuvwxyz0123456789 \n", max_size=30))
def test_the_crd_rule_and_the_operator_agree_on_every_string(kind: str, arg: str) -> None:
    import re
    # fullmatch: RE2's `$` is the end of the text; Python's also matches before a final newline.
    assert (owned_flag(kind, arg) is not None) == bool(re.fullmatch(owned_flag_regex(kind), arg))


def _vllm_parser() -> argparse.ArgumentParser:
    """What an engine's parser does with the flags that matter here: Python's argparse (abbreviations
    on, as in vLLM and SGLang) after vLLM's own normalisation of `_` to `-` in long option names
    (vllm/utils FlexibleArgumentParser.parse_args), the one step not argparse's."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    for flag in ("--tensor-parallel-size", "--max-num-seqs", "--gpu-memory-utilization", "--port",
                 "--pipeline-parallel-size", "--data-parallel-size", "--max-num-batched-tokens", "--model",
                 "--served-model-name", "--max-model-len", "--kv-cache-dtype"):
        aliases = {"--tensor-parallel-size": ["-tp"], "--pipeline-parallel-size": ["-pp"],
                   "--data-parallel-size": ["-dp"]}.get(flag, [])
        parser.add_argument(flag, *aliases)
    parser.add_argument("--enable-prefix-caching", action="store_true")
    return parser


def _normalised(args: list[str]) -> list[str]:
    out = []
    for arg in args:
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            arg = "--" + key[2:].replace("_", "-") + eq + value
        out.append(arg)
    return out


user_args = st.lists(st.sampled_from(["--max-num-batched-tokens", "8192", "--served-model-name", "x",
                                      "--enable-prefix-caching", "--max_model_len=4096", "--kv_cache_dtype",
                                      "fp8", "--max-num-seq", "--tensor_parallel", "-t", "-tp", "--max_num_seqs=9",
                                      "--port", "77", "--gpu-memory", "0.5", "--pipeline_parallel_size", "2"]),
                     max_size=6)


@settings(max_examples=300, deadline=None)
@given(user_args)
def test_what_passes_the_check_never_changes_what_the_operator_set(args: list[str]) -> None:
    operator_args = ["--model", "m", "--tensor-parallel-size", "8", "--max-num-seqs", "64",
                     "--gpu-memory-utilization", "0.90", "--port", "8000"]
    if any(owned_flag("vllm", a) is not None for a in args):
        return  # refused: never rendered
    try:
        parsed = _vllm_parser().parse_args(_normalised(operator_args + args))
    except (argparse.ArgumentError, SystemExit):
        return  # the engine would not start; nothing the operator owns changed
    assert (parsed.tensor_parallel_size, parsed.max_num_seqs, parsed.gpu_memory_utilization, parsed.port) == (
        "8", "64", "0.90", "8000")
    assert parsed.pipeline_parallel_size is None and parsed.data_parallel_size is None


HOSTILE_WEIGHTS = 'x; touch PWNED #'
HOSTILE_ARGS = ["--served-model-name", "$(touch PWNED2)", "`touch PWNED3`", "a'b\"c; touch PWNED4", "$HOME",
                "--chat-template", "{{ '; touch PWNED5' }}"]


def test_the_multi_node_leader_passes_hostile_strings_to_the_server_verbatim(tmp_path: Path) -> None:
    spec = parse_spec({**copy.deepcopy(EXAMPLE["spec"]), "model": {"weights": HOSTILE_WEIGHTS, "profile": "kimi-k2.6"},
                       "engine": {"extraArgs": HOSTILE_ARGS}})
    lws = make_leader_worker_set(Owner("kimi-k2", "inference", "uid-1"), spec, Layout(16, 32, 1), 8)
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    argv = [*leader["command"], *leader["args"]]
    # The image's pieces, played by stubs: Ray's helper succeeds, and "python3" records what it was given.
    ray = tmp_path / "multi-node-serving.sh"
    ray.write_text("#!/bin/sh\nexit 0\n")
    server = tmp_path / "python3"
    server.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import json, sys; "
                      f"json.dump(sys.argv[1:], open(\"argv.json\", \"w\"))' \"$@\"\n")
    for stub in (ray, server):
        stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    argv = [a.replace(VLLM_MULTI_NODE_SCRIPT, str(ray)) for a in argv]
    argv[argv.index("python3")] = str(server)
    subprocess.run(argv, cwd=tmp_path, env={"LWS_GROUP_SIZE": "2", "PATH": os.environ["PATH"], "HOME": "/nonexistent"},
                   check=True, timeout=30)
    received = json.loads((tmp_path / "argv.json").read_text())
    rendered = leader["args"][leader["args"].index("python3") + 1:]
    assert received == rendered  # every string arrived as written, none run
    assert HOSTILE_WEIGHTS in received and all(a in received for a in HOSTILE_ARGS)
    assert not list(tmp_path.glob("PWNED*"))
