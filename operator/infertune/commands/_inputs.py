"""Shared argument parsing for the planning commands: catalog names or config.json, samples CSVs."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

from infertune.errors import UserError
from infertune.model import ModelProfile, load_model, profile_from_hf_config


@dataclass(frozen=True)
class Samples:
    batches: tuple[float, ...]
    seconds: tuple[float, ...]
    context_tokens: tuple[float, ...] | None


def resolve_model(value: str) -> ModelProfile:
    """A catalog name, or a path to a Hugging Face config.json."""
    path = Path(value)
    if value.endswith(".json") or path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"--model: no such file {value}") from None
        except json.JSONDecodeError as exc:
            raise UserError(f"--model: {value} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
        return profile_from_hf_config(raw, name=path.parent.name or path.stem)
    return load_model(value)


def parse_int_list(value: str, flag: str) -> tuple[int, ...]:
    try:
        items = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise UserError(f"{flag}: expected comma-separated integers, got {value!r}") from None
    if not items or any(v <= 0 for v in items):
        raise UserError(f"{flag}: expected positive integers, got {value!r}")
    return items


def read_samples(path: str) -> Samples:
    """Reads `batch,per_pass_ms[,context_tokens]`; a bad row is an error that names its line."""
    try:
        handle = open(path, newline="", encoding="utf-8")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise UserError(f"--samples: no such file {path}") from None
    with handle:
        reader = csv.DictReader(handle)
        fields = [f.strip() for f in reader.fieldnames or []]
        missing = {"batch", "per_pass_ms"} - set(fields)
        if missing:
            raise UserError(f"{path}: missing column(s) {', '.join(sorted(missing))} "
                            "(expected batch,per_pass_ms[,context_tokens])")
        has_context = "context_tokens" in fields
        batches: list[float] = []
        seconds: list[float] = []
        contexts: list[float] = []
        for line, row in enumerate(reader, start=2):
            row = {k.strip(): (v or "").strip() for k, v in row.items() if k is not None}
            try:
                batch, per_pass = float(row["batch"]), float(row["per_pass_ms"])
                context = float(row["context_tokens"]) if has_context and row.get("context_tokens") else 0.0
            except ValueError:
                raise UserError(f"{path}: line {line}: not a number in {row}") from None
            if not all(math.isfinite(v) for v in (batch, per_pass, context)) or not (
                    batch > 0 and per_pass > 0 and context >= 0):
                raise UserError(f"{path}: line {line}: batch and per_pass_ms must be finite and positive "
                                f"(context_tokens >= 0), got {row}")
            batches.append(batch)
            seconds.append(per_pass / 1e3)
            contexts.append(context)
    if len(batches) < 3:
        raise UserError(f"{path}: need at least 3 samples, got {len(batches)}")
    return Samples(tuple(batches), tuple(seconds), tuple(contexts) if has_context else None)
