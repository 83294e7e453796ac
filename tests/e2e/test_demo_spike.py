"""A 3x spike in session arrivals on the demo's stack: the operator scales up before the SLA is breached."""

from __future__ import annotations

import pytest

from infertune_lab.demo.summary import first_breach, windows
from infertune_lab.sim.scenario import Phase
from tests.e2e.conftest import Loop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]


async def test_a_3x_spike_is_met_with_a_scale_up_before_the_sla_is_breached(loop: Loop) -> None:
    # TP4 only: the test is about scaling through a spike, so the layout must not change under it (with
    # TP8 allowed the operator may move to TP8 c=18 before the spike, which the spike then fits).
    await loop.start(tensorParallelSizes=[4])
    first = (await loop.status())["applied"]
    loop.traffic(Phase(0, 0.15), Phase(15, 0.15), Phase(18, 0.45))
    await loop.until(60)
    rec = loop.recorder
    assert rec is not None

    # The spike is real: more streams wanted a slot than the starting layout has.
    peak = max(s.running + s.waiting for s in rec.samples)
    assert peak > first["replicas"] * first["maxNumSeqs"], f"peak {peak} streams fits the starting layout"
    scale_ups = [s.t for s in rec.samples if (s.replicas_wanted or 0) > first["replicas"]]
    assert scale_ups, f"no scale-up; decisions: {rec.decisions}"
    breach = first_breach(windows(rec.requests(), rec.origin, 60), loop.slo)
    assert breach is None or scale_ups[0] < breach, (
        f"scaled up at {scale_ups[0]:.0f} s, SLA first missed in the window from {breach:.0f} s")
    # Every decision is an Event a user sees in `kubectl describe`, not only the first one posted.
    assert loop.stack.kube is not None
    reasons = [e.get("reason") for e in await loop.stack.kube.list("v1/events", "inference")]
    assert len(reasons) > 2 and {"DemandRising", "SLOMissed"} & set(reasons), reasons
