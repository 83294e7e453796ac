"""Counts of what the fuzz tests tried and how each case ended, for docs/reliability.md.

A fuzz test calls `tally(name, outcome)` once per generated case. With INFERTUNE_FUZZ_TALLY set to a
path, the session writes the counts there as JSON when it ends (tests/conftest.py); otherwise they are
only kept in memory."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path

TALLY: defaultdict[str, Counter[str]] = defaultdict(Counter)
ENV = "INFERTUNE_FUZZ_TALLY"


def tally(test: str, outcome: str) -> None:
    TALLY[test][outcome] += 1


def write() -> None:
    path = os.environ.get(ENV)
    if path and TALLY:
        Path(path).write_text(json.dumps({k: dict(v) for k, v in sorted(TALLY.items())}, indent=2) + "\n")
