"""Traffic for the twin: arrival processes, request shapes, open and closed loops.

A traffic source is anything with `next_time()`, `peek()`, `pop()`, `on_finish(record)`, `lookahead`
(the least virtual time between a finish and an arrival it causes; +inf for open loops) and
`cross_session` (whether a finish can cause another session's arrival, as a closed loop's
next user does; if not, a session-affinity router keeps all feedback on one replica). The
fleet pulls arrivals in time order and reports finishes back, which is how returning users
come back: a session's next turn arrives a think time after its previous answer ends, and its
prompt is the previous context plus fresh tokens, so whatever of it is still cached hits.

Shapes follow the Kimi B200 load test for coding agents (docs/sources.md#kimi-b200: ~13K fresh with a
~9.4K median, ~71K cached, ~1K output per turn; contexts grow turn by turn until the session ends or compacts) and the
`chat` preset for chat (short histories, ~400-token answers, long think times).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from infertune.errors import UserError
from infertune_lab.sim.records import RequestRecord, RequestSpec
from infertune_lab.sim.trace import TraceRow


class TrafficSource(Protocol):
    lookahead: float
    cross_session: bool

    def next_time(self) -> float: ...
    def peek(self) -> RequestSpec: ...
    def pop(self) -> RequestSpec: ...
    def on_finish(self, record: RequestRecord) -> None: ...
    def on_reject(self, spec: RequestSpec, at: float) -> None: ...


# A client whose request is refused starts its next session this long after (a load generator's back-off);
# without it, a closed loop of requests that never fit would refuse and resend at one instant forever.
REJECT_BACKOFF_SECONDS = 1.0


# --- arrival processes (open loop) ------------------------------------------------------------
def poisson(rate: float, rng: random.Random, start: float = 0.0) -> Iterator[float]:
    if rate <= 0:
        return
    t = start
    while True:
        t += rng.expovariate(rate)
        yield t


def bursty(rate: float, rng: random.Random, start: float = 0.0, burst_factor: float = 4.0,
           burst_seconds: float = 60.0, calm_seconds: float = 240.0) -> Iterator[float]:
    """A two-state Markov-modulated Poisson process whose long-run mean is `rate`."""
    share = burst_seconds / (burst_seconds + calm_seconds)
    calm_rate = rate / (share * burst_factor + (1 - share))
    t, in_burst = start, False
    switch = t + rng.expovariate(1 / calm_seconds)
    while True:
        current = calm_rate * (burst_factor if in_burst else 1.0)
        nxt = t + rng.expovariate(current) if current > 0 else math.inf
        if nxt < switch:
            t = nxt
            yield t
        else:
            t, in_burst = switch, not in_burst
            switch = t + rng.expovariate(1 / (burst_seconds if in_burst else calm_seconds))


def diurnal(rate: float, rng: random.Random, start: float = 0.0, amplitude: float = 0.6,
            period: float = 86_400.0, peak_at: float = 14 * 3600.0) -> Iterator[float]:
    """Poisson with a sinusoidal rate, mean `rate`, by thinning; peaks at `peak_at` within the period."""
    top = rate * (1 + amplitude)
    for t in poisson(top, rng, start):
        level = rate * (1 + amplitude * math.cos(2 * math.pi * (t - peak_at) / period))
        if rng.random() * top <= level:
            yield t


ARRIVALS = ("poisson", "bursty", "diurnal")


def arrivals(kind: str, rate: float, rng: random.Random, start: float = 0.0) -> Iterator[float]:
    if kind == "poisson":
        return poisson(rate, rng, start)
    if kind == "bursty":
        return bursty(rate, rng, start)
    if kind == "diurnal":
        return diurnal(rate, rng, start)
    raise UserError(f"unknown arrival process {kind!r}; known: {', '.join(ARRIVALS)}")


# --- request shapes ---------------------------------------------------------------------------
def _lognormal(rng: random.Random, mean: float, median: float) -> float:
    sigma = math.sqrt(2 * math.log(mean / median)) if mean > median else 0.0
    return median * math.exp(sigma * rng.gauss(0.0, 1.0))


@dataclass(frozen=True)
class SessionShape:
    """Turns of one user session: fresh tokens and answers lognormal, a think time between turns."""

    name: str
    fresh_mean: float
    fresh_median: float
    output_mean: float
    output_median: float
    min_turns: int
    max_turns: int
    max_context: int  # the session compacts (ends) before its prompt would pass this
    think_mean: float
    think_min: float
    first_fresh_mean: float | None = None  # the opening turn (system prompt, task)

    def turns(self, rng: random.Random) -> int:
        return rng.randint(self.min_turns, self.max_turns)

    def fresh(self, rng: random.Random, turn: int) -> int:
        mean = self.first_fresh_mean if turn == 0 and self.first_fresh_mean else self.fresh_mean
        return max(1, round(_lognormal(rng, mean, self.fresh_median * mean / self.fresh_mean)))

    def output(self, rng: random.Random) -> int:
        return max(1, round(_lognormal(rng, self.output_mean, self.output_median)))

    def think(self, rng: random.Random) -> float:
        extra = self.think_mean - self.think_min
        return self.think_min + (rng.expovariate(1 / extra) if extra > 0 else 0.0)


# docs/sources.md#kimi-b200: mean fresh 13K (median 9.4K), output ~1,056, and sessions long enough that the mean
# cached prefix is ~71K (measured by tests/unit/test_sim_traffic.py). Think time is the agent's
# tool calls between turns.
CODING_AGENT = SessionShape("coding-agent", 13_000, 9_400, 1_056, 800, 7, 16, 200_000, 3.0, 0.5)
CHAT = SessionShape("chat", 450, 300, 400, 300, 1, 5, 32_000, 30.0, 3.0, first_fresh_mean=1_000)
# Bulk generation: one request a session, no reuse.
BATCH = SessionShape("batch", 4_000, 3_000, 800, 700, 1, 1, 1_000_000, 0.0, 0.0)
SHAPES: dict[str, SessionShape] = {s.name: s for s in (CODING_AGENT, CHAT, BATCH)}


def fixed(prompt_tokens: int, output_tokens: int) -> SessionShape:
    """A load generator's requests: every prompt and answer the same length, one turn a session, so no
    prompt is ever in the prefix cache (benchmark_serving's random dataset, --ignore-eos)."""
    if prompt_tokens < 1 or output_tokens < 1:
        raise ValueError("prompt and output tokens must be at least 1")
    return SessionShape(f"fixed-{prompt_tokens}-{output_tokens}", prompt_tokens, prompt_tokens, output_tokens,
                        output_tokens, 1, 1, 1 << 40, 0.0, 0.0)


def shape(name: str) -> SessionShape:
    try:
        return SHAPES[name]
    except KeyError:
        raise UserError(f"unknown workload {name!r}; known: {', '.join(SHAPES)}") from None


@dataclass
class _Session:
    sid: str
    turns_left: int
    context: int  # tokens of the previous turns (prompt + answer), the prefix the next prompt reuses
    turn: int = 0
    shape: SessionShape | None = None  # this session's own shape, when it differs from the source's


class _Base:
    """A heap of pending arrivals plus the session bookkeeping both loops share."""

    cross_session = False

    def __init__(self, shape: SessionShape, seed: int, think: float | None) -> None:
        self.shape = shape
        self.rng = random.Random(seed)
        self.think_override = think
        self._heap: list[tuple[float, int, RequestSpec]] = []
        self._ids = itertools.count()
        self._sessions: dict[str, _Session] = {}
        lo = shape.think_min if think is None else think
        self.lookahead = lo if lo > 0 else 0.0

    def next_time(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def pop(self) -> RequestSpec:
        return heapq.heappop(self._heap)[2]

    def peek(self) -> RequestSpec:
        return self._heap[0][2]

    def _push(self, spec: RequestSpec) -> None:
        heapq.heappush(self._heap, (spec.arrival, next(self._ids), spec))

    def _think(self) -> float:
        return self.think_override if self.think_override is not None else self.shape.think(self.rng)

    def on_reject(self, spec: RequestSpec, at: float) -> None:
        """A refused turn ends its session: the client got an error, not an answer to build on."""
        self._sessions.pop(spec.session, None)

    def _new_session(self, prefix: str, warm: bool = False, shape: SessionShape | None = None) -> _Session:
        turns = self.shape.turns(self.rng)
        s = _Session(f"{prefix}{next(self._ids)}", turns, 0, shape=shape)
        if warm:
            # Join mid-session, as if it had been running: the context exists but nothing is cached.
            for _ in range(self.rng.randrange(turns)):
                s.context += self.shape.fresh(self.rng, s.turn) + self.shape.output(self.rng)
                s.turn += 1
                s.turns_left -= 1
            if s.context >= self.shape.max_context:
                s = _Session(s.sid, turns, 0)
        self._sessions[s.sid] = s
        return s

    def _turn(self, s: _Session, at: float) -> RequestSpec | None:
        """The session's next request, or None once it is over (ended or compacted)."""
        if s.turns_left <= 0:
            return None
        shape = s.shape or self.shape
        prompt = s.context + shape.fresh(self.rng, s.turn)
        if prompt >= shape.max_context and s.turn > 0:
            return None
        out = shape.output(self.rng)
        spec = RequestSpec(at, prompt, out, session=s.sid, turn=s.turn)
        s.context = prompt + out
        s.turn += 1
        s.turns_left -= 1
        return spec


class OpenSessions(_Base):
    """Users arrive by an arrival process; each runs a session whose turns follow its answers.

    `shape_at`, when given, picks the shape of a session starting at virtual time t (a workload
    whose prompts grow over the day); turn counts and think times stay the source's own."""

    def __init__(self, shape: SessionShape, times: Iterator[float], seed: int = 0,
                 think: float | None = None, shape_at: Callable[[float], SessionShape] | None = None) -> None:
        super().__init__(shape, seed, think)
        if shape.max_turns <= 1:  # one request a session: no finish causes an arrival (turn counts are the source's)
            self.lookahead = math.inf
        self._times = times
        self._shape_at = shape_at
        self._pull()

    def _pull(self) -> None:
        t = next(self._times, None)
        if t is not None:
            self._next_start = t
            s = self._new_session("u", shape=self._shape_at(t) if self._shape_at else None)
            spec = self._turn(s, t)
            if spec is not None:
                self._push(spec)

    def pop(self) -> RequestSpec:
        spec = super().pop()
        if spec.turn == 0:
            self._pull()  # keep exactly one future session start in the heap
        return spec

    def on_finish(self, record: RequestRecord) -> None:
        s = self._sessions.get(record.spec.session)
        if s is None:
            return
        spec = self._turn(s, record.finish + self._think())
        if spec is None:
            del self._sessions[s.sid]
        else:
            self._push(spec)


class ClosedLoop(_Base):
    """`concurrency` users, each running sessions back to back: a load test that holds that many
    sessions in flight. Users join mid-session (staggered over `ramp` seconds) so the run starts
    near steady state rather than with every context at turn one."""

    cross_session = True

    def __init__(self, shape: SessionShape, concurrency: int, seed: int = 0, think: float | None = 0.0,
                 ramp: float = 5.0, start: float = 0.0) -> None:
        super().__init__(shape, seed, think)
        self._user_of: dict[str, int] = {}
        for user in range(concurrency):
            self._start_session(user, start + self.rng.uniform(0.0, ramp), warm=True)

    def _start_session(self, user: int, at: float, warm: bool = False) -> None:
        spec = None
        while spec is None:
            s = self._new_session(f"c{user}-", warm)
            spec = self._turn(s, at)
        self._user_of[s.sid] = user
        self._push(spec)

    def on_finish(self, record: RequestRecord) -> None:
        sid = record.spec.session
        user = self._user_of.get(sid)
        if user is None:
            return
        s = self._sessions[sid]
        at = record.finish + self._think()
        spec = self._turn(s, at)
        if spec is not None:
            self._push(spec)
            return
        del self._sessions[sid], self._user_of[sid]
        self._start_session(user, at)

    def on_reject(self, spec: RequestSpec, at: float) -> None:
        """The user starts another session, so the loop keeps the concurrency it reports (a refused
        session used to leave its user idle for the rest of the run)."""
        user = self._user_of.pop(spec.session, None)
        super().on_reject(spec, at)
        if user is not None:
            self._start_session(user, at + self._think() + REJECT_BACKOFF_SECONDS)


# --- a chat-shaped trace ----------------------------------------------------------------------
@dataclass(frozen=True)
class ChatTraceShape:
    """What a chat service's request log looks like: one request a row, no sessions, so nothing is
    reused across requests; lognormal prompt and answer sizes; bursty arrivals.

    Sizes are modelled on the Azure LLM inference trace 2023, conversation (docs/sources.md#chat-trace):
    prompts around a thousand tokens with a tail of a few thousand, answers of a hundred or two.
    Arrivals are a two-state Markov-modulated Poisson process (`bursty`): calm stretches (mean
    `calm_seconds`) and bursts (mean `burst_seconds`) at `burst_factor` times the calm rate, the
    minute-scale burstiness production LLM traces show (docs/sources.md#chat-trace).
    """

    prompt_median: float = 1_020.0
    prompt_mean: float = 1_150.0
    prompt_max: int = 8_192
    output_median: float = 130.0
    output_mean: float = 210.0
    output_max: int = 2_048
    burst_factor: float = 1.6
    burst_seconds: float = 30.0
    calm_seconds: float = 270.0

    def session_shape(self) -> SessionShape:
        """Its requests as one-turn sessions of the same sizes (what capacity is measured with)."""
        return SessionShape("chat-trace", self.prompt_mean, self.prompt_median, self.output_mean, self.output_median,
                            1, 1, 1 << 40, 0.0, 0.0)

    def prompt(self, rng: random.Random) -> int:
        return min(self.prompt_max, max(16, round(_lognormal(rng, self.prompt_mean, self.prompt_median))))

    def output(self, rng: random.Random) -> int:
        return min(self.output_max, max(1, round(_lognormal(rng, self.output_mean, self.output_median))))


CHAT_TRACE = ChatTraceShape()


def chat_trace(rate: float, duration: float, seed: int = 0, shape: ChatTraceShape = CHAT_TRACE) -> list[TraceRow]:
    """A generated chat trace: `rate` requests/s on average over [0, duration), as trace rows (the
    real chat trace is not public; this stands in for its shape, and is the same for a seed)."""
    if rate <= 0 or duration <= 0:
        raise UserError(f"a chat trace needs a rate and a duration > 0, got {rate} req/s over {duration} s")
    rng = random.Random(f"chat-trace/{seed}")
    rows = []
    for t in bursty(rate, rng, burst_factor=shape.burst_factor, burst_seconds=shape.burst_seconds,
                    calm_seconds=shape.calm_seconds):
        if t >= duration:
            break
        rows.append(TraceRow(t, shape.prompt(rng), shape.output(rng)))
    return rows
