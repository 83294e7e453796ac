"""The pods source: rates over the window of polls, and each fault a user would see from scraping pods directly."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from infertune.api.observation import MetricsFault
from infertune.errors import UserError
from infertune.observe import Expected, PodsSource, PodTarget
from infertune.observe.pods import MAX_KEPT_SCRAPES
from tests.prometheus_fixture import EnginePayload, PayloadServer

KEY = ("ns", "chat")


class Clock:
    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _fleet(make: Callable[..., PayloadServer], n: int = 2) -> tuple[list[EnginePayload], list[PayloadServer]]:
    payloads = [EnginePayload(running=4 + 4 * i, kv_usage=0.2 + 0.3 * i) for i in range(n)]
    servers = [make(p.text) for p in payloads]
    return payloads, servers


def _source(servers: list[PayloadServer], clock: Clock, **kw: object) -> PodsSource:
    targets = [PodTarget.parse(f"ns/chat/pod-{i}={s.address}") for i, s in enumerate(servers)]
    return PodsSource(targets, clock=clock, timeout=kw.pop("timeout", 2.0), **kw)  # type: ignore[arg-type]


def test_first_poll_has_gauges_and_no_rates_then_rates_from_deltas(payload_servers) -> None:
    payloads, servers = _fleet(payload_servers)
    clock = Clock()
    source = _source(servers, clock)
    first = source.poll().get(*KEY)
    assert first.available, first.message
    assert first.running == 12 and first.kv_usage == pytest.approx(0.5)
    assert first.arrival_rate is None and first.mean_inter_token_seconds is None  # unknown, not zero
    for p in payloads:
        p.advance(30, rps=2, prompt=4000, cached=3000, output=300, ttft_s=0.7, itl_s=0.025)
    clock.t += 30
    obs = source.poll().get(*KEY)
    assert obs.available, obs.message
    assert obs.arrival_rate == pytest.approx(4.0) and obs.completion_rate == pytest.approx(4.0)
    assert obs.mean_prompt_tokens == pytest.approx(4000) and obs.mean_cached_tokens == pytest.approx(3000)
    assert obs.mean_generated_tokens == pytest.approx(300)
    assert obs.prefix_hit_rate == pytest.approx(0.75)
    assert obs.mean_inter_token_seconds == pytest.approx(0.025)
    assert 0.5 < obs.ttft_p50_seconds <= 0.75 and obs.ttft_p99_seconds <= 0.75
    assert obs.kv_capacity_tokens == 160_000
    # Each sample carries its streams' context: KV use x the pool / running streams (0.2 x 160K / 4, 0.5 x 160K / 8).
    assert sorted(obs.fit_samples) == [(4.0, pytest.approx(0.025), pytest.approx(8000)),
                                       (8.0, pytest.approx(0.025), pytest.approx(10_000))]
    assert [r.pod for r in obs.replicas] == ["pod-0", "pod-1"]
    # The fleet's working set per running stream: all KV in use over all running streams, (32K + 80K) / 12.
    assert obs.stream_context_tokens == pytest.approx(112_000 / 12)
    source.close()


def test_counter_reset_is_reported_then_clears(payload_servers) -> None:
    payloads, servers = _fleet(payload_servers)
    clock = Clock()
    source = _source(servers, clock)
    for p in payloads:
        p.advance(30)
    source.poll()
    payloads[1] = EnginePayload(running=2)  # the engine restarted: counters from zero
    servers[1].body = payloads[1].text
    clock.t += 15
    obs = source.poll().get(*KEY)
    assert not obs.available and obs.fault is MetricsFault.COUNTER_RESET and "pod-1" in obs.message
    for p in payloads:
        p.advance(15)
    clock.t += 15
    assert source.poll().get(*KEY).available
    source.close()


def _replayed(payloads: list[EnginePayload], clock: Clock, **kw: object) -> PodsSource:
    """A pods source over `payloads` without HTTP (the lab's replay path): the window's arithmetic alone."""
    targets = [PodTarget("ns", "chat", f"pod-{i}", f"http://pod-{i}:8000/metrics") for i in range(len(payloads))]
    return PodsSource(targets, clock=clock, fetch=lambda t: payloads[int(t.pod.split("-")[1])].text(),
                      **kw)  # type: ignore[arg-type]


def _serve(payloads: list[EnginePayload], clock: Clock, source: PodsSource, seconds: float, **traffic: float):
    for p in payloads:
        p.advance(seconds, **traffic)
    clock.t += seconds
    return source.poll().get(*KEY)


def test_rates_are_read_over_the_last_minute_of_polls_as_prometheus_rate_reads_them() -> None:
    """A burst is read as the chart's Prometheus reads it, so a resource is sized on the same figures
    whichever source it names: the request's shape over the minute, as rate(...[1m]); the arrival over
    the last poll, as irate(...[1m]), where a step shows at once."""
    payloads, clock = [EnginePayload(running=4)], Clock()
    source = _replayed(payloads, clock)
    source.poll()
    for _ in range(4):  # a minute at 1 req/s of 2,000-token prompts, polled every 15 s
        obs = _serve(payloads, clock, source, 15, rps=1.0, prompt=2000)
    assert obs.arrival_rate == pytest.approx(1.0) and obs.completion_rate == pytest.approx(1.0)
    burst = _serve(payloads, clock, source, 15, rps=5.0, prompt=8000)
    assert burst.arrival_rate == pytest.approx(5.0)  # the last poll
    assert burst.completion_rate == pytest.approx((45 * 1.0 + 15 * 5.0) / 60)  # 2.0: the minute
    assert burst.mean_prompt_tokens == pytest.approx((45 * 2000 + 75 * 8000) / 120)  # the minute's 120 requests
    for _ in range(3):
        obs = _serve(payloads, clock, source, 15, rps=5.0, prompt=8000)
    assert obs.completion_rate == pytest.approx(5.0) and obs.mean_prompt_tokens == pytest.approx(8000)
    # A window of one poll reads each poll's own delta.
    one_poll = _replayed(payloads, clock, window_seconds=15.0)
    one_poll.poll()
    assert _serve(payloads, clock, one_poll, 15, rps=2.0).completion_rate == pytest.approx(2.0)


def test_the_fit_takes_each_polls_own_stretch_inside_the_window() -> None:
    """Fit samples do not overlap (as Prometheus' history is read in windows that do not): a batch of 4
    then one of 12 are two samples at 4 and 12, not a blend of the minute."""
    payloads, clock = [EnginePayload(running=4)], Clock()
    source = _replayed(payloads, clock)
    source.poll()
    _serve(payloads, clock, source, 15, itl_s=0.02)
    payloads[0].running = 12
    obs = _serve(payloads, clock, source, 15, itl_s=0.03)
    assert [(b, s) for b, s, _ in obs.fit_samples] == [(pytest.approx(12.0), pytest.approx(0.03))]
    # The planner's figures are the window's: 3,000 tokens at 20 ms, then 6,000 at 30 ms.
    assert obs.mean_inter_token_seconds == pytest.approx((3000 * 0.02 + 6000 * 0.03) / 9000)


def test_a_restart_inside_the_window_is_a_reset_even_when_its_counters_regrew() -> None:
    """An engine that restarted and counted past its old figures inside the window is still a reset: the
    last poll saw it go backwards. The minute before the restart starts no rate after it."""
    payloads, clock = [EnginePayload(running=4)], Clock()
    source = _replayed(payloads, clock)
    source.poll()
    _serve(payloads, clock, source, 15, rps=1.0)
    payloads[0] = EnginePayload(running=4)  # restarted: counters from zero
    # 1.5 requests since the restart: past the window's first scrape (0), below the last poll's 15.
    obs = _serve(payloads, clock, source, 15, rps=0.1)
    assert obs.fault is MetricsFault.COUNTER_RESET and not obs.available
    payloads[0].advance(15, rps=10.0)
    clock.t += 15
    obs = source.poll().get(*KEY)
    assert obs.available, obs.message
    assert obs.completion_rate == pytest.approx(10.0)  # read from the restart on, not across it


def test_a_window_of_days_is_read_over_the_newest_scrapes_a_pod_keeps() -> None:
    """`--metrics-window 7d` does not keep a week of payloads per pod: the rates are read over the newest
    MAX_KEPT_SCRAPES polls, and the traffic before them is forgotten."""
    payloads, clock = [EnginePayload(running=4)], Clock()
    source = _replayed(payloads, clock, window_seconds=7 * 86_400.0)
    source.poll()
    for _ in range(50):  # a busy start, then a quiet stretch longer than what is kept
        obs = _serve(payloads, clock, source, 15, rps=10.0)
    for _ in range(MAX_KEPT_SCRAPES + 5):
        obs = _serve(payloads, clock, source, 15, rps=1.0)
    assert obs.completion_rate == pytest.approx(1.0)


def test_a_window_that_is_not_a_positive_number_is_refused() -> None:
    for bad in (0.0, -60.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="window_seconds"):
            PodsSource([], window_seconds=bad)


def test_one_pod_scraped_twice_is_a_duplicate(payload_servers) -> None:
    _, servers = _fleet(payload_servers, 1)
    targets = [PodTarget.parse(f"ns/chat/pod-0={servers[0].address}")] * 2
    obs = PodsSource(targets, clock=Clock()).poll().get(*KEY)
    assert obs.fault is MetricsFault.DUPLICATE_SERIES and not obs.available


def test_a_payload_with_a_repeated_series_is_a_duplicate(payload_servers) -> None:
    payload = EnginePayload()
    server = payload_servers(lambda: payload.text() + payload.text())
    obs = _source([server], Clock()).poll().get(*KEY)
    assert obs.fault is MetricsFault.DUPLICATE_SERIES


def test_a_missing_pod_is_partial_and_not_summed_as_zero(payload_servers) -> None:
    _, servers = _fleet(payload_servers, 2)
    source = _source(servers, Clock())
    expected = {KEY: Expected(pods=frozenset({"pod-0", "pod-1", "pod-2"}))}
    obs = source.poll(expected).get(*KEY)
    assert obs.fault is MetricsFault.PARTIAL and "pod-2" in obs.message and not obs.available
    servers[1].close()
    obs = source.poll().get(*KEY)
    assert obs.fault is MetricsFault.PARTIAL and "pod-1" in obs.message and "cannot reach" in obs.message


@pytest.mark.parametrize(("status", "fault"),
                         [(503, MetricsFault.SERVER_ERROR), (500, MetricsFault.SERVER_ERROR)])
def test_every_pod_answering_5xx(payload_servers, status: int, fault: MetricsFault) -> None:
    _, servers = _fleet(payload_servers, 1)
    servers[0].status = status
    obs = _source(servers, Clock()).poll().get(*KEY)
    assert obs.fault is fault and str(status) in obs.message and obs.running is None


def test_a_pod_slower_than_the_timeout(payload_servers) -> None:
    _, servers = _fleet(payload_servers, 1)
    servers[0].delay = 1.0
    obs = _source(servers, Clock(), timeout=0.2).poll().get(*KEY)
    assert obs.fault is MetricsFault.TIMEOUT and obs.kv_usage is None


def test_nan_gauge_is_not_a_number_fault(payload_servers) -> None:
    payload = EnginePayload(kv_usage=math.nan)
    obs = _source([payload_servers(payload.text)], Clock()).poll().get(*KEY)
    assert obs.fault is MetricsFault.NOT_A_NUMBER and "kv_usage" in obs.message


def test_garbage_payload_is_malformed(payload_servers) -> None:
    obs = _source([payload_servers("<html>oops{{{")], Clock()).poll().get(*KEY)
    assert obs.fault is MetricsFault.MALFORMED


def test_an_expected_deployment_without_targets_is_empty(payload_servers) -> None:
    _, servers = _fleet(payload_servers, 1)
    snap = _source(servers, Clock()).poll({("ns", "other"): Expected(replicas=2)})
    assert snap.get("ns", "other").fault is MetricsFault.EMPTY
    assert snap.get("elsewhere", "unknown").fault is MetricsFault.EMPTY


def test_preempting_window_gives_no_fit_sample(payload_servers) -> None:
    payloads, servers = _fleet(payload_servers, 2)
    clock = Clock()
    source = _source(servers, clock)
    source.poll()
    payloads[0].advance(20, preempt_rps=0.5)
    payloads[1].advance(20)
    clock.t += 20
    obs = source.poll().get(*KEY)
    assert obs.preemption_rate == pytest.approx(0.5)
    assert [b for b, _, _ in obs.fit_samples] == [8.0]


@pytest.mark.parametrize("text", ["nohost", "ns/chat=127.0.0.1:80", "127.0.0.1:http"])
def test_bad_targets_are_one_line_errors(text: str) -> None:
    with pytest.raises(UserError, match="target"):
        PodTarget.parse(text)


def test_the_operators_metrics_window_reaches_a_pods_source() -> None:
    """`run --metrics-window 2m` reads a Pods resource over 2 minutes, as it reads a Prometheus one."""
    from infertune.controller.sources import SourceRegistry, SourceSpec

    source = SourceRegistry(None, window="2m").get(SourceSpec("Pods"))  # type: ignore[arg-type]
    assert isinstance(source, PodsSource) and source.window_seconds == 120.0
    assert SourceRegistry(None).get(SourceSpec("Pods")).window_seconds == 60.0  # type: ignore[arg-type, attr-defined]
