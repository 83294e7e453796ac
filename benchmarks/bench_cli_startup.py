"""Command-line start-up: wall time and peak memory of `infertune plan --help` (its own parser only) against
`infertune --help` (every command imported, as every command did before a command imported only itself),
each a fresh interpreter, median of seven."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time

RUNS = 7


def _one(args: list[str]) -> tuple[float, float]:
    """Wall seconds and the child's peak RSS in MiB (the largest child so far: runs go from light to heavy)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "infertune.cli", *args], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, timeout=300)
    return time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def _median(args: list[str]) -> tuple[float, float]:
    _one(args)  # warm the file cache
    runs = [_one(args) for _ in range(RUNS)]
    return statistics.median(w for w, _ in runs), max(m for _, m in runs)


def run() -> None:
    one, one_mib = _median(["plan", "--help"])
    every, every_mib = _median(["--help"])
    print(f"infertune plan --help (its own parser): median {one:.2f} s, peak RSS {one_mib:.0f} MiB")
    print(f"infertune --help (every command imported): median {every:.2f} s, peak RSS {every_mib:.0f} MiB")
    print(f"  one command / every command: {one / every:.2f}x the wall time")
