"""The held-out traces of docs/bench.md ("Four shapes with rates of their own"): a RAG-shaped trace, long
generations, on/off bursts and a heavy-tailed mix, each an hour of `TIMESTAMP,ContextTokens,GeneratedTokens`
rows (seconds), written where the command says:

    .venv/bin/python -m benchmarks.heldout_traces DIR

Their rates are their own (replayed with `--rate-multiplier 1`), chosen so that the hindsight-best fleet needs
half to three quarters of 64 GPUs, and their shapes are none the operator was tuned on. Not a `make bench` module
(no `bench_` prefix): it only writes the inputs the section's commands replay.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

HOUR = 3600.0
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def arrivals(rng: np.random.Generator, rate: Callable[[float], float], peak: float) -> FloatArray:
    """A Poisson process whose rate varies with time, by thinning one at the peak rate."""
    t, out = 0.0, []
    while True:
        t += rng.exponential(1.0 / peak)
        if t >= HOUR:
            return np.array(out)
        if rng.random() < rate(t) / peak:
            out.append(t)


def lognormal(rng: np.random.Generator, median: float, sigma: float, n: int, low: int, high: int) -> IntArray:
    return np.clip(np.round(rng.lognormal(np.log(median), sigma, n)), low, high).astype(np.int64)


def write(directory: Path, name: str, times: FloatArray, prompts: IntArray, answers: IntArray) -> None:
    path = directory / f"{name}.csv"
    rows = "".join(f"{t:.3f},{p},{a}\n" for t, p, a in zip(times, prompts, answers, strict=True))
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    print(f"{path}: {len(times):,} requests ({len(times) / HOUR:.2f}/s); prompt mean/median "
          f"{prompts.mean():,.0f}/{np.median(prompts):,.0f}, answer mean/median {answers.mean():,.0f}/"
          f"{np.median(answers):,.0f}")


def surges(t: float) -> float:
    """Two 10-minute surges at twice the base rate."""
    return 2.0 if 900 <= t < 1500 or 2400 <= t < 3000 else 1.0


def rag(directory: Path, name: str, base: float, seed: int) -> None:
    """Long prompts (median 7,000 tokens, 1K-32K), short answers (median 150)."""
    rng = np.random.default_rng(seed)
    times = arrivals(rng, lambda t: base * surges(t), 2 * base)
    write(directory, name, times, lognormal(rng, 7000, 0.35, len(times), 1000, 32000),
          lognormal(rng, 150, 0.5, len(times), 8, 1200))


def long_generations(directory: Path) -> None:
    """Short prompts (median 300), long answers (median 1,500, up to 6,000), a steady 3 req/s."""
    rng = np.random.default_rng(102)
    times = arrivals(rng, lambda t: 3.0, 3.0)
    write(directory, "longgen", times, lognormal(rng, 300, 0.5, len(times), 20, 4000),
          lognormal(rng, 1500, 0.55, len(times), 50, 6000))


def on_off(directory: Path) -> None:
    """Chat-sized requests at 5.5 req/s, with 5-minute bursts at 4x about every 20 minutes."""
    rng = np.random.default_rng(103)
    starts = [s + rng.uniform(-120, 120) for s in (300.0, 1500.0, 2700.0)]
    times = arrivals(rng, lambda t: 22.0 if any(s <= t < s + 300 for s in starts) else 5.5, 22.0)
    write(directory, "bursty", times, lognormal(rng, 1000, 0.8, len(times), 20, 16000),
          lognormal(rng, 130, 0.8, len(times), 1, 2000))


def heavy_tailed(directory: Path) -> None:
    """A steady 11.5 req/s: nine in ten small (median 800-token prompts), one in ten 16K tokens or more."""
    rng = np.random.default_rng(104)
    times = arrivals(rng, lambda t: 11.5, 11.5)
    n = len(times)
    big = rng.random(n) < 0.10
    prompts = np.where(big, np.minimum(16000 + np.round(rng.exponential(8000, n)), 100000).astype(np.int64),
                       lognormal(rng, 800, 0.6, n, 10, 8000))
    answers = np.where(big, lognormal(rng, 400, 0.6, n, 10, 4000), lognormal(rng, 150, 0.6, n, 1, 2000))
    write(directory, "heavymix", times, prompts, answers)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m benchmarks.heldout_traces DIR", file=sys.stderr)
        return 2
    directory = Path(argv[0])
    directory.mkdir(parents=True, exist_ok=True)
    rag(directory, "rag", 7.5, 101)
    long_generations(directory)
    on_off(directory)
    heavy_tailed(directory)
    rag(directory, "rag_half", 3.75, 105)  # the same shape at half the rate, for a 32-GPU pool
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
