"""The benchmark's scenarios, sized for the pool: traffic, duration, and the demand the oracle sees.

Every scenario is sized from the capacity table rather than by a constant: its peak (or, for a
trace, its mean) needs `FILL` of the pool's GPUs with the hindsight-best layout, so each policy
has room to over- or under-provision. The traffic is rebuilt from the seed for every policy.

- coding-agent-day: the load test's coding-agent sessions through sim.scenario's WORKDAY profile (7:1 peak to trough);
- spike: a third of the peak, then 3x for the middle fifth of the run, reached in 60 s;
- context-growth: a steady session rate whose mean prompt grows from 40K to 100K tokens;
- azure-code (or any `--trace`): the trace replayed `rate_multiplier` times faster, back to back
  until the duration is over. Its rows carry no sessions, so nothing is cached across requests;
- chat: a generated chat-shaped trace (sim.traffic.chat_trace: ~1K-token prompts, ~200-token
  answers, bursts, no sessions), its rate set so its heaviest 5 minutes need FILL of the pool;
- week: seven WORKDAY days scaled by the day of the week (sim.scenario.WEEKLY);
- drop: the peak, then 10% of it within 60 s, for the last 60% of the run;
- ramp: from 10% of the peak to the peak, linearly over the run.

The last four also run with a 60 s model load (`<name>-load60`) as well as the resource's 900 s.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from infertune.errors import UserError
from infertune_lab.bench.capacity import HAND_PICKED, CapacitySweep, LayoutCapacity
from infertune_lab.data import AZURE_CODE_TRACE
from infertune_lab.sim import RequestRecord, RequestSpec, SessionShape, TraceReplay, TrafficSource, load_trace
from infertune_lab.sim.scenario import Scenario, random_scenario, scaled_to_context, scenario, turns_per_session
from infertune_lab.sim.trace import TraceRow
from infertune_lab.sim.traffic import CHAT_TRACE, CODING_AGENT, chat_trace

BASE_NAMES = ("coding-agent-day", "spike", "context-growth", "azure-code", "chat", "week", "drop", "ramp")
DURATIONS = {"coding-agent-day": 86_400.0, "spike": 14_400.0, "context-growth": 21_600.0, "azure-code": 7_200.0,
             "chat": 7_200.0, "week": 7 * 86_400.0, "drop": 14_400.0, "ramp": 21_600.0}
# The scenarios it was not built on run with a fast model load as well (a cached image, a small model).
FAST_LOAD = "-load60"
FAST_LOAD_SECONDS = 60.0
NAMES = (*BASE_NAMES, *(f"{n}{FAST_LOAD}" for n in ("chat", "week", "drop", "ramp")))
# A scenario drawn from the seed (sim.scenario.random_scenario); not part of "all".
RANDOM = "random"
RANDOM_DURATION = 3_600.0
FILL = 0.85  # share of the pool the hindsight-best layout needs at the scenario's peak
# A session's next turn comes one answer later; the oracle's hindsight demand replays the
# sessions with this answer time (about 1,000 tokens at the SLO's 25 tok/s, plus TTFT).
DRY_RUN_ANSWER_SECONDS = 42.0
# Traffic runs this long before the scored run starts, on every policy's starting layout, so the
# run opens with sessions in flight and warm caches, as a day does; it is neither charged nor scored.
WARMUP_SECONDS = 1_800.0
CHAT_WARMUP_SECONDS = 300.0
RANDOM_WARMUP_SECONDS = 600.0
DEMAND_BIN_SECONDS = 300.0  # demand is the busiest five minutes of a window
# The spike rises over a minute into the run's middle fifth and falls over a minute out of it
# (sim.scenario.spike), so a shorter run has no room for it.
SPIKE_MIN_SECONDS = 5 * 60.0


@dataclass(frozen=True)
class BenchCase:
    name: str
    duration: float  # scored seconds, after the warm-up
    seed: int
    scenario: Scenario | None = None  # in scenario time; the traffic runs it shifted by the warm-up
    trace: tuple[TraceRow, ...] = ()
    rate_multiplier: float = 1.0
    note: str = ""
    warmup: float = WARMUP_SECONDS
    load_seconds: float | None = None  # None: the resource's spec.engine.startupSeconds
    shape: SessionShape | None = None  # what capacity is measured with, when the generator knows it

    def traffic(self) -> TrafficSource:
        """A fresh source in run time (the warm-up, then the scenario): the same requests for every policy."""
        if self.scenario is not None:
            sc = self.scenario
            shifted = replace(sc, duration=sc.duration + self.warmup,
                              phases=tuple(replace(p, at=p.at + self.warmup) for p in sc.phases))
            return shifted.traffic(self.seed)
        rows = looped(self.trace, self.rate_multiplier, self.warmup + self.duration)
        return TraceReplay(rows, self.rate_multiplier)

    def shape_at(self, t: float) -> SessionShape:
        """The session shape whose capacity table applies at scored time t."""
        if self.shape is not None:
            return self.shape
        if self.scenario is None:
            return trace_shape(self.trace)
        context = self.scenario.context_at(t)
        if context is None:
            return self.scenario.shape
        return scaled_to_context(self.scenario.shape, round(context / 5_000) * 5_000)

    def arrivals(self) -> list[float]:
        """Hindsight: when every scored request arrives (scored time)."""
        return [spec.arrival - self.warmup for spec in self._dry_run(self.duration) if spec.arrival >= self.warmup]

    def _dry_run(self, end: float) -> Iterator[RequestSpec]:
        """Every request until scored time `end`, in run time, each turn answered in DRY_RUN_ANSWER_SECONDS
        (exact for a trace, which has no feedback)."""
        source = self.traffic()
        while source.next_time() < self.warmup + end:
            spec = source.pop()
            yield spec
            source.on_finish(RequestRecord(spec, "dry", spec.arrival, spec.arrival + DRY_RUN_ANSWER_SECONDS, 0, 0))

    def request_shape(self, start: float, end: float) -> RequestShape | None:
        """Hindsight: the mean request scored in [start, end) (None without one). A turn's cached
        tokens are its session's context so far (the earlier prompt and answer), which its prompt
        starts with; a request with no earlier turn in the run caches nothing."""
        context: dict[str, int] = {}
        fresh = cached = output = 0.0
        count = 0
        for spec in self._dry_run(end):
            history = min(context.get(spec.session, 0), spec.prompt_tokens) if spec.session else 0
            if spec.session:
                context[spec.session] = spec.prompt_tokens + spec.output_tokens
            if spec.arrival >= self.warmup + start:
                fresh += spec.prompt_tokens - history
                cached += history
                output += spec.output_tokens
                count += 1
        return RequestShape(fresh / count, cached / count, output / count) if count else None


@dataclass(frozen=True)
class RequestShape:
    """The mean request of a stretch of traffic, as a model team writes its hints: tokens new to the
    engine, tokens a session's earlier turns put in the prefix cache, and tokens answered."""

    fresh_tokens: float
    cached_tokens: float
    output_tokens: float


def peak_demand(arrivals: Sequence[float], start: float, end: float, bin_seconds: float = DEMAND_BIN_SECONDS) -> float:
    """The highest request rate of any `bin_seconds` stretch in [start, end)."""
    best, t = 0.0, start
    while t < end:
        stop = min(t + bin_seconds, end)
        count = bisect.bisect_left(arrivals, stop) - bisect.bisect_left(arrivals, t)
        best = max(best, count / (stop - t))
        t = stop
    return best


def looped(rows: Sequence[TraceRow], multiplier: float, duration: float) -> list[TraceRow]:
    """The trace repeated back to back (in trace time) for as long as `duration` needs once the
    replay runs `multiplier` times faster."""
    span = rows[-1].offset + 1.0
    passes = max(1, math.ceil(duration * multiplier / span))
    return [TraceRow(r.offset + n * span, r.context_tokens, r.generated_tokens) for n in range(passes) for r in rows]


def trace_shape(rows: Sequence[TraceRow]) -> SessionShape:
    """One-turn sessions with the trace's prompt and answer sizes (mean and median), for capacity."""
    prompts = sorted(max(r.context_tokens, 1) for r in rows)
    outputs = sorted(max(r.generated_tokens, 1) for r in rows)
    return SessionShape("trace", sum(prompts) / len(prompts), prompts[len(prompts) // 2], sum(outputs) / len(outputs),
                        outputs[len(outputs) // 2], 1, 1, 10**7, 0.0, 0.0)


def best_capacity(sweep: CapacitySweep, shape: SessionShape, tps: Sequence[int]) -> LayoutCapacity:
    """The qualifying layout with the most requests/s per GPU."""
    rows = [c for c in sweep.table(shape, tps) if c.qualifies()]
    if not rows:
        raise UserError(f"no layout of TP {list(tps)} meets the SLO for the {shape.name} shape")
    return max(rows, key=lambda c: c.sustained_rps / c.tp)


def check_duration(name: str, duration: float | None) -> None:
    """Refuses, before any work, a --duration the named scenario has no room in."""
    if duration is not None and name.removesuffix(FAST_LOAD) == "spike" and duration < SPIKE_MIN_SECONDS:
        raise UserError(f"--duration: the spike rises over a minute into the middle fifth of the run and falls over "
                        f"a minute out of it, so it needs at least {SPIKE_MIN_SECONDS:g} s, got {duration:g}")


def case_name(name: str, trace: Path | None) -> str:
    """What a run is named by, in its tables and its report's files: a trace replay after the trace's file."""
    return name if trace is None else trace.stem


def build(name: str, sweep: CapacitySweep, tps: Sequence[int], pool_gpus: int, seed: int,
          duration: float | None = None, trace: Path | None = None, rate_multiplier: float | None = None) -> BenchCase:
    """The named scenario (or a trace replay) sized for `pool_gpus`."""
    if trace is not None or name == "azure-code":
        path = trace or AZURE_CODE_TRACE
        return _trace_case(case_name(name, trace), path, sweep, tps, pool_gpus, seed,
                           duration or DURATIONS["azure-code"], rate_multiplier)
    if name == RANDOM:
        return _random_case(sweep, pool_gpus, seed, duration or RANDOM_DURATION)
    if name not in NAMES:
        raise UserError(f"unknown scenario {name!r}; known: {', '.join(NAMES)}, {RANDOM}, all")
    check_duration(name, duration)
    base = name.removesuffix(FAST_LOAD)
    load = FAST_LOAD_SECONDS if base != name else None
    length = duration or DURATIONS[base]
    case = _chat_case(sweep, tps, pool_gpus, seed, length) if base == "chat" else \
        _session_case(base, sweep, tps, pool_gpus, seed, length)
    return replace(case, name=name, load_seconds=load)


def _session_case(name: str, sweep: CapacitySweep, tps: Sequence[int], pool_gpus: int, seed: int,
                  length: float) -> BenchCase:
    # A first guess from the base shape, then scaled so that the heaviest window of the hindsight
    # demand needs FILL of the pool (contexts that grow change both turns per session and capacity).
    best = best_capacity(sweep, CODING_AGENT, tps)
    guess = FILL * pool_gpus / best.tp * best.sustained_rps / turns_per_session(CODING_AGENT)
    probe = BenchCase(name, length, seed, scenario=scenario(name, guess, length))
    need = _peak_gpus(probe, sweep, tps)
    if not need > 0:  # no session started in the whole run: nothing to size the pool on
        raise UserError(f"--duration {length:g} s: no session of the {name} scenario starts within it (seed {seed}), "
                        "so nothing sizes the pool; give a longer --duration")
    peak_sessions = guess * FILL * pool_gpus / need
    case = BenchCase(name, length, seed, scenario=scenario(name, peak_sessions, length))
    note = (f"{length / 3600:g} h; peak {peak_sessions:.3f} sessions/s, sized so the hindsight-best layouts "
            f"need {FILL:.0%} of {pool_gpus} GPUs in the heaviest window")
    natural = DURATIONS[name]
    if name in ("coding-agent-day", "week") and length < natural:
        note += f"; compressed {natural / length:g}x"
    return replace(case, note=note)


def _chat_case(sweep: CapacitySweep, tps: Sequence[int], pool_gpus: int, seed: int, length: float) -> BenchCase:
    """The generated chat trace over the warm-up and the run, at the mean rate whose heaviest
    window needs FILL of the pool (a probe at a guessed rate measures how far bursts lift it).
    A stateless trace needs only a short warm-up: there are no sessions or caches to fill."""
    warmup = CHAT_WARMUP_SECONDS
    shape = CHAT_TRACE.session_shape()
    probe_rate = 10.0
    probe = BenchCase("chat", length, seed, trace=tuple(chat_trace(probe_rate, warmup + length, seed)),
                      warmup=warmup, shape=shape)
    best = best_capacity(sweep, shape, tps)
    rate = probe_rate * FILL * pool_gpus / _peak_gpus(probe, sweep, tps)
    rows = tuple(chat_trace(rate, warmup + length, seed))
    prompt = statistics.mean(r.context_tokens for r in rows)
    answer = statistics.mean(r.generated_tokens for r in rows)
    note = (f"generated chat trace, {length / 3600:g} h: {rate:.1f} req/s on average, ~{prompt:,.0f}-token prompts, "
            f"~{answer:,.0f}-token answers, bursts, no sessions; sized so the heaviest window needs {FILL:.0%} of "
            f"{pool_gpus} GPUs at TP{best.tp} c={best.max_num_seqs}")
    return BenchCase("chat", length, seed, trace=rows, note=note, warmup=warmup, shape=shape)


def _random_case(sweep: CapacitySweep, pool_gpus: int, seed: int, length: float) -> BenchCase:
    """The seed's random scenario, sized so that the hand-picked layout sized for its peak (what
    static runs) needs FILL of the pool; its model load is the one drawn."""
    drawn = random_scenario(seed, length)
    probe = BenchCase(RANDOM, length, seed, scenario=drawn.scenario, warmup=RANDOM_WARMUP_SECONDS)
    picked = sweep.measure(drawn.scenario.shape, *HAND_PICKED)
    per_replica = picked.sustained_rps or picked.requests_per_second
    need = peak_demand(probe.arrivals(), 0.0, length) / per_replica * picked.tp
    peak = FILL * pool_gpus / need
    sc = drawn.scenario
    scaled = replace(sc, phases=tuple(replace(p, rate=p.rate * peak) for p in sc.phases))
    note = (f"random scenario {seed} ({drawn.description}), {length / 3600:g} h; peak {peak:.3f} sessions/s, sized "
            f"so TP{picked.tp} c={picked.max_num_seqs} sized for the peak needs {FILL:.0%} of {pool_gpus} GPUs")
    return BenchCase(RANDOM, length, seed, scenario=scaled, note=note, warmup=RANDOM_WARMUP_SECONDS,
                     load_seconds=drawn.load_seconds)


def _peak_gpus(case: BenchCase, sweep: CapacitySweep, tps: Sequence[int], window: float = 900.0) -> float:
    """The most GPUs any window's demand needs at its best layout's sustained rate (fractional)."""
    arrivals = case.arrivals()
    need, start = 0.0, 0.0
    while start < case.duration:
        end = min(start + window, case.duration)
        count = bisect.bisect_left(arrivals, end) - bisect.bisect_left(arrivals, start)
        best = best_capacity(sweep, case.shape_at(end), tps)
        need = max(need, count / (end - start) / best.sustained_rps * best.tp)
        start = end
    return need


def _trace_case(name: str, path: Path, sweep: CapacitySweep, tps: Sequence[int], pool_gpus: int, seed: int,
                duration: float, multiplier: float | None) -> BenchCase:
    rows = tuple(load_trace(path))
    span = rows[-1].offset + 1.0
    rate = len(rows) / span
    if multiplier is None:
        best = best_capacity(sweep, trace_shape(rows), tps)
        multiplier = FILL * pool_gpus / best.tp * best.sustained_rps / rate
    if multiplier <= 0:
        raise UserError("--rate-multiplier must be > 0")
    # A trace of a few seconds (or one instant) reads in seconds, and one slowed to fill the pool as "0.03x".
    spanned = f"{span / 60:.0f} min" if span >= 120 else f"{span:.0f} s"
    note = (f"{path.name}: {len(rows):,} requests over {spanned} replayed {multiplier:.3g}x faster "
            f"({rate * multiplier:.1f} req/s), back to back for {duration / 3600:g} h")
    return BenchCase(name, duration, seed, trace=rows, rate_multiplier=multiplier, note=note)
