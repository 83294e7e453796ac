"""The engine flags the operator sets itself, and every spelling an engine's argparse reads as one of them.

A user arg naming an owned flag would silently override what the operator tunes, so the spec refuses it
twice: `owned_flag` in the parser, and `owned_flag_regex` as the CRD's CEL rule, the same set of spellings
(tests/unit/test_owned_flags.py holds the two against each other).
"""

from __future__ import annotations

import re

# Flags the operator sets itself, or that would undo what it sets (more GPUs per replica than TP; any
# flag at all from a config file); a user arg naming one of them is a spec error, not a silent override.
OWNED_ARGS: dict[str, tuple[str, ...]] = {
    "vllm": ("--tensor-parallel-size", "-tp", "--max-num-seqs", "--gpu-memory-utilization", "--port",
             "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp", "--config"),
    "sglang": ("--tp-size", "--tp", "--max-running-requests", "--mem-fraction-static", "--port", "--host",
               "--nnodes", "--node-rank", "--dist-init-addr", "--pp-size", "--dp-size", "--dp", "--config"),
}


def flag_name(arg: str) -> str | None:
    """The option an engine's argparse reads from `arg`, as vLLM's parser normalises it: the part before
    `=`, with `_` read as `-` in a long option. None for a value, a positional, `-` or `--`."""
    if not arg.startswith("-") or arg in ("-", "--"):
        return None
    name = arg.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def owned_flag(kind: str, arg: str) -> str | None:
    """The owned flag `arg` would set: the flag itself, in any spelling, or an abbreviation argparse
    expands to it (argparse takes any unique prefix of a long option, and `-t` for `-tp`)."""
    name = flag_name(arg)
    if name is None:
        return None
    for flag in OWNED_ARGS[kind]:
        if flag.startswith("--") == name.startswith("--") and flag.startswith(name) and name.strip("-"):
            return flag
    return None


def owned_flag_regex(kind: str) -> str:
    """`owned_flag` as one RE2 pattern for the CRD's CEL rule: each owned flag or any prefix of it,
    `-` and `_` alike in long options, optionally followed by `=value`."""
    def prefixes(flag: str) -> str:
        dashes = "--" if flag.startswith("--") else "-"
        body = flag[len(dashes):]
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", body), flag  # no regex metacharacter, no CEL escape
        pattern = ""
        for char in reversed(body[1:]):
            piece = "[-_]" if char == "-" and dashes == "--" else char
            pattern = f"(?:{piece}{pattern})?"
        return dashes + body[0] + pattern

    # (?s): a value may hold newlines; RE2 and Python agree on it.
    return "(?s)^(?:" + "|".join(prefixes(f) for f in OWNED_ARGS[kind]) + ")(?:=.*)?$"
