"""The Prometheus source against Debian's Prometheus scraping canned engine payloads: dialects,
and one test per fault a user would see (the Prometheus-side half of issue 5's fault list)."""

from __future__ import annotations

import json
import math
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from infertune.api.observation import MetricsFault
from infertune.observe import Expected, PrometheusSource
from infertune.observe.prometheus import CONCURRENT_QUERIES
from tests.prometheus_fixture import EnginePayload, PayloadServer, PrometheusProcess, ScrapeTarget

pytestmark = pytest.mark.integration
WINDOW = "6s"


@dataclass
class Scene:
    prom: PrometheusProcess
    payloads: dict[str, EnginePayload]
    servers: dict[str, PayloadServer]
    lock: threading.Lock
    rps: dict[str, float]  # a pod's requests a second; 2.0 when not named


SCENARIO = {  # deployment -> pods (pod name, dialect)
    "healthy": [("healthy-0", "vllm"), ("healthy-1", "vllm")],
    "legacy": [("legacy-0", "vllm-legacy")],
    "sglang": [("sglang-0", "sglang")],
    "nan": [("nan-0", "vllm")],
    "dup": [("dup-0", "vllm")],
    "reset": [("reset-0", "vllm")],
    "partial": [("partial-0", "vllm"), ("partial-1", "vllm")],
    "step": [("step-0", "vllm")],
}


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    payloads, servers, targets = {}, {}, []
    lock = threading.Lock()
    rps: dict[str, float] = {}
    advanced: dict[str, float] = {}

    def catch_up(pod: str) -> None:
        """The pod's counters advanced by the wall time since they last were (the lock held). A scrape
        catches up too: counters a tick (0.25 s) behind a 1 s scrape put irate() up to 25% off."""
        now = time.monotonic()
        payloads[pod].advance(now - advanced.get(pod, now), rps=rps.get(pod, 2.0), ttft_s=0.7, itl_s=0.025)
        advanced[pod] = now

    for dep, pods in SCENARIO.items():
        for i, (pod, dialect) in enumerate(pods):
            payloads[pod] = EnginePayload(dialect=dialect, running=4 + 4 * i, kv_usage=0.25 + 0.25 * i,
                                          num_gpu_blocks=5_000)
            if dep == "nan":
                payloads[pod].kv_usage = math.nan

            def body(pod: str = pod) -> str:
                with lock:
                    catch_up(pod)
                    return payloads[pod].text()

            servers[pod] = PayloadServer(body)
            targets.append(ScrapeTarget(servers[pod].address, "ns", dep, pod))
    # The same pod behind a second scrape job: what two overlapping PodMonitors do.
    targets.append(ScrapeTarget(servers["dup-0"].address, "ns", "dup", "dup-0", path="/metrics-again"))
    stop = threading.Event()

    def tick() -> None:
        # The counters advance by the wall time that passed (not 0.25 s a tick): on a busy machine the ticks
        # come late, and counters that fall behind the clock would read as fewer decoding streams.
        with lock:
            for pod in payloads:
                advanced[pod] = time.monotonic()
        while not stop.wait(0.25):
            with lock:
                for pod in payloads:
                    catch_up(pod)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    prom = PrometheusProcess(tmp_path_factory.mktemp("prom"), targets).start()
    try:
        prom.wait_for_samples('vllm:num_requests_running{deployment="healthy"}', 10, timeout=60)
        yield Scene(prom, payloads, servers, lock, rps)
    finally:
        stop.set()
        prom.stop()
        for s in servers.values():
            s.close()


def _poll(scene: Scene, **expected: Expected) -> dict[str, object]:
    source = PrometheusSource(scene.prom.url, window=WINDOW, timeout=5)
    snap = source.poll({("ns", k): v for k, v in expected.items()})
    source.close()
    assert snap.available, snap.message
    assert snap.queries == len(source.queries)
    return {dep: obs for (_, dep), obs in snap.observations.items()}


def test_healthy_deployment_is_read_per_replica_and_aggregated(scene: Scene) -> None:
    obs = _poll(scene)["healthy"]
    assert obs.available, obs.message
    assert obs.dialect == "vllm"
    assert [r.pod for r in obs.replicas] == ["healthy-0", "healthy-1"]
    assert obs.running == 12 and obs.kv_usage == pytest.approx(0.5) and obs.mean_kv_usage == pytest.approx(0.375)
    assert obs.kv_capacity_tokens == 80_000
    assert obs.arrival_rate == pytest.approx(4.0, rel=0.2)
    assert obs.mean_prompt_tokens == pytest.approx(2000, rel=0.01)
    assert obs.mean_cached_tokens == pytest.approx(1500, rel=0.01)
    assert obs.prefix_hit_rate == pytest.approx(0.75, rel=0.01)
    assert obs.mean_inter_token_seconds == pytest.approx(0.025, rel=0.01)
    assert 0.5 < obs.ttft_p50_seconds < obs.ttft_p99_seconds <= 0.75
    # The mean decoding batch, a rate over the window: within a few percent of the 4 and 8 the pods run.
    assert sorted(b for b, _, _ in obs.fit_samples) == [pytest.approx(4, rel=0.1), pytest.approx(8, rel=0.1)]
    # The context behind each sample: KV use x the 80K-token pool / running (0.25 x 80K / 4, 0.5 x 80K / 8).
    assert [c for _, _, c in sorted(obs.fit_samples)] == [pytest.approx(5000), pytest.approx(5000)]
    assert time.time() - obs.sample_time < 5


def test_a_step_in_arrivals_is_read_at_the_last_scrape_and_the_shape_over_the_window(scene: Scene) -> None:
    """irate() for the arrival: a step shows at the next scrape, where rate() over the window would read a
    quarter of it; completions, and the request's shape, stay over the window."""
    with scene.lock:
        scene.rps["step-0"] = 20.0
    time.sleep(2.5)  # two scrapes at the new rate
    obs = _poll(scene)["step"]
    with scene.lock:
        scene.rps["step-0"] = 2.0
    assert obs.available, obs.message
    assert obs.arrival_rate == pytest.approx(20.0, rel=0.25)
    assert obs.completion_rate is not None and obs.completion_rate < 0.75 * obs.arrival_rate


@pytest.mark.parametrize(("dep", "dialect"), [("legacy", "vllm-legacy"), ("sglang", "sglang")])
def test_older_vllm_and_sglang_names_are_understood(scene: Scene, dep: str, dialect: str) -> None:
    obs = _poll(scene)[dep]
    assert obs.available, obs.message
    assert obs.dialect == dialect
    assert obs.running == 4 and obs.kv_usage == pytest.approx(0.25)
    assert obs.mean_inter_token_seconds == pytest.approx(0.025, rel=0.01)
    assert obs.kv_capacity_tokens == 80_000
    assert obs.ttft_p95_seconds is not None


def test_nan_gauge_is_a_fault_not_a_zero(scene: Scene) -> None:
    obs = _poll(scene)["nan"]
    assert not obs.available and obs.fault is MetricsFault.NOT_A_NUMBER
    assert obs.kv_usage is None


def test_pod_scraped_twice_is_a_duplicate_not_a_double_count(scene: Scene) -> None:
    obs = _poll(scene)["dup"]
    assert not obs.available and obs.fault is MetricsFault.DUPLICATE_SERIES and "dup-0" in obs.message


def test_missing_pod_is_partial(scene: Scene) -> None:
    obs = _poll(scene, partial=Expected(pods=frozenset({"partial-0", "partial-1", "partial-2"})))["partial"]
    assert not obs.available and obs.fault is MetricsFault.PARTIAL and "partial-2" in obs.message
    assert obs.running is not None and len(obs.replicas) == 2  # what was seen, marked untrusted


def test_expected_deployment_without_series_is_empty(scene: Scene) -> None:
    obs = _poll(scene, ghost=Expected(replicas=1))["ghost"]
    assert not obs.available and obs.fault is MetricsFault.EMPTY and obs.running is None


def test_counter_reset_is_reported_for_the_window(scene: Scene) -> None:
    assert _poll(scene)["reset"].available
    with scene.lock:  # the engine restarts: every counter from zero
        scene.payloads["reset-0"] = EnginePayload(num_gpu_blocks=5_000)
    scene.prom.wait_for_series('resets(vllm:generation_tokens_total{deployment="reset"}[6s]) > 0', timeout=20)
    obs = _poll(scene)["reset"]
    assert not obs.available and obs.fault is MetricsFault.COUNTER_RESET and "reset-0" in obs.message


def test_old_samples_are_stale(scene: Scene) -> None:
    source = PrometheusSource(scene.prom.url, window=WINDOW, stale_after=60)
    obs = source.poll(now=time.time() + 200).get("ns", "healthy")
    assert not obs.available and obs.fault is MetricsFault.STALE


def test_one_query_per_figure_whatever_the_fleet(scene: Scene) -> None:
    one = PrometheusSource(scene.prom.url, window=WINDOW, deployment="healthy").poll()
    every = PrometheusSource(scene.prom.url, window=WINDOW).poll()
    assert len(one.observations) == 1 and len(every.observations) == len(SCENARIO)
    assert one.queries == every.queries


def test_bad_label_config_is_malformed_not_a_crash(scene: Scene) -> None:
    from infertune.observe import Labels
    snap = PrometheusSource(scene.prom.url, labels=Labels(deployment="not a label")).poll()
    assert snap.fault is MetricsFault.MALFORMED and "HTTP 400" in snap.message
    assert snap.get("ns", "healthy").fault is MetricsFault.MALFORMED


# --- the source itself failing -----------------------------------------------------------------

def test_prometheus_down_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    snap = PrometheusSource(f"http://127.0.0.1:{port}").poll({("ns", "d"): Expected(replicas=1)})
    # The first failure ends the poll: only the queries already in flight were sent, not all of them.
    assert snap.fault is MetricsFault.UNREACHABLE and 1 <= snap.queries <= CONCURRENT_QUERIES
    assert snap.get("ns", "d").fault is MetricsFault.UNREACHABLE and snap.get("ns", "d").running is None
    # The runbook's first question answered in a fixed phrase: nothing listens there.
    assert snap.message == f"http://127.0.0.1:{port}: cannot reach it (connection refused)"


def test_a_connection_closed_without_an_answer_is_lost() -> None:
    # What a Prometheus killed mid-answer looks like from a kept-alive connection: accepted, then closed.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        port = s.getsockname()[1]
        closing = threading.Event()

        def accept_and_close() -> None:
            s.settimeout(0.2)
            while not closing.is_set():
                try:
                    conn, _ = s.accept()
                except OSError:
                    continue
                conn.recv(4096)
                conn.close()

        thread = threading.Thread(target=accept_and_close, daemon=True)
        thread.start()
        try:
            snap = PrometheusSource(f"http://127.0.0.1:{port}").poll()
        finally:
            closing.set()
            thread.join()
    assert snap.fault is MetricsFault.UNREACHABLE
    assert snap.message == f"http://127.0.0.1:{port}: cannot reach it (connection lost)"


def test_prometheus_slower_than_the_timeout() -> None:
    # A listener that never accepts: the TCP handshake completes, no answer ever comes.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        started = time.monotonic()
        snap = PrometheusSource(f"http://127.0.0.1:{s.getsockname()[1]}", timeout=0.5).poll()
        assert snap.fault is MetricsFault.TIMEOUT
        assert time.monotonic() - started < 5  # one timeout, not one per query


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_is_a_server_error(status: int) -> None:
    # Stands in for a Prometheus (or the proxy in front of it) that answers 5xx.
    server = PayloadServer('{"status":"error","errorType":"unavailable","error":"overloaded"}')
    server.status = status
    try:
        snap = PrometheusSource(f"http://{server.address}").poll()
    finally:
        server.close()
    assert snap.fault is MetricsFault.SERVER_ERROR and str(status) in snap.message


def test_non_json_answer_is_malformed() -> None:
    server = PayloadServer("<html>login page</html>")
    try:
        snap = PrometheusSource(f"http://{server.address}").poll()
    finally:
        server.close()
    assert snap.fault is MetricsFault.MALFORMED


def test_observe_command_prints_every_deployment_and_exits_1_on_faults(scene: Scene, capsys) -> None:
    from infertune.cli import main
    assert main(["observe", "--source", "prometheus", "--url", scene.prom.url, "--window", WINDOW,
                 "--output", "json"]) == 1  # the nan/dup deployments are faulted
    data = json.loads(capsys.readouterr().out)
    by_name = {d["deployment"]: d for d in data["deployments"]}
    assert set(by_name) == set(SCENARIO)
    assert by_name["healthy"]["available"] and len(by_name["healthy"]["replicas"]) == 2
    assert by_name["nan"]["fault"] == "NaNValues"
    assert main(["observe", "--source", "prometheus", "--url", scene.prom.url, "--window", WINDOW,
                 "--namespace", "ns", "--deployment", "healthy"]) == 0
    out = capsys.readouterr().out
    assert "ns/healthy" in out and "healthy-1" in out and "ns/nan" not in out


def test_fit_history_from_range_queries(scene: Scene) -> None:
    source = PrometheusSource(scene.prom.url)
    # Every window of the last 20 s inside the series' life: rate() divides by the whole window, so one that
    # began before a pod's first scrape reads fewer streams than decoded (a pod's first window, in a cluster).
    scene.prom.wait_for_samples('vllm:num_requests_running{deployment="healthy"}', 30, timeout=60)
    now = time.time()
    history = source.fit_history(now - 20, now, step="5s")
    samples = history[("ns", "healthy")]
    assert len(samples) >= 4
    # Each window's batch is the mean number of streams decoding (the inter-token sum's rate): the pods run 4
    # and 8. A rate over a 5 s window of counters that step every 0.25 s reads within a stream or so of it.
    low = [s.batch for s in samples if s.batch < 6]
    high = [s.batch for s in samples if s.batch >= 6]
    assert low and high and all(3 <= b <= 5 for b in low) and all(6 <= b <= 10 for b in high), sorted(low + high)
    assert statistics.median(low) == pytest.approx(4, rel=0.1) and statistics.median(high) == pytest.approx(8, rel=0.1)
    assert all(s.seconds == pytest.approx(0.025, rel=0.01) and 0 < s.weight <= 1 for s in samples)
    assert all(s.context == pytest.approx(5000, rel=0.01) for s in samples)  # from cache_config_info


def test_demand_history_from_a_range_query(scene: Scene) -> None:
    """What a started operator learns its season and bursts from: each deployment's first-token rate
    over the past, one point a step (every healthy pod answers 2 req/s)."""
    source = PrometheusSource(scene.prom.url)
    now = time.time()
    history = source.demand_history(now - 20, now, step="5s", rate_window="10s")
    points = history[("ns", "healthy")]
    assert len(points) >= 2 and all(now - 21 <= p.time <= now + 1 for p in points)
    assert points[-1].rate == pytest.approx(4.0, rel=0.2)  # two pods at 2 req/s
    assert all(rate.rate >= 0 for key, series in history.items() for rate in series)
