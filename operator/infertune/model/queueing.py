"""How many requests/s one replica sustains within the TTFT SLO once arrivals are random.

A replica has `max-num-seqs` slots; a request that finds them all busy waits before its prefill, and
that wait is TTFT the engine's own figures never predict. Flat-out throughput (every slot always
busy) is what a closed loop measures; random arrivals at that rate queue without bound. So replicas
are sized with Erlang C (M/M/c): the slots are the servers, a request holds one for its end-to-end
time, and the sustainable rate is the highest one at which the chance of waiting longer than the
TTFT slack stays within the SLO's percentile. The end-to-end time and TTFT are read off the layout's
own prediction grid at the busy level the load implies, since a half-busy replica decodes faster
than a full one. Pure numpy, vectorised over every candidate at once.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_BISECTION_STEPS = 30  # busy-slot precision of slots / 2**30: far below one request


def erlang_c(servers: npt.NDArray[np.int64], load: FloatArray) -> FloatArray:
    """P(an arrival waits) in M/M/c with `servers` servers at `load` Erlangs; 1 when load >= servers.

    Erlang B is the last term of the truncated Poisson series a^k/k!, k = 0..c, over their sum,
    taken in logs so that hundreds of slots neither overflow nor underflow, for all candidates and
    all k at once.
    """
    servers, load = np.broadcast_arrays(np.asarray(servers, dtype=np.int64), np.asarray(load, dtype=float))
    k = np.arange(int(servers.max(initial=0)) + 1)
    log_factorial = np.concatenate(([0.0], np.cumsum(np.log(k[1:], dtype=float))))
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = k * np.log(load)[..., None] - log_factorial
    terms = np.where(k <= servers[..., None], terms, -np.inf)
    terms[..., 0] = 0.0  # a^0/0! is 1 even at no load, where 0 * log 0 is NaN
    peak = terms.max(axis=-1, keepdims=True)
    log_total = peak[..., 0] + np.log(np.exp(terms - peak).sum(axis=-1))
    last = np.take_along_axis(terms, servers[..., None], axis=-1)[..., 0]
    blocking = np.exp(last - log_total)
    with np.errstate(divide="ignore", invalid="ignore"):
        waits = servers * blocking / (servers - load * (1.0 - blocking))
    return np.where(load >= servers, 1.0, np.clip(np.nan_to_num(waits, nan=0.0), 0.0, 1.0))


def wait_exceedance(servers: npt.NDArray[np.int64], load: FloatArray, holding_seconds: FloatArray,
                    slack_seconds: FloatArray) -> FloatArray:
    """P(an arrival waits longer than `slack_seconds` for a slot): C(c, a) exp(-(c - a) t / T)."""
    spare = np.maximum(servers - load, 0.0)
    return erlang_c(servers, load) * np.exp(-spare * np.maximum(slack_seconds, 0.0) / holding_seconds)


def sustainable_rates(slots: FloatArray, grid_concurrency: FloatArray, grid_e2e: FloatArray,
                      grid_ttft: FloatArray, ttft_limit: float | None, percentile: int) -> FloatArray:
    """Requests/s per replica for each slot count in `slots`, for each TP's prediction grid (`grid_e2e`
    and `grid_ttft`: one row per TP over the shared `grid_concurrency`): the largest rate whose wait
    beyond the TTFT slack is no likelier than the SLO allows (1 - percentile/100). Without a TTFT
    limit a wait of one service time is the slack. One row per TP, one column per slot count."""
    slots = np.asarray(slots, dtype=float)
    concurrency = np.asarray(grid_concurrency, dtype=float)
    e2e_rows, ttft_rows = np.atleast_2d(grid_e2e).astype(float), np.atleast_2d(grid_ttft).astype(float)
    servers = slots.astype(np.int64)
    allowed = max(1.0 - percentile / 100.0, 1e-4)
    if int(servers.max(initial=0)) <= TABLE_TIERS[-1]:
        busy = _busy_from_table(servers, concurrency, e2e_rows, ttft_rows, ttft_limit, allowed)
    else:
        busy = np.stack([_busy_by_bisection(servers, concurrency, e2e, ttft, ttft_limit, allowed)
                         for e2e, ttft in zip(e2e_rows, ttft_rows, strict=True)])
    rates: FloatArray = busy / _interp_rows(busy, concurrency, e2e_rows)
    return rates


def _interp_rows(x: FloatArray, xp: FloatArray, rows: FloatArray) -> FloatArray:
    """`np.interp` on every row of `rows` over the shared `xp`, at `x` (one row of points shared by all
    rows, or one row of points per row). numpy's own loop per row beats any gather at these sizes."""
    points = np.broadcast_to(x, (rows.shape[0], np.shape(x)[-1]))
    return np.stack([np.interp(at, xp, row) for at, row in zip(points, rows, strict=True)])


def _slack(ttft: FloatArray, e2e: FloatArray, ttft_limit: float | None) -> FloatArray:
    return e2e if ttft_limit is None else ttft_limit - ttft


def _busy_by_bisection(servers: npt.NDArray[np.int64], grid_concurrency: FloatArray, grid_e2e: FloatArray,
                       grid_ttft: FloatArray, ttft_limit: float | None, allowed: float) -> FloatArray:
    """The busy slots at the sustainable rate, bisecting on Erlang C itself: any slot count, O(slots) a step."""
    lo, hi = np.zeros(servers.shape), servers.astype(float)
    for _ in range(_BISECTION_STEPS):
        busy = (lo + hi) / 2
        e2e = np.interp(busy, grid_concurrency, grid_e2e)
        slack = _slack(np.interp(busy, grid_concurrency, grid_ttft), e2e, ttft_limit)
        ok = (slack > 0) & (wait_exceedance(servers, busy, e2e, slack) <= allowed)
        lo, hi = np.where(ok, busy, lo), np.where(ok, hi, busy)
    return lo


# The planner sizes every candidate (up to 16 TPs x 256 slot counts) each cycle; bisecting on Erlang C
# costs O(slots) per candidate and step, half a second for the full grid. Erlang C depends on nothing
# but (slots, load), so it is tabulated once per process at loads 1/8 of a slot apart and the search
# runs on the table, for every TP at once: the bracket by bisection over the table's loads, the
# crossing inside it by Newton's method on an interpolant (`_crossing`); within 1e-3 of the direct
# bisection from 8 slots up, 1e-2 below (tests/unit/test_queueing.py).
TABLE_MAX_SLOTS = 256  # 257 x 2,049 floats, 4 MiB; larger slot counts take the next tier
# Slot counts up to 1,024 (the CRD's bound on max-num-seqs) take a second table, 1,025 x 8,193 floats
# (64 MiB, built in ~0.5 s), made only when a resource asks for more than 256 slots: the direct
# bisection costs O(slots^2) memory a step (38 s and 530 MB for 7 TPs x 4,096 slots).
TABLE_TIERS = (TABLE_MAX_SLOTS, 1024)
_LOADS_PER_SLOT = 8


@lru_cache(maxsize=len(TABLE_TIERS))
def _log_erlang_c_table(max_slots: int = TABLE_MAX_SLOTS) -> FloatArray:
    """log C(c, l / 8) for c = 0..max_slots (rows) and l = 0..8 max_slots (columns)."""
    loads = np.arange(max_slots * _LOADS_PER_SLOT + 1) / _LOADS_PER_SLOT
    table = np.zeros((max_slots + 1, loads.size))
    blocking = np.ones(loads.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(1, max_slots + 1):  # Erlang B over servers, for every load at once
            blocking = loads * blocking / (k + loads * blocking)
            waits = k * blocking / (k - loads * (1.0 - blocking))
            table[k] = np.log(np.where(loads >= k, 1.0, np.clip(np.nan_to_num(waits), 0.0, 1.0)))
    table.flags.writeable = False
    return table


class _Tabulated:
    """One TP row per grid, every candidate of every row flattened: what the search reads at a table column."""

    def __init__(self, servers: npt.NDArray[np.int64], concurrency: FloatArray, e2e_rows: FloatArray,
                 ttft_rows: FloatArray, ttft_limit: float | None, allowed: float) -> None:
        most = int(servers.max(initial=0))
        table = _log_erlang_c_table(next(tier for tier in TABLE_TIERS if most <= tier))
        self.width = table.shape[1]
        self.table = table.ravel()
        columns = int(servers.max(initial=0)) * _LOADS_PER_SLOT + 1
        self.loads = np.arange(columns) / _LOADS_PER_SLOT
        tps = e2e_rows.shape[0]
        e2e = _interp_rows(self.loads, concurrency, e2e_rows)  # TP x column
        self.slack = _slack(_interp_rows(self.loads, concurrency, ttft_rows), e2e, ttft_limit)
        # Waiting beyond the slack decays as exp(-spare x slack / e2e); a column without slack is never within.
        self.decay = (np.maximum(self.slack, 0.0) / e2e).ravel()
        self.has_slack = (self.slack > 0).ravel()
        self.log_allowed = math.log(allowed)
        self.servers = np.tile(servers, tps)
        self.servers_f = self.servers.astype(float)
        self.base = self.servers * self.width  # each candidate's row of the table
        self.row = np.repeat(np.arange(tps) * columns, servers.size)  # each candidate's row start

    def excess(self, col: npt.NDArray[np.int64], at: npt.NDArray[np.int64] | None = None) -> FloatArray:
        """log(P(wait beyond the slack) / allowed) at load `col` / 8: <= 0 is within the SLO."""
        at = self.row + col if at is None else at
        spare = self.servers_f - col * (1.0 / _LOADS_PER_SLOT)
        out: FloatArray = self.table[self.base + col] - spare * self.decay[at] - self.log_allowed
        return out

    def within(self, col: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Within the SLO at load `col` / 8: the prefill leaves slack, and waiting past it is rare enough."""
        at = self.row + col
        inside: npt.NDArray[np.bool_] = self.has_slack[at] & (self.excess(col, at) <= 0)
        return inside


def _busy_from_table(servers: npt.NDArray[np.int64], concurrency: FloatArray, e2e_rows: FloatArray,
                     ttft_rows: FloatArray, ttft_limit: float | None, allowed: float) -> FloatArray:
    """The busy slots at the sustainable rate, TP x slot count, for slot counts up to TABLE_MAX_SLOTS."""
    t = _Tabulated(servers, concurrency, e2e_rows, ttft_rows, ttft_limit, allowed)
    if t.loads.size < 2:  # no slots at all
        return np.zeros((e2e_rows.shape[0], servers.size))
    # At load = slots everyone waits (C = 1 > allowed): the top of the bracket is never within the SLO.
    lo, hi = np.zeros(t.servers.shape, dtype=np.int64), t.servers * _LOADS_PER_SLOT
    for _ in range(int(hi.max(initial=0)).bit_length()):
        mid = (lo + hi) >> 1
        inside = t.within(mid)
        lo, hi = np.where(inside, mid, lo), np.where(inside, hi, mid)
    up = np.minimum(lo + 1, t.servers * _LOADS_PER_SLOT)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cross = _crossing(t, lo, up)
        slack = t.slack.ravel()
        s_low, s_high = slack[t.row + lo], slack[t.row + up]
        by_slack = t.loads[lo] + (t.loads[up] - t.loads[lo]) * s_low / (s_low - s_high)
        cross = np.where(s_high <= 0, np.minimum(cross, by_slack), cross)
    inside_bracket = np.clip(np.nan_to_num(cross), t.loads[lo], t.loads[up])
    busy: FloatArray = np.where(t.within(lo) & (up > lo), inside_bracket, 0.0)
    return busy.reshape(e2e_rows.shape[0], servers.size)


def _crossing(t: _Tabulated, lo: npt.NDArray[np.int64], up: npt.NDArray[np.int64]) -> FloatArray:
    """Where the excess crosses zero between columns `lo` and `up`, by Newton's method on an interpolant:
    log P(wait) runs straight in log load between the columns (and is exactly `slots` x log load near no
    load, where P(wait) ~ load^slots / slots!), the slack's decay straight in load."""
    low_load, up_load = t.loads[lo], t.loads[up]
    log_c_low, log_c_up = t.table[t.base + lo], t.table[t.base + up]
    from_zero = (lo == 0) | ~np.isfinite(log_c_low)  # no load, or P(wait) below the smallest double
    slope = np.where(from_zero, t.servers_f, (log_c_up - log_c_low) / (np.log(up_load) - np.log(low_load)))
    anchor = np.where(from_zero, up_load, low_load)
    anchor_log_c = np.where(from_zero, log_c_up, log_c_low)
    decay_low, decay_up = t.decay[t.row + lo], t.decay[t.row + up]
    decay_slope = (decay_up - decay_low) * _LOADS_PER_SLOT
    def excess_and_rise(load: FloatArray) -> tuple[FloatArray, FloatArray]:
        decay = decay_low + decay_slope * (load - low_load)
        spare = t.servers_f - load
        excess = anchor_log_c + slope * np.log(load / anchor) - spare * decay - t.log_allowed
        return excess, slope / load + decay - spare * decay_slope

    # Safeguarded Newton: a step that leaves the shrinking bracket is replaced by its midpoint.
    left, right = np.where(from_zero, up_load * 1e-12, low_load), up_load.copy()
    excess_up, _ = excess_and_rise(up_load)
    load = np.clip(np.where(from_zero, up_load * np.exp(-excess_up / np.maximum(t.servers_f, 1.0)), low_load),
                   left, right)
    for _ in range(3):  # quadratic once close; the first step starts at a bracket end
        excess, rise = excess_and_rise(load)
        left, right = np.where(excess <= 0, load, left), np.where(excess > 0, load, right)
        step = load - excess / rise
        load = np.where((step >= left) & (step <= right), step, (left + right) / 2)
    return np.where(excess_up > 0, load, up_load)  # within at `up` too: only the slack can end the bracket


def busy_distribution(servers: npt.NDArray[np.int64], load: FloatArray, most: int) -> FloatArray:
    """P(n slots busy), n = 0..most, for each (servers, load) pair of M/M/c: below c, the truncated
    Poisson a^n/n! scaled by P(no wait); at c, every slot busy (Erlang C, the queue included).
    One row per pair; columns past a pair's own `servers` are 0."""
    servers, load = np.broadcast_arrays(np.asarray(servers, dtype=np.int64), np.asarray(load, dtype=float))
    n = np.arange(most + 1)
    log_factorial = np.concatenate(([0.0], np.cumsum(np.log(np.maximum(n[1:], 1), dtype=float))))
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = n * np.log(np.maximum(load, 1e-300))[..., None] - log_factorial
    below = n < servers[..., None]
    terms = np.where(below, terms, -np.inf)
    peak = terms.max(axis=-1, keepdims=True)
    weights = np.where(below, np.exp(terms - peak), 0.0)
    total = weights.sum(axis=-1, keepdims=True)
    waits = erlang_c(servers, load)
    probabilities: FloatArray = np.where(total > 0, weights / np.where(total > 0, total, 1.0), 0.0)
    probabilities *= (1.0 - waits)[..., None]
    at_cap = n == servers[..., None]
    return np.where(at_cap, waits[..., None], probabilities)


def load_keeping_streams(servers: npt.NDArray[np.int64], streams: npt.NDArray[np.int64],
                         share: float) -> FloatArray:
    """The largest load (Erlangs) at which M/M/c with `servers` slots has more than `streams` of them busy
    no more than `share` of the time, for each pair; 0 where even one busy slot is too many that often.
    Bisection, since that share only rises with the load; to `_BISECTION_STEPS` of the servers' count."""
    servers, streams = np.broadcast_arrays(np.asarray(servers, dtype=np.int64), np.asarray(streams, dtype=np.int64))
    most = int(servers.max(initial=0))
    above = np.arange(most + 1) > streams[..., None]
    low, high = np.zeros(servers.shape), servers.astype(float)
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2.0
        keeps = (busy_distribution(servers, middle, most) * above).sum(axis=-1) <= share
        low, high = np.where(keeps, middle, low), np.where(keeps, high, middle)
    return low
