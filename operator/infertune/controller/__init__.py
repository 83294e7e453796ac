"""The kopf controller: one metrics poller for the whole operator, per-object handlers that render and
apply the workload and run the tuning cycle, status, Events, logs and the operator's own metrics."""

from infertune.controller.context import OperatorContext
from infertune.controller.handlers import build_registry

__all__ = ["OperatorContext", "build_registry"]
