"""The request shape the planner sees is averaged over the history's horizon, so a window in which a
few long sessions happened to finish does not re-shape the fleet."""

from __future__ import annotations

import math
import random

import pytest

from infertune.api.observation import MetricsFault, Observation
from infertune.observe.history import PressureHistory
from infertune.observe.snapshot import Snapshot

KEY = ("ns", "kimi")


def obs(t: float, prompt: float, completions: float = 1.0, **kw) -> Observation:
    return Observation(*KEY, sample_time=t, available=True, completion_rate=completions, mean_prompt_tokens=prompt,
                       mean_generated_tokens=1_000.0, mean_cached_tokens=prompt * 0.8, **kw)


def record(history: PressureHistory, o: Observation) -> None:
    history.record(Snapshot(o.sample_time, {KEY: o}))


def test_the_shape_is_the_completion_weighted_mean_over_the_horizon():
    history = PressureHistory(horizon_seconds=900)
    record(history, obs(0, 60_000, completions=3.0))
    record(history, obs(15, 140_000, completions=1.0))  # one window of long sessions
    latest = obs(15, 140_000, completions=1.0, arrival_rate=2.0)
    settled = history.settled(KEY, latest)
    assert settled.mean_prompt_tokens == 80_000  # (3 x 60K + 1 x 140K) / 4
    assert settled.mean_cached_tokens == 64_000
    assert settled.arrival_rate == 2.0  # demand is not averaged: only the request shape is


def test_old_windows_fall_out_and_faults_or_idle_windows_add_nothing():
    history = PressureHistory(horizon_seconds=900)
    record(history, obs(0, 200_000))
    record(history, obs(1_000, 50_000))
    record(history, obs(1_015, 999_999, completions=0.0))  # nothing finished: no shape to learn
    bad = Observation(*KEY, sample_time=1_030, available=False, fault=MetricsFault.UNREACHABLE)
    history.record(Snapshot(1_030, {KEY: bad}))
    assert history.settled(KEY, obs(1_030, 70_000)).mean_prompt_tokens == 50_000
    assert history.settled(KEY, bad) is bad  # an untrusted observation stays untrusted, untouched
    assert history.settled(("ns", "other"), obs(0, 1.0)).mean_prompt_tokens == 1.0
    history.forget(KEY)
    assert history.settled(KEY, obs(1_030, 70_000)).mean_prompt_tokens == 70_000


def test_a_growing_context_is_planned_for_one_load_ahead_and_a_steady_one_as_it_is():
    """Contexts growing 1K tokens a second: a resource whose model loads in 15 s is planned at the
    context of 15 s ahead, over a window of a load rather than the 15-minute horizon."""
    history = PressureHistory()
    for t in range(0, 60):
        record(history, obs(float(t), 40_000 + 1_000 * t))
    now = obs(59.0, 99_000)
    grown = history.settled(KEY, now, horizon=15.0)
    assert grown.mean_prompt_tokens is not None and grown.mean_prompt_tokens > 99_000 + 10_000
    # Without a horizon (or with a steady context) the mean over the window stands.
    assert (history.settled(KEY, now).mean_prompt_tokens or 0) < 99_000
    steady = PressureHistory()
    for t in range(0, 60):
        record(steady, obs(float(t), 50_000 + (t % 2) * 100))
    flat = steady.settled(KEY, obs(59.0, 50_100), horizon=15.0)
    assert flat.mean_prompt_tokens is not None and abs(flat.mean_prompt_tokens - 50_050) < 200


def test_a_prompt_trend_the_running_streams_do_not_show_is_not_carried_ahead():
    """The finished requests' prompts climb 1K tokens a second while the streams still running hold a
    steady 60K: the climb is the few requests that happened to finish, not contexts that grow. When the
    running streams grow too, the prompt is carried ahead by the tokens they grow, no further."""
    def poll(t: float, prompt: float, held: float) -> Observation:
        # Ten completions a second: the load's 16 polls hold 160 requests, enough to read a shape from.
        return obs(t, prompt, completions=10.0, running=8.0, stream_context_tokens=held)

    vetoed = PressureHistory()
    for t in range(0, 60):
        record(vetoed, poll(float(t), 40_000 + 1_000 * t, 60_000 + (t % 2) * 100))
    settled = vetoed.settled(KEY, poll(59.0, 99_000, 60_100), horizon=15.0)
    assert settled.mean_prompt_tokens == pytest.approx(sum(40_000 + 1_000 * t for t in range(44, 60)) / 16)
    corroborated = PressureHistory()
    for t in range(0, 60):
        record(corroborated, poll(float(t), 40_000 + 1_000 * t, 60_000 + 500 * t))
    grown = corroborated.settled(KEY, poll(59.0, 99_000, 89_500), horizon=15.0)
    # The running streams' mean over the load is 85.75K and they will hold about 97K a load ahead: the
    # prompt's mean (91.5K) is carried by that rise (about 12K), not by its own line (to about 114K).
    assert grown.mean_prompt_tokens == pytest.approx(91_500 + 12_250)
    # The streams' own rise is kept beside their level, for the running shape to be judged on.
    assert grown.stream_context_growth_tokens == pytest.approx(12_250)
    assert settled.stream_context_growth_tokens == 0.0


def test_a_few_sessions_climbing_through_their_turns_are_not_carried_ahead():
    """The climb of the test above (streams 500 tokens a second, prompts 1K), with three streams running:
    a quiet night's few sessions, each climbing through its own turns, rise together for minutes while
    nothing in the workload grows, and will have ended a load ahead (the bench's week carried 25-90K so on
    1-3 streams and tore a safe shape down six times). Their working set is read as it is, and the
    prompt's climb is not carried either. Twelve streams climbing so are a workload that grows."""
    def climb(running: float) -> Observation:
        history = PressureHistory()
        for t in range(0, 60):
            record(history, obs(float(t), 40_000 + 1_000 * t, completions=10.0, running=running,
                                stream_context_tokens=60_000 + 500 * t))
        return history.settled(KEY, obs(59.0, 99_000, completions=10.0, running=running, stream_context_tokens=89_500),
                               horizon=15.0)

    few = climb(3.0)
    assert few.stream_context_growth_tokens == 0.0
    assert few.mean_prompt_tokens == pytest.approx(sum(40_000 + 1_000 * t for t in range(44, 60)) / 16)
    many = climb(12.0)
    assert many.stream_context_growth_tokens == pytest.approx(12_250)
    assert many.mean_prompt_tokens == pytest.approx(91_500 + 12_250)


def test_a_quiet_fleets_shape_is_read_from_a_hundred_requests_and_a_busy_ones_from_the_load():
    """A 60 s model load and 15 s polls. At 0.4 requests a second the load's five polls hold 30 requests,
    too few to read a shape from (ramp-load60 read 70% cached from two dozen requests where one 15 s poll
    had read 87%, and rolled its fleet to TP8 on it): the shape reaches back to the polls that hold a hundred. At 10
    a second the load's own polls hold 600, and a change is read within the load."""
    def shaped(completions: float) -> Observation:
        history = PressureHistory(horizon_seconds=900)
        for t in range(0, 600, 15):
            share = 0.87 if t < 525 else 0.70  # the load's five polls (525 s to 585 s)
            record(history, Observation(*KEY, sample_time=float(t), available=True, completion_rate=completions,
                                        mean_prompt_tokens=100_000, mean_generated_tokens=1_000.0,
                                        mean_cached_tokens=100_000 * share))
        return history.settled(KEY, obs(585.0, 100_000, completions=completions), horizon=60.0)

    quiet = shaped(0.4)  # 6 requests a poll: 17 polls for a hundred, 5 of them at 70%
    assert quiet.mean_cached_tokens == pytest.approx(100_000 * (12 * 0.87 + 5 * 0.70) / 17)
    assert shaped(10.0).mean_cached_tokens == pytest.approx(70_000)


def test_a_steady_prompt_is_not_planned_as_growing_while_the_running_streams_are_measured():
    """A quiet night, twelve times over: one to three completions a poll, heavy-tailed prompts, no trend,
    and 5-19 streams running with a steady working set. Alone, the prompt's trend carried by its line
    passed by chance in about one cycle in fourteen, up to 2.4x the true mean (by the low end of its band,
    about one in a hundred, up to 1.6x: the xfail below); with the running streams' working set measured,
    a chance pass needs both to pass at once."""
    true_mean, planned = 80_000 * math.exp(0.5 ** 2 / 2), []
    for seed in range(12):
        rng, history = random.Random(seed), PressureHistory()
        for i in range(1440):
            n, running = rng.choice([1, 1, 2, 3]), rng.randrange(5, 20)
            prompts = [rng.lognormvariate(math.log(80_000), 0.5) for _ in range(n)]
            held = sum(rng.lognormvariate(math.log(80_000), 0.5) for _ in range(running)) / running
            o = obs(1_000_000.0 + 15.0 * i, sum(prompts) / n, completions=n / 15.0, running=float(running),
                    stream_context_tokens=held)
            record(history, o)
            if i > 120 and i % 2 == 0:
                planned.append(history.settled(KEY, o, horizon=900.0).mean_prompt_tokens)
    high = sum(p >= 1.25 * true_mean for p in planned)
    assert high <= len(planned) / 1000, f"{high} of {len(planned)} cycles plan 1.25x the mean or more"
    assert max(planned) < 1.5 * true_mean


@pytest.mark.xfail(strict=True, reason="known: the cached share is averaged over one model load, so a rollout's "
                                       "cold caches read as traffic that stopped reusing its prefixes; remembering "
                                       "the share over twelve loads was tried and left out (docs/bench.md)")
def test_a_rollouts_cold_caches_are_not_read_as_traffic_that_stopped_reusing_its_prefixes():
    """Two hours of sessions served 80% from cache, then new pods: twenty minutes at 20%. On a bench
    day that read the fresh tokens per request as 28K instead of 12.7K, and the planner's choice turned
    from TP4 to TP8 x8 for 0.8 req/s. The traffic's share is what the warm caches served."""
    def poll(t: float, share: float) -> Observation:
        return Observation(*KEY, sample_time=t, available=True, completion_rate=1.0, mean_prompt_tokens=80_000,
                           mean_generated_tokens=1_000.0, mean_cached_tokens=80_000 * share)

    history = PressureHistory(horizon_seconds=900)
    for t in range(0, 7_200, 15):
        record(history, poll(float(t), 0.8))
    for t in range(7_200, 8_400, 15):
        record(history, poll(float(t), 0.2))
    cold = history.settled(KEY, poll(8_385.0, 0.2), horizon=900.0)
    assert cold.mean_cached_tokens == 64_000  # not 16,000: 16K fresh tokens per request, not 64K


def streams(t: float, tokens: float, running: float = 8.0) -> Observation:
    return obs(t, 50_000, running=running, stream_context_tokens=tokens)


def test_the_working_set_per_stream_is_weighted_by_the_streams_over_the_horizon():
    """Eight streams at 80K weigh four times two streams at 20K; a poll with one stream running tells too
    little to plan on, and windows older than the horizon fall out."""
    history = PressureHistory()
    record(history, streams(0, 10_000, running=1))
    assert history.settled(KEY, streams(0, 10_000, running=1), horizon=30.0).stream_context_tokens is None
    record(history, streams(100, 80_000, running=8))
    record(history, streams(101, 20_000, running=2))
    settled = history.settled(KEY, streams(101, 20_000, running=2), horizon=30.0)
    assert settled.stream_context_tokens == pytest.approx(68_000)  # (8 x 80K + 2 x 20K) / 10
    # Without completions in the horizon the request means stay the observation's, the working set is still read.
    bare = Observation(*KEY, sample_time=101, available=True, running=2.0, stream_context_tokens=20_000)
    assert history.settled(KEY, bare, horizon=30.0).stream_context_tokens == pytest.approx(68_000)


def test_the_working_set_over_the_whole_memory_is_kept_beside_the_last_loads():
    """A 60 s load's window reads the trough (20K) of a working set that held 80K ten minutes before; the
    mean over the history's memory (15 minutes) is kept beside it, for a cost move to be judged on."""
    history = PressureHistory()
    for t in range(0, 600, 15):
        record(history, streams(float(t), 80_000))
    for t in range(600, 675, 15):
        record(history, streams(float(t), 20_000))
    settled = history.settled(KEY, streams(660.0, 20_000), horizon=60.0)
    assert settled.stream_context_tokens == pytest.approx(20_000)
    assert settled.stream_context_recent_tokens == pytest.approx((40 * 80_000 + 5 * 20_000) / 45)


def test_how_long_the_working_set_was_measured_outlives_the_memory_and_ends_with_the_resource():
    """A cost move is judged on the working set only once it has been measured for a model load: the span
    counts from the first point, past the 15 minutes the memory keeps, and starts again once forgotten."""
    history = PressureHistory()
    assert history.settled(KEY, streams(0.0, 80_000)).stream_context_measured_seconds is None
    for t in range(0, 2_400, 15):
        record(history, streams(float(t), 80_000))
    settled = history.settled(KEY, streams(2_385.0, 80_000), horizon=900.0)
    assert settled.stream_context_measured_seconds == pytest.approx(2_385.0)
    history.forget(KEY)
    record(history, streams(3_000.0, 80_000))
    assert history.settled(KEY, streams(3_060.0, 80_000)).stream_context_measured_seconds == pytest.approx(60.0)


def test_how_many_streams_stand_behind_the_last_loads_working_set():
    """The last load's working set says how many streams it rests on (their mean a poll), so a planner can
    tell a few long sessions from the workload's level; the memory's older polls do not count."""
    history = PressureHistory()
    assert history.settled(KEY, streams(0.0, 80_000)).stream_context_streams is None
    for t in range(0, 600, 15):
        record(history, streams(float(t), 80_000, running=20.0))
    for t in range(600, 900, 15):
        record(history, streams(float(t), 150_000, running=2.0 if t % 30 else 1.0))
    settled = history.settled(KEY, streams(885.0, 150_000, running=2.0), horizon=135.0)
    assert settled.stream_context_streams == pytest.approx(1.5)
    assert settled.stream_context_tokens == pytest.approx(150_000)
    assert settled.stream_context_recent_tokens is not None and settled.stream_context_recent_tokens < 100_000


def test_the_arrivals_are_kept_apart_from_a_demand_that_counts_the_queue():
    history = PressureHistory()
    for i, waiting in enumerate((0.0, 120.0, 600.0)):
        obs = Observation("ns", "kimi", sample_time=1_000.0 + 15 * i, available=True, arrival_rate=20.0,
                          waiting=waiting)
        history.record(Snapshot(obs.sample_time, {KEY: obs}))
    assert [p.rate for p in history.demand_points(KEY)] == [20.0, 22.0, 30.0]
    assert [p.rate for p in history.arrival_points(KEY)] == [20.0, 20.0, 20.0]
    history.forget(KEY)
    assert history.arrival_points(KEY) == ()


def test_a_queue_that_stands_for_minutes_is_remembered_as_the_rate_that_arrived_not_as_more_demand():
    """A backlog of 600 served at the rate it grows by: the demand now counts the queue to drain it
    (30 req/s), but the demand remembered for the burst quantile is what arrived, 20 req/s, once the
    queue stood a drain window. Counting the standing queue again at every poll held a burst that never
    came for the quantile's whole window after the queue was gone."""
    history = PressureHistory()
    for i in range(41):  # ten minutes at 15 s polls: the queue rises to 600 in the first minute and stands
        obs = Observation("ns", "kimi", sample_time=1_000.0 + 15 * i, available=True, arrival_rate=20.0,
                          waiting=min(150.0 * i, 600.0))
        history.record(Snapshot(obs.sample_time, {KEY: obs}))
        assert obs.demand_rate == pytest.approx(20.0 + min(150.0 * i, 600.0) / 60)
    remembered = [p.rate for p in history.demand_points(KEY)]
    assert remembered[:5] == pytest.approx([20.0, 22.5, 25.0, 27.5, 30.0])  # the growth is demand
    assert max(remembered[9:]) == pytest.approx(20.0)  # a minute after it stopped growing
    # And a queue draining is fewer arriving than served, never a negative rate.
    drained = Observation("ns", "kimi", sample_time=1_615.0, available=True, arrival_rate=1.0, waiting=0.0)
    history.record(Snapshot(drained.sample_time, {KEY: drained}))
    assert history.demand_points(KEY)[-1].rate == 0.0
    # A resource forgotten (deleted, then made again) starts with no queue remembered: its first poll's
    # queue is all new, counted whole as the demand counts it, not as a queue that shrank.
    history.forget(KEY)
    again = Observation("ns", "kimi", sample_time=1_630.0, available=True, arrival_rate=20.0, waiting=300.0)
    history.record(Snapshot(again.sample_time, {KEY: again}))
    assert [p.rate for p in history.demand_points(KEY)] == [pytest.approx(25.0)]


@pytest.mark.xfail(strict=True, reason=(
    "known: with no working set measured (an engine without KV figures) the prompt's trend "
    "(model/forecast.py rising, a line through each poll's mean prompt, tested at t >= 2 every cycle and "
    "carried one load ahead by the low end of its band) stands alone and passes by chance on a quiet night: "
    "2-8 of 659 cycles plan a prompt 1.25x the true mean or more, up to 1.6x (21-49 and up to 3.0x carried by "
    "the line itself; docs/bench-history.md: the week's 8.6-hour TP8 c=5 hold began so)"))
def test_a_steady_prompt_read_from_a_few_completions_a_poll_is_not_planned_as_growing():
    # Six quiet hours: one to three completions a 15 s poll, prompts lognormal around 80K (mean 90.6K),
    # no trend at all. A chance rise in the planned prompt declares running shapes past the cliff.
    rng = random.Random(0)
    history, true_mean, planned = PressureHistory(), 80_000 * math.exp(0.5 ** 2 / 2), []
    for i in range(1440):
        n = rng.choice([1, 1, 2, 3])
        prompts = [rng.lognormvariate(math.log(80_000), 0.5) for _ in range(n)]
        o = obs(1_000_000.0 + 15.0 * i, sum(prompts) / n, completions=n / 15.0)
        record(history, o)
        if i > 120 and i % 2 == 0:  # a 30 s cycle, once the horizon has filled
            planned.append(history.settled(KEY, o, horizon=900.0).mean_prompt_tokens)
    assert max(planned) < 1.25 * true_mean, f"{sum(p >= 1.25 * true_mean for p in planned)} of {len(planned)}"
