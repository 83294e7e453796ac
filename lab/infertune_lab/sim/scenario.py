"""Time-varying traffic for the twin: a rate profile and a prompt-context profile over virtual time.

A `Scenario` is a list of `Phase` breakpoints. Between two breakpoints the session arrival rate
(and, where given, the target mean prompt context) moves linearly, so a day, a spike or a slow
growth of contexts is a handful of numbers. Its traffic is an `OpenSessions` source whose session
starts are a non-homogeneous Poisson process (thinning a homogeneous one at the peak rate, Lewis
and Shedler 1979) and whose new sessions get the fresh-token size that makes the mean prompt of
their turns equal the context target at their start. Sessions already running keep their shape,
so the mean prompt follows the target with a lag of about one session length.

    from infertune_lab.sim.scenario import SCENARIOS
    day = SCENARIOS["coding-agent-day"](peak_rate=0.5, duration=86_400.0)
    fleet = Fleet(day.traffic(seed=1), router="session-affinity")
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import pairwise

from infertune.errors import UserError
from infertune_lab.sim.traffic import CHAT, CHAT_TRACE, CODING_AGENT, OpenSessions, SessionShape, TrafficSource

# Context targets are rounded to this many tokens so the shapes a scenario hands out are few
# and cached; 250 tokens is well under 1% of any coding-agent prompt.
_CONTEXT_STEP = 250.0


@dataclass(frozen=True)
class Phase:
    """A breakpoint: from `at` (virtual seconds) the arrival rate (sessions/s) and the target mean
    prompt context (tokens; None: no target here) move linearly towards the next phase's."""

    at: float
    rate: float
    context_tokens: float | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    duration: float
    shape: SessionShape
    phases: tuple[Phase, ...]

    def __post_init__(self) -> None:
        if not self.phases:
            raise ValueError(f"scenario {self.name!r} has no phases")
        if any(b.at < a.at for a, b in pairwise(self.phases)):
            raise ValueError(f"scenario {self.name!r}: phases must be in time order")
        if any(p.rate < 0 for p in self.phases):
            raise ValueError(f"scenario {self.name!r}: rates must be >= 0")
        if self.duration <= 0:
            raise ValueError(f"scenario {self.name!r}: duration must be > 0")

    def rate_at(self, t: float) -> float:
        """Session starts per second at virtual time t (flat before the first and after the last phase)."""
        return _interpolate([(p.at, p.rate) for p in self.phases], t)

    def context_at(self, t: float) -> float | None:
        """The target mean prompt context at t, interpolated across the phases that set one."""
        points = [(p.at, p.context_tokens) for p in self.phases if p.context_tokens is not None]
        return _interpolate(points, t) if points else None

    @property
    def peak_rate(self) -> float:
        return max(p.rate for p in self.phases)

    def expected_sessions(self, start: float = 0.0, end: float | None = None) -> float:
        """The integral of the rate over [start, end): how many sessions start there on average."""
        stop = self.duration if end is None else end
        cuts = sorted({start, stop, *(p.at for p in self.phases if start < p.at < stop)})
        return sum((b - a) * (self.rate_at(a) + self.rate_at(b)) / 2 for a, b in pairwise(cuts))

    def traffic(self, seed: int = 0) -> TrafficSource:
        """A fresh source: the same seed gives the same sessions, turn for turn."""
        arrivals = _thinned(self.rate_at, self.peak_rate, self.duration, random.Random(f"{self.name}/{seed}"))
        shape_at = self._shape_at if any(p.context_tokens is not None for p in self.phases) else None
        return OpenSessions(self.shape, arrivals, seed=seed, shape_at=shape_at)

    def _shape_at(self, t: float) -> SessionShape:
        target = self.context_at(t)
        assert target is not None
        return scaled_to_context(self.shape, round(target / _CONTEXT_STEP) * _CONTEXT_STEP)


def _interpolate(points: list[tuple[float, float]], t: float) -> float:
    times = [at for at, _ in points]
    i = bisect.bisect_right(times, t)
    if i == 0:
        return points[0][1]
    if i == len(points):
        return points[-1][1]
    (t0, v0), (t1, v1) = points[i - 1], points[i]
    return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def _thinned(rate_at: Callable[[float], float], top: float, end: float, rng: random.Random) -> Iterator[float]:
    """Non-homogeneous Poisson arrivals on [0, end): candidates at rate `top`, each kept with
    probability rate_at(t) / top."""
    if top <= 0:
        return
    t = 0.0
    while True:
        t += rng.expovariate(top)
        if t >= end:
            return
        if rng.random() * top < rate_at(t):
            yield t


# --- prompt context --------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _fresh_scale_table(shape: SessionShape) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """(scales, mean prompts, turns per session): the request-weighted mean prompt, and how many
    turns a session lasts, when every fresh-token draw of `shape` is multiplied by a scale. Drawn
    once with common random numbers, so the curves are smooth in the scale; session compaction at
    max_context is what makes them non-linear."""
    rng = random.Random(0)
    sessions = []
    for _ in range(2_000):
        turns = shape.turns(rng)
        sessions.append([(shape.fresh(rng, turn), shape.output(rng)) for turn in range(turns)])
    scales = tuple(0.05 * 1.08**i for i in range(80))
    means, turns_per_session = [], []
    for k in scales:
        total = count = 0
        for session in sessions:
            context = 0
            for turn, (fresh, output) in enumerate(session):
                prompt = context + max(1, round(fresh * k))
                if prompt >= shape.max_context and turn > 0:
                    break
                total += prompt
                count += 1
                context = prompt + output
        means.append(total / count)
        turns_per_session.append(count / len(sessions))
    for i in range(1, len(means)):  # a sampling wobble must not make the inverse ambiguous
        means[i] = max(means[i], means[i - 1])
    return scales, tuple(means), tuple(turns_per_session)


def mean_prompt(shape: SessionShape) -> float:
    """The request-weighted mean prompt (context + fresh tokens) of the shape's sessions."""
    return scaled_mean_prompt(shape, 1.0)


def scaled_mean_prompt(shape: SessionShape, scale: float) -> float:
    scales, means, _ = _fresh_scale_table(shape)
    return _interpolate(list(zip(scales, means, strict=True)), scale)


def turns_per_session(shape: SessionShape, context_tokens: float | None = None) -> float:
    """Mean requests per session of the shape (scaled to a mean prompt, if given): sessions/s x
    this is requests/s."""
    scales, means, turns = _fresh_scale_table(shape)
    scale = 1.0 if context_tokens is None else _interpolate(list(zip(means, scales, strict=True)), context_tokens)
    return _interpolate(list(zip(scales, turns, strict=True)), scale)


@lru_cache(maxsize=1_024)
def scaled_to_context(shape: SessionShape, context_tokens: float) -> SessionShape:
    """The shape with its fresh tokens scaled so its mean prompt is `context_tokens`. Answers, turn
    counts and think times stay: agents read more context, they do not write longer answers."""
    scales, means, _ = _fresh_scale_table(shape)
    if not means[0] <= context_tokens <= means[-1]:
        raise UserError(f"a mean prompt of {context_tokens:.0f} tokens is out of reach of the {shape.name} shape "
                         f"({means[0]:.0f}..{means[-1]:.0f} with compaction at {shape.max_context})")
    k = _interpolate(list(zip(means, scales, strict=True)), context_tokens)
    first = shape.first_fresh_mean * k if shape.first_fresh_mean else None
    return replace(shape, name=f"{shape.name}@{context_tokens / 1000:.1f}K", fresh_mean=shape.fresh_mean * k,
                   fresh_median=shape.fresh_median * k, first_fresh_mean=first)


# --- the scenarios the bench and the demo share -------------------------------------------------
# A developer workday in one time zone, share of the peak by hour 0..24: quiet nights, a morning
# ramp, a lunch dip, the afternoon peak at 14:00, a long evening tail. A stylised profile with a
# 7:1 peak-to-trough ratio, not fitted to any trace.
WORKDAY = (0.22, 0.18, 0.15, 0.14, 0.14, 0.16, 0.22, 0.35, 0.55, 0.78, 0.92, 0.97, 0.90, 0.95, 1.00, 0.98,
           0.90, 0.75, 0.55, 0.45, 0.40, 0.36, 0.30, 0.25, 0.22)


def coding_agent_day(peak_rate: float, duration: float = 86_400.0) -> Scenario:
    """The load test's coding-agent sessions (docs/sources.md#kimi-b200) through the WORKDAY profile;
    `duration` is the length of the day in virtual seconds (shorter than 86,400 compresses it, ramps
    steepen accordingly)."""
    hour = duration / 24
    phases = tuple(Phase(h * hour, peak_rate * share) for h, share in enumerate(WORKDAY))
    return Scenario("coding-agent-day", duration, CODING_AGENT, phases)


def spike(peak_rate: float, duration: float = 7_200.0, ramp: float = 60.0) -> Scenario:
    """A steady third of the peak, then 3x for the middle fifth of the run, reached within `ramp` seconds."""
    base = peak_rate / 3
    start, end = 0.4 * duration, 0.6 * duration
    phases = (Phase(0.0, base), Phase(start, base), Phase(start + ramp, peak_rate), Phase(end, peak_rate),
              Phase(end + ramp, base))
    return Scenario("spike", duration, CODING_AGENT, phases)


def context_growth(peak_rate: float, duration: float = 7_200.0, start_tokens: float = 40_000.0,
                   end_tokens: float = 100_000.0) -> Scenario:
    """A steady session rate whose mean prompt grows linearly from `start_tokens` to `end_tokens`,
    as agents take on bigger repositories: the same rate needs more KV cache by the hour."""
    phases = (Phase(0.0, peak_rate, start_tokens), Phase(duration, peak_rate, end_tokens))
    return Scenario("context-growth", duration, CODING_AGENT, phases)


# A week from Monday 00:00: the WORKDAY profile every day, scaled by the day's share of a weekday.
# Stylised (not fitted): production LLM traffic follows the working day and drops at the weekend
# (docs/sources.md#azure-llm-2024: a week of Azure's code and conversation services).
WEEKLY = (1.00, 1.00, 1.00, 1.00, 0.95, 0.45, 0.35)


def week(peak_rate: float, duration: float = 7 * 86_400.0) -> Scenario:
    """Seven WORKDAY days, Monday to Sunday, each scaled by WEEKLY: daily and weekly seasonality.
    `duration` shorter than a week compresses it."""
    hour = duration / (24 * len(WEEKLY))
    phases = tuple(Phase((d * 24 + h) * hour, peak_rate * WEEKLY[d] * WORKDAY[h])
                   for d in range(len(WEEKLY)) for h in range(24))
    return Scenario("week", duration, CODING_AGENT, (*phases, Phase(duration, peak_rate * WEEKLY[0] * WORKDAY[0])))


def drop(peak_rate: float, duration: float = 14_400.0, ramp: float = 60.0, floor: float = 0.10) -> Scenario:
    """The peak rate for the first 40% of the run, then down to `floor` of it within `ramp` seconds
    and there to the end: what a policy keeps paying for after its traffic has gone."""
    at = 0.4 * duration
    phases = (Phase(0.0, peak_rate), Phase(at, peak_rate), Phase(at + ramp, peak_rate * floor))
    return Scenario("drop", duration, CODING_AGENT, phases)


def slow_ramp(peak_rate: float, duration: float = 21_600.0, floor: float = 0.10) -> Scenario:
    """From `floor` of the peak to the peak, linearly over the whole run: a launch's adoption."""
    phases = (Phase(0.0, peak_rate * floor), Phase(duration, peak_rate))
    return Scenario("ramp", duration, CODING_AGENT, phases)


# --- scenarios nobody chose --------------------------------------------------------------------
@dataclass(frozen=True)
class RandomScenario:
    """A scenario drawn from a seed (rates relative to its peak, 1 session/s), its model-load time,
    and what was drawn, in words."""

    scenario: Scenario
    load_seconds: float
    description: str


def random_scenario(seed: int, duration: float = 3_600.0) -> RandomScenario:
    """Traffic nobody tuned for: a random request shape (coding-agent sessions at a random context,
    chat sessions, or one-shot chat requests), and a rate that is the product of a seasonality (a
    sinusoid of random period, amplitude and phase), a linear trend, up to two lasting steps (a
    third to three times, reached in a minute) and up to three bursts (1.5 to 3 times, 1 to 10
    minutes), normalised to a peak of 1; and a model load between 60 and 900 s. The same seed gives
    the same scenario."""
    rng = random.Random(f"random-scenario/{seed}")
    kind = rng.choice(("coding-agent", "chat", "one-shot"))
    if kind == "coding-agent":
        context = rng.choice((20_000, 40_000, 60_000, 80_000))
        shape, what = scaled_to_context(CODING_AGENT, context), f"coding-agent sessions at {context // 1000}K"
    elif kind == "chat":
        shape, what = CHAT, "chat sessions"
    else:
        shape, what = CHAT_TRACE.session_shape(), "one-shot chat requests"
    amplitude, period = rng.uniform(0.0, 0.5), rng.uniform(0.5, 2.0) * duration
    phase, trend = rng.uniform(0.0, 2 * math.pi), rng.uniform(-0.6, 0.6)
    steps = [(rng.uniform(0.2, 0.8) * duration, math.exp(rng.uniform(math.log(1 / 3), math.log(3))))
             for _ in range(rng.randint(0, 2))]
    bursts = [(rng.uniform(0.05, 0.9) * duration, rng.uniform(60.0, 600.0), rng.uniform(1.5, 3.0))
              for _ in range(rng.randint(0, 3))]
    load = float(round(rng.uniform(60.0, 900.0), -1))
    ramp = 60.0

    def rate(t: float) -> float:
        season = 1 + amplitude * math.sin(2 * math.pi * t / period + phase)
        level = season * max(0.1, 1 + trend * (t / duration - 0.5))
        for at, factor in steps:
            level *= 1 + (factor - 1) * min(1.0, max(0.0, (t - at) / ramp))
        for at, length, factor in bursts:
            rise = min(1.0, max(0.0, (t - at) / 30.0), max(0.0, (at + length - t) / 30.0))
            level *= 1 + (factor - 1) * rise
        return level

    edges = {*(float(t) for t in range(0, int(duration) + 1, 120))}
    edges |= {min(duration, max(0.0, e)) for at, _ in steps for e in (at, at + ramp)}
    edges |= {min(duration, max(0.0, e))
              for at, length, _ in bursts for e in (at, at + 30, at + length - 30, at + length)}
    times = sorted(edges)
    levels = [rate(t) for t in times]
    top = max(levels)
    phases = tuple(Phase(t, max(level / top, 0.02)) for t, level in zip(times, levels, strict=True))
    description = (f"{what}; seasonality {amplitude:.0%} over {period / 3600:.1f} h, trend {trend:+.0%} over the run, "
                   f"steps {' '.join(f'x{f:.2f}' for _, f in steps) or 'none'}, {len(bursts)} burst(s), "
                   f"model load {load:g} s")
    return RandomScenario(Scenario(f"random-{seed}", duration, shape, phases), load, description)


SCENARIOS: dict[str, Callable[..., Scenario]] = {
    "coding-agent-day": coding_agent_day,
    "spike": spike,
    "context-growth": context_growth,
    "week": week,
    "drop": drop,
    "ramp": slow_ramp,
}


def scenario(name: str, peak_rate: float, duration: float) -> Scenario:
    try:
        build = SCENARIOS[name]
    except KeyError:
        raise UserError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
    return build(peak_rate=peak_rate, duration=duration)


__all__ = ["SCENARIOS", "WEEKLY", "WORKDAY", "Phase", "RandomScenario", "Scenario", "coding_agent_day",
           "context_growth", "drop", "mean_prompt", "random_scenario", "scaled_to_context", "scenario", "slow_ramp",
           "spike", "turns_per_session", "week"]
