"""The Prometheus source: a fixed batch of instant queries per poll, all evaluated at one instant.

The controller reads the bearer token from a Secret and hands over the string; this module only
talks HTTP. Retries are off: a poll that fails is reported as a fault and the next poll tries
again, which is better than a poll that silently takes four timeouts.
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import requests
import urllib3
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from infertune.api.observation import MetricsFault
from infertune.errors import SourceError
from infertune.model.forecast import DemandPoint
from infertune.observe.dialects import KV_USAGE_DIALECTS, dialect_of
from infertune.observe.figures import DeploymentKey, Expected, PodFigures, build_observation, stream_context
from infertune.observe.fitmemory import FitSample
from infertune.observe.promql import Labels, Query, demand_range_query, fit_range_queries, poll_queries
from infertune.observe.quantile import quantiles
from infertune.observe.snapshot import Snapshot


class QueryError(SourceError):
    """A Prometheus query failed; `fault` says how, in the words a condition uses."""

    def __init__(self, fault: MetricsFault, message: str) -> None:
        super().__init__(message)
        self.fault = fault


_RANK = {name: i for i, name in enumerate(KV_USAGE_DIALECTS)}
_STATUS = re.compile(r"HTTP Status Code (\d+)")


def classify(exc: BaseException, url: str) -> QueryError:
    """Maps a client exception to the fault a user can act on."""
    if isinstance(exc, QueryError):
        return exc
    if isinstance(exc, ValueError):  # requests' JSONDecodeError is a RequestException too: test first
        return QueryError(MetricsFault.MALFORMED, f"{url} sent an answer that is not Prometheus JSON")
    # Without retries urllib3's own errors surface unwrapped; NewConnectionError subclasses its
    # TimeoutError, so it is tested first.
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        return QueryError(MetricsFault.UNREACHABLE, f"cannot reach {url}: connection refused")
    if isinstance(exc, requests.exceptions.Timeout | urllib3.exceptions.TimeoutError):
        return QueryError(MetricsFault.TIMEOUT, f"{url} did not answer within the timeout")
    if isinstance(exc, requests.exceptions.RequestException | urllib3.exceptions.HTTPError | OSError):
        return QueryError(MetricsFault.UNREACHABLE, f"cannot reach {url}: {type(exc).__name__}")
    if isinstance(exc, PrometheusApiClientException):
        match = _STATUS.search(str(exc))
        code = int(match.group(1)) if match else 0
        if code >= 500:
            return QueryError(MetricsFault.SERVER_ERROR, f"{url} answered HTTP {code}")
        if code in (401, 403):
            return QueryError(MetricsFault.UNREACHABLE, f"{url} answered HTTP {code}: check the token")
        return QueryError(MetricsFault.MALFORMED, f"{url} rejected the query: HTTP {code}")
    return QueryError(MetricsFault.MALFORMED, f"{url} sent an answer that is not Prometheus JSON")


def _value(item: Mapping[str, Any]) -> float:
    return float(item["value"][1])  # "NaN" and "+Inf" parse to float too


def _capacity_tokens(key: str, metric: Mapping[str, Any], values: list[Any]) -> float | None:
    """A pod's KV pool in tokens from a range series: SGLang's gauge, or vLLM's cache_config_info labels."""
    if key == "cache_config":
        blocks, size = metric.get("num_gpu_blocks", ""), metric.get("block_size", "")
        return float(int(blocks) * int(size)) if blocks.isdigit() and size.isdigit() else None
    finite = [float(v) for _, v in values if math.isfinite(float(v)) and float(v) > 0]
    return finite[-1] if finite else None


class _PodAccumulator:
    """Collects one pod's figures across the batch of queries."""

    def __init__(self, pod: str) -> None:
        self.pod = pod
        self.dialect: str | None = None
        self._kv_name = ""
        self.series_count = 1
        self.sample_time: float | None = None
        self.gauges: dict[str, float] = {}
        self.rates: dict[str, float] = {}
        self.ttft_buckets: dict[float, float] = {}
        self.running_mean: float | None = None
        self.capacity: int | None = None
        self.reset = False

    def absorb(self, query: Query, item: Mapping[str, Any]) -> None:
        metric, value = item["metric"], _value(item)
        if query.key == "identity":
            # vLLM keeps the deprecated gauge beside the new one for a while: prefer the newer name.
            name = metric.get("__name__", "")
            if dialect_of(name) and (self.dialect is None or _RANK[name] < _RANK.get(self._kv_name, 99)):
                self.dialect, self._kv_name = dialect_of(name), name
            self.series_count = max(self.series_count, int(value))
        elif query.key == "sample_time":
            self.sample_time = value
        elif query.key in ("kv_usage", "running", "waiting"):
            self.gauges[query.key] = value
        elif query.key == "capacity_tokens":
            if math.isfinite(value):
                self.capacity = int(value)
        elif query.key == "cache_config":
            blocks, size = metric.get("num_gpu_blocks"), metric.get("block_size")
            if blocks and size and blocks.isdigit() and size.isdigit():
                self.capacity = int(blocks) * int(size)
        elif query.key == "running_mean":
            self.running_mean = value
        elif query.key == "resets":
            self.reset = value > 0
        elif query.shape == "buckets":
            self.ttft_buckets[float(metric["le"])] = value
        else:
            self.rates[query.key] = value

    def figures(self) -> PodFigures:
        return PodFigures(pod=self.pod, dialect=self.dialect, sample_time=self.sample_time,
                          gauges=self.gauges, rates=self.rates, ttft=quantiles(self.ttft_buckets),
                          running_mean=self.running_mean,
                          capacity_tokens=self.capacity, series_count=self.series_count,
                          counter_reset=self.reset)


class PrometheusSource:
    """`MetricsSource` over a Prometheus HTTP API (prometheus-api-client)."""

    name = "prometheus"

    def __init__(self, url: str, *, token: str | None = None, ca_path: str | None = None,
                 insecure: bool = False, timeout: float = 10.0, window: str = "1m",
                 stale_after: float = 120.0, labels: Labels | None = None, namespace: str | None = None,
                 deployment: str | None = None, clock: Callable[[], float] = time.time) -> None:
        self.url = url.rstrip("/")
        self.window = window
        self.stale_after = stale_after
        self.labels = labels = labels or Labels()
        self.namespace = namespace
        self.deployment = deployment
        self.clock = clock
        session = requests.Session()
        session.verify = ca_path if ca_path else not insecure
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self.client = PrometheusConnect(self.url, headers=headers, session=session, timeout=timeout,
                                        # False, not 0: with 0 urllib3 wraps a read timeout in a
                                        # MaxRetryError that requests reports as ConnectionError.
                                        retry=Retry(total=False))
        self.queries = poll_queries(window, labels, namespace, deployment)

    def close(self) -> None:
        self.client.close()

    def _query(self, query: Query, at: float) -> list[dict[str, Any]]:
        try:
            result = self.client.custom_query(query.promql, params={"time": f"{at:.3f}"})
        except Exception as exc:  # every client failure becomes a fault, never a traceback
            raise classify(exc, self.url) from exc
        if not isinstance(result, list) or not all(isinstance(i, dict) and "metric" in i for i in result):
            raise QueryError(MetricsFault.MALFORMED, f"{self.url}: unexpected answer to {query.key}")
        return result

    def poll(self, expected: Mapping[DeploymentKey, Expected] | None = None,
             now: float | None = None) -> Snapshot:
        at = self.clock() if now is None else now
        pods: dict[DeploymentKey, dict[str, _PodAccumulator]] = defaultdict(dict)
        deployment_buckets: dict[DeploymentKey, dict[float, float]] = defaultdict(dict)
        issued = 0
        lab = self.labels
        try:
            for query in self.queries:
                issued += 1
                for item in self._query(query, at):
                    metric = item["metric"]
                    key = (metric.get(lab.namespace, ""), metric.get(lab.deployment, ""))
                    if query.level == "deployment":
                        deployment_buckets[key][float(metric["le"])] = _value(item)
                        continue
                    pod = metric.get(lab.pod, "")
                    acc = pods[key].setdefault(pod, _PodAccumulator(pod))
                    acc.absorb(query, item)
        except QueryError as err:
            return Snapshot(time=at, queries=issued, fault=err.fault, message=str(err), source=self.name)
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            return Snapshot(time=at, queries=issued, fault=MetricsFault.MALFORMED,
                            message=f"{self.url}: malformed series ({type(exc).__name__}: {exc})",
                            source=self.name)
        expected = expected or {}
        keys = set(expected) | {k for k, v in pods.items() if any(a.dialect for a in v.values())}
        observations = {
            key: build_observation(
                key,
                # A pod seen only in rate queries (no KV gauge at all) is not a serving replica we know.
                [a.figures() for a in pods.get(key, {}).values() if a.dialect is not None],
                expected.get(key), at, self.stale_after, quantiles(deployment_buckets.get(key, {})))
            for key in keys
        }
        return Snapshot(time=at, observations=observations, queries=issued, source=self.name)

    def fit_history(self, start: float, end: float,
                    step: str = "30s") -> dict[DeploymentKey, list[FitSample]]:
        """Clean (batch, inter-token seconds, context) windows per deployment from range queries: 7 in all.

        Windows with a preemption are dropped; weights grow with the tokens a window decoded,
        because a window of three tokens says little about the pass time.
        """
        series: dict[str, dict[tuple[str, str, str, float], float]] = {}
        capacity: dict[tuple[str, str, str], float] = {}
        begin, finish = datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC)
        lab = self.labels
        for query in fit_range_queries(step, lab, self.namespace, self.deployment):
            try:
                result = self.client.custom_query_range(query.promql, begin, finish, step)
            except Exception as exc:
                raise classify(exc, self.url) from exc
            points: dict[tuple[str, str, str, float], float] = {}
            for item in result:
                m = item["metric"]
                ident = (m.get(lab.namespace, ""), m.get(lab.deployment, ""), m.get(lab.pod, ""))
                if query.key in ("capacity_tokens", "cache_config"):
                    capacity_of = _capacity_tokens(query.key, m, item["values"])
                    if capacity_of is not None:
                        capacity[ident] = capacity_of
                    continue
                for t, v in item["values"]:
                    points[(*ident, float(t))] = float(v)
            series[query.key] = points
        out: dict[DeploymentKey, list[FitSample]] = defaultdict(list)
        for point, itl in series["itl_mean"].items():
            batch = series["running_mean"].get(point)
            tokens = series["tokens"].get(point)
            preempted = series["preemptions"].get(point)
            if batch is None or tokens is None or not (math.isfinite(itl) and math.isfinite(batch)):
                continue
            if preempted is None or preempted > 0 or batch < 1 or itl <= 0:
                continue
            context = stream_context(series["kv_mean"].get(point), capacity.get(point[:3]), batch)
            out[(point[0], point[1])].append(FitSample(batch, itl, min(1.0, tokens / 100.0), point[3], context))
        return dict(out)

    def demand_history(self, start: float, end: float, step: str,
                       rate_window: str = "5m") -> dict[DeploymentKey, list[DemandPoint]]:
        """The demand of every deployment over [start, end], one point per step: what a started
        operator learns the season and the bursts from before its own polls have seen them."""
        query = demand_range_query(rate_window, self.labels, self.namespace, self.deployment)
        begin, finish = datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC)
        try:
            result = self.client.custom_query_range(query.promql, begin, finish, step)
        except Exception as exc:
            raise classify(exc, self.url) from exc
        out: dict[DeploymentKey, list[DemandPoint]] = defaultdict(list)
        for item in result:
            m = item["metric"]
            key = (m.get(self.labels.namespace, ""), m.get(self.labels.deployment, ""))
            for t, v in item["values"]:
                try:
                    time_, rate = float(t), float(v)
                except (TypeError, ValueError):
                    continue
                # A figure outside its range (NaN, infinite, negative) is not demand; it is dropped.
                if math.isfinite(time_) and math.isfinite(rate) and rate >= 0:
                    out[key].append(DemandPoint(time_, rate))
        return dict(out)

