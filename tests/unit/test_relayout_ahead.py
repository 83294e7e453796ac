"""Where the learnt daily profile knows the hours ahead, a re-layout is weighed on the demand it has for them,
for as long as the new shape keeps saving: a move into the shape the morning's rise will want is not
rounding, and a move whose saving the next hour's fall takes back does not pay (docs/bench.md, History,
"A re-layout weighed on the hours the profile knows")."""

from __future__ import annotations

from infertune.model.forecast import SECONDS_PER_HOUR, DemandOutlook, SeasonalProfile
from infertune.planner import PlannerState, decide, plan
from infertune.planner.types import Action, DecisionReason, Layout
from tests.unit.test_rollout import NOW, RAILS, fresh, request

MIDNIGHT = 86_400.0 * 10  # a Sunday, 00:00 UTC


def _profile(levels: dict[int, float], days: int = 1) -> SeasonalProfile:
    """A profile that saw `levels` (requests/s by hour of the day) on `days` days, a sample a minute."""
    profile = SeasonalProfile()
    for day in range(days):
        for hour, rate in levels.items():
            for minute in range(60):
                profile = profile.updated(MIDNIGHT + day * 86_400.0 + hour * SECONDS_PER_HOUR + minute * 60, rate)
    return profile


def test_the_profile_ahead_is_its_ratio_to_now_while_every_hour_on_the_way_was_seen():
    profile = _profile({6: 1.0, 7: 2.0, 8: 4.0})
    six = MIDNIGHT + 6 * SECONDS_PER_HOUR
    ahead = profile.ahead(six, step_s=1800.0, most_s=4 * SECONDS_PER_HOUR)
    # 06:30 and 07:00 ... 08:30 seen; 09:00 never was, so the reading stops there. 08:00 is 4x, capped at 3x.
    assert ahead == ((1800.0, 1.0), (3600.0, 2.0), (5400.0, 2.0), (7200.0, 3.0), (9000.0, 3.0))
    assert profile.ahead(MIDNIGHT + 5 * SECONDS_PER_HOUR) == ()  # the level now unknown: nothing to scale
    assert _profile({6: 0.0, 7: 1.0}).ahead(six) == ()  # nor a level of nothing


def test_an_outlook_carries_the_profile_ahead_and_none_without_one():
    from infertune.model.forecast import outlook

    profile = _profile({h: 1.0 + h for h in range(24)})
    now = MIDNIGHT + 86_400.0 + 6 * SECONDS_PER_HOUR
    look = outlook(1.0, (), profile, now, 600.0)
    assert look.ahead == profile.ahead(now) and len(look.ahead) == 32  # eight hours of quarter-hours
    assert outlook(1.0, (), None, now, 600.0).ahead == ()


def _decide(demand: float, running: Layout, ahead: tuple[tuple[float, float], ...]):
    look = DemandOutlook(current=demand, ahead=ahead)
    p = plan(request(demand), fresh(demand), NOW, look)
    state = PlannerState(applied=running, recent_recommendations=((NOW - 5000, running.replicas),))
    return p, decide(p, state, fresh(demand), RAILS, NOW)


def _steps(ratios: list[float]) -> tuple[tuple[float, float], ...]:
    return tuple((900.0 * (i + 1), r) for i, r in enumerate(ratios))


RISING = _steps([1.5, 2.0, 2.5] + [3.0] * 29)  # eight hours ahead: the demand tripled within the hour


def test_a_saving_that_is_rounding_now_but_grows_with_the_learnt_rise_moves():
    """At 0.4 req/s three pods of TP4 c=4 run (the window's memory) where two of c=8 carry the demand, and 10%
    less demand needs two of c=4 too: held as rounding when nothing is known ahead. The profile has the demand
    tripling over the next hour and holding there, where c=8 needs a third fewer GPUs at any demand within
    10%: the move goes."""
    running = Layout(4, 4, 3)
    _, held = _decide(0.4, running, ())
    assert held.reason == DecisionReason.RELAYOUT_NOT_WORTH_IT and "rounding" in held.message
    p, moved = _decide(0.4, running, RISING)
    assert p.layout == Layout(4, 8, 2)
    assert moved.action is Action.RELAYOUT and moved.reason == DecisionReason.CHEAPER_LAYOUT
    assert moved.target is not None and moved.target.max_num_seqs == 8


def test_shapes_a_pod_apart_at_every_demand_stay_rounding_however_the_demand_grows():
    """TP4 c=6 against c=8 is a pod in eight at any count: over the profile's rise the saving stays under the
    hysteresis share of what the running shape needs, so the move is held as rounding with or without it."""
    running = Layout(4, 6, 4)
    for ahead in ((), RISING):
        _, held = _decide(0.8, running, ahead)
        assert held.action is not Action.RELAYOUT
        assert held.reason == DecisionReason.RELAYOUT_NOT_WORTH_IT and "rounding" in held.message
    assert "the learnt profile's demand over the next 8.0 h" in held.message


def test_a_saving_the_learnt_fall_takes_back_within_the_hour_does_not_pay():
    """From c=4 to c=8 at 1.5 req/s saves eight GPUs, and pays back within the hour at this demand. The profile
    has the demand falling within a quarter-hour to where both shapes need one pod for the next eight hours:
    the new shape would save for fifteen minutes of them."""
    running = Layout(4, 4, 8)
    _, moved = _decide(1.5, running, ())
    assert moved.action is Action.RELAYOUT  # the move the hour at the demand now pays for
    falling = _steps([0.05] * 32)
    _, held = _decide(1.5, running, falling)
    assert held.action is not Action.RELAYOUT
    assert held.reason == DecisionReason.RELAYOUT_NOT_WORTH_IT
    assert "the learnt profile's demand over the next" in held.message  # eight hours of a saving near none


def test_a_profile_that_does_not_reach_past_the_horizon_changes_nothing():
    """A profile that has seen only the next half-hour (the first day's hours so far) is no reading of the
    hours a shape lasts: the move is weighed at the demand now, as without one."""
    running = Layout(4, 4, 3)
    _, without = _decide(0.4, running, ())
    _, short = _decide(0.4, running, _steps([3.0, 3.0]))
    assert (short.action, short.reason, short.message) == (without.action, without.reason, without.message)
