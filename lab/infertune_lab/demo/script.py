"""What the demo's users do: a ramp, a 3x spike in arrivals, then contexts growing from 40K to 100K
tokens, as one `Scenario` of the twin (sim.scenario) with coding-agent sessions (the shape of
docs/sources.md#kimi-b200).

Times are seconds since the first replica served. The load test's sessions last ~5 minutes (7-16 turns
of ~1K-token answers), longer than the whole compressed run, so sessions in flight would only pile
up. The demo's agents answer in tool-call-sized turns (~300 tokens) and run 6-12 turns, so a session
lasts ~1.5 minutes and the request rate settles within each act; prompts, caching and think times
stay the load test's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from infertune_lab.sim.scenario import Phase, Scenario
from infertune_lab.sim.traffic import CODING_AGENT

DEMO_AGENT = replace(CODING_AGENT, name="coding-agent-demo", output_mean=300, output_median=220, min_turns=6,
                     max_turns=12)


@dataclass(frozen=True)
class Act:
    at: float
    label: str


@dataclass(frozen=True)
class Script:
    scenario: Scenario
    acts: tuple[Act, ...]

    @property
    def duration(self) -> float:
        return self.scenario.duration

    def act_at(self, t: float) -> str:
        label = self.acts[0].label
        for act in self.acts:
            if act.at <= t:
                label = act.label
        return label


def script(base_rate: float, ramp: float, spike_at: float, spike_for: float, growth_at: float,
           growth_for: float, tail: float, name: str = "demo") -> Script:
    """Session arrivals ramp to `base_rate`, triple at `spike_at` for `spike_for`, and new sessions'
    mean prompt goes from 40K to 100K tokens over [growth_at, growth_at + growth_for]."""
    edge = min(10.0, spike_for / 4)  # how fast the spike comes and goes
    spike_end = spike_at + spike_for
    growth_end = growth_at + growth_for
    points = sorted({0.0: (base_rate / 4, 40_000.0), ramp: (base_rate, None), spike_at: (base_rate, None),
                     spike_at + edge: (3 * base_rate, None), spike_end: (3 * base_rate, None),
                     spike_end + edge: (base_rate, None), growth_at: (None, 40_000.0),
                     growth_end: (None, 100_000.0)}.items())
    scenario_phases = _phases(points)
    acts = (Act(0.0, "ramp"), Act(spike_at, "3x spike"), Act(spike_end, "after the spike"),
            Act(growth_at, "context 40K -> 100K"), Act(growth_end, "100K contexts"))
    return Script(Scenario(name, growth_end + tail, DEMO_AGENT, scenario_phases),
                  tuple(sorted(acts, key=lambda a: a.at)))


def _phases(points: list[tuple[float, tuple[float | None, float | None]]]) -> tuple[Phase, ...]:
    """Breakpoints where only one of rate/context is given get the other by interpolation."""
    rates = [(t, r) for t, (r, _) in points if r is not None]
    contexts = [(t, c) for t, (_, c) in points if c is not None]
    return tuple(Phase(t, _at(rates, t), _at(contexts, t)) for t, _ in points)


def _at(points: list[tuple[float, float]], t: float) -> float:
    before = [p for p in points if p[0] <= t]
    after = [p for p in points if p[0] > t]
    if not before:
        return after[0][1]
    if not after:
        return before[-1][1]
    (t0, v0), (t1, v1) = before[-1], after[0]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def full() -> Script:
    """About four minutes of traffic: the whole demo stays under five."""
    return script(base_rate=0.19, ramp=40, spike_at=50, spike_for=70, growth_at=110, growth_for=90, tail=30)


def fast() -> Script:
    """The same story in about 35 s, for `--fast` (and the smoke test)."""
    return script(base_rate=0.4, ramp=5, spike_at=6, spike_for=14, growth_at=12, growth_for=16, tail=5,
                  name="demo-fast")
