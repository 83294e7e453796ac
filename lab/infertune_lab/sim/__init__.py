"""The digital twin: simulated vLLM replicas in virtual time, fleets, traffic, trace replay, an exporter.

    from infertune_lab.sim import ReplicaConfig, Fleet, ClosedLoop, shape
    fleet = Fleet(ClosedLoop(shape("coding-agent"), concurrency=16))
    fleet.add_replica(ReplicaConfig(model="kimi-k2.6", gpu="b200", tp=8))
    records = fleet.run_until(600.0)

`LiveFleet` (infertune_lab.sim.live) runs the same fleet against the wall clock and serves each
replica's /metrics; `sweep` (infertune_lab.sim.sweep) is the closed-loop concurrency sweep.
"""

from infertune_lab.sim.config import ReplicaConfig
from infertune_lab.sim.engine import Engine
from infertune_lab.sim.fleet import ROUTERS, Fleet, Replica, summarize, uniform_fleet
from infertune_lab.sim.records import ReplicaSample, RequestRecord, RequestSpec
from infertune_lab.sim.trace import TraceError, TraceReplay, load_trace, window
from infertune_lab.sim.traffic import (
    ARRIVALS,
    SHAPES,
    ClosedLoop,
    OpenSessions,
    SessionShape,
    TrafficSource,
    arrivals,
    fixed,
    shape,
)

__all__ = [
    "ARRIVALS",
    "ROUTERS",
    "SHAPES",
    "ClosedLoop",
    "Engine",
    "Fleet",
    "OpenSessions",
    "Replica",
    "ReplicaConfig",
    "ReplicaSample",
    "RequestRecord",
    "RequestSpec",
    "SessionShape",
    "TraceError",
    "TraceReplay",
    "TrafficSource",
    "arrivals",
    "fixed",
    "load_trace",
    "shape",
    "summarize",
    "uniform_fleet",
    "window",
]
