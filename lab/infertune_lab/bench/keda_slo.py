"""llm-d's SLO-aware autoscaler: KEDA with a latency-saturation signal, as its guide configures it.

llm-d/llm-d, guides/workload-autoscaling/README.slo-aware.md (docs/sources.md#llm-d-slo-keda):

1. **Signal** (Prometheus recording rules, every 15 s): s_raw = max(P90 TTFT / S_ttft, P90 TPOT /
   S_tpot) over the last minute's requests, 0 with no traffic; s = avg_over_time(min(s_raw, 2))[45s].
2. **Desired replicas** (the ScaledObject's formula), with n provisioned and r ready replicas:
   n + ceil(n (s c / 0.55 - 1)) when s > 0.55, with the in-flight credit c = r / n (1 unless
   0 < r < n); n - floor(n (1 - s / 0.40)) when s < 0.40; n in between.
3. **HPA** (KEDA's, target AverageValue 1 on the formula's output, so it passes through with the
   HPA's 10% tolerance): up at most max(+100%, +4 pods) per 60 s after a 30 s stabilisation window
   (the lowest recommendation of the window), down 1 pod per 120 s after a 180 s window (the
   highest), clipped to [minReplicaCount, maxReplicaCount].

The guide reads the P90s from the EPP's latency histograms, *predicted* by its online-trained
model or, without that plugin, the *actual* latencies; the benchmark has no EPP predictor, so it
uses the actual latencies, and exactly: every request's TTFT as its first token streams and its
TPOT (mean time per output token) as it finishes, the nearest-rank P90 over the last 60 s
(finer than any histogram's buckets). The SLO pair is the benchmark's own: TTFT <= 3 s, and
TPOT <= 1 / 25 tok/s = 40 ms.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace

from infertune.planner.types import Layout
from infertune_lab.bench.actuation import Actuator
from infertune_lab.bench.hpa import SYNC_PERIOD, Hpa, ScalingPolicy, ScalingRules, external_average_replicas
from infertune_lab.bench.metrics import Slo, quantile

CLAMP = 2.0  # C: one sample's most; anything above already means "add capacity at the maximum rate"
SMOOTHING_SECONDS = 45.0
RATE_WINDOW_SECONDS = 60.0  # the 1-minute rate windows of the histograms
QUANTILE = 0.9
SCALE_UP = ScalingRules(30.0, (ScalingPolicy("Percent", 100, 60.0), ScalingPolicy("Pods", 4, 60.0)))
SCALE_DOWN = ScalingRules(180.0, (ScalingPolicy("Pods", 1, 120.0),))


@dataclass(frozen=True)
class Band:
    """θ_up and θ_dn: scale up above `up`, down below `down`, hold between (the guide: 0.55 / 0.40)."""

    up: float = 0.55
    down: float = 0.40

    def __post_init__(self) -> None:
        if not 0.0 < self.down <= self.up < CLAMP:
            raise ValueError(f"the band needs 0 < down <= up < {CLAMP}, got {self.down}/{self.up}")

    def __str__(self) -> str:
        return f"{self.up:.2f}/{self.down:.2f}"


def desired_replicas(provisioned: int, ready: int, saturation: float, band: Band = Band()) -> int:
    """The guide's control law: the formula KEDA evaluates, before the HPA's tolerance and behaviour."""
    n = provisioned
    if saturation > band.up:
        credit = ready / n if 0 < ready < n else 1.0
        return n + math.ceil(n * (saturation * credit / band.up - 1.0))
    if saturation < band.down:
        return n - math.floor(n * (1.0 - saturation / band.down))
    return n


class SaturationSignal:
    """The recording rules: the pool's P90 latency against the SLO, clamped, smoothed over 45 s."""

    def __init__(self, slo: Slo) -> None:
        self.ttft_slo = slo.ttft_seconds
        self.tpot_slo = 1.0 / slo.min_stream_tps
        self._ttft: list[tuple[float, float]] = []  # (when observed, seconds)
        self._tpot: list[tuple[float, float]] = []
        self._samples: deque[tuple[float, float]] = deque()

    def observe_ttft(self, at: float, seconds: float) -> None:
        self._ttft.append((at, seconds))

    def observe_tpot(self, at: float, seconds: float) -> None:
        self._tpot.append((at, seconds))

    def evaluate(self, now: float) -> float:
        """One evaluation of the rules at `now`: records min(s_raw, C) and returns its 45 s average."""
        cutoff = now - RATE_WINDOW_SECONDS
        self._ttft = [(at, v) for at, v in self._ttft if at > cutoff]
        self._tpot = [(at, v) for at, v in self._tpot if at > cutoff]
        ratios = [quantile([v for _, v in window], QUANTILE) / slo
                  for window, slo in ((self._ttft, self.ttft_slo), (self._tpot, self.tpot_slo)) if window]
        raw = max(ratios, default=0.0)  # no traffic reads 0
        self._samples.append((now, min(raw, CLAMP)))
        while self._samples[0][0] <= now - SMOOTHING_SECONDS:
            self._samples.popleft()
        return sum(s for _, s in self._samples) / len(self._samples)


@dataclass
class KedaSlo:
    """The benchmark's keda-slo policy: replicas of the hand-picked layout, by the guide's loop."""

    layout: Layout
    max_replicas: int
    slo: Slo
    band: Band = Band()
    min_replicas: int = 1
    name: str = "keda-slo"
    max_surge: int | None = 1
    hpa: Hpa = field(init=False)
    signal: SaturationSignal = field(init=False)
    _next_sync: float = 0.0
    _seen_records: int = 0
    _last_look: float = -math.inf

    def __post_init__(self) -> None:
        self.hpa = Hpa(max(self.min_replicas, 1), self.max_replicas, SCALE_UP, SCALE_DOWN)
        self.signal = SaturationSignal(self.slo)

    def start(self) -> Layout:
        return self.layout

    def tick(self, now: float, actuator: Actuator) -> None:
        self._observe(actuator)
        if now < self._next_sync:
            return
        self._next_sync = now + SYNC_PERIOD
        saturation = self.signal.evaluate(actuator.fleet.now)
        provisioned = actuator.target.replicas if actuator.target is not None else 0
        ready = sum(actuator.ready(r) for r in actuator.serving())
        formula = desired_replicas(provisioned, ready, saturation, self.band)
        wanted = external_average_replicas(len(actuator.pods()), formula, 1.0)
        final = self.hpa.normalize(provisioned, wanted, now)
        if final != provisioned:
            actuator.apply(replace(self.layout, replicas=final))

    def _observe(self, actuator: Actuator) -> None:
        """What the gateway saw since the last look: first tokens as they streamed, TPOT at each finish."""
        fleet = actuator.fleet
        since = self._last_look
        for record in fleet.records[self._seen_records:]:
            if record.first_token > since:
                self.signal.observe_ttft(record.first_token, record.ttft)
            if record.spec.output_tokens > 1:
                self.signal.observe_tpot(record.finish, record.mean_itl)
        self._seen_records = len(fleet.records)
        for replica in fleet.replicas.values():
            for at, ttft in replica.engine.first_tokens_after(since):
                self.signal.observe_ttft(at, ttft)
        self._last_look = fleet.now
