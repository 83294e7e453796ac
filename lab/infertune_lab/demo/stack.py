"""The whole product on one machine, as an async context manager: kmock's emulated cluster, a
simulated fleet paced by the wall clock, the fleet agent, and the real operator, which reads the
metrics source the resource names: Debian's Prometheus scraping the pods (through the agent's
file_sd file), or the pods themselves (the Pod objects the agent writes carry their IPs).

    async with DemoStack(settings, prometheus) as stack:
        await stack.apply(demo_resource(stack.port, stack.prometheus_url))
        await stack.wait_ready(1)
        stack.start_traffic(scenario.traffic(seed))     # the scenario's clock starts now
        ...
        status = await stack.status("kimi-k2")

Everything runs in real time (speed 1): Prometheus computes rates per wall second, so a sped-up
fleet would inflate every rate the operator reads. Time is compressed in the resource instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from infertune.controller import OperatorContext
from infertune_lab.demo.agent import FleetAgent
from infertune_lab.demo.cluster import INFERENCE_DEPLOYMENTS, SERVING_POLICIES, KubeHttp, emulated_cluster
from infertune_lab.demo.operator import running_operator
from infertune_lab.demo.prometheus import PrometheusProcess, free_port
from infertune_lab.demo.resource import policies
from infertune_lab.demo.traffic import Delayed
from infertune_lab.sim.config import ReplicaConfig
from infertune_lab.sim.live import LiveFleet
from infertune_lab.sim.traffic import TrafficSource

Obj = dict[str, Any]


@dataclass(frozen=True)
class StackSettings:
    load_delay: float = 15.0  # the model load, equal to the resource's spec.engine.startupSeconds
    poll_seconds: float = 1.0
    cycle_seconds: float = 1.0
    # The rate() window: 6 scrapes of 1 s. Its lag (half the window) is a thirtieth of a load in
    # production; a 15 s window against the demo's 15 s load lagged half of one.
    window: str = "6s"
    base: ReplicaConfig = ReplicaConfig(model="kimi-k2.6", gpu="b200")
    seed: int = 0


class DemoStack:
    def __init__(self, settings: StackSettings = StackSettings(), prometheus: PrometheusProcess | None = None) -> None:
        self.settings = settings
        self.prometheus = prometheus
        self.port = free_port()
        self.live = LiveFleet(seed=settings.seed)
        self.traffic_started_at: float | None = None  # fleet time of the scenario's t=0
        self._file_sd: Path | None = None
        if prometheus is not None and prometheus.file_sd_dir is not None:
            self._file_sd = prometheus.file_sd_dir / f"demo-{uuid.uuid4().hex[:8]}.json"
        self._exit = contextlib.AsyncExitStack()
        self.kube: KubeHttp | None = None
        self.agent: FleetAgent | None = None
        self.operator: OperatorContext | None = None

    @property
    def prometheus_url(self) -> str | None:
        return None if self.prometheus is None else self.prometheus.url

    async def __aenter__(self) -> DemoStack:
        try:
            self.kube = await self._exit.enter_async_context(emulated_cluster())
            for policy in policies():
                await self.kube.create(SERVING_POLICIES, policy)
            self.live.start()
            self._exit.callback(self.live.stop)
            self.agent = FleetAgent(self.kube, self.live, self.settings.base, self.settings.load_delay,
                                    self._file_sd)
            agent_task = asyncio.create_task(self.agent.run(), name="fleet-agent")
            self._exit.push_async_callback(_cancel, agent_task)
            if self._file_sd is not None:
                self._exit.callback(self._file_sd.unlink, missing_ok=True)
            self.operator = await self._exit.enter_async_context(running_operator(
                self.kube.base_url, self.settings.poll_seconds, self.settings.cycle_seconds, self.settings.window))
        except BaseException:
            await self._exit.aclose()
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._exit.aclose()

    # --- driving ---------------------------------------------------------------------------------
    def _api(self) -> KubeHttp:
        if self.kube is None:
            raise RuntimeError("the stack is not started")
        return self.kube

    async def apply(self, resource: Obj) -> None:
        await self._api().create(INFERENCE_DEPLOYMENTS, resource)

    async def patch_spec(self, namespace: str, name: str, spec: Obj) -> None:
        """A user's edit: the spec changes and the generation goes up, as the API server would do."""
        current = await self.resource(namespace, name)
        generation = int(((current or {}).get("metadata") or {}).get("generation", 1)) + 1
        await self._api().patch(INFERENCE_DEPLOYMENTS, namespace, name,
                                {"metadata": {"generation": generation}, "spec": spec})

    async def resource(self, namespace: str, name: str) -> Obj | None:
        return await self._api().get(INFERENCE_DEPLOYMENTS, namespace, name)

    def ready_replicas(self, namespace: str, name: str) -> int:
        assert self.agent is not None
        return sum(p.ready for p in self.agent.pods if (p.namespace, p.deployment) == (namespace, name))

    async def wait_ready(self, replicas: int, namespace: str = "inference", name: str = "kimi-k2",
                         timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while self.ready_replicas(namespace, name) < replicas:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{namespace}/{name}: {replicas} ready replica(s) not reached in {timeout:.0f} s")
            await asyncio.sleep(0.2)

    def start_traffic(self, source: TrafficSource) -> float:
        """Users start arriving now: the source's t=0 is this fleet instant (returned)."""
        with self.live.lock:
            offset = self.live.fleet.now
            self.live.fleet.traffic = Delayed(source, offset)
        self.traffic_started_at = offset
        return offset

    def scenario_time(self) -> float:
        """Seconds since the traffic started (fleet time before that)."""
        return self.live.now - (self.traffic_started_at or 0.0)


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
