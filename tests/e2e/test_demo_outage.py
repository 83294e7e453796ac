"""A Prometheus outage on the demo's stack: the operator holds and says why, then resumes."""

from __future__ import annotations

import asyncio

import pytest

from infertune.actuate.workload import INPUT_HASH
from infertune_lab.demo.prometheus import PrometheusProcess
from infertune_lab.sim.scenario import Phase
from tests.e2e.conftest import Loop, condition

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(170)]


async def _wait_condition(loop: Loop, kind: str, status: str, by: float) -> dict[str, object]:
    """Follows the loop until the condition has `status`, or fails at scenario time `by`."""
    while loop.stack.scenario_time() < by:
        found = condition(await loop.until(loop.stack.scenario_time() + 1), kind)
        if found.get("status") == status:
            return found
    raise AssertionError(f"{kind} never became {status} by {by:.0f} s")


async def test_a_prometheus_outage_holds_then_resumes(loop: Loop, prometheus: PrometheusProcess) -> None:
    await loop.start()
    # Demand that climbs through the outage: an operator that acted on stale figures would scale.
    loop.traffic(Phase(0, 0.15), Phase(20, 0.15), Phase(30, 0.5))
    await _wait_condition(loop, "MetricsAvailable", "True", by=30)

    prometheus.kill()
    try:
        down = await _wait_condition(loop, "MetricsAvailable", "False", by=loop.stack.scenario_time() + 20)
        # Refused once the port is closed; lost when the kill lands on a kept-alive connection mid-answer.
        lost = ("connection refused", "connection lost")
        assert down["reason"] == "SourceUnreachable" and any(w in str(down["message"]) for w in lost), down
        held_from = loop.stack.scenario_time()
        hashes = set()
        for _ in range(10):
            hashes.add((await loop.deployment())["metadata"]["annotations"][INPUT_HASH])
            await loop.until(loop.stack.scenario_time() + 1)
        held_until = loop.stack.scenario_time()
    finally:
        await asyncio.to_thread(prometheus.start)
    assert len(hashes) == 1, "the workload changed while the metrics were down"
    rec = loop.recorder
    assert rec is not None
    during = [d for d in rec.decisions if held_from <= d.t <= held_until]
    assert all(d.action in ("Hold", "None") for d in during), during

    await _wait_condition(loop, "MetricsAvailable", "True", by=loop.stack.scenario_time() + 40)
    resumed_at = loop.stack.scenario_time()
    # A restarted Prometheus answers before its samples are fresh again: the cycles hold on
    # MetricsStale until a scrape and a rate window have passed (how long varies with the machine's load).
    outage = ("SourceUnreachable", "MetricsStale")
    decided: list[object] = []
    status = await loop.until(resumed_at + 1)
    while not decided and loop.stack.scenario_time() < resumed_at + 30:
        status = await loop.until(loop.stack.scenario_time() + 1)
        decided = [d for d in rec.decisions if d.t >= resumed_at - 1 and d.reason not in outage]
    assert status["observed"]["metricsAvailable"] is True
    assert decided, f"no cycle decided anything after Prometheus returned: {rec.decisions[-5:]}"
