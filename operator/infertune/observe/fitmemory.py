"""What the online fit has learned, per layout (TP), in a bounded form that survives a restart.

Each sample carries the batch, the pass time AND the context the batch's streams attended over (KV
use x KV capacity / running requests), so the physics fit (model/passfit.py) can tell a batch that is
slow because it is large from one that is slow because its contexts are long. `fits()` hands the
samples on as hashable SampleSets: the planner fits them once per change, not once per plan.

The controller keeps `to_status()` in the resource's status and rebuilds with `from_status()`.
The memory is bounded per layout; when full it forgets the oldest sample of the most crowded
(batch, context) bin, so a long stretch at one load does not wash out what was seen at other batch
sizes and contexts (the fit needs the spread).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from infertune.errors import StatusError
from infertune.model.fit import FitError, LinearFit, fit_per_pass
from infertune.model.passfit import SampleSet
from infertune.observe.figures import ITL_MAX_SECONDS

STATUS_VERSION = 2
# What one window of a replica may show: a pass within a minute (figures.ITL_MAX_SECONDS), a batch a
# replica can hold. Rows from status or a range answer past them are not measurements.
PASS_SECONDS_MAX = ITL_MAX_SECONDS
BATCH_MAX = 1e5
# How much newer a layout's samples must be before the planner refits it.
REFIT_SECONDS = 300.0  # rows gained the context; version 1 rows (no context) still load


@dataclass(frozen=True)
class FitSample:
    batch: float  # mean streams decoding over the window (observe/figures.py, decoding_streams)
    seconds: float  # mean inter-token latency over the window: one pass
    weight: float = 1.0
    time: float = 0.0
    context: float = 0.0  # mean tokens each running stream holds; 0 = unknown

    def valid(self) -> bool:
        return all(math.isfinite(v) for v in (self.batch, self.seconds, self.weight, self.time, self.context)) \
            and 1 <= self.batch <= BATCH_MAX and 0 < self.seconds <= PASS_SECONDS_MAX and self.weight > 0 \
            and self.time >= 0 and 0 <= self.context < 1e9


def _bin(sample: FitSample) -> tuple[int, int]:
    """Quarter-octave batch bins (fine at small batches, where the fixed cost is decided) crossed with
    half-octave context bins: the context spread is what tells the KV term from the weights."""
    context = round(2 * math.log2(sample.context)) if sample.context >= 1 else -1
    return round(4 * math.log2(max(sample.batch, 1.0))), context


class FitMemory:
    def __init__(self, max_samples: int = 64, min_samples: int = 6) -> None:
        if max_samples < min_samples or min_samples < 3:
            raise ValueError("max_samples must be >= min_samples >= 3")
        self.max_samples = max_samples
        self.min_samples = min_samples
        self._samples: dict[int, list[FitSample]] = {}
        # What the planner was last handed per layout, and the samples added since: the physics fit is
        # cached by content, so handing it a new set at every poll would refit every cycle.
        self._published: dict[int, tuple[SampleSet, float]] = {}  # and its newest sample's time

    def add(self, tp: int, samples: Iterable[FitSample | tuple[float, ...]], now: float = 0.0) -> int:
        """Adds samples for layout `tp`; tuples are (batch, seconds[, context]) taken at `now`; returns how many."""
        kept = 0
        bucket = self._samples.setdefault(int(tp), [])
        for raw in samples:
            sample = raw if isinstance(raw, FitSample) else FitSample(
                float(raw[0]), float(raw[1]), 1.0, now, float(raw[2]) if len(raw) > 2 else 0.0)
            if not sample.valid():
                continue
            bucket.append(sample)
            kept += 1
            if len(bucket) > self.max_samples:
                self._evict(bucket)
        return kept

    @staticmethod
    def _evict(bucket: list[FitSample]) -> None:
        bins: dict[tuple[int, int], list[int]] = {}
        for i, s in enumerate(bucket):
            bins.setdefault(_bin(s), []).append(i)
        crowded = max(bins.values(), key=len)
        del bucket[min(crowded, key=lambda i: bucket[i].time)]

    def samples(self, tp: int) -> tuple[FitSample, ...]:
        return tuple(self._samples.get(int(tp), ()))

    def layouts(self) -> tuple[int, ...]:
        return tuple(sorted(self._samples))

    def sample_set(self, tp: int) -> SampleSet | None:
        """This layout's samples for the physics fit, or None while there are too few."""
        samples = self._samples.get(int(tp), [])
        if len(samples) < self.min_samples:
            return None
        return SampleSet(tuple(s.batch for s in samples), tuple(s.seconds for s in samples),
                         tuple(s.context for s in samples), tuple(s.weight for s in samples))

    def fits(self) -> dict[int, SampleSet]:
        """Every layout with enough samples, for the planner's physics fit. A layout's set is handed on
        anew once its samples reach REFIT_SECONDS past the set handed on before, or grow by half: one
        poll's windows move a fit of dozens by little, and a refit every cycle (every replica gives a
        window a poll) is most of a cycle's cost."""
        out = {}
        for tp in self.layouts():
            bucket = self._samples[tp]
            newest = max((s.time for s in bucket), default=0.0)
            published = self._published.get(tp)
            stale = published is None or newest - published[1] >= REFIT_SECONDS or len(bucket) >= 1.5 * len(
                published[0])
            if stale:
                samples = self.sample_set(tp)
                if samples is None:
                    continue
                self._published[tp] = (samples, newest)
            out[tp] = self._published[tp][0]
        return out

    def fit(self, tp: int) -> LinearFit | None:
        """The plain robust per-pass line for this layout (what `infertune observe` shows), or None while
        the samples cannot support one. The planner fits the napkin's terms instead: see `fits()`."""
        samples = self._samples.get(int(tp), [])
        if len(samples) < self.min_samples:
            return None
        try:
            # Latency noise is relative (a jittery pass is jittery by a fraction), hence 1/y^2 as in
            # fit_per_pass's own default, times each sample's confidence.
            fit = fit_per_pass([s.batch for s in samples], [s.seconds for s in samples],
                               [s.weight / s.seconds**2 for s in samples])
        except FitError:
            return None
        # A negative slope or intercept is noise over too narrow a batch range, not physics.
        return fit if fit.slope_s > 0 and fit.intercept_s > 0 else None

    def to_status(self) -> dict[str, Any]:
        """JSON-able and small: at most max_samples x 5 numbers per layout."""
        return {
            "version": STATUS_VERSION,
            "layouts": {
                str(tp): [[round(s.batch, 3), round(s.seconds, 7), round(s.weight, 3), round(s.time, 1),
                           round(s.context, 1)] for s in samples]
                for tp, samples in sorted(self._samples.items())
            },
        }

    @classmethod
    def from_status(cls, data: Mapping[str, Any] | None, max_samples: int = 64,
                    min_samples: int = 6, now: float | None = None) -> FitMemory:
        """Rebuilds from `to_status()`. Raises StatusError naming the bad field; None gives an empty memory.
        A row outside a sample's physical range (`FitSample.valid`), or dated after `now`, is left out: the
        newest sample sets when a layout is refitted and the oldest is evicted first, so one dated in the
        future would freeze the fit for good."""
        memory = cls(max_samples, min_samples)
        if not data:
            return memory
        if not isinstance(data, Mapping):
            raise StatusError("fit status: must be an object with a version and layouts")
        version = data.get("version")
        if version not in (1, STATUS_VERSION):
            raise StatusError(f"fit status: unsupported version {version!r}")
        width = 4 if version == 1 else 5
        layouts = data.get("layouts")
        if not isinstance(layouts, Mapping):
            raise StatusError("fit status: 'layouts' must be a mapping of TP to samples")
        for tp_text, rows in layouts.items():
            if not (str(tp_text).isascii() and str(tp_text).isdigit()) or not isinstance(rows, list):
                raise StatusError(f"fit status: layouts[{tp_text!r}] must be a TP with a list of samples")
            parsed = []
            for i, row in enumerate(rows):
                if not isinstance(row, list) or len(row) != width:
                    fields = "batch, seconds, weight, time" + (", context" if width == 5 else "")
                    raise StatusError(f"fit status: layouts[{tp_text!r}][{i}] must be [{fields}]")
                try:
                    sample = FitSample(*(float(v) for v in row))
                except (TypeError, ValueError):
                    raise StatusError(f"fit status: layouts[{tp_text!r}][{i}] holds a non-number") from None
                if now is None or sample.time <= now:
                    parsed.append(sample)
            memory.add(int(tp_text), parsed)
        return memory
