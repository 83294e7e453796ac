"""The capacity sweep bounds its work in requests, not only in simulated time.

`infertune bench --trace` on a trace of tiny requests (20-token prompts, 5-token answers) was still in its
capacity sweep after 15 minutes: such a replica serves 82-191 requests a second, so each layout's 1,200 s
closed loop held 99,000-229,000 requests and each probe's 2,400 s window 710,000-1,350,000. A window now
ends at 25,000 requests a replica (a probe's run is shortened to hold that on average), which no window of
the named scenarios reaches, so their tables stay what they were to the digit.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from infertune_lab.bench import capacity
from infertune_lab.bench.capacity import LOAD_SHARES, CapacitySweep, LayoutCapacity
from infertune_lab.bench.cases import trace_shape
from infertune_lab.bench.metrics import Slo, attainment
from infertune_lab.bench.suite import _replica
from infertune_lab.bench.tuned import bench_resource, slo_of
from infertune_lab.data import AZURE_CODE_TRACE
from infertune_lab.sim import Fleet, RequestRecord, SessionShape, load_trace
from infertune_lab.sim.traffic import CHAT_TRACE, CODING_AGENT

BOUND = 25_000  # requests a replica in one window: capacity.WINDOW_REQUESTS, as docs/simulator.md gives it

def _sweep(**bounds: int) -> CapacitySweep:
    """A fresh sweep as `infertune bench` builds it: the example resource's replica and SLO."""
    resolved = bench_resource(64, None).resolved()
    return CapacitySweep(_replica(resolved.model.name, resolved.gpu.name), slo_of(resolved), **bounds)


@pytest.fixture
def tiny(tmp_path: Path) -> SessionShape:
    """What `bench --trace` measures a trace of 200 requests of 20 prompt and 5 answer tokens with."""
    path = tmp_path / "tiny.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{i / 2},20,5\n" for i in range(200)))
    return trace_shape(load_trace(path))


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The requests in every window the sweep scores (what it takes attainment over), in order."""
    sizes: list[int] = []

    def scored(records: list[RequestRecord], slo: Slo, unfinished: int = 0) -> tuple[float, float]:
        sizes.append(len(records))
        return attainment(records, slo, unfinished)

    monkeypatch.setattr(capacity, "attainment", scored)
    return sizes


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """The requests every fleet the sweep builds finished, warm-up and drain included, by fleet."""
    finished: Counter[int] = Counter()
    run_until = Fleet.run_until

    def counted(fleet: Fleet, *args: object, **kwargs: object) -> list[RequestRecord]:
        records = run_until(fleet, *args, **kwargs)
        finished[id(fleet)] += len(records)
        return records

    monkeypatch.setattr(Fleet, "run_until", counted)
    return finished


def test_a_tiny_request_closed_loop_ends_at_the_bound_with_the_rate_a_full_window_gives(
        tiny: SessionShape, windows: list[int], simulated: Counter[int]) -> None:
    """TP8 c=64 serves 174 tiny requests a second: its 1,200 s window held 209,072 of them (and its
    warm-up 50,642); it now holds the bound (plus what finished in the same step), and the rate it
    gives is the full window's within 0.2%. The per-stream floor rules the layout out, so no probe runs."""
    row = _sweep().measure(tiny, 8, 64)
    assert len(windows) == 1 and BOUND <= windows[0] < BOUND + 64, windows
    assert sum(simulated.values()) <= 2 * BOUND  # the ramp, the warm-up's share and the window
    assert row.requests_per_second == pytest.approx(209_072 / 1_200, rel=0.002)
    assert row.ttft_attainment == 1.0 and row.tps_attainment == 0.0 and not row.qualifies()


def test_every_window_of_a_tiny_request_layout_holds_at_most_the_bound_a_replica(
        tiny: SessionShape, windows: list[int], simulated: Counter[int]) -> None:
    """TP8 c=4 qualifies, so a probe runs on four replicas: at a bound of 1,000 a replica its closed loop
    holds 1,000 requests, and its probe's shortened run 4,000 on average (Poisson arrivals: +-63), where
    the full 2,400 s held about 730,000 (and its 3,300 s run a million). It still sustains 0.9 of flat out."""
    bound = 1_000
    row = _sweep(window_requests=bound).measure(tiny, 8, 4)
    closed, *probes = windows
    assert bound <= closed < bound + 4
    assert probes and all(3_600 <= p <= 4_400 for p in probes), probes
    assert all(n <= 8 * bound for n in simulated.values()), simulated  # warm-up, window and drain of each run
    assert row.qualifies() and row.sustained_rps == pytest.approx(LOAD_SHARES[0] * row.requests_per_second)


AZURE_CODE = trace_shape(load_trace(AZURE_CODE_TRACE))


@pytest.mark.parametrize(("shape", "expected"), [
    (CODING_AGENT, LayoutCapacity(8, 4, 0.2725, 1.0, 1.0, 0.1635)),
    (CHAT_TRACE.session_shape(), LayoutCapacity(4, 24, 2.715, 1.0, 0.14947820748925722, 0.0)),
    # The named scenarios' largest closed-loop window: 18,303 requests, 73% of the bound.
    (AZURE_CODE, LayoutCapacity(8, 64, 15.2525, 1.0, 0.039337813473201116, 0.0)),
], ids=["coding-agent", "chat-trace", "azure-code"])
def test_a_realistic_shape_measures_what_it_did_before_the_bound_to_the_digit(
        shape: SessionShape, expected: LayoutCapacity) -> None:
    """Measured before the bound (c3cf205): every figure is a count over a count or a time, so equal
    floats mean the same requests were simulated and scored."""
    assert _sweep().measure(shape, expected.tp, expected.max_num_seqs) == expected
