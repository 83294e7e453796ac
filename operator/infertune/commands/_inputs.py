"""Shared argument parsing for the commands: the one validated numeric argument type, output paths
checked before any work starts, JSON that is always valid JSON, catalog names or config.json, and
samples CSVs, and the cluster a command talks to. Every bad input is one line that names the flag
(cli.py prints it)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import statistics
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infertune.api.formats import shown
from infertune.api.schema import CONTEXT_TOKENS_MAX
from infertune.api.spec import PASS_MS_RANGE
from infertune.errors import UserError
from infertune.model import GpuSpec, ModelProfile, load_model, profile_from_hf_config
from infertune.model.roofline import faster_than_floor
from infertune.planner.request import tp_refusal
from infertune.textfile import JsonPastLimits, csv_problem, load_json, plain_number, read_text

if TYPE_CHECKING:
    from infertune.actuate.apply import KubeClient


def path(value: str) -> Path:
    """An argparse `type` for a path: `Path("")` is the current directory, so a flag given an empty
    value (a shell variable that expanded to nothing) would read or write there unasked."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path; name the file or directory")
    if value == "-":
        # By Unix habit "-" is standard input or output, which no path flag here reads or writes: taken
        # as a name it made `crds --out -` write a directory called "-". A file really named so is "./-".
        raise argparse.ArgumentTypeError("'-' is not standard input or output here; name the file or directory "
                                         "(./- for one called '-'), or leave the flag out where it is optional")
    return Path(value)


def _bound(value: float) -> str:
    """A flag's bound as a person reads it: 4,294,967,295 rather than 4.29497e+09, and 0.1 as 0.1."""
    return f"{value:,.12g}"


def number(low: float | None = None, high: float | None = None, *, integer: bool = False,
           above: bool = False, unit: str = "") -> Callable[[str], Any]:
    """An argparse `type`: a finite number (an integer with `integer`) in [low, high] (low excluded with
    `above`). argparse names the flag in front of the message and exits 2."""
    def describe() -> str:
        kind = "an integer" if integer else "a number"
        if low is not None and high is not None:
            return (f"{kind} {'above' if above else 'from'} {_bound(low)} {'up to' if above else 'to'} "
                    f"{_bound(high)}{unit}")
        if low is not None:
            return f"{kind} {'above' if above else 'of at least'} {_bound(low)}{unit}"
        return f"{kind} of at most {_bound(high)}{unit}" if high is not None else f"a finite {kind.split()[-1]}"

    def parse(text: str) -> Any:
        value = plain_number(text, integer=integer)
        if value is None:
            raise argparse.ArgumentTypeError(f"expected {describe()}, got {text!r}")
        if not math.isfinite(value) or (low is not None and (value <= low if above else value < low)) or (
                high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {describe()}, got {text!r}")
        return value

    parse.__name__ = "integer" if integer else "number"  # what argparse calls the type in its messages
    return parse


def written_number() -> Callable[[str], Any]:
    """An argparse `type` for a flag whose command checks the range itself (and words it): only that the number
    is plainly written. NaN and infinity pass, as float() reads them, for that check to refuse."""
    def parse(text: str) -> Any:
        value = plain_number(text)
        if value is None:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
        return value

    parse.__name__ = "written_number"  # not `number`'s name: what it returns may be NaN, for the command to refuse
    return parse


def plain_floats(text: str, count: int) -> tuple[float, ...] | None:
    """`count` comma-separated plainly written numbers (`--fit 5.2,1.65`), else None."""
    items = text.split(",")
    values = [plain_number(item) for item in items]
    if len(items) != count or any(v is None for v in values):
        return None
    return tuple(float(v) for v in values if v is not None)


def writable_file(flag: str, path: str | Path | None) -> None:
    """Fails now, not after minutes of work, when `path` cannot be written: its directory must exist
    and take a new file, and the path must not be a directory."""
    if path is None:
        return
    if not str(path).strip():
        raise UserError(f"{flag}: an empty path; name the file to write")
    target = Path(path)
    regular_or_absent(flag, target)
    _probe(flag, target.parent if str(target.parent) else Path("."))


def regular_or_absent(flag: str, target: Path) -> None:
    """An output file must be a regular file or not exist yet."""
    _not_a_link_to_nowhere(flag, target)
    if target.is_dir():
        raise UserError(f"{flag}: {target} is a directory, not a file")
    if target.exists() and not target.is_file():
        # A device, FIFO or socket: the file is written beside it and renamed over it, which would
        # replace /dev/null itself when run as root; written in place, a FIFO no one reads blocks for ever.
        raise UserError(f"{flag}: {target} exists and is not a regular file (a device, FIFO or socket); "
                        "name a file to write")


def plot_file(flag: str, path: str | None) -> None:
    """`writable_file`, and a name whose extension says a format matplotlib writes: it refuses any other
    only after the work (an internal error), and adds ".png" to a name without one, writing a file the
    user did not name. Without matplotlib the command says so itself."""
    writable_file(flag, path)
    if path is None:
        return
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    suffix = Path(path).suffix.lower().removeprefix(".")
    if suffix not in formats:
        got = f"'.{suffix}'" if suffix else "none"
        raise UserError(f"{flag}: {path}: the extension says the image format; expected one of "
                        f"{', '.join('.' + f for f in formats)}, got {got}")


def writable_dir(flag: str, path: str | Path | None, files: Iterable[str] | None = None) -> None:
    """Fails now when `path` could not hold new files later: an existing directory must take a file;
    a missing one must have a nearest existing ancestor that is a directory it can be created in.
    Nothing is created here: a command that fails later leaves no empty directory behind.

    In an existing directory, each of `files` (the names the command writes there) must be a regular file
    or absent; without `files` (the names depend on the run: `bench --report` writes a plot per scenario),
    every entry of the directory must be a regular file or a directory."""
    if path is None:
        return
    target = Path(path)
    _not_a_link_to_nowhere(flag, target)
    if target.exists():
        if not target.is_dir():
            raise UserError(f"{flag}: {target} exists and is not a directory")
        _no_special_files(flag, target, files)
        _probe(flag, target)
        return
    ancestor = target.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UserError(f"{flag}: cannot create {target}: {ancestor} is not a directory")
    _probe(flag, ancestor)


def _not_a_link_to_nowhere(flag: str, target: Path) -> None:
    """A symbolic link whose target does not exist passed every check (exists() follows it), then failed after
    the work: a plot written through it found no directory, and `crds --out` could not make a directory where
    the link stands ("File exists"), in words that named no flag."""
    if target.is_symlink() and not target.exists():
        raise UserError(f"{flag}: {target} is a symbolic link to {os.readlink(target)}, which does not exist; "
                        "name the file or directory itself")


def _no_special_files(flag: str, folder: Path, files: Iterable[str] | None) -> None:
    """A device, FIFO or socket where a file is to be written: opened to write, a FIFO no one reads blocks
    for ever (`demo` hung at once on operator.log, `bench` after its minutes of work on bench.md). Named
    files are held to `regular_or_absent`, as a single output file is; without names, any entry that is
    neither a file nor a directory is refused."""
    if files is not None:
        for name in sorted(files):
            regular_or_absent(flag, folder / name)
        return
    for entry in sorted(folder.iterdir()):
        if not (entry.is_file() or entry.is_dir()):
            raise UserError(f"{flag}: {entry} exists and is not a regular file (a device, FIFO or socket), where "
                            "the command writes its files; remove it or name another directory")


def _probe(flag: str, folder: Path) -> None:
    if not folder.is_dir():
        raise UserError(f"{flag}: the directory {folder} does not exist")
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".infertune-probe-")
    except OSError as exc:
        raise UserError(f"{flag}: cannot write in {folder}: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(name)


def finite(value: Any) -> Any:
    """`value` with every NaN or infinity (at any depth) replaced by None, JSON's 'no figure'."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def dump_json(value: Any) -> str:
    """JSON that any parser reads: a figure that is not finite is null, never NaN or Infinity."""
    return json.dumps(finite(value), indent=2, allow_nan=False)


def check_tp(model: ModelProfile, sizes: tuple[int, ...], flag: str) -> None:
    """Every TP size must split the model as the engine requires (its attention heads evenly)."""
    for tp in sizes:
        why = tp_refusal(model, tp)
        if why is not None:
            raise UserError(f"{flag}: {why}")


def check_above_token_floor(fastest_s: float, model: ModelProfile, gpu: GpuSpec, tp: int, where: str) -> None:
    """A measured pass faster than the model can decode at `tp` is a unit slip or another model's."""
    too_fast = faster_than_floor(fastest_s, model, gpu, tp)
    if too_fast is not None:
        raise UserError(f"{where}: {too_fast}")


@dataclass(frozen=True)
class Samples:
    batches: tuple[float, ...]
    seconds: tuple[float, ...]
    context_tokens: tuple[float, ...] | None


def parse_json(text: str, where: str) -> Any:
    """json.loads, with what it raises besides a syntax error refused in one line that starts with `where`:
    an integer past Python's 4,300 digits and nesting past the recursion limit (textfile.load_json, which the
    planner reads a ConfigMap's config.json with too). A syntax error (JSONDecodeError) is left to the caller,
    which words it for its file."""
    try:
        return load_json(text)
    except JsonPastLimits as exc:
        if exc.too_deep:
            raise UserError(f"{where}: nested too deeply to be a config.json") from None
        raise UserError(f"{where}: holds an integer of more than 4,300 digits, past the range of every field") from None


def resolve_model(value: str) -> ModelProfile:
    """A catalog name, or a path to a Hugging Face config.json."""
    path = Path(value)
    if value.endswith(".json") or path.is_file():
        try:
            raw = parse_json(read_text(path, "--model"), f"--model: {value}")
        except json.JSONDecodeError as exc:
            raise UserError(f"--model: {value} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
        return profile_from_hf_config(raw, name=path.parent.name or path.stem)
    return load_model(value)


def parse_int_list(value: str, flag: str, high: int | None = None) -> tuple[int, ...]:
    """Comma-separated positive integers, each at most `high` when given (a batch of 10**30 streams
    is a typo, and one past a float's range would fail deep in the arithmetic)."""
    # int() also takes other scripts' digits and skipped items were dropped ("1,,2"): a list that is not
    # plainly written is a typo or a paste, not a list to guess at (nor "+-4", which int() refuses).
    written = [plain_number(v, integer=True) for v in value.split(",")]
    items = tuple(int(v) for v in written if v is not None)
    if len(items) != len(written):
        raise UserError(f"{flag}: expected comma-separated integers, got {value!r}")
    if not items or any(v <= 0 for v in items):
        raise UserError(f"{flag}: expected positive integers, got {value!r}")
    # A row per item: one named twice printed its row twice (`fit --predict 2,2`), a paste, as a target named
    # twice is (observe).
    twice = next((v for i, v in enumerate(items) if v in items[:i]), None)
    if twice is not None:
        raise UserError(f"{flag}: {twice} is given twice in {value!r}")
    if high is not None and max(items) > high:
        biggest = str(max(items))  # as digits: an int past a float's range cannot be formatted as one
        shown = biggest if len(biggest) <= 20 else f"a {len(biggest)}-digit number"
        raise UserError(f"{flag}: expected integers of at most {high:,}, got {shown}")
    return items


# What a load test can measure: no replica runs more streams than this, a pass takes what any pass can
# (api/spec.py PASS_MS_RANGE, a declared load test's bound too), no context is longer than ten million tokens.
SAMPLE_BATCH_MAX = 100_000
# A pass runs one stream or more, so a mean batch (fractional, from averaged windows) is never under one.
SAMPLE_BATCH_MIN = 1.0
SAMPLE_PASS_MS_MIN, SAMPLE_PASS_MS_MAX = PASS_MS_RANGE
SAMPLE_CONTEXT_MAX = CONTEXT_TOKENS_MAX


def read_samples(path: str) -> Samples:
    """Reads `batch,per_pass_ms[,context_tokens]`; a bad row is an error that names its line."""
    with io.StringIO(read_text(path, "--samples"), newline="") as handle:
        reader = csv.DictReader(handle)
        try:
            batches, seconds, contexts, has_context = _sample_rows(path, reader)
        except csv.Error as exc:  # a line past csv's field limit: one line naming it, not an internal error
            raise UserError(f"{path}: line {reader.reader.line_num}: {csv_problem(exc)}") from None
    if len(batches) < 3:
        raise UserError(f"{path}: need at least 3 samples, got {len(batches)}")
    flat = _flat_or_falling(batches, seconds, contexts)
    if flat is not None:
        slope_ms, low, high, context = flat
        at = f" at context {context:,.0f}" if has_context else ""
        raise UserError(f"{path}: per_pass_ms does not rise with the batch ({slope_ms:+.3g} ms a stream from batch "
                        f"{low:g} to {high:g}{at}, least squares); a decode step takes longer with more streams "
                        "(is it a throughput, or are the columns swapped?)")
    return Samples(tuple(batches), tuple(seconds), tuple(contexts) if has_context else None)


def _sample_rows(path: str, reader: csv.DictReader[str]) -> tuple[list[float], list[float], list[float], bool]:
    """Each row's batch, pass time (seconds) and context, and whether the header has a context column."""
    fields = [f.strip() for f in reader.fieldnames or []]
    repeated = sorted({f for f in fields if fields.count(f) > 1})
    if repeated:  # the reader keeps the last of them: which one was meant is not ours to guess
        raise UserError(f"{path}: the header names column(s) {', '.join(repeated)} more than once")
    missing = {"batch", "per_pass_ms"} - set(fields)
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(sorted(missing))} "
                        "(expected batch,per_pass_ms[,context_tokens])")
    has_context = "context_tokens" in fields
    batches: list[float] = []
    seconds: list[float] = []
    contexts: list[float] = []
    for line, row in enumerate(reader, start=2):
        if None in row:  # the reader's key for the fields past the header's
            raise UserError(f"{path}: line {line}: {len(fields) + len(row[None])} fields, but the header "
                            f"names {len(fields)}")
        row = {k.strip(): (v or "").strip() for k, v in row.items() if k is not None}
        cells = [plain_number(row["batch"]), plain_number(row["per_pass_ms"]),
                 plain_number(row["context_tokens"]) if has_context and row.get("context_tokens") else 0.0]
        numbers = [float(cell) for cell in cells if cell is not None]
        if len(numbers) != len(cells):  # `1_0` or another script's digits: a paste, not a sample
            raise UserError(f"{path}: line {line}: not a number in {_shown_row(row)}")
        batch, per_pass, context = numbers
        if not all(math.isfinite(v) for v in (batch, per_pass, context)) or not (
                SAMPLE_BATCH_MIN <= batch <= SAMPLE_BATCH_MAX
                and SAMPLE_PASS_MS_MIN <= per_pass <= SAMPLE_PASS_MS_MAX and 0 <= context <= SAMPLE_CONTEXT_MAX):
            raise UserError(f"{path}: line {line}: batch must be in [{SAMPLE_BATCH_MIN:g}, {SAMPLE_BATCH_MAX:,}], "
                            f"per_pass_ms in [{SAMPLE_PASS_MS_MIN:g}, {SAMPLE_PASS_MS_MAX:,.0f}] and "
                            f"context_tokens in [0, {SAMPLE_CONTEXT_MAX:,}], got {_shown_row(row)}")
        batches.append(batch)
        seconds.append(per_pass / 1e3)
        contexts.append(context)
    return batches, seconds, contexts, has_context


def _shown_row(row: dict[str, str]) -> str:
    """A row as a message quotes it: each value cut short, so that a line of megabytes stays a readable line."""
    return "{" + ", ".join(f"{shown(k)}: {shown(v)}" for k, v in row.items()) + "}"


def _flat_or_falling(batches: list[float], seconds: list[float],
                     contexts: list[float]) -> tuple[float, float, float, float] | None:
    """The first set of rows at one context that spans two batches or more and whose pass time does not
    rise with the batch: its least-squares slope (ms a stream), batch range and context. A least-squares
    slope, not a row-by-row rule as for a declared load test's means (api/spec.py `LoadTest`): raw rows,
    at fractional mean batches, are noisy one by one. Rows at different contexts are not compared, since a
    larger batch of shorter contexts may well pass faster."""
    by_context: dict[float, list[tuple[float, float]]] = {}
    for batch, second, context in zip(batches, seconds, contexts, strict=True):
        by_context.setdefault(context, []).append((batch, second))
    for context, rows in by_context.items():
        xs = [b for b, _ in rows]
        if max(xs) == min(xs):
            continue
        slope = statistics.linear_regression(xs, [s for _, s in rows]).slope
        if not slope > 0:
            return slope * 1e3, min(xs), max(xs), context
    return None


def cluster_client() -> KubeClient:
    """The API client (in-cluster, else the kubeconfig), or one line saying why there is none."""
    import kubernetes.config  # only the commands that talk to a cluster pay for the import
    import yaml

    from infertune.actuate.apply import client_from_environment

    where = os.environ.get("KUBECONFIG") or "~/.kube/config"
    try:
        return client_from_environment()
    except (kubernetes.config.ConfigException, OSError) as exc:
        raise UserError(f"no cluster to talk to: not in a pod, and the kubeconfig ({where}) "
                        f"does not load: {exc}") from None
    except (yaml.YAMLError, ValueError, TypeError, AttributeError, LookupError) as exc:
        # The client's loader reads the file unchecked: YAML that does not parse, bytes that are not UTF-8 or
        # base64 that does not decode (ValueError), a list or a string where a kubeconfig has mappings.
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 200 else detail[:197] + "..."
        raise UserError(f"no cluster to talk to: not in a pod, and the kubeconfig ({where}) is not a kubeconfig "
                        f"({type(exc).__name__}: {detail})") from None
