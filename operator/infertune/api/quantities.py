"""Parsers for the spec's float-free scalars: Go-style durations ("90s", "1h30m", "1500ms") and
decimal strings ("6", "5.50"), as Kubernetes API conventions ask instead of floats."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from infertune.errors import SpecError

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
DECIMAL_PATTERN = r"^[0-9]+(\.[0-9]+)?$"

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")


def parse_duration(text: str, field: str = "duration") -> float:
    """Seconds in a Go-style duration; SpecError naming `field` when it is not one."""
    if not isinstance(text, str) or not re.fullmatch(DURATION_PATTERN, text.strip()):
        raise SpecError(f"{field}: {text!r} is not a duration like '30s', '5m' or '1500ms'")
    return sum(float(num) * _UNIT_SECONDS[unit] for num, unit in _PART.findall(text.strip()))


def parse_decimal(text: str, field: str = "value") -> float:
    """A non-negative decimal string as a float, for the arithmetic inside the pure core."""
    if not isinstance(text, str) or not re.fullmatch(DECIMAL_PATTERN, text.strip()):
        raise SpecError(f"{field}: {text!r} is not a decimal string like '6' or '5.50'")
    try:
        return float(Decimal(text.strip()))
    except InvalidOperation:  # pragma: no cover - the pattern already excludes this
        raise SpecError(f"{field}: {text!r} is not a decimal") from None


def format_duration(seconds: float) -> str:
    """The shortest duration string that round-trips through parse_duration (for status)."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60 or seconds % 60:
        return f"{seconds:g}s"
    if seconds % 3600:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"


def format_figure(value: float, spec: str) -> str:
    """A figure for a table or a sentence: "-" where there is none (NaN, or the infinity of a ratio
    to a KV pool of zero), never "nan" or "inf%"."""
    return format(value, spec) if math.isfinite(value) else "-"
