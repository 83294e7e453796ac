"""Contexts growing from 40K to 100K tokens on the demo's stack: the operator lowers concurrency or
adds replicas before the first preemption, and KV use never crosses the headroom line."""

from __future__ import annotations

import pytest

from infertune_lab.demo.measure import Sample
from infertune_lab.sim.scenario import Phase
from tests.e2e.conftest import Loop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]


def _relieved(sample: Sample, first: dict[str, int]) -> bool:
    """Fewer streams per replica, or more replicas, than the layout the run started with."""
    return ((sample.max_num_seqs or first["maxNumSeqs"]) < first["maxNumSeqs"]
            or (sample.replicas_wanted or 0) > first["replicas"] or (sample.tp or 0) > first["tensorParallelSize"])


async def test_growing_contexts_are_met_before_the_first_preemption_and_below_the_headroom_line(loop: Loop) -> None:
    await loop.start()
    first = (await loop.status())["applied"]
    loop.traffic(Phase(0, 0.3, 40_000), Phase(10, 0.3, 40_000), Phase(40, 0.3, 100_000))
    await loop.until(75)
    rec = loop.recorder
    assert rec is not None

    relief = [s.t for s in rec.samples if _relieved(s, first)]
    assert relief, f"the layout never made room: {rec.decisions}"
    preempted = [s.t for s in rec.samples if s.preemptions]
    assert not preempted or relief[0] < preempted[0], (
        f"first preemption at {preempted[0]:.0f} s, room made at {relief[0]:.0f} s")
    fullest = max(rec.samples, key=lambda s: s.kv_max)
    assert fullest.kv_max <= 1 - loop.headroom, f"KV {fullest.kv_max:.0%} at {fullest.t:.0f} s"
