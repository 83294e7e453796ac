"""Implausible readings never move a replica and never crash a cycle: the real pods source reads each
engine payload (vLLM's text format), the hub judges it with the limits the reconciler derived from
the running layout, and the reconciler's cycle runs on fake time with in-memory ports."""

from __future__ import annotations

import math
from typing import Any

import pytest

from infertune.api.observation import MetricsFault, Observation
from infertune.model import load_gpu, load_model
from infertune.model.roofline import pass_floor_seconds
from infertune.observe import PodsSource, PodTarget
from infertune.observe.figures import Expected
from infertune.observe.plausible import JumpGuard, replica_limits
from tests.prometheus_fixture import EnginePayload
from tests.unit.test_reconciler import KEY, World

POLL = 15.0


class Fleet:
    """The resource's replicas as engines would print them, scraped by the operator's own pods source."""

    def __init__(self, world: World) -> None:
        self.world = world
        running = world.running()
        assert running is not None
        self.payloads = {f"kimi-k2-{i}": EnginePayload(running=4, kv_usage=0.4) for i in range(running.replicas)}
        # Each poll read on its own (a window of one poll): these tests step the traffic poll by poll.
        self.source = PodsSource([], clock=world.clock, fetch=lambda t: self.payloads[t.pod].text(),
                                 window_seconds=POLL)
        self.source.set_targets([PodTarget(*KEY, pod, f"http://{pod}:8000/metrics") for pod in self.payloads])

    def poll(self) -> Observation | None:
        hub = self.world.hub
        spec = hub.routes[KEY].source
        expected = {KEY: hub.expected.get(KEY, Expected()).ready(frozenset(self.payloads))}
        hub.ingest(spec, self.source.poll(expected, self.world.clock.now), {KEY: hub.routes[KEY]},
                   poll_samples=True)
        return hub.observation(KEY)

    def serve(self, seconds: float = POLL, **traffic: Any) -> Observation | None:
        """Every replica serves `traffic` (EnginePayload.advance) for `seconds`, then the operator polls."""
        self.world.clock.now += seconds
        for payload in self.payloads.values():
            payload.advance(seconds, **traffic)
        return self.poll()


def _settled(world: World) -> Fleet:
    world.converge()
    fleet = Fleet(world)
    fleet.poll()
    fleet.serve(rps=0.05)
    return fleet


@pytest.mark.parametrize("reading", [
    pytest.param({"kv_usage": 5.0}, id="kv-use-500%"),
    pytest.param({"kv_usage": -0.2}, id="kv-use-negative"),
    pytest.param({"running": 1e6}, id="more-running-than-max-num-seqs"),
    pytest.param({"waiting": 1e308}, id="queue-1e308"),
    pytest.param({"waiting": -3.0}, id="queue-negative"),
])
def test_an_impossible_gauge_is_a_fault_that_holds(reading: dict[str, float]) -> None:
    world = World()
    fleet = _settled(world)
    before = world.running()
    for payload in fleet.payloads.values():
        for name, value in reading.items():
            setattr(payload, name, value)
    obs = fleet.serve(rps=0.05)
    assert obs is not None and obs.fault is MetricsFault.IMPLAUSIBLE and not obs.available
    outcome = world.tune()
    assert outcome is not None and outcome.apply is None and world.running() == before
    metrics = world.condition("MetricsAvailable")
    assert (metrics["status"], metrics["reason"]) == ("False", "ImplausibleValue")
    assert world.condition("CacheHeadroom")["reason"] != "PastCliff"
    assert "requestsPerSecond" not in world.report.current["observed"]


@pytest.mark.parametrize("rps", [1e9, 1e308])
def test_a_request_rate_no_fleet_could_serve_never_scales(rps: float) -> None:
    world = World()
    fleet = _settled(world)
    before = world.running()
    for _ in range(3):  # however often it is repeated
        obs = fleet.serve(rps=rps)
        assert obs is not None and not obs.available
        assert obs.fault in (MetricsFault.IMPLAUSIBLE, MetricsFault.NOT_A_NUMBER)
        outcome = world.tune(after=0.0)
        assert outcome is None or outcome.apply is None
        assert world.running() == before
    assert world.report.current["applied"]["replicas"] == before.replicas
    assert world.condition("Ready")["reason"] != "FirstVisit"


def test_a_counter_that_runs_backwards_is_never_a_negative_rate() -> None:
    world = World()
    fleet = _settled(world)
    for payload in fleet.payloads.values():
        payload.successes = -1e6
        payload.prompt_tokens = -5.0
    obs = fleet.serve(rps=0.05)
    assert obs is not None and not obs.available  # a reset, not a negative rate
    world.tune()
    observed = world.report.current["observed"]
    assert all(v >= 0 for v in observed.values() if isinstance(v, float))


def test_a_jump_in_demand_waits_for_the_next_poll_and_a_real_surge_then_scales() -> None:
    world = World()
    fleet = _settled(world)
    before = world.running()
    assert before is not None
    obs = fleet.serve(rps=6.0)  # from 0.05 req/s
    assert obs is not None and obs.fault is MetricsFault.IMPLAUSIBLE and "jumped" in obs.message
    outcome = world.tune(after=0.0)
    assert outcome is not None and outcome.apply is None and world.running() == before
    obs = fleet.serve(rps=6.0)  # the next poll sees the same demand: corroborated
    assert obs is not None and obs.available
    outcome = world.tune(after=30.0)
    assert outcome is not None and outcome.apply is not None
    assert world.running().replicas > before.replicas  # type: ignore[union-attr]


def test_one_bad_scrape_between_good_ones_is_never_acted_on() -> None:
    guard = JumpGuard()
    calm = Observation(*KEY, sample_time=0.0, available=True, arrival_rate=2.0, waiting=0.0)
    spike = Observation(*KEY, sample_time=15.0, available=True, arrival_rate=2e4, waiting=0.0)
    back = Observation(*KEY, sample_time=30.0, available=True, arrival_rate=2.2, waiting=0.0)
    assert guard.judge(KEY, calm).available
    assert guard.judge(KEY, spike).fault is MetricsFault.IMPLAUSIBLE
    assert guard.judge(KEY, spike).fault is MetricsFault.IMPLAUSIBLE  # the same sample read again confirms nothing
    assert guard.judge(KEY, back).available
    assert not guard.judge(KEY, Observation(*KEY, sample_time=45.0, available=True, arrival_rate=2e4)).available


def test_the_limits_follow_the_physics_of_the_layout() -> None:
    kimi, llama, b200 = load_model("kimi-k2.6"), load_model("llama-3.1-8b"), load_gpu("b200")
    # A bigger model and a smaller TP make the shortest pass longer.
    assert pass_floor_seconds(kimi, b200, 8) > pass_floor_seconds(llama, b200, 8)
    assert pass_floor_seconds(kimi, b200, 4) == pytest.approx(2 * pass_floor_seconds(kimi, b200, 8))
    small, large = replica_limits(kimi, b200, (4,), 64), replica_limits(kimi, b200, (8,), 256)
    assert small.running == 64 and large.running == 256
    assert small.requests is not None and large.requests is not None and small.tokens is not None
    assert 0 < small.requests < large.requests < 1e9 and small.tokens > small.requests
    assert all(math.isfinite(x) for x in (small.requests, small.tokens))


def test_ratios_of_vanishing_rates_are_no_figure_and_absurd_means_are_not_believed() -> None:
    """Found by the fuzzing: two rates of 1e-311 divided to an infinite mean answer length."""
    from infertune.observe.figures import PodFigures, build_observation

    gauges = {"kv_usage": 0.1, "running": 1.0, "waiting": 0.0}
    tiny = {"generation_length_sum": 4.45e-309, "generation_length_count": 2.2e-311, "ttft_count": 2.2e-311}
    obs = build_observation(KEY, [PodFigures("p-0", "vllm", 100.0, gauges, tiny)], None, 100.0, 120.0, {})
    assert obs.available and obs.mean_generated_tokens is None
    absurd = {"generation_length_sum": 5e8, "generation_length_count": 0.01, "ttft_count": 0.01}
    obs = build_observation(KEY, [PodFigures("p-0", "vllm", 100.0, gauges, absurd)], None, 100.0, 120.0, {})
    assert obs.fault is MetricsFault.IMPLAUSIBLE and "mean generated tokens" in obs.message


def test_more_decoding_streams_than_a_replica_can_run_are_not_believed() -> None:
    """The fit's batch is the inter-token histogram's sum per second (observe/figures.py); a sum that grows
    by more seconds than twice max-num-seqs streams could wait is no engine's."""
    from infertune.observe.figures import PodFigures, ReplicaLimits, build_observation, fit_samples

    gauges = {"kv_usage": 0.3, "running": 8.0, "waiting": 0.0}
    limits = Expected(limits=ReplicaLimits(running=64.0))
    honest = PodFigures("p-0", "vllm", 100.0, gauges, {"itl_sum": 8.0, "itl_count": 400.0, "preemptions": 0.0})
    assert [b for b, _, _ in fit_samples([honest])] == [8.0]
    edge = PodFigures("p-0", "vllm", 100.0, gauges, {"itl_sum": 100.0, "itl_count": 400.0, "preemptions": 0.0})
    assert build_observation(KEY, [edge], limits, 100.0, 120.0, {}).available  # a window's edges: up to 2x
    absurd = PodFigures("p-0", "vllm", 100.0, gauges, {"itl_sum": 1e6, "itl_count": 400.0, "preemptions": 0.0})
    obs = build_observation(KEY, [absurd], limits, 100.0, 120.0, {})
    # Not available: the hub feeds the fit only from an observation it believes (controller/hub.py).
    assert obs.fault is MetricsFault.IMPLAUSIBLE and not obs.available and "decoding streams" in obs.message


def test_a_new_replica_without_a_rate_leaves_a_floor_and_the_rated_replicas_means() -> None:
    from infertune.observe.figures import PodFigures, build_observation

    gauges = {"kv_usage": 0.3, "running": 4.0, "waiting": 2.0}
    served = {"ttft_count": 1.5, "completions": 1.5, "prompt_length_sum": 3_000.0, "prompt_length_count": 1.5}
    pods = [PodFigures(f"p-{i}", "vllm", 100.0, gauges, dict(served)) for i in range(2)]
    new = PodFigures("p-2", "vllm", 100.0, gauges, {})  # ready since the last scrape: no counter rate yet
    obs = build_observation(KEY, [*pods, new], None, 100.0, 120.0, {})
    assert obs.available and obs.arrival_rate is None and obs.completion_rate is None  # half a sum is no sum
    assert obs.arrival_rate_floor == pytest.approx(3.0) and obs.mean_prompt_tokens == pytest.approx(2_000.0)
    assert obs.demand_rate is None and obs.demand_floor == pytest.approx(3.0 + 6.0 / 60.0)
    whole = build_observation(KEY, pods, None, 100.0, 120.0, {})
    assert whole.arrival_rate == pytest.approx(3.0) and whole.arrival_rate_floor is None and whole.demand_floor is None


def test_a_floor_that_jumps_is_held_and_one_below_the_figure_is_no_reference() -> None:
    guard = JumpGuard()
    calm = Observation(*KEY, sample_time=0.0, available=True, arrival_rate=8.0, waiting=0.0)
    assert guard.judge(KEY, calm).available
    absurd = Observation(*KEY, sample_time=15.0, available=True, arrival_rate_floor=2e4, waiting=0.0)
    held = guard.judge(KEY, absurd)
    assert held.fault is MetricsFault.IMPLAUSIBLE and "at least" in held.message
    partial = Observation(*KEY, sample_time=30.0, available=True, arrival_rate_floor=1.0, waiting=0.0)
    assert guard.judge(KEY, partial).available
    # The partial floor did not become the reference: from 1 req/s, 8.5 would be a jump held a poll.
    back = Observation(*KEY, sample_time=45.0, available=True, arrival_rate=8.5, waiting=0.0)
    assert guard.judge(KEY, back).available


def _joined(fleet: Fleet, pod: str) -> None:
    """A pod that just became ready: its first scrape comes with the next poll."""
    fleet.payloads[pod] = EnginePayload(running=4, kv_usage=0.4)
    fleet.source.set_targets([PodTarget(*KEY, p, f"http://{p}:8000/metrics") for p in fleet.payloads])


def test_a_replica_that_just_became_ready_does_not_hold_a_rising_fleet() -> None:
    """The real pods source: a new pod's first scrape has no counter rate. When the pods with a rate
    already carry more than the fleet is sized for, the cycle adds pods on that floor instead of waiting
    a scrape; a fall waits for every pod's rate."""
    world = World()
    fleet = _settled(world)
    for _ in range(2):
        fleet.serve(rps=2.0)
    world.tune(after=0.0)
    before = world.running()
    assert before is not None and before.replicas == 2
    _joined(fleet, "kimi-k2-1")
    obs = fleet.serve(rps=6.0)  # the old pod alone now carries 6 req/s
    assert obs is not None and obs.arrival_rate is None and obs.demand_floor is not None
    outcome = world.tune(after=70.0)
    grown = world.running()
    assert grown is not None and grown.replicas > before.replicas and grown.same_shape(before)
    assert outcome is not None and "a new replica has no rate yet" in outcome.decision.message

    world.clock.now += 400.0  # past every scale-down cooldown and window
    _joined(fleet, "kimi-k2-2")
    fleet.serve(rps=0.3)
    outcome = world.tune(after=0.0)
    assert outcome is not None and outcome.decision.reason == "NoDemandFigure" and world.running() == grown
