"""The digital twin: simulated vLLM replicas in virtual time, fleets, traffic, trace replay, an exporter.

    from infertune.sim import ReplicaConfig, Fleet, ClosedLoop, shape
    fleet = Fleet(ClosedLoop(shape("coding-agent"), concurrency=16))
    fleet.add_replica(ReplicaConfig(model="kimi-k2.6", gpu="b200", tp=8))
    records = fleet.run_until(600.0)

`LiveFleet` (infertune.sim.live) runs the same fleet against the wall clock and serves each
replica's /metrics; `sweep` (infertune.sim.sweep) is the closed-loop concurrency sweep.
"""

from infertune.sim.config import ReplicaConfig
from infertune.sim.engine import Engine
from infertune.sim.fleet import ROUTERS, Fleet, Replica, summarize, uniform_fleet
from infertune.sim.records import ReplicaSample, RequestRecord, RequestSpec
from infertune.sim.trace import TraceError, TraceReplay, load_trace, window
from infertune.sim.traffic import (
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
