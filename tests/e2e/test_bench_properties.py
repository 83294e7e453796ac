"""What must hold on traffic nobody tuned for: randomised scenarios (sim.scenario.random_scenario: a
random request shape, seasonality, trend, steps, bursts and model load), drawn from seeds by
hypothesis, each run by the operator's own reconciler and by static sized for the peak on the same
pool in virtual time:

- never beyond the pool: no GPU held past it, and no pod asked for past it;
- a bounded number of re-layouts: at most two an hour (a re-layout costs a model load of double pay);
- infertune's attainment (the lower of TTFT and TPS) no worse than static sized for the peak, at no
  more GPU-hours.

Each run is short (an hour scored after a 10-minute warm-up, on a 32-GPU pool), so the examples run
in a few minutes; a failing example names its seed: `infertune bench --scenario random --seed N
--pool-gpus 32 --duration 3600 --policies infertune,static` replays it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from infertune_lab.bench.capacity import HAND_PICKED
from infertune_lab.bench.cases import peak_demand
from infertune_lab.bench.frontier import attainment_of
from infertune_lab.bench.knobs import infertune_resource
from infertune_lab.bench.oracle import static_layout
from infertune_lab.bench.policies import Static
from infertune_lab.bench.runner import PolicyRun, run_policy
from infertune_lab.bench.suite import Options, prepare
from infertune_lab.bench.tuned import Infertune

POOL_GPUS = 32
DURATION = 3_600.0
RELAYOUTS_PER_HOUR = 2
EXAMPLES = 8
SEEDS = st.integers(min_value=0, max_value=2**31 - 1)
GENERATION_SEED = 16  # the same scenarios for every property (their runs are shared) and on every machine
# Every example is a full closed-loop run: no shrinking (each step would rerun it), no deadline.
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, database=None, phases=(Phase.explicit, Phase.generate),
                    suppress_health_check=list(HealthCheck))


@dataclass(frozen=True)
class Runs:
    note: str
    infertune: PolicyRun
    static: PolicyRun


@functools.cache
def runs(seed: int, pool_gpus: int = POOL_GPUS) -> Runs:
    """The seed's random scenario, run by infertune and by static sized for its peak (cached: every
    property reads the same runs)."""
    prepared = prepare("random", Options(seed=seed, pool_gpus=pool_gpus, duration=DURATION))
    case, setup = prepared.case, prepared.setup
    arrivals = case.arrivals()
    picked = prepared.sweep.measure(case.shape_at(0.0), *HAND_PICKED)
    static = Static(static_layout(picked, peak_demand(arrivals, 0.0, case.duration), pool_gpus))
    ours = Infertune(infertune_resource(setup, arrivals, 900.0))
    return Runs(f"seed {seed}: {case.note}", run_policy(setup, ours), run_policy(setup, static))


@seed(GENERATION_SEED)
@given(scenario_seed=SEEDS)
@PROPERTY
def test_never_beyond_the_pool(scenario_seed: int) -> None:
    r = runs(scenario_seed)
    for run in (r.infertune, r.static):
        assert run.result.peak_gpus <= POOL_GPUS, r.note
    asked = max(p.asked_gpus for p in r.infertune.timeline)
    assert asked <= POOL_GPUS, f"{r.note}: infertune asked for {asked} GPUs"


@seed(GENERATION_SEED)
@given(scenario_seed=SEEDS)
@PROPERTY
def test_a_bounded_number_of_relayouts_per_hour(scenario_seed: int) -> None:
    r = runs(scenario_seed)
    bound = RELAYOUTS_PER_HOUR * math.ceil(DURATION / 3_600.0)
    assert r.infertune.result.relayouts <= bound, r.note


@pytest.mark.xfail(strict=True, reason="static sized for the peak knows the peak in advance: a burst or step of "
                                       "1.9-4.5x inside one model load is absorbed only by capacity held before it, "
                                       "which static holds at 1.2-4.6x the GPU-hours (docs/bench.md, 'The misses on "
                                       "random scenarios 1-28, traced')")
@seed(GENERATION_SEED)
@given(scenario_seed=SEEDS)
@PROPERTY
def test_no_worse_than_static_sized_for_the_peak_at_no_more_gpu_hours(scenario_seed: int) -> None:
    r = runs(scenario_seed)
    ours, static = r.infertune.result, r.static.result
    assert attainment_of(ours) >= attainment_of(static), (
        f"{r.note}: attainment {attainment_of(ours):.2%} vs static's {attainment_of(static):.2%}")
    assert ours.gpu_hours <= static.gpu_hours, (
        f"{r.note}: {ours.gpu_hours:.1f} GPU-h vs static's {static.gpu_hours:.1f}")


def test_a_chat_draw_bursting_on_a_quiet_fleet_is_met_by_the_slots_past_the_floor() -> None:
    """Seed 606, a draw nobody tuned for (docs/bench.md, "Twenty-four draws never run before"): chat
    sessions at under 1 req/s, then a 6x burst inside a 590 s model load. Capped at the streams that keep
    the per-stream floor (TP4 c=23, then c=9-11 once measured), one or two pods queued it: 83.25% within
    SLA where static sized for the peak met it all. A cap past the floor (planner/candidates.py) takes it
    at once on the pods already serving."""
    r = runs(606)
    ours, static = r.infertune.result, r.static.result
    assert attainment_of(ours) >= 0.99 and attainment_of(ours) >= attainment_of(static), r.note
    assert ours.gpu_hours < static.gpu_hours, r.note


def test_a_burst_cap_is_not_left_for_a_saving_the_demands_swing_undoes() -> None:
    """Seed 705 at the default 64-GPU pool, a draw nobody tuned for (docs/bench.md, "Six more at the default
    pool"): chat sessions at about 1-1.6 req/s on two pods of TP4 c=64, a cap past the per-stream floor.
    Judged on one cycle's dip (1.13 req/s, one pod of c=19), a move for cost rolled them to two pods of c=19,
    as many GPUs, and the 2.3x step inside its 610 s load then queued on 38 slots: 89.43% within SLA. The
    saving is judged at the highest demand read within the last load too, and there it is none."""
    r = runs(705, pool_gpus=64)
    ours, static = r.infertune.result, r.static.result
    assert ours.relayouts == 0, r.note
    assert attainment_of(ours) >= 0.99 and attainment_of(ours) >= attainment_of(static), r.note
    assert ours.gpu_hours < static.gpu_hours, r.note


@pytest.mark.parametrize("seed", [0, 1])
def test_the_random_scenario_is_sized_for_the_pool_and_reproducible(seed: int) -> None:
    first = prepare("random", Options(seed=seed, pool_gpus=POOL_GPUS, duration=DURATION)).case
    again = prepare("random", Options(seed=seed, pool_gpus=POOL_GPUS, duration=DURATION)).case
    assert first.scenario == again.scenario and first.load_seconds == again.load_seconds
    assert first.load_seconds is not None and 60.0 <= first.load_seconds <= 900.0
    assert f"needs 85% of {POOL_GPUS} GPUs" in first.note
