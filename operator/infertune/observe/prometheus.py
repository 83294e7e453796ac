"""The Prometheus source: a fixed batch of instant queries per poll, all evaluated at one instant.

The controller reads the bearer token from a Secret and hands over the string; this module only
talks HTTP, through `observe/http.py`: each request within one total deadline and a size cap, at most
a few at a time, URLs built by yarl from a base URL that carries no query. The answer is checked
against the Prometheus HTTP API's shape before a figure is read from it, and a failure names the
source and the query, never what the source answered. No retries: a poll that fails is reported as a
fault and the next poll tries again, which is better than a poll that silently takes four timeouts.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import yarl

from infertune.api.observation import MetricsFault
from infertune.api.schema import REQUESTS_PER_SECOND_MAX
from infertune.model.forecast import DemandPoint
from infertune.observe.dialects import KV_USAGE_DIALECTS, dialect_of
from infertune.observe.figures import DeploymentKey, Expected, PodFigures, build_observation, stream_context
from infertune.observe.fitmemory import BATCH_MAX, PASS_SECONDS_MAX, FitSample
from infertune.observe.http import Client, FetchFailed, MiB, origin, run, source_url
from infertune.observe.promql import (
    DEFAULT_METRICS_WINDOW,
    Labels,
    Query,
    demand_range_query,
    fit_range_queries,
    poll_queries,
)
from infertune.observe.quantile import quantiles
from infertune.observe.snapshot import Snapshot

# The name other modules use for a failed query: the same fault and fixed message as any fetch.
QueryError = FetchFailed
# A big fleet's answer to one query is a few MiB (10,000 series of ~300 bytes); more is not Prometheus.
MAX_ANSWER_BYTES = 16 * MiB
# Queries in flight per Prometheus: enough that one slow query does not hold the others back.
CONCURRENT_QUERIES = 4
# A series count, a capacity or a bucket bound beyond this is not a number a Prometheus would send.
_MAX_COUNT = 1e9

_RANK = {name: i for i, name in enumerate(KV_USAGE_DIALECTS)}


class _Malformed(Exception):
    """Inside this module only: the answer does not have the API's shape (turned into a fault)."""


def _answer(body: bytes, result_type: str) -> list[dict[str, Any]]:
    """The `data.result` list of a Prometheus API answer, checked item by item."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise _Malformed from None
    if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(doc.get("data"), dict):
        raise _Malformed
    data = doc["data"]
    result = data.get("result")
    if data.get("resultType") != result_type or not isinstance(result, list):
        raise _Malformed
    field = "value" if result_type == "vector" else "values"
    for item in result:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise _Malformed
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in item["metric"].items()):
            raise _Malformed
        points = [item.get(field)] if result_type == "vector" else item.get(field)
        if not isinstance(points, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[1], str) for p in points):
            raise _Malformed
    return result


def _number(text: Any) -> float:
    """A sample value: Prometheus sends "NaN" and "+Inf" too, which the judge sees as such."""
    try:
        return float(text)
    except (TypeError, ValueError):
        raise _Malformed from None


def _value(item: Mapping[str, Any]) -> float:
    return _number(item["value"][1])


def _count(value: float) -> int:
    if not (math.isfinite(value) and 0 <= value <= _MAX_COUNT):
        raise _Malformed
    return int(value)


def _capacity_tokens(key: str, metric: Mapping[str, Any], values: list[Any]) -> float | None:
    """A pod's KV pool in tokens from a range series: SGLang's gauge, or vLLM's cache_config_info labels."""
    if key == "cache_config":
        return _cache_config(metric)
    finite = [v for v in (_number(v) for _, v in values) if math.isfinite(v) and 0 < v <= _MAX_COUNT]
    return finite[-1] if finite else None


def _cache_config(metric: Mapping[str, Any]) -> float | None:
    blocks, size = str(metric.get("num_gpu_blocks", "")), str(metric.get("block_size", ""))
    if not (blocks.isdigit() and size.isdigit() and len(blocks) <= 12 and len(size) <= 6):
        return None
    tokens = int(blocks) * int(size)
    return float(tokens) if 0 < tokens <= _MAX_COUNT else None


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
        self.capacity: int | None = None
        self.reset = False

    def absorb(self, query: Query, item: Mapping[str, Any]) -> None:
        metric, value = item["metric"], _value(item)
        if query.key == "identity":
            # vLLM keeps the deprecated gauge beside the new one for a while: prefer the newer name.
            name = metric.get("__name__", "")
            if dialect_of(name) and (self.dialect is None or _RANK[name] < _RANK.get(self._kv_name, 99)):
                self.dialect, self._kv_name = dialect_of(name), name
            self.series_count = max(self.series_count, _count(value))
        elif query.key == "sample_time":
            self.sample_time = value
        elif query.key in ("kv_usage", "running", "waiting"):
            self.gauges[query.key] = value
        elif query.key == "capacity_tokens":
            if math.isfinite(value) and 0 < value <= _MAX_COUNT:
                self.capacity = int(value)
        elif query.key == "cache_config":
            tokens = _cache_config(metric)
            if tokens is not None:
                self.capacity = int(tokens)
        elif query.key == "resets":
            self.reset = value > 0
        elif query.shape == "buckets":
            bound = _number(metric.get("le"))
            if bound in self.ttft_buckets:  # a bucket twice for one pod: two jobs scrape it (one would overwrite)
                self.series_count = max(self.series_count, 2)
            self.ttft_buckets[bound] = value
        else:
            self.rates[query.key] = value

    def figures(self) -> PodFigures:
        return PodFigures(pod=self.pod, dialect=self.dialect, sample_time=self.sample_time,
                          gauges=self.gauges, rates=self.rates, ttft=quantiles(self.ttft_buckets),
                          capacity_tokens=self.capacity, series_count=self.series_count,
                          counter_reset=self.reset)


class PrometheusSource:
    """`MetricsSource` over the Prometheus HTTP API (`/api/v1/query` and `/api/v1/query_range`)."""

    name = "prometheus"

    def __init__(self, url: str, *, token: str | None = None, ca_path: str | None = None,
                 insecure: bool = False, timeout: float = 10.0, window: str = DEFAULT_METRICS_WINDOW,
                 stale_after: float = 120.0, labels: Labels | None = None, namespace: str | None = None,
                 deployment: str | None = None, clock: Callable[[], float] = time.time,
                 allow_token_over_http: bool = False) -> None:
        """Raises UrlError for a URL the operator will not use, or a token it would send in the clear."""
        self.base: yarl.URL = source_url(url)
        self.url = str(self.base).rstrip("/")
        self.where = origin(self.base)
        self.window = window
        self.stale_after = stale_after
        self.timeout = timeout
        self.labels = labels = labels or Labels()
        self.namespace = namespace
        self.deployment = deployment
        self.clock = clock
        self.http = Client(self.base, token=token, ca_path=ca_path, insecure=insecure, timeout=timeout,
                           max_bytes=MAX_ANSWER_BYTES, limit=CONCURRENT_QUERIES,
                           allow_token_over_http=allow_token_over_http)
        self.queries = poll_queries(window, labels, namespace, deployment)

    def close(self) -> None:
        """Nothing to do from synchronous code: `poll` closes the session it opens, and the poller
        closes its own on its loop with `aclose`."""

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _get(self, endpoint: str, params: Mapping[str, str], query: Query, result_type: str
                   ) -> list[dict[str, Any]]:
        body = await self.http.get(self.base.joinpath("api", "v1", endpoint), params)
        try:
            # Off the loop: a large answer takes a while to parse, and the loop serves every resource.
            return await asyncio.to_thread(_answer, body, result_type)
        except _Malformed:
            raise FetchFailed(MetricsFault.MALFORMED, f"its answer to the {query.key} query is not Prometheus "
                                                      "API JSON", self.where) from None

    # --- one poll -----------------------------------------------------------------------------
    def poll(self, expected: Mapping[DeploymentKey, Expected] | None = None,
             now: float | None = None) -> Snapshot:
        """The poll from synchronous code (the observe command, the tests)."""
        return run(self.http, lambda: self.poll_async(expected, now))

    async def poll_async(self, expected: Mapping[DeploymentKey, Expected] | None = None,
                         now: float | None = None) -> Snapshot:
        """Every query at once (a few in flight), each within the timeout; the first failure ends the poll."""
        at = self.clock() if now is None else now
        params = {"time": f"{at:.3f}"}
        tasks = [asyncio.ensure_future(self._get("query", {"query": q.promql, **params}, q, "vector"))
                 for q in self.queries]
        try:
            answers = await asyncio.gather(*tasks)
        except FetchFailed as err:
            return Snapshot(time=at, queries=sum(t.done() for t in tasks), fault=err.fault, message=str(err),
                            source=self.name)
        finally:
            for task in tasks:
                task.cancel()
        try:
            return await asyncio.to_thread(self._snapshot, answers, expected or {}, at)
        except _Malformed:
            return Snapshot(time=at, queries=len(self.queries), fault=MetricsFault.MALFORMED,
                            message=f"{self.where}: sent series that are not numbers where numbers belong",
                            source=self.name)

    def _snapshot(self, answers: list[list[dict[str, Any]]], expected: Mapping[DeploymentKey, Expected],
                  at: float) -> Snapshot:
        pods: dict[DeploymentKey, dict[str, _PodAccumulator]] = defaultdict(dict)
        deployment_buckets: dict[DeploymentKey, dict[float, float]] = defaultdict(dict)
        repeated: dict[DeploymentKey, float] = {}  # a deployment's TTFT bucket bound sent twice
        lab = self.labels
        for query, result in zip(self.queries, answers, strict=True):
            for item in result:
                metric = item["metric"]
                key = (metric.get(lab.namespace, ""), metric.get(lab.deployment, ""))
                if query.level == "deployment":
                    bound = _number(metric.get("le"))
                    if bound in deployment_buckets[key]:
                        repeated.setdefault(key, bound)
                    deployment_buckets[key][bound] = _value(item)
                    continue
                pod = metric.get(lab.pod, "")
                acc = pods[key].setdefault(pod, _PodAccumulator(pod))
                acc.absorb(query, item)
        keys = set(expected) | {k for k, v in pods.items() if any(a.dialect for a in v.values())}
        observations = {
            key: build_observation(
                key,
                # A pod seen only in rate queries (no KV gauge at all) is not a serving replica we know.
                [a.figures() for a in pods.get(key, {}).values() if a.dialect is not None],
                expected.get(key), at, self.stale_after, quantiles(deployment_buckets.get(key, {})))
            for key in keys
        }
        for key, bound in repeated.items():
            obs = observations.get(key)
            if obs is not None and obs.available:
                # `sum by (le)` answers one series a bound: a second is an answer not to read quantiles from
                # (one silently overwrote the other, and the SLO check reads these quantiles).
                observations[key] = replace(obs, available=False, fault=MetricsFault.DUPLICATE_SERIES,
                                            message=f"the deployment's TTFT histogram sent the bucket le={bound:g} "
                                                    f"twice")
        return Snapshot(time=at, observations=observations, queries=len(self.queries), source=self.name)

    # --- the fit's history ----------------------------------------------------------------------
    def fit_history(self, start: float, end: float,
                    step: str = "30s") -> dict[DeploymentKey, list[FitSample]]:
        return run(self.http, lambda: self.fit_history_async(start, end, step))

    async def fit_history_async(self, start: float, end: float,
                                step: str = "30s") -> dict[DeploymentKey, list[FitSample]]:
        """Clean (batch, inter-token seconds, context) windows per deployment from range queries: 7 in all.

        Windows with a preemption are dropped; weights grow with the tokens a window decoded,
        because a window of three tokens says little about the pass time. FetchFailed on a failure.
        """
        queries = fit_range_queries(step, self.labels, self.namespace, self.deployment)
        params = {"start": f"{start:.3f}", "end": f"{end:.3f}", "step": step}
        tasks = [asyncio.ensure_future(self._get("query_range", {"query": q.promql, **params}, q, "matrix"))
                 for q in queries]
        try:
            answers = await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
        try:
            return await asyncio.to_thread(self._fit_samples, queries, answers, float(params["start"]),
                                           float(params["end"]))
        except _Malformed:
            raise FetchFailed(MetricsFault.MALFORMED, "sent range series that are not numbers", self.where) from None

    def _fit_samples(self, queries: tuple[Query, ...], answers: list[list[dict[str, Any]]],
                     first: float = -math.inf, last: float = math.inf) -> dict[DeploymentKey, list[FitSample]]:
        series: dict[str, dict[tuple[str, str, str, float], float]] = {}
        capacity: dict[tuple[str, str, str], float] = {}
        lab = self.labels
        for query, result in zip(queries, answers, strict=True):
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
                    points[(*ident, _number(t))] = _number(v)
            series[query.key] = points
        out: dict[DeploymentKey, list[FitSample]] = defaultdict(list)
        for point, itl in series["itl_mean"].items():
            batch = series["decoding_mean"].get(point)
            tokens = series["tokens"].get(point)
            preempted = series["preemptions"].get(point)
            if batch is None or tokens is None or not all(map(math.isfinite, (itl, batch, tokens))):
                continue
            # A window only counts when its figures are physical: a pass within a minute, a batch a
            # replica can hold, tokens that were decoded.
            if preempted is None or preempted > 0 or not (1 <= batch <= BATCH_MAX and 0 < itl <= PASS_SECONDS_MAX
                                                          and tokens >= 0):
                continue
            if not first <= point[3] <= last:  # dated outside the range asked for: Prometheus sends none
                continue
            context = stream_context(series["kv_mean"].get(point), capacity.get(point[:3]),
                                     series["running_mean"].get(point))
            out[(point[0], point[1])].append(FitSample(batch, itl, min(1.0, tokens / 100.0), point[3], context))
        return dict(out)

    # --- the demand's history -------------------------------------------------------------------
    def demand_history(self, start: float, end: float, step: str,
                       rate_window: str = "5m") -> dict[DeploymentKey, list[DemandPoint]]:
        return run(self.http, lambda: self.demand_history_async(start, end, step, rate_window))

    async def demand_history_async(self, start: float, end: float, step: str,
                                   rate_window: str = "5m") -> dict[DeploymentKey, list[DemandPoint]]:
        """The demand of every deployment over [start, end], one point per step: what a started
        operator learns the season and the bursts from before its own polls have seen them.
        FetchFailed on a failure. A point that is no rate (NaN, infinite, negative, above what any
        resource may state: REQUESTS_PER_SECOND_MAX) is dropped, and so is one dated outside the range
        asked for, which Prometheus never returns: a point in the future would sit at the head of the
        history the burst and the trend read, and never age out of it."""
        query = demand_range_query(rate_window, self.labels, self.namespace, self.deployment)
        params = {"query": query.promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step}
        result = await self._get("query_range", params, query, "matrix")
        first, last = float(params["start"]), float(params["end"])  # as sent, to the millisecond
        out: dict[DeploymentKey, list[DemandPoint]] = defaultdict(list)
        lab = self.labels
        twice: set[DeploymentKey] = set()
        for item in result:
            m = item["metric"]
            key = (m.get(lab.namespace, ""), m.get(lab.deployment, ""))
            if key in out:
                twice.add(key)
            for t, v in item["values"]:
                try:
                    time_, rate = _number(t), _number(v)
                except _Malformed:
                    continue
                if first <= time_ <= last and 0 <= rate <= REQUESTS_PER_SECOND_MAX:
                    out[key].append(DemandPoint(time_, rate))
        # The query sums by deployment, so one answers a series each: two (labels relabelled into one
        # deployment's) interleave two histories at every step, and neither is the demand. Such a history is
        # not seeded; the operator's own polls build one.
        return {key: points for key, points in out.items() if key not in twice}

