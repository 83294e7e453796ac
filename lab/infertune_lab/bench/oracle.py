"""The hindsight oracle and the static sizing, both read off the capacity table.

The oracle knows the whole run in advance. Per window it takes the heaviest five minutes of
demand, and from every layout (allowed TP x the concurrency grid) that met both SLOs in the sweep
it picks the one needing the fewest GPUs (ties: the layout it already runs, then more headroom).
It stages the next window's replicas one model load ahead, so they serve from the window's first
second; it then runs through the same fleet as everyone else and reports what it achieved.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from infertune.errors import UserError
from infertune.planner.types import Layout
from infertune_lab.bench.capacity import CapacitySweep, LayoutCapacity
from infertune_lab.bench.cases import BenchCase, peak_demand


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    demand_rps: float
    layout: Layout


def fewest_gpus(rows: Sequence[LayoutCapacity], demand: float, pool_gpus: int, previous: Layout | None) -> Layout:
    """The qualifying layout that serves `demand` on the fewest GPUs within the pool; if none can,
    the one that serves the most."""
    options = []
    for row in rows:
        if not row.qualifies():
            continue
        replicas = max(1, math.ceil(demand / row.sustained_rps))
        same = previous is not None and (row.tp, row.max_num_seqs) == (previous.tensor_parallel_size,
                                                                       previous.max_num_seqs)
        options.append((replicas * row.tp > pool_gpus, replicas * row.tp, not same,
                        -row.sustained_rps / row.tp, Layout(row.tp, row.max_num_seqs, replicas)))
    if not options:
        raise UserError("no layout in the sweep meets the SLO")
    over, _, _, _, layout = min(options, key=lambda o: o[:4])
    if over:  # the pool cannot serve the demand: the layout with the most capacity that fits
        fits = [r for r in rows if r.qualifies()]
        best = max(fits, key=lambda r: (pool_gpus // r.tp) * r.sustained_rps)
        layout = Layout(best.tp, best.max_num_seqs, max(1, pool_gpus // best.tp))
    return layout


def schedule(case: BenchCase, sweep: CapacitySweep, tps: Sequence[int], pool_gpus: int,
             window_seconds: float, arrivals: Sequence[float]) -> list[Window]:
    windows: list[Window] = []
    previous: Layout | None = None
    start = 0.0
    while start < case.duration:
        end = min(start + window_seconds, case.duration)
        demand = peak_demand(arrivals, start, end)
        # Contexts only grow in these scenarios: the window's end is its heaviest shape.
        layout = fewest_gpus(sweep.table(case.shape_at(end), tps), demand, pool_gpus, previous)
        windows.append(Window(start, end, demand, layout))
        previous, start = layout, end
    return windows


def staged(windows: Sequence[Window], now: float, load_seconds: float) -> Layout:
    """What the oracle wants running at `now`: its window's layout, grown for any later window
    within one model load of the same shape, or already the next shape if one starts by then."""
    k = max(0, bisect.bisect_right([w.start for w in windows], now) - 1)
    current = windows[k].layout
    for window in windows[k + 1:]:
        if window.start > now + load_seconds:
            break
        if not window.layout.same_shape(current):
            return window.layout
        current = replace(current, replicas=max(current.replicas, window.layout.replicas))
    return current


def static_layout(capacity: LayoutCapacity, peak: float, pool_gpus: int) -> Layout:
    """A hand-picked layout sized once for a peak demand (requests/s): at the rate it sustains within
    the SLO, or, if it never does, at its flat-out throughput (all a load test of it can offer)."""
    rate = capacity.sustained_rps or capacity.requests_per_second
    replicas = max(1, math.ceil(peak / rate)) if rate > 0 else 1
    return Layout(capacity.tp, capacity.max_num_seqs, min(replicas, max(1, pool_gpus // capacity.tp)))
