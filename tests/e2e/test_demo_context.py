"""Contexts growing from 40K to 100K tokens on the demo's stack: the operator lowers concurrency or
adds replicas before the first preemption, never lets a replica reach the cliff, and keeps KV use
above the headroom line no longer than a running shape is allowed to run there.

The headroom line is the planner's margin, not a wall: a new layout may cross it 5% of the time at
its sized load and a running one is torn down only past 25% (planner/candidates.py), so that a
request shape drifting across the line does not restart every replica. A sample above the line is
the margin in use; the cliff and a preemption are the failures."""

from __future__ import annotations

import pytest

from infertune.model.early_warning import CLIFF_USAGE
from infertune.planner.candidates import RUNNING_KV_RISK
from infertune_lab.demo.measure import Sample
from infertune_lab.sim.scenario import Phase
from tests.e2e.conftest import Loop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]


def _relieved(sample: Sample, first: dict[str, int]) -> bool:
    """Fewer streams per replica, or more replicas, than the layout the run started with."""
    return ((sample.max_num_seqs or first["maxNumSeqs"]) < first["maxNumSeqs"]
            or (sample.replicas_wanted or 0) > first["replicas"] or (sample.tp or 0) > first["tensorParallelSize"])


async def test_growing_contexts_are_met_before_the_first_preemption_and_never_at_the_cliff(loop: Loop) -> None:
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
    assert fullest.kv_max < CLIFF_USAGE, f"KV {fullest.kv_max:.0%} at {fullest.t:.0f} s: at the cliff"
    grown = [s for s in rec.samples if s.t >= 40]
    over_line = [s.t for s in grown if s.kv_max > 1 - loop.headroom]
    assert len(over_line) <= RUNNING_KV_RISK * len(grown), (
        f"KV above the {1 - loop.headroom:.0%} line in {len(over_line)} of {len(grown)} s once contexts grew: "
        f"{[round(t) for t in over_line]}")
