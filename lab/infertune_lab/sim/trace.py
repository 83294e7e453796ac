"""Trace replay: a public LLM request log as an open-loop traffic source, one request a row. Read:
- the Azure LLM inference traces (2023, 2024): CSV `TIMESTAMP,ContextTokens,GeneratedTokens`, TIMESTAMP
  an ISO date-time (any number of fractional digits; without a time zone it is read as UTC) or plain
  seconds, the same kind on every row (infertune_lab/data holds the 2023 code trace);
- BurstGPT: CSV with `Timestamp` (seconds), `Request tokens` and `Response tokens` among its columns;
- Mooncake: JSON lines `{"timestamp": ms, "input_length": n, "output_length": n, ...}`.
Which one a file is, its first line says (a `{`, or the header's columns); docs/sources.md cites each.

The whole file is parsed and checked before anything runs, so a malformed trace fails with one
error naming its line and no partial replay ever starts. Requests carry no session (Azure's and
BurstGPT's logs have none, and Mooncake's block hashes are not read), so only preemption recompute can
hit the prefix cache.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infertune.api.formats import shown
from infertune.errors import UserError
from infertune.textfile import csv_problem, plain_number, read_text
from infertune_lab.sim.records import RequestRecord, RequestSpec

# No model attends over ten million tokens (the planner's and the samples' limit too); a bigger count
# is a corrupt row, and past a float's range it would fail deep in the arithmetic.
TOKENS_MAX = 10_000_000
# A trace is a log of days, not decades: a wider span is a stray value or a mix of units, and one that
# overflows to infinity would leave its last rows never arriving.
SPAN_MAX_SECONDS = 365 * 86_400.0


class TraceError(UserError):
    """A malformed trace; the message names the file and line."""


@dataclass(frozen=True)
class TraceRow:
    offset: float  # seconds since the trace's first row
    context_tokens: int
    generated_tokens: int


@dataclass(frozen=True)
class CsvFormat:
    """A request log's CSV columns: when, the prompt's tokens, the answer's tokens."""

    name: str
    timestamp: str
    prompt: str
    answer: str


CSV_FORMATS = (
    CsvFormat("Azure LLM inference", "TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    CsvFormat("BurstGPT", "Timestamp", "Request tokens", "Response tokens"),
)
COLUMNS = tuple(getattr(CSV_FORMATS[0], k) for k in ("timestamp", "prompt", "answer"))
JSONL_KEYS = ("timestamp", "input_length", "output_length")  # Mooncake's; its timestamp is in milliseconds

# (instant in seconds, prompt tokens, answer tokens, line)
Stamp = tuple[float, int, int, int]


# A date-time's fraction of a second: the first point followed by digits (a date has none, nor does an offset).
_FRACTION = re.compile(r"\.([0-9]+)")


def _timestamp(raw: str) -> tuple[float, str]:
    """The instant in seconds, and which kind of stamp gave it (seconds, or a date-time with or without
    a time zone)."""
    text = raw.strip()
    # Plainly written, as every number the commands read: float() also took `1_0` as 10 s and other scripts'
    # digits ('١٢') as 12 s, a paste replayed without a word.
    seconds = plain_number(text)
    if seconds is not None:
        return float(seconds), "plain seconds"
    # fromisoformat takes 7 fractional digits only from 3.11 on, and only in some layouts: the fraction is cut to
    # microseconds, and the time zone after it kept (cut with it, `.100000001+02:00` was read as UTC, an hour or
    # two off, and `.5Z` was refused).
    stamp = datetime.fromisoformat(_FRACTION.sub(lambda m: "." + (m[1] + "000000")[:6], text, count=1))
    if stamp.tzinfo is None:
        # Only differences matter, so a bare date-time is read as UTC: read as this machine's local
        # time, a trace crossing a daylight-saving change would gain or lose an hour of arrivals.
        return stamp.replace(tzinfo=UTC).timestamp(), "a date-time without a time zone"
    return stamp.timestamp(), "a date-time with a time zone"


def _count(raw: Any, column: str, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, str | int):  # JSON's true, 1.5 or null is not a count
        raise TraceError(f"{where}: {column} {shown(raw)} is not an integer")
    # int() also took `1_000` and other scripts' digits ('١٢'): a paste, not a count to guess at.
    value = plain_number(raw, integer=True) if isinstance(raw, str) else raw
    if not isinstance(value, int):
        raise TraceError(f"{where}: {column} {shown(raw)} is not an integer")
    if value < 0:
        raise TraceError(f"{where}: {column} is negative ({value})")
    if value > TOKENS_MAX:
        raise TraceError(f"{where}: {column} {str(raw).strip()[:20]!r} is more than {TOKENS_MAX:,} tokens")
    return value


def load_trace(path: str | Path) -> list[TraceRow]:
    """Parses and validates a whole trace; raises TraceError naming the first bad line."""
    p = Path(path)
    try:  # a missing file, a directory or bytes that are not text, each in one line
        text = read_text(p, "--trace")
    except UserError as exc:
        raise TraceError(str(exc)) from None
    jsonl = text.lstrip().startswith("{")
    stamps = list(_jsonl_stamps(p, text) if jsonl else _csv_stamps(p, text))
    if not stamps:
        raise TraceError(f"{p}: no requests{'' if jsonl else ' after the header'}")
    # Merged logs are not always in order; replay is by time.
    stamps.sort(key=lambda s: s[0])
    _check_span(p, stamps[0], stamps[-1])
    first = stamps[0][0]
    return [TraceRow(ts - first, context, generated) for ts, context, generated, _ in stamps]


def _csv_format(p: Path, names: list[str]) -> CsvFormat:
    for fmt in CSV_FORMATS:
        if all(c in names for c in (fmt.timestamp, fmt.prompt, fmt.answer)):
            return fmt
    expected = "; or ".join(f"{f.timestamp},{f.prompt},{f.answer} ({f.name})" for f in CSV_FORMATS)
    missing = [c for c in COLUMNS if c not in names]
    raise TraceError(f"{p}:1: missing column(s) {', '.join(missing)} (header: {','.join(names)[:200]!r}); "
                     f"expected {expected}, or JSON lines with {', '.join(JSONL_KEYS)} (Mooncake)")


def _csv_stamps(p: Path, text: str) -> Iterator[Stamp]:
    with io.StringIO(text, newline="") as fh:
        reader = csv.reader(fh)
        try:
            yield from _csv_rows(p, reader)
        except csv.Error as exc:  # a line past csv's field limit: one line naming it, not an internal error
            raise TraceError(f"{p}:{reader.line_num}: {csv_problem(exc)}") from None


def _csv_rows(p: Path, reader: Iterator[list[str]]) -> Iterator[Stamp]:
    header = next(reader, None)
    if header is None:
        raise TraceError(f"{p}: empty file, expected a header {','.join(COLUMNS)}")
    names = [h.strip() for h in header]
    fmt = _csv_format(p, names)
    repeated = sorted({c for c in (fmt.timestamp, fmt.prompt, fmt.answer) if names.count(c) > 1})
    if repeated:  # the first would be read and the other ignored: which one was meant is not ours to guess
        raise TraceError(f"{p}:1: the header names column(s) {', '.join(repeated)} more than once")
    idx = [names.index(c) for c in (fmt.timestamp, fmt.prompt, fmt.answer)]
    first_kind: tuple[str, int] | None = None
    for line_no, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        where = f"{p}:{line_no}"
        if len(row) < len(names):
            raise TraceError(f"{where}: expected {len(names)} fields, got {len(row)}")
        if len(row) > len(names):  # a stray comma or a shifted row: which fields were meant is a guess
            raise TraceError(f"{where}: {len(row)} fields, but the header names {len(names)}")
        raw = row[idx[0]]
        try:
            ts, kind = _timestamp(raw)
        except ValueError:
            raise TraceError(f"{where}: {fmt.timestamp} {shown(raw)} is not a date-time or seconds") from None
        if first_kind is None:
            first_kind = kind, line_no
        elif kind != first_kind[0]:  # their offsets from each other would be a guess
            raise TraceError(f"{where}: {fmt.timestamp} {shown(raw)} is {kind}, but line {first_kind[1]}'s "
                             f"is {first_kind[0]}; give every row the same kind")
        if not math.isfinite(ts):
            raise TraceError(f"{where}: {fmt.timestamp} {shown(raw)} is not finite")
        yield ts, _count(row[idx[1]], fmt.prompt, where), _count(row[idx[2]], fmt.answer, where), line_no


def _jsonl_stamps(p: Path, text: str) -> Iterator[Stamp]:
    # Lines end at "\n" alone (a "\r" before it is JSON's whitespace): splitlines() also ends them at
    # U+2028, a form feed or a vertical tab, which a JSON string may hold as they are.
    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{p}:{line_no}"
        try:
            doc = json.loads(line, object_pairs_hook=_once_each)
        except _KeyTwice as exc:  # json keeps the last of them: which one was meant is not ours to guess
            raise TraceError(f"{where}: key {shown(exc.key)} is given twice in one object") from None
        except (ValueError, RecursionError):  # a JSON decode error is a ValueError
            raise TraceError(f"{where}: not a JSON object (a JSON-lines trace has one a line)") from None
        if not isinstance(doc, dict):
            raise TraceError(f"{where}: not a JSON object (a JSON-lines trace has one a line)")
        missing = [k for k in JSONL_KEYS if k not in doc]
        if missing:
            raise TraceError(f"{where}: missing key(s) {', '.join(missing)}; expected {', '.join(JSONL_KEYS)}")
        ms = doc["timestamp"]
        if isinstance(ms, bool) or not isinstance(ms, int | float) or not math.isfinite(_as_float(ms)):
            raise TraceError(f"{where}: timestamp {shown(ms)} is not a finite number of milliseconds")
        yield (ms / 1000.0, _count(doc["input_length"], "input_length", where),
               _count(doc["output_length"], "output_length", where), line_no)


class _KeyTwice(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once (json.loads keeps the last of a key given twice)."""
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise _KeyTwice(key)
        doc[key] = value
    return doc


def _as_float(value: int | float) -> float:
    """A JSON number as a float; an integer past a float's range (400 digits) is infinite."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _check_span(path: Path, first: Stamp, last: Stamp) -> None:
    span = last[0] - first[0]
    if not span <= SPAN_MAX_SECONDS:  # also an overflow to infinity
        raise TraceError(f"{path}: the requests span {span:.3g} s from line {first[3]} to line {last[3]}, more "
                         f"than a year ({SPAN_MAX_SECONDS:.0f} s): a stray timestamp, or seconds mixed with dates")


def window(rows: Sequence[TraceRow], start: float = 0.0, duration: float | None = None) -> list[TraceRow]:
    """The rows in [start, start + duration) of trace time, re-based to start at zero."""
    end = math.inf if duration is None else start + duration
    return [TraceRow(r.offset - start, r.context_tokens, r.generated_tokens)
            for r in rows if start <= r.offset < end]


class TraceReplay:
    """Open-loop arrivals from trace rows; `rate_multiplier` 2 replays twice as fast."""

    lookahead = math.inf
    cross_session = False

    def __init__(self, rows: Sequence[TraceRow], rate_multiplier: float = 1.0, start: float = 0.0) -> None:
        if rate_multiplier <= 0:
            raise UserError("rate_multiplier must be > 0")
        self._rows = rows
        self._i = 0
        self._scale = 1.0 / rate_multiplier
        self._start = start

    def __len__(self) -> int:
        return len(self._rows)

    def next_time(self) -> float:
        if self._i >= len(self._rows):
            return math.inf
        return self._start + self._rows[self._i].offset * self._scale

    def peek(self) -> RequestSpec:
        row = self._rows[self._i]
        # An empty prompt or answer is still one token to the engine (vLLM rejects zero).
        return RequestSpec(self.next_time(), max(row.context_tokens, 1), max(row.generated_tokens, 1))

    def pop(self) -> RequestSpec:
        spec = self.peek()
        self._i += 1
        return spec

    def on_finish(self, record: RequestRecord) -> None:
        return None

    def on_reject(self, spec: RequestSpec, at: float) -> None:
        return None  # a trace's rows arrive when the log says, whatever became of the one before
