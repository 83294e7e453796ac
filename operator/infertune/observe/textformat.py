"""One pod's `/metrics` payload reduced to the raw readings infertune needs.

Parsing is prometheus_client's (`text_string_to_metric_families`); this module only picks the
samples of known figures, sums label variants (vLLM labels by engine and finish reason) and
notices a sample that appears twice, which a well-behaved exporter never does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from prometheus_client.parser import text_string_to_metric_families

from infertune.errors import SourceError
from infertune.observe.dialects import (
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    KV_USAGE,
    Figure,
    dialect_of,
    figure_for_sample,
)


class PayloadError(SourceError):
    """The payload is not the Prometheus text format."""


@dataclass
class Histogram:
    total: float = 0.0
    count: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)


@dataclass
class Reading:
    """Cumulative values as scraped: counters and histograms are subtracted between polls later."""

    dialect: str | None = None
    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    capacity_tokens: int | None = None
    duplicate: str = ""  # the first sample seen twice, if any


_T = TypeVar("_T")


def _add_gauge(gauges: dict[str, float], key: str, value: float) -> None:
    if key not in gauges:
        gauges[key] = value
    elif key == "kv_usage":
        gauges[key] = max(gauges[key], value)  # the fullest engine's pool
    elif key == "capacity_tokens":
        gauges[key] = min(gauges[key], value)
    else:
        gauges[key] = gauges[key] + value


def _preferred(fig: Figure, present: dict[str, dict[str, _T]]) -> dict[str, _T] | None:
    """vLLM exports deprecated names beside their replacements for a while: take the first listed."""
    return next((present[name] for name in fig.names if name in present), None)


Sample = tuple[str, Mapping[str, str], float]  # (sample name, labels, value), as the text format lists them


def parse_payload(text: str) -> Reading:
    """A /metrics payload read by prometheus_client's parser; `PayloadError` when it is not the format."""
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # the parser raises bare ValueError/IndexError/TypeError on bad lines
        raise PayloadError(f"not the Prometheus text format: {exc}") from None
    return read_samples((sample.name, sample.labels, sample.value) for family in families for sample in family.samples)


def read_samples(samples: Iterable[Sample]) -> Reading:
    """The figures infertune needs from a payload's samples, whoever parsed them.

    Split from `parse_payload` so that the benchmark's twin, which holds its samples already, hands
    them over without printing and re-parsing text at every poll (a test pins that both roads agree).
    """
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    duplicate = ""
    # Everything is first collected per metric name, then resolved per figure by preference.
    gauges: dict[str, dict[str, float]] = defaultdict(dict)
    counters: dict[str, dict[str, float]] = defaultdict(dict)
    hists: dict[str, dict[str, Histogram]] = defaultdict(dict)
    capacity: int | None = None
    for sample_name, labels, sample_value in samples:
        identity = (sample_name, tuple(sorted(labels.items())))
        if identity in seen and not duplicate:
            duplicate = sample_name
        seen.add(identity)
        found = figure_for_sample(sample_name)
        if found is None:
            continue
        fig, part = found
        name = sample_name.removesuffix(part) if part else sample_name
        value = float(sample_value)
        if fig.kind == "gauge":
            _add_gauge(gauges[name], fig.key, value)
        elif fig.kind == "info":
            blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
            if blocks.isdigit() and size.isdigit():
                capacity = int(blocks) * int(size)
        elif fig.kind == "counter":
            counters[name][fig.key] = counters[name].get(fig.key, 0.0) + value
        else:
            hist = hists[name].setdefault(fig.key, Histogram())
            if part == "_sum":
                hist.total += value
            elif part == "_count":
                hist.count += value
            else:
                le = float(labels.get("le", "nan"))
                if not math.isnan(le):
                    hist.buckets[le] = hist.buckets.get(le, 0.0) + value
    reading = Reading(duplicate=duplicate, capacity_tokens=capacity)
    reading.dialect = next((dialect_of(n) for n in KV_USAGE.names if n in gauges), None)
    for fig in GAUGES:
        chosen = _preferred(fig, gauges)
        if chosen is not None:
            reading.gauges[fig.key] = chosen[fig.key]
    for fig in COUNTERS:
        chosen_c = _preferred(fig, counters)
        if chosen_c is not None:
            reading.counters[fig.key] = chosen_c[fig.key]
    for fig in HISTOGRAMS:
        chosen_h = _preferred(fig, hists)
        if chosen_h is not None:
            reading.histograms[fig.key] = chosen_h[fig.key]
    if reading.capacity_tokens is None and "capacity_tokens" in reading.gauges:
        cap = reading.gauges["capacity_tokens"]
        reading.capacity_tokens = int(cap) if math.isfinite(cap) else None
    return reading
