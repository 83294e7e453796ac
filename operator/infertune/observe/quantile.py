"""histogram_quantile as Prometheus computes it, for the pods source.

Hand-written because the pods source has only bucket counts, and matching Prometheus' own
interpolation (linear within a bucket, 0 as the lower bound of the first, the last finite bound
when the rank falls in +Inf) is what makes both sources report the same quantiles.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from infertune.observe.dialects import TTFT_QUANTILES


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """`buckets` maps the upper bound `le` to its cumulative count (or rate). None when empty."""
    if not buckets or not 0 <= q <= 1:
        return None
    bounds = sorted(buckets)
    if not math.isinf(bounds[-1]):
        return None  # Prometheus answers NaN without a +Inf bucket
    counts = [buckets[b] for b in bounds]
    # Cumulative counts can dip when series are merged mid-scrape; Prometheus forces monotonicity.
    for i in range(1, len(counts)):
        counts[i] = max(counts[i], counts[i - 1])
    total = counts[-1]
    if total <= 0 or not math.isfinite(total):
        return None
    rank = q * total
    idx = next(i for i, c in enumerate(counts) if c >= rank)
    if idx == len(bounds) - 1:
        return bounds[-2] if len(bounds) >= 2 else None
    upper = bounds[idx]
    lower, below = (0.0, 0.0) if idx == 0 else (bounds[idx - 1], counts[idx - 1])
    if idx == 0 and upper <= 0:
        return upper
    in_bucket = counts[idx] - below
    if in_bucket <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket


def quantiles(buckets: Mapping[float, float], qs: tuple[float, ...] = TTFT_QUANTILES) -> dict[float, float]:
    """The quantiles that exist (NaN-free) for one set of buckets."""
    out = {}
    for q in qs:
        value = histogram_quantile(q, buckets)
        if value is not None and math.isfinite(value):
            out[q] = value
    return out
