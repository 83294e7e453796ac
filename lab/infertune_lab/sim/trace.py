"""Trace replay: CSV files with columns `TIMESTAMP,ContextTokens,GeneratedTokens` (the Azure LLM
inference traces; infertune_lab/data holds the 2023 code trace), as an open-loop traffic source.

The whole file is parsed and checked before anything runs, so a malformed trace fails with one
error naming its line and no partial replay ever starts. TIMESTAMP is an ISO date-time (any
number of fractional digits) or plain seconds. Each row is one request with no session (the
traces carry none), so only preemption recompute can hit the prefix cache.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from infertune.errors import UserError
from infertune.textfile import read_text
from infertune_lab.sim.records import RequestRecord, RequestSpec

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
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


def _timestamp(raw: str) -> float:
    text = raw.strip()
    try:
        return float(text)
    except ValueError:
        pass
    # fromisoformat takes 7 fractional digits only from 3.11 on, and only in some layouts.
    head, dot, frac = text.partition(".")
    if dot:
        text = f"{head}.{(frac + '000000')[:6]}"
    return datetime.fromisoformat(text).timestamp()


def _count(raw: str, column: str, where: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise TraceError(f"{where}: {column} {raw!r} is not an integer") from None
    if value < 0:
        raise TraceError(f"{where}: {column} is negative ({value})")
    if value > TOKENS_MAX:
        raise TraceError(f"{where}: {column} {raw.strip()[:20]!r} is more than {TOKENS_MAX:,} tokens")
    return value


def load_trace(path: str | Path) -> list[TraceRow]:
    """Parses and validates a whole trace; raises TraceError naming the first bad line."""
    p = Path(path)
    try:  # a missing file, a directory or bytes that are not text, each in one line
        text = read_text(p, "--trace")
    except UserError as exc:
        raise TraceError(str(exc)) from None
    with io.StringIO(text, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise TraceError(f"{p}: empty file, expected a header {','.join(COLUMNS)}")
        names = [h.strip() for h in header]
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise TraceError(f"{p}:1: missing column(s) {', '.join(missing)} (header: {','.join(names)[:200]!r})")
        idx = [names.index(c) for c in COLUMNS]
        stamps: list[tuple[float, int, int, int]] = []
        for line_no, row in enumerate(reader, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            where = f"{p}:{line_no}"
            if len(row) < len(names):
                raise TraceError(f"{where}: expected {len(names)} fields, got {len(row)}")
            try:
                ts = _timestamp(row[idx[0]])
            except ValueError:
                raise TraceError(f"{where}: TIMESTAMP {row[idx[0]]!r} is not a date-time or seconds") \
                    from None
            if not math.isfinite(ts):
                raise TraceError(f"{where}: TIMESTAMP {row[idx[0]]!r} is not finite")
            context = _count(row[idx[1]], "ContextTokens", where)
            generated = _count(row[idx[2]], "GeneratedTokens", where)
            stamps.append((ts, context, generated, line_no))
    if not stamps:
        raise TraceError(f"{p}: no requests after the header")
    # Merged logs are not always in order; replay is by time.
    stamps.sort(key=lambda s: s[0])
    _check_span(p, stamps[0], stamps[-1])
    first = stamps[0][0]
    return [TraceRow(ts - first, context, generated) for ts, context, generated, _ in stamps]


def _check_span(path: Path, first: tuple[float, int, int, int], last: tuple[float, int, int, int]) -> None:
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
