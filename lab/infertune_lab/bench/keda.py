"""A KEDA ScaledObject with one Prometheus trigger, as vLLM production-stack configures it.

production-stack (docs/source/use_cases/autoscaling-keda.rst, helm/templates/scaledobject-vllm.yaml):
trigger `vllm:num_requests_waiting`, threshold '5', pollingInterval 15, cooldownPeriod 360,
minReplicaCount 1. What KEDA does with that (keda.sh ScaledObject spec; pkg/scaling):

- it creates an HPA with an External metric whose target is AverageValue = threshold (the default
  metricType), so replicas = ceil(sum of the metric / 5) with the HPA's tolerance, stabilisation and
  rate limits (bench.hpa);
- it polls the trigger every pollingInterval for *activation* (value > activationThreshold, 0) and
  scales 0 <-> 1 itself; `cooldownPeriod` is the wait after the last active poll before it scales
  to zero, so it only matters with minReplicaCount 0. With production-stack's minReplicaCount 1
  every scale-down goes through the HPA's 300 s stabilisation window.

The metric is summed over pods (`sum(vllm:num_requests_waiting)`): KEDA's Prometheus scaler
rejects a query that returns one series per pod ("returned multiple elements"), so the chart's
bare metric name only works with one replica, and a working setup sums it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from infertune_lab.bench.hpa import Hpa, external_average_replicas

THRESHOLD = 5.0
POLLING_INTERVAL = 15.0
COOLDOWN_PERIOD = 360.0


@dataclass
class Keda:
    max_replicas: int
    min_replicas: int = 1
    threshold: float = THRESHOLD
    activation_threshold: float = 0.0
    cooldown_seconds: float = COOLDOWN_PERIOD
    hpa: Hpa = field(init=False)
    last_active: float = -math.inf

    def __post_init__(self) -> None:
        # KEDA sets the HPA's minReplicas to max(minReplicaCount, 1): 1 <-> 0 is its own job.
        self.hpa = Hpa(max(self.min_replicas, 1), self.max_replicas)

    def desired(self, now: float, current: int, waiting_total: float) -> int:
        """The replica count after this sync, given the Deployment's replicas and the metric."""
        active = waiting_total > self.activation_threshold
        if active:
            self.last_active = now
        if current == 0:
            return max(self.min_replicas, 1) if active else 0
        if self.min_replicas == 0 and not active and now - self.last_active >= self.cooldown_seconds:
            return 0
        wanted = external_average_replicas(current, waiting_total, self.threshold)
        return self.hpa.normalize(current, wanted, now)
