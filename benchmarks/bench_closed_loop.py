"""The closed-loop benchmark (`infertune bench --scenario all`): every policy through every scenario
on the twin, with the wall time per scenario and in all, and the peak RSS of the processes."""

from __future__ import annotations

import resource
import time

from infertune_lab.bench.cases import NAMES
from infertune_lab.bench.report import markdown
from infertune_lab.bench.suite import Options, run_scenario


def run() -> None:
    start = time.perf_counter()
    for name in NAMES:
        result = run_scenario(name, Options(), progress=lambda line: None)
        print(markdown(result))
        print(f"\n  {name}: {result.duration / 3600:g} simulated h x {len(result.results)} policies in "
              f"{result.wall_seconds:.1f} s wall\n", flush=True)
    wall = time.perf_counter() - start
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"whole benchmark: {wall:.1f} s wall; peak RSS {own:.0f} MiB (parent), {workers:.0f} MiB (largest worker)")


if __name__ == "__main__":
    run()
