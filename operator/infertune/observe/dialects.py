"""Metric names of each serving engine, keyed by the figure infertune derives from them.

Each figure lists its names in order of preference; a pod exports one dialect, so a regex over
all of them selects the right series without knowing the dialect first. The dialect itself is
told by the name of the KV-usage gauge a pod exports.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """One logical figure and the metric names that carry it, across dialects."""

    key: str
    kind: str  # gauge | counter | histogram | info
    names: tuple[str, ...]

    @property
    def regex(self) -> str:
        return "|".join(self.names)


# The KV-usage gauge also identifies the dialect: the first name that a pod exports wins.
KV_USAGE_DIALECTS: dict[str, str] = {
    "vllm:kv_cache_usage_perc": "vllm",
    "vllm:gpu_cache_usage_perc": "vllm-legacy",
    "sglang:token_usage": "sglang",
}

KV_USAGE = Figure("kv_usage", "gauge", tuple(KV_USAGE_DIALECTS))
RUNNING = Figure("running", "gauge", ("vllm:num_requests_running", "sglang:num_running_reqs"))
WAITING = Figure("waiting", "gauge", ("vllm:num_requests_waiting", "sglang:num_queue_reqs"))
# SGLang states its pool in tokens; vLLM in blocks, on the info metric's labels.
CAPACITY_TOKENS = Figure("capacity_tokens", "gauge", ("sglang:max_total_num_tokens",))
CACHE_CONFIG = Figure("cache_config", "info", ("vllm:cache_config_info",))

PREEMPTIONS = Figure("preemptions", "counter",
                     ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"))
PROMPT_TOKENS = Figure("prompt_tokens", "counter", ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"))
GENERATION_TOKENS = Figure("generation_tokens", "counter",
                           ("vllm:generation_tokens_total", "sglang:generation_tokens_total"))
PREFIX_QUERIES = Figure("prefix_queries", "counter",
                        ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"))
PREFIX_HITS = Figure("prefix_hits", "counter",
                     ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total",
                      "sglang:cached_tokens_total"))
COMPLETIONS = Figure("completions", "counter", ("vllm:request_success_total", "sglang:num_requests_total"))

TTFT = Figure("ttft", "histogram", ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"))
ITL = Figure("itl", "histogram",
             ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
              "sglang:inter_token_latency_seconds"))
PROMPT_LENGTH = Figure("prompt_length", "histogram", ("vllm:request_prompt_tokens",))
GENERATION_LENGTH = Figure("generation_length", "histogram", ("vllm:request_generation_tokens",))

GAUGES: tuple[Figure, ...] = (KV_USAGE, RUNNING, WAITING, CAPACITY_TOKENS)
COUNTERS: tuple[Figure, ...] = (PREEMPTIONS, PROMPT_TOKENS, GENERATION_TOKENS, PREFIX_QUERIES, PREFIX_HITS,
                                COMPLETIONS)
HISTOGRAMS: tuple[Figure, ...] = (TTFT, ITL, PROMPT_LENGTH, GENERATION_LENGTH)
# Without these a replica cannot be judged at all; everything else degrades to None.
REQUIRED_GAUGES: tuple[str, ...] = ("kv_usage", "running", "waiting")

TTFT_QUANTILES: tuple[float, ...] = (0.5, 0.95, 0.99)


def dialect_of(metric_name: str) -> str | None:
    return KV_USAGE_DIALECTS.get(metric_name)


def figure_for_sample(sample_name: str) -> tuple[Figure, str] | None:
    """Maps an exposed sample name to (figure, part), part being '' or a histogram suffix."""
    return _SAMPLE_INDEX.get(sample_name)


def _build_index() -> dict[str, tuple[Figure, str]]:
    index: dict[str, tuple[Figure, str]] = {}
    for fig in (*GAUGES, CACHE_CONFIG, *COUNTERS):
        for name in fig.names:
            index[name] = (fig, "")
    for fig in HISTOGRAMS:
        for name in fig.names:
            for part in ("_bucket", "_sum", "_count"):
                index[name + part] = (fig, part)
    return index


_SAMPLE_INDEX = _build_index()


def all_counter_regex() -> str:
    """Every monotonic series, histogram counts included: what a counter reset can hit."""
    names = [n for fig in COUNTERS for n in fig.names]
    names += [f"{n}_count" for fig in HISTOGRAMS for n in fig.names]
    return "|".join(names)


# The arrival is read over the last scrape: Prometheus' irate(), the pods source's last poll: a step shows
# within one scrape, where a rate over the window lags it by half the window. Read over the window, the
# benchmark's 4-hour spike went 75 s past the cliff (0 s this way) and its random scenario 19 fell from 99.27%
# to 95.54% TTFT within SLA (docs/bench-history.md, "The benchmark reads as the example resource reads").
READ_OVER_ONE_SCRAPE = ("ttft_count",)
