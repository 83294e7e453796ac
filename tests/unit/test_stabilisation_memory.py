"""The scale-down stabilisation window's memory in status: bounded however fast the cycle runs, and
answering the window's highest count exactly as the full history would."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from infertune.controller.status import state_to_status
from infertune.planner import Guardrails, Layout, PlannerState, next_state
from infertune.planner.types import window_maxima
from tests.unit.test_guardrails import RAILS, run

DAY = 86_400.0


def highest_within(entries: tuple[tuple[float, int], ...], now: float, span: float) -> int | None:
    inside = [r for t, r in entries if now - t <= span]
    return max(inside) if inside else None


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0.0, 100.0), st.integers(1, 40)), max_size=200),
       span=st.floats(0.0, 5_000.0), lag=st.floats(0.0, 5_000.0))
def test_the_kept_entries_answer_every_window_as_the_full_history_does(steps, span, lag):
    at, history = 0.0, []
    for gap, replicas in steps:
        at += gap
        history.append((at, replicas))
    full = tuple(history)
    kept = window_maxima(full)
    now = at + lag
    assert highest_within(kept, now, span) == highest_within(full, now, span)
    assert len(kept) <= len({r for _, r in full})
    assert bool(kept) == bool(full)


def test_a_days_window_at_a_fast_cycle_keeps_status_small():
    """A 24 h stabilisation window and a decision every second: the demand's count wanders between 3
    and 12 all day. Every entry was kept before (86,400 of them, about 1.5 MB of status, past what etcd
    stores in one object); now at most one per count."""
    rails = replace(RAILS, scale_down_stabilization_s=DAY)
    _, first = run(1.0, PlannerState(applied=Layout(4, 8, 12)))
    state = PlannerState(applied=Layout(4, 8, 12))
    for second in range(86_400):
        wanted = 3 + (second * 7919) % 10
        decision = replace(first, decided_at=second, running_wanted=wanted, target=None)
        state = next_state(state, decision, rails, applied=False)
    assert len(state.recent_recommendations) <= 10
    assert max(r for _, r in state.recent_recommendations) == 12  # the seed: what ran when the window began
    assert len(str(state_to_status(state))) < 1_000


def test_the_window_still_holds_a_scale_down_to_its_highest_count():
    rails: Guardrails = RAILS
    state = PlannerState(applied=Layout(4, 8, 10), recent_recommendations=((9_500.0, 8), (9_600.0, 5), (9_700.0, 6)))
    _, d = run(1.0, state)
    assert d.target == Layout(4, 8, 8)
    kept = next_state(state, d, rails).recent_recommendations
    assert kept[0] == (9_500.0, 8) and (9_600.0, 5) not in kept
