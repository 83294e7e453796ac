"""Erlang C and the sustainable rate replicas are sized by: textbook values, and the properties a
person sizing a fleet relies on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infertune.model.queueing import (
    TABLE_MAX_SLOTS,
    _busy_by_bisection,
    busy_distribution,
    erlang_c,
    load_keeping_streams,
    sustainable_rates,
    wait_exceedance,
)


@pytest.mark.parametrize(("servers", "load", "expected"), [
    (1, 0.5, 0.5),  # M/M/1: P(wait) is the utilisation
    (2, 1.0, 1 / 3),
    (10, 8.0, 0.40918),  # standard Erlang C table value
    (4, 4.0, 1.0),  # at or past saturation everyone waits
])
def test_erlang_c_matches_the_textbook(servers, load, expected):
    got = float(erlang_c(np.array([servers]), np.array([load]))[0])
    assert got == pytest.approx(expected, abs=1e-4)


@given(st.integers(1, 64), st.floats(0.01, 0.99), st.floats(0.0, 30.0))
def test_more_load_means_more_waiting(servers, utilisation, slack):
    loads = np.array([servers * utilisation * 0.9, servers * utilisation])
    c = np.array([servers, servers])
    p = wait_exceedance(c, loads, np.array([20.0, 20.0]), np.array([slack, slack]))
    assert 0.0 <= p[0] <= p[1] <= 1.0


def sustainable_rate(slots, conc, e2e, ttft, ttft_limit, percentile):
    """One TP's rates: the planner asks for every TP at once, with one grid row each."""
    return sustainable_rates(slots, conc, np.asarray(e2e)[None], np.asarray(ttft)[None], ttft_limit, percentile)[0]


def _flat_grid(e2e: float, ttft: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    conc = np.arange(1.0, 65.0)
    return conc, np.full(conc.shape, e2e), np.full(conc.shape, ttft)


def test_a_replica_sustains_less_than_flat_out_and_pools_better_with_more_slots():
    conc, e2e, ttft = _flat_grid(30.0, 1.0)
    slots = np.array([4.0, 16.0, 64.0])
    rate = sustainable_rate(slots, conc, e2e, ttft, ttft_limit=3.0, percentile=95)
    flat_out = slots / 30.0
    share = rate / flat_out
    assert np.all(rate < flat_out)
    assert share[0] < share[1] < share[2]  # big batches absorb randomness better (Erlang's economy of scale)
    # At the returned rate the chance of waiting past the 2 s slack is within the 5% the p95 SLO allows
    # (to the table's interpolation: a thousandth of it).
    load = rate * 30.0
    assert np.all(wait_exceedance(slots.astype(np.int64), load, np.full(3, 30.0), np.full(3, 2.0)) <= 0.05 * 1.001)


def test_a_stricter_percentile_or_no_slack_sustains_less():
    conc, e2e, ttft = _flat_grid(30.0, 1.0)
    slots = np.array([16.0])
    p95 = sustainable_rate(slots, conc, e2e, ttft, 3.0, 95)[0]
    p99 = sustainable_rate(slots, conc, e2e, ttft, 3.0, 99)[0]
    tight = sustainable_rate(slots, conc, e2e, ttft, 1.0001, 95)[0]
    assert p99 < p95 and tight < p95
    # A TTFT limit the prefill alone already breaks leaves nothing sustainable.
    assert sustainable_rate(slots, conc, e2e, ttft, 0.5, 95)[0] == 0.0


def _erlang_c_by_recursion(servers: int, load: float) -> float:
    """The textbook: Erlang B by B(k) = a B(k-1) / (k + a B(k-1)), then C from B."""
    if load >= servers:
        return 1.0
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = load * blocking / (k + load * blocking)
    return servers * blocking / (servers - load * (1.0 - blocking))


@given(st.lists(st.tuples(st.integers(0, 600), st.floats(0.0, 1.2)), min_size=1, max_size=20))
def test_erlang_c_agrees_with_the_textbook_recursion_for_any_mix_of_candidates(cases):
    servers = np.array([c for c, _ in cases], dtype=np.int64)
    loads = np.array([c * u for c, u in cases])
    got = erlang_c(servers, loads)
    expected = [_erlang_c_by_recursion(int(c), float(a)) for c, a in zip(servers, loads, strict=True)]
    assert got == pytest.approx(expected, abs=1e-9)


def _direct(conc, e2e, ttft, limit, percentile):
    """The rate from bisecting on Erlang C itself, the reference the tables are checked against."""
    busy = _busy_by_bisection(conc.astype(np.int64), conc, e2e, ttft, limit, max(1.0 - percentile / 100.0, 1e-4))
    return busy / np.interp(busy, conc, e2e)


@settings(max_examples=30, deadline=None)  # the direct bisection at 320 slots is the slow half
@given(st.floats(2.0, 60.0), st.floats(0.0, 1.0), st.floats(0.05, 2.0), st.floats(0.0, 0.05),
       st.one_of(st.none(), st.floats(0.3, 6.0)), st.sampled_from([50, 90, 95, 99]))
def test_the_tabulated_search_finds_what_bisecting_on_erlang_c_finds(base, per_slot, prefill, ttft_per_slot,
                                                                      limit, percentile):
    # Slot counts up to TABLE_MAX_SLOTS are sized from a small table of Erlang C, more (up to the CRD's
    # 1,024) from a larger one. Both must agree with the direct bisection on every slot count they cover.
    conc = np.arange(1.0, 321.0)
    e2e, ttft = base + per_slot * conc, prefill + ttft_per_slot * conc
    direct = _direct(conc, e2e, ttft, limit, percentile)
    small = sustainable_rate(conc[:TABLE_MAX_SLOTS], conc, e2e, ttft, limit, percentile)
    large = sustainable_rate(conc, conc, e2e, ttft, limit, percentile)
    for tabulated, reference in ((small, direct[:TABLE_MAX_SLOTS]), (large, direct)):
        assert tabulated == pytest.approx(reference, rel=1e-2, abs=1e-6)
        assert tabulated[7:] == pytest.approx(reference[7:], rel=1e-3, abs=1e-6)  # 8 slots and more


def test_every_tp_at_once_gets_what_each_tp_gets_alone():
    conc = np.arange(1.0, 129.0)
    e2e = np.stack([10.0 + 0.2 * conc, 30.0 + 0.8 * conc, 20.0 + 0.05 * conc])
    ttft = np.stack([0.3 + 0.01 * conc, 0.5 + 0.04 * conc, 1.0 + 0.002 * conc])
    together = sustainable_rates(conc, conc, e2e, ttft, 3.0, 95)
    alone = [sustainable_rate(conc, conc, e2e[i], ttft[i], 3.0, 95) for i in range(3)]
    assert together.shape == (3, conc.size)
    for row, single in zip(together, alone, strict=True):
        assert row == pytest.approx(single, rel=1e-12)
    assert len({round(float(r[63]), 6) for r in together}) == 3  # the rows really differ


@settings(max_examples=60, deadline=None)
@given(servers=st.integers(2, 256), fraction=st.floats(0.05, 0.95), share=st.sampled_from([0.01, 0.05, 0.2]))
def test_the_load_keeping_streams_is_the_most_that_keeps_them_that_often(servers, fraction, share):
    """At the load found, more than `streams` slots are busy `share` of the time; 1% more load, more often."""
    streams = max(1, min(servers - 1, round(servers * fraction)))
    load = float(load_keeping_streams(np.array([servers]), np.array([streams]), share)[0])
    def above(at: float) -> float:
        return float(busy_distribution(np.array([servers]), np.array([at]), servers)[0][streams + 1:].sum())
    assert 0.0 < load < servers
    assert above(load) <= share + 1e-6
    assert above(load * 1.01) > share


def test_more_streams_allowed_or_more_often_means_more_load():
    loads = load_keeping_streams(np.array([48, 48, 48]), np.array([12, 24, 24]), 0.05)
    assert loads[0] < loads[1]
    assert float(load_keeping_streams(np.array([48]), np.array([24]), 0.2)[0]) > loads[1]
