"""The demo's stack for the closed-loop tests: one Debian Prometheus for the whole session (it takes
~6 s to start), and per test a fresh emulated cluster, fleet agent, simulated fleet and operator,
with time compressed as in `infertune demo --fast`."""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.error
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from infertune.api.quantities import parse_duration
from infertune.planner.types import SloTarget
from infertune_lab.demo.cluster import DEPLOYMENTS
from infertune_lab.demo.measure import Recorder
from infertune_lab.demo.prometheus import PrometheusProcess, installed
from infertune_lab.demo.resource import demo_resource
from infertune_lab.demo.run import NAME, NAMESPACE, follow, profile, slo_of
from infertune_lab.demo.script import DEMO_AGENT
from infertune_lab.demo.stack import DemoStack
from infertune_lab.sim.scenario import Phase, Scenario


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    if not installed():
        pytest.skip("Debian's prometheus is not installed (make system-deps)")
    workdir = tmp_path_factory.mktemp("e2e-prometheus")
    server = PrometheusProcess(workdir, file_sd_dir=workdir / "targets").start()
    yield server
    server.stop()


@dataclass
class Loop:
    """One running closed loop: the stack, its resource, and what the demo records of it."""

    stack: DemoStack
    recorder: Recorder | None = None
    slo: SloTarget = SloTarget()
    headroom: float = 0.0

    async def start(self, mode: str = "Auto", **tuning: Any) -> None:
        """Applies the demo resource (its first replica loads before any user arrives)."""
        resource = demo_resource(self.stack.port, self.stack.prometheus_url, mode=mode,
                                 compression=profile(fast_run=True).compression)
        resource["spec"]["tuning"] |= tuning
        self.slo, self.headroom = slo_of(resource)  # the coding-agent policy's, as the operator merges it
        await self.stack.apply(resource)
        await self.stack.wait_ready(1)

    def traffic(self, *phases: Phase, duration: float = 600.0, seed: int = 0) -> None:
        scenario = Scenario("e2e", duration, DEMO_AGENT, phases)
        self.recorder = Recorder(self.stack.live, self.stack.start_traffic(scenario.traffic(seed)))

    async def until(self, t: float) -> dict[str, Any]:
        """Follows the loop to scenario time `t`; the resource's last status."""
        assert self.recorder is not None, "start the traffic first"
        return await follow(self.stack, self.recorder, t)

    async def status(self) -> dict[str, Any]:
        return ((await self.stack.resource(NAMESPACE, NAME)) or {}).get("status") or {}

    async def deployment(self) -> dict[str, Any]:
        assert self.stack.kube is not None
        found = await self.stack.kube.get(DEPLOYMENTS, NAMESPACE, NAME)
        assert found is not None, "the operator has not created the Deployment"
        return found


@pytest.fixture
async def loop(prometheus: PrometheusProcess) -> AsyncIterator[Loop]:
    settings = profile(fast_run=True).settings
    # The tests share one Prometheus and the demo's names: the last test's pods stay in a rate() window
    # after they are gone, and a Recommend test that ends overloaded would read as this test's first
    # TTFT (a scale-up before any traffic). Each test starts once that window holds nothing of theirs.
    await _window_clear(prometheus, parse_duration(settings.window))
    async with DemoStack(settings, prometheus) as stack:
        yield Loop(stack)


async def _window_clear(prometheus: PrometheusProcess, window_s: float, timeout: float = 60.0) -> None:
    selector = f'count(count_over_time({{__name__=~"vllm:.+"}}[{window_s + 2.0:g}s]))'
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, urllib.error.URLError):
            if not prometheus.query(selector):
                return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the last test's series are still in a {window_s:g} s rate window after {timeout:g} s")


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in status.get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return {}
