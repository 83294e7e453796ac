"""How long one engine step takes, from the performance model.

A step runs every decoding stream one token plus any prefill chunks:

    step = per_pass(B) + context_slope x B x (mean_context - reference_context)
           + prefill_tokens / prefill_rate

`per_pass(B)` is the model's prediction (the physics fit, calibrated napkin or bare napkin) at the
workload's reference context; the slope term moves it with the streams' actual context, since
each stream reads its own KV every pass. `prefill_rate` is the napkin's unless the replica carries a
rate calibrated on measurements (ReplicaConfig.prefill_tokens_per_second). The slope is the model's own:
the same prediction at a longer context when a fit's samples spanned contexts (so the twin's steps
move as the fit learnt), else the napkin's, scaled by how far the prediction sits from the napkin.
Values are memoised per batch size: steps repeat a lot.
"""

from __future__ import annotations

import math
import random

from infertune.model import PerformanceModel

# Never let the context correction shrink a pass below this share of its reference time.
MIN_SHARE = 0.5
# Samples whose contexts span more than this ratio have told the fit how passes grow with context.
CONTEXT_SPAN = 1.2


class StepTimer:
    def __init__(self, perf: PerformanceModel, tp: int, noise: float = 0.0, seed: int = 0,
                 prefill_rate: float | None = None) -> None:
        self.perf = perf
        self.tp = tp
        self.noise = noise
        self._rng = random.Random(seed)
        self._base: dict[int, float] = {}
        self.reference_context = perf.decode_context_tokens
        # A calibrated rate (tokens/s) where the replica was given one, else the napkin's.
        self.prefill_rate = perf.prefill_rate(tp) if prefill_rate is None else prefill_rate
        self.context_slope = self._context_slope()

    def _context_slope(self) -> float:
        """Seconds a pass gains per stream per extra token of context.

        A fit whose samples spanned contexts learnt this: the model at twice the context says it. Without
        such samples (a line, or samples at one context) nothing was learnt about context, and the
        napkin's own slope, scaled by how far the prediction sits from the napkin, stands.
        """
        ref = max(self.reference_context, 1.0)
        fit = self.perf.pass_fit(self.tp)
        if fit is not None and fit.context_max > CONTEXT_SPAN * max(fit.context_min, 1.0):
            delta = (self.perf.per_pass(self.tp, 16, context=2 * ref).seconds
                     - self.perf.per_pass(self.tp, 16, context=ref).seconds)
            return max(delta, 0.0) / (16 * ref)
        at = self.perf.per_pass(self.tp, 16)
        napkin_delta = (self.perf.per_pass(self.tp, 1, context=2 * ref).napkin_seconds
                        - self.perf.per_pass(self.tp, 1, context=ref).napkin_seconds)
        scale = at.seconds / at.napkin_seconds if at.napkin_seconds > 0 else 1.0
        return max(napkin_delta, 0.0) / ref * scale

    def base(self, batch: int) -> float:
        b = max(batch, 1)
        seconds = self._base.get(b)
        if seconds is None:
            seconds = self.perf.per_pass(self.tp, b).seconds
            self._base[b] = seconds
        return seconds

    def decode(self, batch: int, mean_context: float) -> float:
        base = self.base(batch)
        if batch <= 0:
            return base
        corrected = base + self.context_slope * batch * (mean_context - self.reference_context)
        return max(corrected, MIN_SHARE * base)

    def step(self, batch: int, mean_context: float, prefill_tokens: int) -> float:
        return self.decode(batch, mean_context) + prefill_tokens / self.prefill_rate

    def jitter(self, steps: int) -> float:
        """A factor for `steps` identical steps: their summed noise shrinks as 1/sqrt(steps)."""
        if self.noise <= 0 or steps <= 0:
            return 1.0
        return max(0.2, 1.0 + self._rng.gauss(0.0, self.noise) / math.sqrt(steps))
