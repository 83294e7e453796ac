"""A pool too small for the step: the operator's own reconciler on the 2-hour spike with the GPUs it may
use (`spec.hardware.poolGpus`) cut to 36, while the traffic stays sized for 64. The 3x step then fills
the pool, pods preempt, and every move away costs serving pods for a model load a wave. What must hold
is that the operator does not make that worse than staying: before the full-pool fixes (docs/bench-history.md,
"A full pool under a step") this run reached 49.8% TTFT with 1,160 s past the cliff, as it
shed pods for a shape that carries half as much, or rolled one pod per load for over two hours.
"""

from __future__ import annotations

import pytest

from infertune_lab.bench.cases import peak_demand
from infertune_lab.bench.runner import PolicyRun, run_policy
from infertune_lab.bench.suite import Options, prepare
from infertune_lab.bench.tuned import Infertune, bench_resource

TWIN_POOL_GPUS = 64
ALLOWED_GPUS = 36
DURATION = 7_200.0


@pytest.fixture(scope="module")
def short_pool_run() -> PolicyRun:
    prepared = prepare("spike", Options(pool_gpus=TWIN_POOL_GPUS, duration=DURATION))
    setup, arrivals = prepared.setup, prepared.case.arrivals()
    resource = bench_resource(ALLOWED_GPUS, setup.load_seconds, peak_demand(arrivals, 0.0, 900.0))
    return run_policy(setup, Infertune(resource))


def test_a_pool_short_of_the_step_is_not_made_worse_by_leaving_it(short_pool_run: PolicyRun) -> None:
    result = short_pool_run.result
    assert result.sla_attainment_ttft >= 0.85, f"TTFT within the SLO {result.sla_attainment_ttft:.2%}"
    assert result.sla_attainment_tps >= 0.99, f"TPS within the SLO {result.sla_attainment_tps:.2%}"
    assert result.seconds_past_cliff <= 600, f"{result.seconds_past_cliff:.0f} s past the cliff"


def test_the_operator_never_holds_more_than_the_gpus_it_may_use(short_pool_run: PolicyRun) -> None:
    assert short_pool_run.result.peak_gpus <= ALLOWED_GPUS
    assert max(p.asked_gpus for p in short_pool_run.timeline) <= ALLOWED_GPUS
