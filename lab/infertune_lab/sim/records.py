"""What the twin hands in and out: request specs, per-request records, per-replica samples and meters.

`Meters` holds each replica's running counters and histogram buckets (cumulative, as Prometheus
wants them); the exporter turns them into vLLM or SGLang metric families. Histograms take a
weight, because one stretch of identical decode steps is many observations of the same value.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field, replace

# vLLM's own bucket bounds (vllm/v1/metrics/loggers.py), so quantiles line up with real pods.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0, 960.0, 1920.0, 7680.0)
# vLLM's build_1_2_5_buckets up to a 256K context.
TOKEN_BUCKETS = tuple(float(m * 10**e) for e in range(6) for m in (1, 2, 5) if m * 10**e <= 262_144)


@dataclass(frozen=True)
class RequestSpec:
    """One request as traffic issues it. `session` keys the prefix cache; the prompt starts with the
    session's previous context, so whatever of it is still cached is a prefix hit."""

    arrival: float
    prompt_tokens: int
    output_tokens: int
    session: str = ""
    turn: int = 0

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1:
            raise ValueError(f"prompt_tokens must be >= 1, got {self.prompt_tokens}")
        if self.output_tokens < 1:
            raise ValueError(f"output_tokens must be >= 1, got {self.output_tokens}")


@dataclass(frozen=True)
class RequestRecord:
    spec: RequestSpec
    replica: str
    first_token: float  # absolute virtual time
    finish: float
    cached_tokens: int  # prefix-cache hit at first admission
    preemptions: int

    @property
    def ttft(self) -> float:
        return self.first_token - self.spec.arrival

    @property
    def e2e(self) -> float:
        return self.finish - self.spec.arrival

    @property
    def mean_itl(self) -> float:
        """Mean inter-token latency after the first token (0 for one-token answers)."""
        n = self.spec.output_tokens - 1
        return (self.finish - self.first_token) / n if n > 0 else 0.0

    @property
    def stream_tps(self) -> float:
        itl = self.mean_itl
        return 1.0 / itl if itl > 0 else 0.0


@dataclass(frozen=True)
class ReplicaSample:
    """One replica's state at one instant of virtual time (the per-replica time series)."""

    time: float
    running: int
    waiting: int
    kv_usage: float
    preemptions: int
    generation_tokens: int


def le_labels(bounds: tuple[float, ...]) -> tuple[str, ...]:
    """The `le` label of each bucket of a histogram with these bounds, +Inf last."""
    return (*(repr(b) for b in bounds), "+Inf")


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)  # per bucket, not cumulative; last is +Inf
    total: float = 0.0
    count: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, weight: float = 1.0) -> None:
        self.counts[bisect_left(self.bounds, value)] += weight
        self.total += value * weight
        self.count += weight

    def copy(self) -> Histogram:
        return Histogram(self.bounds, list(self.counts), self.total, self.count)

    def cumulative(self) -> list[tuple[str, float]]:
        """(le label, cumulative count) per bucket, +Inf last."""
        return list(zip(le_labels(self.bounds), self.running_counts(), strict=True))

    def running_counts(self) -> list[float]:
        out: list[float] = []
        running = 0.0
        for n in self.counts:
            running += n
            out.append(running)
        return out


@dataclass
class Meters:
    """A replica's monotonic counters and histograms since it started."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    successes: int = 0
    arrivals: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    prompt_len: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    generation_len: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))

    def copy(self) -> Meters:
        """A snapshot for a scrape (`copy.deepcopy` did the same, at ten times the cost)."""
        return replace(self, ttft=self.ttft.copy(), itl=self.itl.copy(), e2e=self.e2e.copy(),
                       prompt_len=self.prompt_len.copy(), generation_len=self.generation_len.copy())
