"""Recommend mode on the demo's stack: the recommendation follows the traffic, the workload does not."""

from __future__ import annotations

import pytest

from infertune.actuate.workload import INPUT_HASH
from infertune_lab.sim.scenario import Phase
from tests.e2e.conftest import Loop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]


def _recommended(status: dict[str, object]) -> tuple[object, ...]:
    rec = status.get("recommendation") or {}
    assert isinstance(rec, dict)
    return rec.get("tensorParallelSize"), rec.get("maxNumSeqs"), rec.get("replicas")


async def test_recommend_mode_changes_only_the_recommendation(loop: Loop) -> None:
    await loop.start(mode="Recommend")
    before = await loop.deployment()
    applied = (await loop.status())["applied"]
    loop.traffic(Phase(0, 0.15), Phase(10, 0.15), Phase(12, 0.5))
    recommendations = set()
    for t in range(5, 55, 5):
        status = await loop.until(t)
        recommendations.add(_recommended(status))
        deployment = await loop.deployment()
        assert deployment["spec"] == before["spec"], f"the Deployment changed at {t} s"
        assert deployment["metadata"]["annotations"][INPUT_HASH] == before["metadata"]["annotations"][INPUT_HASH]
        assert status["applied"] == applied
    recommendations.discard((None, None, None))
    assert len(recommendations) > 1, f"the recommendation never moved: {recommendations}"
    assert loop.stack.ready_replicas("inference", "kimi-k2") == applied["replicas"]
