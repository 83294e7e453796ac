"""What the kopf handlers share, passed to kopf as its `memo`: the Kubernetes client, the metrics hub
and its one poller, the Cluster port over the API server, and the Reconciler that owns every
resource's cycle."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from infertune.actuate.apply import KubeClient
from infertune.controller.hub import MetricsHub
from infertune.controller.kube import KubeCluster
from infertune.controller.poller import Poller
from infertune.controller.reconciler import Reconciler
from infertune.controller.sources import Ref, SourceRegistry
from infertune.controller.telemetry import Telemetry
from infertune.observe.http import AllowList
from infertune.observe.promql import DEFAULT_METRICS_WINDOW
from infertune.observe.snapshot import MetricsSource


@dataclass
class OperatorContext:
    kube: KubeClient
    source: MetricsSource | None = None  # the default Prometheus (--prometheus-url)
    poll_seconds: float = 15.0
    cycle_seconds: float = 30.0
    clock: Callable[[], float] = time.time
    telemetry: Telemetry = field(default_factory=Telemetry)
    metrics_window: str = DEFAULT_METRICS_WINDOW
    default_token: Ref | None = None  # (kind, namespace, name, key) of the default Prometheus' token
    hub: MetricsHub = field(default_factory=MetricsHub)
    # Where resources may point the operator (`--allowed-prometheus-url`); empty: anywhere.
    allowed_urls: AllowList = field(default_factory=AllowList)

    def __post_init__(self) -> None:
        self.cluster = KubeCluster(self.kube)
        sources = SourceRegistry(self.kube, self.source, self.metrics_window, self.default_token,
                                 self.allowed_urls)
        self.poller = Poller(self.kube, self.hub, sources, self.clock, self.poll_seconds)
        self.reconciler = Reconciler(self.cluster, self.hub, self.clock, self.telemetry)
