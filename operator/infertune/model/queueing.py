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

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_BISECTION_STEPS = 30  # busy-slot precision of slots / 2**30: far below one request


def erlang_c(servers: npt.NDArray[np.int64], load: FloatArray) -> FloatArray:
    """P(an arrival waits) in M/M/c with `servers` servers at `load` Erlangs; 1 when load >= servers.

    Erlang B is the last term of the truncated Poisson series a^k/k!, k = 0..c, over their sum,
    taken in logs so that hundreds of slots neither overflow nor underflow. All candidates and all
    k at once: the planner bisects this 30 times per TP every cycle, and the loop over k that the
    textbook recursion needs was most of a cycle's time.
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


def sustainable_rate(slots: FloatArray, grid_concurrency: FloatArray, grid_e2e: FloatArray,
                     grid_ttft: FloatArray, ttft_limit: float | None, percentile: int) -> FloatArray:
    """Requests/s per replica for each candidate's `slots`, given its TP's prediction grid (e2e and
    TTFT over concurrency): the largest rate whose wait beyond the TTFT slack is no likelier than
    the SLO allows (1 - percentile/100). Without a TTFT limit a wait of one service time is the slack."""
    slots = np.asarray(slots, dtype=float)
    servers = slots.astype(np.int64)
    allowed = max(1.0 - percentile / 100.0, 1e-4)
    lo, hi = np.zeros(slots.shape), slots.copy()
    for _ in range(_BISECTION_STEPS):
        busy = (lo + hi) / 2
        e2e = np.interp(busy, grid_concurrency, grid_e2e)
        ttft = np.interp(busy, grid_concurrency, grid_ttft)
        slack = e2e if ttft_limit is None else ttft_limit - ttft
        ok = (slack > 0) & (wait_exceedance(servers, busy, e2e, slack) <= allowed)
        lo, hi = np.where(ok, busy, lo), np.where(ok, hi, busy)
    rate: FloatArray = lo / np.interp(lo, grid_concurrency, grid_e2e)
    return rate
