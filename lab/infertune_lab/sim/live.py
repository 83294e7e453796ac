"""A live simulated fleet: the twin paced by the wall clock, each replica serving its own /metrics.

    from infertune_lab.sim import ReplicaConfig
    from infertune_lab.sim.live import LiveFleet
    from infertune_lab.sim.traffic import OpenSessions, poisson, shape

    traffic = OpenSessions(shape("coding-agent"), poisson(0.05, random.Random(0)))
    with LiveFleet([ReplicaConfig(tp=8)] * 2, traffic, speed=10.0) as live:
        live.targets                  # ["127.0.0.1:41234", "127.0.0.1:41235"] -> /metrics, /health
        live.pods                     # ["sim-0", "sim-1"]
        pod = live.add_replica(ReplicaConfig(tp=8, load_delay_seconds=60))  # ready 60 virtual s later
        live.set_max_num_seqs(pod, 16)
        live.remove_replica("sim-0")  # drains: serves what it holds, then its port closes
        live.now                      # virtual seconds since start

API:
- `LiveFleet(replicas=(), traffic=None, speed=1.0, host="127.0.0.1", router="session-affinity",
  seed=0, tick=0.05, base_port=0, names=None, sample_interval=None)`: `speed` virtual seconds
  per wall second; `base_port` 0 takes free ports, otherwise replica i listens on base_port + i.
- `start()` / `stop()` or a `with` block. `stop()` is idempotent, joins the stepping thread and
  closes every port; a stopped fleet cannot restart.
- `targets`, `pods`, `endpoints` ({pod: "host:port"}), `now`, `records()` (finished requests),
  `view(pod)` (the figures a scrape would see), `file_sd(namespace, deployment)` (Prometheus
  file_sd entries carrying namespace/deployment/pod labels).
- `add_replica(config, name=None, port=0, host=None) -> pod`, `remove_replica(pod, drain=True)`,
  `set_max_num_seqs(pod, n)`. All are thread-safe; the fleet itself sits behind `lock`. `host`
  gives one replica its own address (e.g. 127.0.0.N, as a pod has its own IP), so every replica
  can serve on the same port.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from infertune.errors import UserError
from infertune_lab.sim.config import ReplicaConfig
from infertune_lab.sim.exporter import MetricsServer, ReplicaView
from infertune_lab.sim.fleet import Fleet
from infertune_lab.sim.records import RequestRecord
from infertune_lab.sim.traffic import TrafficSource


class LiveFleet:
    def __init__(self, replicas: Sequence[ReplicaConfig] = (), traffic: TrafficSource | None = None,
                 speed: float = 1.0, host: str = "127.0.0.1", router: str = "session-affinity", seed: int = 0,
                 tick: float = 0.05, base_port: int = 0, names: Sequence[str] | None = None,
                 sample_interval: float | None = None) -> None:
        if speed <= 0:
            raise UserError("speed must be > 0")
        if names is not None and len(names) != len(replicas):
            raise ValueError("names must match replicas one for one")
        self.speed = speed
        self.host = host
        self.tick = tick
        self.base_port = base_port
        self.lock = threading.RLock()
        self.fleet = Fleet(traffic, router, seed, sample_interval)
        self._servers: dict[str, MetricsServer] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wall0 = 0.0
        self._virtual0 = 0.0
        self._closed = False
        labels: list[str | None] = list(names) if names is not None else [None] * len(replicas)
        self._initial = list(zip(labels, replicas, strict=True))
        self.error: BaseException | None = None

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> LiveFleet:
        if self._closed:
            raise RuntimeError("a stopped LiveFleet cannot be restarted")
        if self._thread is not None:
            return self
        try:
            for name, config in self._initial:
                self.add_replica(config, name)
        except BaseException:
            self.stop()
            raise
        self._wall0 = time.monotonic()
        self._virtual0 = self.fleet.now
        self._thread = threading.Thread(target=self._loop, name="sim-live", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            servers = list(self._servers.values())
            self._servers.clear()
        for server in servers:
            server.stop()

    def __enter__(self) -> LiveFleet:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _virtual_now(self) -> float:
        return self._virtual0 + (time.monotonic() - self._wall0) * self.speed

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                with self.lock:
                    self.fleet.run_until(self._virtual_now())
                    gone = [p for p in self._servers if p not in self.fleet.replicas]
                    closing = [self._servers.pop(p) for p in gone]
            except BaseException as exc:  # keep the failure for the owner; the servers go on answering
                self.error = exc
                return
            for server in closing:
                server.stop()
            self._stop.wait(self.tick)

    # --- membership ------------------------------------------------------------------------------
    def add_replica(self, config: ReplicaConfig, name: str | None = None, port: int | None = None,
                    host: str | None = None) -> str:
        with self.lock:
            pod = self.fleet.add_replica(config, name)
            if port is None:
                port = self.base_port + len(self._servers) if self.base_port else 0
            try:
                self._servers[pod] = MetricsServer(functools.partial(self.view, pod), host or self.host, port)
            except UserError:
                self.fleet.remove_replica(pod, drain=False)
                raise
            return pod

    def remove_replica(self, pod: str, drain: bool = True) -> None:
        with self.lock:
            self.fleet.remove_replica(pod, drain)
            server = self._servers.pop(pod) if pod not in self.fleet.replicas else None
        if server is not None:
            server.stop()

    def set_max_num_seqs(self, pod: str, value: int) -> None:
        with self.lock:
            self.fleet.set_max_num_seqs(pod, value)

    # --- views -----------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        with self.lock:
            return self.fleet.now

    @property
    def pods(self) -> list[str]:
        with self.lock:
            return list(self._servers)

    @property
    def endpoints(self) -> dict[str, str]:
        with self.lock:
            return {pod: server.address for pod, server in self._servers.items()}

    @property
    def targets(self) -> list[str]:
        return list(self.endpoints.values())

    def view(self, pod: str) -> ReplicaView | None:
        with self.lock:
            replica = self.fleet.replicas.get(pod)
            if replica is None:
                return None
            return ReplicaView.of(replica.engine, ready=replica.ready_at <= self.fleet.now)

    def records(self) -> list[RequestRecord]:
        with self.lock:
            return list(self.fleet.records)

    def file_sd(self, namespace: str = "default", deployment: str = "sim") -> list[dict[str, Any]]:
        return [{"targets": [address],
                 "labels": {"namespace": namespace, "deployment": deployment, "pod": pod}}
                for pod, address in self.endpoints.items()]
