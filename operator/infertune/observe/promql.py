"""The PromQL of one poll: a fixed set of queries, each covering every deployment at once.

Every query is grouped `by (namespace, <deployment label>, pod)` (or without pod for the
deployment-level quantiles), so the answer grows with the fleet but the number of queries never
does. Dialects are folded into each selector as a `__name__` regex, since a pod exports one.
"""

from __future__ import annotations

from dataclasses import dataclass

from infertune.observe import dialects as d


@dataclass(frozen=True)
class Query:
    key: str
    promql: str
    # How to read each series: "value", "quantile" (label `quantile`), "identity" (label `__name__`),
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
    matchers = [f'__name__=~"{names}"', f'{labels.deployment}!=""']
    if namespace:
        matchers.append(f'{labels.namespace}="{_escape(namespace)}"')
    if deployment:
        matchers.append(f'{labels.deployment}="{_escape(deployment)}"')
    return "{" + ", ".join(matchers) + "}"


def _quantiles(bucket_sel: str, window: str, by: str) -> str:
    parts = [
        f'label_replace(histogram_quantile({q}, sum by ({by}, le) (rate({bucket_sel}[{window}]))), '
        f'"quantile", "{q}", "", "")'
        for q in d.TTFT_QUANTILES
    ]
    return " or ".join(parts)


def poll_queries(window: str, labels: Labels = Labels(), namespace: str | None = None,
                 deployment: str | None = None) -> tuple[Query, ...]:
    def sel(names: str) -> str:
        return selector(names, labels, namespace, deployment)

    g = labels.by("pod")
    kv = sel(d.KV_USAGE.regex)
    queries = [
        # Distinct scrape sources per pod and dialect: two means one pod scraped twice.
        Query("identity", f"count by ({g}, __name__) (count by ({g}, __name__, instance, job) ({kv}))",
              "identity"),
        Query("sample_time", f"max by ({g}) (timestamp({kv}))"),
        Query("kv_usage", f"max by ({g}) ({kv})"),
        Query("running", f"sum by ({g}) ({sel(d.RUNNING.regex)})"),
        Query("waiting", f"sum by ({g}) ({sel(d.WAITING.regex)})"),
        Query("capacity_tokens", f"min by ({g}) ({sel(d.CAPACITY_TOKENS.regex)})"),
        Query("cache_config", f"max by ({g}, num_gpu_blocks, block_size) ({sel(d.CACHE_CONFIG.regex)})",
              "cache_config"),
        Query("running_mean", f"sum by ({g}) (avg_over_time({sel(d.RUNNING.regex)}[{window}]))"),
        Query("resets", f"max by ({g}) (resets({sel(d.all_counter_regex())}[{window}]))"),
    ]
    for fig in d.COUNTERS:
        queries.append(Query(fig.key, f"sum by ({g}) (rate({sel(fig.regex)}[{window}]))"))
    hist_parts = {"ttft": ("_count",), "itl": ("_sum", "_count"), "prompt_length": ("_sum", "_count"),
                  "generation_length": ("_sum", "_count")}
    for fig in d.HISTOGRAMS:
        for part in hist_parts[fig.key]:
            names = "|".join(n + part for n in fig.names)
            queries.append(Query(fig.key + part, f"sum by ({g}) (rate({sel(names)}[{window}]))"))
    buckets = sel("|".join(n + "_bucket" for n in d.TTFT.names))
    queries.append(Query("ttft_quantiles", _quantiles(buckets, window, g), "quantile"))
    queries.append(Query("ttft_quantiles", _quantiles(buckets, window, labels.by("deployment")), "quantile",
                         "deployment"))
    return tuple(queries)


def fit_range_queries(step: str, labels: Labels = Labels(), namespace: str | None = None,
                      deployment: str | None = None) -> tuple[Query, ...]:
    """Range queries for (running batch, inter-token latency) windows, one point per step per pod."""
    def sel(names: str) -> str:
        return selector(names, labels, namespace, deployment)

    g = labels.by("pod")
    itl_sum = sel("|".join(n + "_sum" for n in d.ITL.names))
    itl_count = sel("|".join(n + "_count" for n in d.ITL.names))
    return (
        Query("itl_mean",
              f"sum by ({g}) (rate({itl_sum}[{step}])) / sum by ({g}) (rate({itl_count}[{step}]))"),
        Query("tokens", f"sum by ({g}) (increase({itl_count}[{step}]))"),
        Query("running_mean", f"sum by ({g}) (avg_over_time({sel(d.RUNNING.regex)}[{step}]))"),
        Query("preemptions", f"sum by ({g}) (increase({sel(d.PREEMPTIONS.regex)}[{step}]))"),
    )
