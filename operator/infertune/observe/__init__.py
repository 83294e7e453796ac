"""Observation: what the serving engines report, read in one batched poll for every deployment.

Two sources implement `MetricsSource`: `PrometheusSource` (a fixed set of PromQL queries, each
grouped by namespace, deployment and pod) and `PodsSource` (each pod's `/metrics`, parsed with
prometheus_client). Both speak vLLM (current and older names) and SGLang, and both turn every
failure into an Observation with `available=False` and a `MetricsFault` reason. `FitMemory` keeps
what the online per-pass fit has learned per layout, in a form the resource's status can hold;
`PressureHistory` feeds the cliff early warning.
"""

from infertune.observe.figures import DeploymentKey, Expected, PodFigures, build_observation
from infertune.observe.fitmemory import FitMemory, FitSample
from infertune.observe.history import PressureHistory, pressure_point
from infertune.observe.pods import PodsSource, PodTarget
from infertune.observe.prometheus import PrometheusSource, QueryError
from infertune.observe.promql import Labels, poll_queries
from infertune.observe.serialize import fit_to_dict, observation_to_dict
from infertune.observe.snapshot import MetricsSource, Snapshot

__all__ = [
    "DeploymentKey",
    "Expected",
    "FitMemory",
    "FitSample",
    "Labels",
    "MetricsSource",
    "PodFigures",
    "PodTarget",
    "PodsSource",
    "PressureHistory",
    "PrometheusSource",
    "QueryError",
    "Snapshot",
    "build_observation",
    "fit_to_dict",
    "observation_to_dict",
    "poll_queries",
    "pressure_point",
]
