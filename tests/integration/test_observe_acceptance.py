"""Acceptance: Debian's Prometheus scrapes the twin's replicas; the Prometheus source and the pods
source see the same fleet; Prometheus killed mid-test is a fault, and recovery follows its restart.

Tolerances (the two sources sample a moving fleet at slightly different instants and Prometheus
extrapolates rate() to the window's edges): identical pods, dialect and KV capacity; running
within 2 and KV usage within 0.1 per replica; request rates within 35%; mean inter-token latency
and mean prompt/generated tokens within 15%. Both read the arrival over the last scrape (irate(), the
pods' last poll), a second here, which a few requests make or break: it is compared as the mean of
the readings of polls a scrape apart over the window.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from infertune.api.observation import MetricsFault, Observation
from infertune.observe import Expected, PodsSource, PodTarget, PrometheusSource
from infertune_lab.sim import ClosedLoop, ReplicaConfig, shape
from infertune_lab.sim.live import LiveFleet
from tests.prometheus_fixture import PrometheusProcess, ScrapeTarget

pytestmark = pytest.mark.integration
KEY = ("ns", "sim")
WINDOW = 10.0
SCRAPE_SECONDS = 1.0  # PrometheusProcess' scrape interval


@dataclass
class Rig:
    live: LiveFleet
    prom: PrometheusProcess


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    config = ReplicaConfig(tp=8, max_num_seqs=64, workload="chat")
    live = LiveFleet([config, config], ClosedLoop(shape("chat"), concurrency=16), speed=1.0,
                     router="least-outstanding").start()
    targets = [ScrapeTarget(addr, *KEY, pod) for pod, addr in live.endpoints.items()]
    prom = PrometheusProcess(tmp_path_factory.mktemp("prom"), targets).start()
    try:
        prom.wait_for_samples('vllm:num_requests_running{deployment="sim"}', int(WINDOW) + 4, timeout=60)
        yield Rig(live, prom)
    finally:
        prom.stop()
        live.stop()


def _close(a: float | None, b: float | None, rel: float = 0.0, abs_: float = 0.0) -> bool:
    assert a is not None and b is not None, (a, b)
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def _assert_same(p: Observation, q: Observation, p_arrivals: list[float], q_arrivals: list[float]) -> None:
    assert p.available and q.available, (p.message, q.message)
    assert [r.pod for r in p.replicas] == [r.pod for r in q.replicas]
    assert p.dialect == q.dialect == "vllm"
    assert p.kv_capacity_tokens == q.kv_capacity_tokens is not None
    for a, b in zip(p.replicas, q.replicas, strict=True):
        assert _close(a.running, b.running, abs_=2), (a.pod, a.running, b.running)
        assert _close(a.kv_usage, b.kv_usage, abs_=0.1), (a.pod, a.kv_usage, b.kv_usage)
        assert _close(a.mean_inter_token_seconds, b.mean_inter_token_seconds, rel=0.15)
    assert _close(p.completion_rate, q.completion_rate, rel=0.35), (p.completion_rate, q.completion_rate)
    p_mean, q_mean = sum(p_arrivals) / len(p_arrivals), sum(q_arrivals) / len(q_arrivals)
    assert _close(p_mean, q_mean, rel=0.35), (p_arrivals, q_arrivals)
    assert _close(p_mean, p.completion_rate, rel=0.35), (p_arrivals, p.completion_rate)  # the same traffic
    assert _close(p.mean_inter_token_seconds, q.mean_inter_token_seconds, rel=0.15)
    assert _close(p.mean_prompt_tokens, q.mean_prompt_tokens, rel=0.15)
    assert _close(p.mean_generated_tokens, q.mean_generated_tokens, rel=0.15)


def test_prometheus_and_pods_sources_agree_on_the_twin(rig: Rig) -> None:
    targets = [PodTarget(*KEY, pod, f"http://{addr}/metrics") for pod, addr in rig.live.endpoints.items()]
    pods = PodsSource(targets, window_seconds=WINDOW)
    prom = PrometheusSource(rig.prom.url, window=f"{WINDOW:g}s")
    pods.poll()
    pod_arrivals: list[float] = []
    prom_arrivals: list[float] = []
    for _ in range(int(WINDOW)):  # one poll a scrape (1 s) for a window
        time.sleep(SCRAPE_SECONDS)
        from_pods = pods.poll().get(*KEY)
        from_prom = prom.poll().get(*KEY)
        pod_arrivals.append(from_pods.arrival_rate)  # type: ignore[arg-type]
        prom_arrivals.append(from_prom.arrival_rate)  # type: ignore[arg-type]
    pods.close()
    prom.close()
    _assert_same(from_prom, from_pods, prom_arrivals, pod_arrivals)
    assert from_prom.running is not None and from_prom.running >= 8  # the load is really there


def test_prometheus_killed_mid_test_then_restarted(rig: Rig) -> None:
    expected = {KEY: Expected(pods=frozenset(rig.live.pods))}
    source = PrometheusSource(rig.prom.url, window=f"{WINDOW:g}s", timeout=2)
    assert source.poll(expected).get(*KEY).available
    rig.prom.kill()
    snap = source.poll(expected)
    obs = snap.get(*KEY)
    assert snap.fault is MetricsFault.UNREACHABLE
    assert not obs.available and obs.fault is MetricsFault.UNREACHABLE
    assert obs.running is None and obs.kv_usage is None  # nothing read as zero
    rig.prom.start()
    deadline = time.monotonic() + 30
    while not (obs := source.poll(expected).get(*KEY)).available and time.monotonic() < deadline:
        time.sleep(0.5)
    assert obs.available, obs.message
    assert obs.running is not None and obs.running > 0
