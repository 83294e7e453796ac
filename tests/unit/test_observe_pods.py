"""The pods source: deltas between polls, and each fault a user would see from scraping pods directly."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from infertune.api.observation import MetricsFault
from infertune.errors import UserError
from infertune.observe import Expected, PodsSource, PodTarget
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
