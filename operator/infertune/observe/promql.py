"""The PromQL of one poll: a fixed set of queries, each covering every deployment at once.

Every query is grouped `by (namespace, <deployment label>, pod)` (or without pod for the
deployment-level quantiles), so the answer grows with the fleet but the number of queries never
does. Dialects are folded into each selector as a `__name__` regex, since a pod exports one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from infertune.observe import dialects as d

# A range selector's duration as PromQL reads it: whole numbers of units, largest first ("1m30s").
_RANGE = re.compile(r"(?:([0-9]+)y)?(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m(?!s))?(?:([0-9]+)s)?"
                    r"(?:([0-9]+)ms)?")
# Each unit in milliseconds, so a range sums exactly (Python ints) before any float is made of it.
_RANGE_UNITS_MS = (365 * 86_400_000, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1000, 1)
# Prometheus holds a duration in int64 milliseconds and refuses one past it ("duration out of range").
_MAX_RANGE_MS = 2**63 - 1

# The range every rate is read over unless `--metrics-window` says otherwise: four scrapes of the chart's
# PodMonitor (15 s), the fewest `rate()` reads reliably. Both sources, the controller and the CLI take it.
DEFAULT_METRICS_WINDOW = "1m"


def range_seconds(window: str) -> float:
    """Seconds in a PromQL range duration ("1m", "90s", "1m30s"); ValueError for anything PromQL
    would refuse or a range of zero, so that a bad window is refused before any query is sent."""
    found = _RANGE.fullmatch(window) if isinstance(window, str) else None
    if found is None or not any(found.groups()):
        raise ValueError(f"{window!r} is not a PromQL range like '1m', '90s' or '1m30s'")
    millis = sum(int(n) * unit for n, unit in zip(found.groups(), _RANGE_UNITS_MS, strict=True) if n)
    if millis <= 0:
        raise ValueError(f"{window!r} is a range of zero")
    if millis > _MAX_RANGE_MS:
        raise ValueError(f"{window[:40]!r}{'...' if len(window) > 40 else ''} is longer than any range Prometheus "
                         f"holds (about 292 million years)")
    return millis / 1000.0


@dataclass(frozen=True)
class Query:
    key: str
    promql: str
    # How to read each series: "value", "buckets" (label `le`), "identity" (label `__name__`),
    # "cache_config" (labels num_gpu_blocks, block_size).
    shape: str = "value"
    level: str = "pod"  # pod | deployment


@dataclass(frozen=True)
class Labels:
    namespace: str = "namespace"
    deployment: str = "deployment"
    pod: str = "pod"

    def by(self, level: str = "pod") -> str:
        names = [self.namespace, self.deployment] + ([self.pod] if level == "pod" else [])
        return ", ".join(names)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def selector(names: str, labels: Labels, namespace: str | None, deployment: str | None) -> str:
    """A series selector; `names` is one metric name or a `|`-separated regex of names."""
    op = "=~" if "|" in names else "="
    matchers = [f'__name__{op}"{names}"', f'{labels.deployment}!=""']
    if namespace:
        matchers.append(f'{labels.namespace}="{_escape(namespace)}"')
    if deployment:
        matchers.append(f'{labels.deployment}="{_escape(deployment)}"')
    return "{" + ", ".join(matchers) + "}"


def _first(names: tuple[str, ...], template: str, sel: Callable[[str], str]) -> str:
    """`template` over each name, joined by `or` in order of preference.

    vLLM keeps deprecated names beside their replacements for a release or two, so a regex union
    would count a figure twice (and rate() over it fails on clashing label sets). `or` keeps, for
    each pod, only the first name it exports.
    """
    return " or ".join(f"({template.format(sel=sel(name))})" for name in names)


def _bucket_rates(bucket_names: tuple[str, ...], sel: Callable[[str], str], window: str, by: str) -> str:
    # Bucket rates, not histogram_quantile: Prometheus would recompute the rates once per
    # quantile (no common subexpressions), and the client interpolates exactly as it does.
    return _first(bucket_names, f"sum by ({by}, le) (rate({{sel}}[{window}]))", sel)


def _any_reset(window: str, g: str, sel: Callable[[str], str]) -> str:
    """The most resets any counter of a pod saw in the window. Each counter is tagged before the
    union so their (otherwise identical) label sets do not clash."""
    # An engine restart resets every counter at once, so two per dialect tell it as well as all
    # eighteen would, at a ninth of the cost.
    names = [*d.GENERATION_TOKENS.names, *(f"{n}_count" for n in d.TTFT.names)]
    parts = [f'label_replace(max by ({g}) (resets({sel(n)}[{window}])), "counter", "{n}", "", "")'
             for n in names]
    return f"max by ({g}) ({' or '.join(parts)})"


_HISTOGRAM_PARTS = {"ttft": ("_count",), "itl": ("_sum", "_count"), "prompt_length": ("_sum", "_count"),
                    "generation_length": ("_sum", "_count")}


def poll_queries(window: str, labels: Labels = Labels(), namespace: str | None = None,
                 deployment: str | None = None) -> tuple[Query, ...]:
    def sel(names: str) -> str:
        return selector(names, labels, namespace, deployment)

    g = labels.by("pod")
    kv = sel(d.KV_USAGE.regex)
    queries = [
        # Distinct scrape sources per pod and KV gauge name: two means one pod scraped twice.
        Query("identity", f"count by ({g}, __name__) (count by ({g}, __name__, instance, job) ({kv}))",
              "identity"),
        Query("sample_time", f"max by ({g}) (timestamp({kv}))"),
        Query("kv_usage", _first(d.KV_USAGE.names, f"max by ({g}) ({{sel}})", sel)),
        Query("running", _first(d.RUNNING.names, f"sum by ({g}) ({{sel}})", sel)),
        Query("waiting", _first(d.WAITING.names, f"sum by ({g}) ({{sel}})", sel)),
        Query("capacity_tokens", _first(d.CAPACITY_TOKENS.names, f"min by ({g}) ({{sel}})", sel)),
        Query("cache_config", f"max by ({g}, num_gpu_blocks, block_size) ({sel(d.CACHE_CONFIG.regex)})",
              "cache_config"),
        Query("resets", _any_reset(window, g, sel)),
    ]
    rate = f"sum by ({g}) (rate({{sel}}[{window}]))"
    last_scrape = f"sum by ({g}) (irate({{sel}}[{window}]))"
    for fig in d.COUNTERS:
        queries.append(Query(fig.key, _first(fig.names, rate, sel)))
    for fig in d.HISTOGRAMS:
        for part in _HISTOGRAM_PARTS[fig.key]:
            key = fig.key + part
            template = last_scrape if key in d.READ_OVER_ONE_SCRAPE else rate
            queries.append(Query(key, _first(tuple(n + part for n in fig.names), template, sel)))
    buckets = tuple(n + "_bucket" for n in d.TTFT.names)
    queries.append(Query("ttft_buckets", _bucket_rates(buckets, sel, window, g), "buckets"))
    queries.append(Query("ttft_buckets", _bucket_rates(buckets, sel, window, labels.by("deployment")),
                         "buckets", "deployment"))
    return tuple(queries)


def fit_range_queries(step: str, labels: Labels = Labels(), namespace: str | None = None,
                      deployment: str | None = None) -> tuple[Query, ...]:
    """Range queries for (running batch, inter-token latency, context) windows, one point per step per pod."""
    def sel(names: str) -> str:
        return selector(names, labels, namespace, deployment)

    g = labels.by("pod")
    rate = f"sum by ({g}) (rate({{sel}}[{step}]))"
    itl_sum = _first(tuple(n + "_sum" for n in d.ITL.names), rate, sel)
    itl_count = tuple(n + "_count" for n in d.ITL.names)
    return (
        Query("itl_mean", f"({itl_sum}) / ({_first(itl_count, rate, sel)})"),
        Query("tokens", _first(itl_count, f"sum by ({g}) (increase({{sel}}[{step}]))", sel)),
        # The mean decoding batch, exactly: a request's inter-token latencies add up to its decoding time
        # (observe/figures.py, decoding_streams).
        Query("decoding_mean", itl_sum),
        # The streams holding the KV (prefilling ones too), for the context: KV in use over them.
        Query("running_mean", _first(d.RUNNING.names, f"sum by ({g}) (avg_over_time({{sel}}[{step}]))",
                                     sel)),
        Query("preemptions", _first(d.PREEMPTIONS.names, f"sum by ({g}) (increase({{sel}}[{step}]))",
                                    sel)),
        # The context behind each window: KV use x capacity / running streams (observe/figures.py).
        Query("kv_mean", _first(d.KV_USAGE.names, f"max by ({g}) (avg_over_time({{sel}}[{step}]))", sel)),
        Query("capacity_tokens", _first(d.CAPACITY_TOKENS.names, f"min by ({g}) ({{sel}})", sel)),
        Query("cache_config", f"max by ({g}, num_gpu_blocks, block_size) ({sel(d.CACHE_CONFIG.regex)})",
              "cache_config"),
    )


def demand_range_query(rate_window: str, labels: Labels = Labels(), namespace: str | None = None,
                       deployment: str | None = None) -> Query:
    """The requests/s each deployment was asked for, as a range query: the first-token rate (what the
    poll's arrival rate reads), for the demand history a started operator learns its season from."""
    def sel(names: str) -> str:
        return selector(names, labels, namespace, deployment)

    g = labels.by("deployment")
    counts = tuple(n + "_count" for n in d.TTFT.names)
    return Query("demand", _first(counts, f"sum by ({g}) (rate({{sel}}[{rate_window}]))", sel))

