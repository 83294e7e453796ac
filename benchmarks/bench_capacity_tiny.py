"""The capacity sweep on a trace of tiny requests (`make bench BENCH=capacity_tiny`).

`infertune bench --trace` measures every layout (TP 4 and 8 x max-num-seqs 4..64) on the twin before it
runs a policy. A trace of 20-token prompts and 5-token answers puts 82-191 requests a second on a replica,
so windows of fixed simulated time (the closed loop's 1,500 s, each probe's 3,300 s on four replicas)
simulated 10^5 to 10^6 requests each; the sweep bounds every window at capacity.WINDOW_REQUESTS a replica.
This prints the wall time of that trace's whole table, layout by layout (docs/simulator.md, "The capacity
sweep").
"""

from __future__ import annotations

import time

from infertune_lab.bench.capacity import CONCURRENCY_GRID, CapacitySweep
from infertune_lab.bench.cases import trace_shape
from infertune_lab.bench.suite import _replica
from infertune_lab.bench.tuned import bench_resource, slo_of
from infertune_lab.sim.trace import TraceRow

PROMPT_TOKENS, ANSWER_TOKENS, ROWS = 20, 5, 200  # the smallest trace `bench --trace` takes is 100 rows


def run() -> None:
    resolved = bench_resource(64, None).resolved()
    sweep = CapacitySweep(_replica(resolved.model.name, resolved.gpu.name), slo_of(resolved))
    shape = trace_shape([TraceRow(i / 2, PROMPT_TOKENS, ANSWER_TOKENS) for i in range(ROWS)])
    print(f"capacity sweep of a trace of {ROWS} requests, {PROMPT_TOKENS}-token prompts and {ANSWER_TOKENS}-token "
          f"answers ({len(resolved.request.tp_sizes) * len(CONCURRENCY_GRID)} layouts):", flush=True)
    start = time.perf_counter()
    for tp in resolved.request.tp_sizes:
        for c in CONCURRENCY_GRID:
            layout = time.perf_counter()
            row = sweep.measure(shape, tp, c)
            print(f"  TP{tp} c={c:>2}: flat out {row.requests_per_second:6.1f} req/s, sustained "
                  f"{row.sustained_rps:6.1f}; {time.perf_counter() - layout:5.1f} s wall", flush=True)
    print(f"  the whole table: {time.perf_counter() - start:.1f} s wall", flush=True)


if __name__ == "__main__":
    run()
