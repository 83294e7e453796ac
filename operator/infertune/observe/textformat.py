"""One pod's `/metrics` payload reduced to the raw readings infertune needs.

Parsing is prometheus_client's (`text_string_to_metric_families`); this module only picks the
samples of known figures, sums label variants (vLLM labels by engine and finish reason) and
notices a sample that appears twice, which a well-behaved exporter never does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from infertune.observe.dialects import dialect_of, figure_for_sample


class PayloadError(ValueError):
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
    histograms: dict[str, Histogram] = field(default_factory=lambda: defaultdict(Histogram))
    capacity_tokens: int | None = None
    duplicate: str = ""  # the first sample seen twice, if any


def _add_gauge(reading: Reading, key: str, value: float) -> None:
    if key not in reading.gauges:
        reading.gauges[key] = value
    elif key == "kv_usage":
        reading.gauges[key] = max(reading.gauges[key], value)  # the fullest engine's pool
    elif key == "capacity_tokens":
        reading.gauges[key] = min(reading.gauges[key], value)
    else:
        reading.gauges[key] = reading.gauges[key] + value


def parse_payload(text: str) -> Reading:
    reading = Reading()
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # the parser raises bare ValueError/IndexError/TypeError on bad lines
        raise PayloadError(f"not the Prometheus text format: {exc}") from None
    for family in families:
        for sample in family.samples:
            identity = (sample.name, tuple(sorted(sample.labels.items())))
            if identity in seen and not reading.duplicate:
                reading.duplicate = sample.name
            seen.add(identity)
            found = figure_for_sample(sample.name)
            if found is None:
                continue
            fig, part = found
            value = float(sample.value)
            if fig.key == "kv_usage":
                reading.dialect = reading.dialect or dialect_of(sample.name)
            if fig.kind == "gauge":
                _add_gauge(reading, fig.key, value)
            elif fig.kind == "info":
                blocks, size = sample.labels.get("num_gpu_blocks", ""), sample.labels.get("block_size", "")
                if blocks.isdigit() and size.isdigit():
                    reading.capacity_tokens = int(blocks) * int(size)
            elif fig.kind == "counter":
                reading.counters[fig.key] = reading.counters.get(fig.key, 0.0) + value
            else:
                hist = reading.histograms[fig.key]
                if part == "_sum":
                    hist.total += value
                elif part == "_count":
                    hist.count += value
                else:
                    le = float(sample.labels.get("le", "nan"))
                    if not math.isnan(le):
                        hist.buckets[le] = hist.buckets.get(le, 0.0) + value
    if reading.capacity_tokens is None and "capacity_tokens" in reading.gauges:
        cap = reading.gauges["capacity_tokens"]
        reading.capacity_tokens = int(cap) if math.isfinite(cap) else None
    return reading
