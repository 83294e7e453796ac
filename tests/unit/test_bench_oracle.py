"""The hindsight oracle's choices and the static sizing, on hand-made capacity tables."""

from __future__ import annotations

from infertune.planner.types import Layout
from infertune_lab.bench.capacity import LayoutCapacity
from infertune_lab.bench.cases import peak_demand
from infertune_lab.bench.oracle import Window, fewest_gpus, staged, static_layout


def cap(tp: int, c: int, sustained: float, flat_out: float | None = None) -> LayoutCapacity:
    return LayoutCapacity(tp, c, flat_out or sustained * 1.2, 1.0, 1.0, sustained)


def test_oracle_takes_the_layout_with_fewest_gpus() -> None:
    rows = [cap(4, 8, 0.30), cap(8, 16, 0.50), cap(8, 32, 0.0)]  # TP8 c=32 misses the SLO
    # 2.0 req/s: TP4 needs 7 x 4 = 28 GPUs, TP8 c=16 needs 4 x 8 = 32.
    assert fewest_gpus(rows, 2.0, 64, None) == Layout(4, 8, 7)
    # 3.0 req/s: TP4 needs 10 x 4 = 40, TP8 needs 6 x 8 = 48.
    assert fewest_gpus(rows, 3.0, 64, None) == Layout(4, 8, 10)
    # Never a layout that misses the SLO, however cheap its flat-out figure.
    assert all(fewest_gpus(rows, d, 64, None).max_num_seqs != 32 for d in (0.5, 1.0, 5.0))


def test_oracle_prefers_its_running_layout_on_a_tie() -> None:
    rows = [cap(4, 8, 0.25), cap(8, 16, 0.50)]  # both 16 GPUs for 2.0 req/s
    assert fewest_gpus(rows, 2.0, 64, Layout(8, 16, 3)) == Layout(8, 16, 4)
    assert fewest_gpus(rows, 2.0, 64, Layout(4, 8, 3)) == Layout(4, 8, 8)


def test_oracle_over_the_pool_takes_the_most_capacity_that_fits() -> None:
    rows = [cap(4, 8, 0.30), cap(8, 16, 0.70)]
    assert fewest_gpus(rows, 50.0, 32, None) == Layout(8, 16, 4)  # 4 x 0.7 > 8 x 0.3


def test_staging_starts_the_next_window_one_load_ahead() -> None:
    windows = [Window(0, 3600, 1.0, Layout(8, 16, 2)), Window(3600, 7200, 3.0, Layout(8, 16, 6)),
               Window(7200, 10800, 1.0, Layout(4, 8, 4))]
    assert staged(windows, 1000.0, 900.0) == Layout(8, 16, 2)
    assert staged(windows, 2800.0, 900.0) == Layout(8, 16, 6)  # grows before the window opens
    assert staged(windows, 6000.0, 900.0) == Layout(8, 16, 6)
    assert staged(windows, 6400.0, 900.0) == Layout(4, 8, 4)  # the next shape loads ahead
    # Shrinking waits for the window itself.
    shrink = [Window(0, 3600, 3.0, Layout(8, 16, 6)), Window(3600, 7200, 1.0, Layout(8, 16, 2))]
    assert staged(shrink, 3000.0, 900.0) == Layout(8, 16, 6)
    assert staged(shrink, 3600.0, 900.0) == Layout(8, 16, 2)


def test_peak_demand_is_the_busiest_bin() -> None:
    arrivals = [float(t) for t in range(0, 300)] + [300 + t / 3 for t in range(900)]  # 1/s then 3/s
    assert peak_demand(arrivals, 0.0, 600.0) == 3.0
    assert peak_demand(arrivals, 0.0, 300.0) == 1.0


def test_static_is_sized_once_for_the_peak() -> None:
    assert static_layout(cap(4, 8, 0.25), 2.6, 64) == Layout(4, 8, 11)
    # A layout that never meets the SLO is sized at its flat-out throughput.
    assert static_layout(cap(4, 8, 0.0, flat_out=0.5), 2.6, 64) == Layout(4, 8, 6)
    assert static_layout(cap(4, 8, 0.01), 2.6, 64) == Layout(4, 8, 16)  # the pool caps it
