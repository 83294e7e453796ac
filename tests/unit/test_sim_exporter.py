"""The exporter speaks vLLM's (and SGLang's) names and types; LiveFleet serves, changes and stops cleanly."""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infertune.cli import main
from infertune.errors import UserError
from infertune_lab.sim import Engine, ReplicaConfig, RequestSpec, shape
from infertune_lab.sim.exporter import ReplicaView, render
from infertune_lab.sim.live import LiveFleet
from infertune_lab.sim.traffic import OpenSessions, poisson

VLLM = {
    "vllm:cache_config_info": "gauge", "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge", "vllm:kv_cache_usage_perc": "gauge",
    "vllm:num_preemptions": "counter", "vllm:prompt_tokens": "counter", "vllm:generation_tokens": "counter",
    "vllm:prefix_cache_queries": "counter", "vllm:prefix_cache_hits": "counter",
    "vllm:request_success": "counter", "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram", "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram", "vllm:request_generation_tokens": "histogram",
}
SGLANG = {
    "sglang:token_usage": "gauge", "sglang:num_running_reqs": "gauge", "sglang:num_queue_reqs": "gauge",
    "sglang:max_total_num_tokens": "gauge", "sglang:time_to_first_token_seconds": "histogram",
    "sglang:inter_token_latency_seconds": "histogram", "sglang:num_retracted_requests": "counter",
}
SMALL = ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, workload="chat", num_gpu_blocks=200)


def busy_engine(config: ReplicaConfig) -> Engine:
    engine = Engine(config, "pod-a")
    for i in range(6):
        engine.add(RequestSpec(0.0, 300, 200 + i, session=f"s{i}"))
    engine.advance(3.0)
    return engine


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_vllm_names_types_and_values() -> None:
    engine = busy_engine(SMALL)
    text = render(ReplicaView.of(engine)).decode()
    fams = families(text)
    assert {name: fams[name].type for name in VLLM} == VLLM  # type: ignore[attr-defined]
    assert "vllm:num_preemptions_total{" in text and "vllm_" not in text
    info = fams["vllm:cache_config_info"].samples[0]  # type: ignore[attr-defined]
    assert info.labels["num_gpu_blocks"] == "200" and info.labels["block_size"] == "16"
    usage = fams["vllm:kv_cache_usage_perc"].samples[0].value  # type: ignore[attr-defined]
    assert usage == pytest.approx(engine.kv_usage) and 0 < usage <= 1
    running = fams["vllm:num_requests_running"].samples[0].value  # type: ignore[attr-defined]
    assert running == len(engine.running) > 0


def test_histograms_are_cumulative_and_count_tokens() -> None:
    engine = busy_engine(SMALL)
    fams = families(render(ReplicaView.of(engine)).decode())
    itl = fams["vllm:inter_token_latency_seconds"].samples  # type: ignore[attr-defined]
    buckets = [s.value for s in itl if s.name.endswith("_bucket")]
    assert buckets == sorted(buckets)
    count = next(s.value for s in itl if s.name.endswith("_count"))
    assert count == buckets[-1] > 0
    gen = fams["vllm:generation_tokens"].samples[0].value  # type: ignore[attr-defined]
    first_tokens = next(s.value for s in fams["vllm:time_to_first_token_seconds"].samples  # type: ignore[attr-defined]
                        if s.name.endswith("_count"))
    assert gen == count + first_tokens  # every token is either a first token or an inter-token gap


def test_sglang_dialect() -> None:
    text = render(ReplicaView.of(busy_engine(SMALL.with_(engine="sglang")))).decode()
    fams = families(text)
    assert {name: fams[name].type for name in SGLANG} == SGLANG  # type: ignore[attr-defined]
    assert "vllm:" not in text
    assert fams["sglang:max_total_num_tokens"].samples[0].value == 200 * 16  # type: ignore[attr-defined]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_live_fleet_serves_each_replica_and_stops_cleanly() -> None:
    before = set(threading.enumerate())
    traffic = OpenSessions(shape("chat"), poisson(2.0, random.Random(0)), seed=0)
    live = LiveFleet([SMALL, SMALL.with_(engine="sglang")], traffic, speed=20.0)
    with live:
        assert live.pods == ["sim-0", "sim-1"] and len(set(live.targets)) == 2
        wait_for(lambda: "vllm:kv_cache_usage_perc" in get(f"http://{live.endpoints['sim-0']}/metrics")[1])
        assert "sglang:token_usage" in get(f"http://{live.endpoints['sim-1']}/metrics")[1]
        assert get(f"http://{live.targets[0]}/health")[0] == 200
        wait_for(lambda: live.now > 5.0)  # virtual time runs at 20x
        wait_for(lambda: len(live.records()) > 0)
    ports = list(live.endpoints.values())
    assert not ports  # every server closed
    assert set(threading.enumerate()) <= before


def test_live_fleet_adds_loads_reconfigures_and_drains() -> None:
    traffic = OpenSessions(shape("chat"), poisson(1.0, random.Random(1)), seed=1)
    with LiveFleet([SMALL], traffic, speed=10.0) as live:
        pod = live.add_replica(SMALL.with_(load_delay_seconds=5.0), name="loading")
        url = f"http://{live.endpoints[pod]}"
        assert get(f"{url}/health")[0] == 503 and get(f"{url}/metrics")[0] == 503
        wait_for(lambda: get(f"{url}/health")[0] == 200)  # 5 virtual seconds, ~0.5 s of wall time
        live.set_max_num_seqs(pod, 3)
        view = live.view(pod)
        assert view is not None and view.max_num_seqs == 3
        live.remove_replica("sim-0")
        wait_for(lambda: "sim-0" not in live.pods)  # drained, then its port closed
        assert live.pods == ["loading"]
        with pytest.raises(ValueError, match="no replica named"):
            live.set_max_num_seqs("sim-0", 4)


def test_live_fleet_reports_a_busy_port_clearly() -> None:
    with LiveFleet([SMALL]) as first:
        port = int(first.targets[0].rsplit(":", 1)[1])
        with pytest.raises(UserError, match=f"cannot listen on 127.0.0.1:{port}"):
            LiveFleet([SMALL], base_port=port).start()


def test_serve_command_writes_targets(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    targets = tmp_path / "targets.json"
    code = main(["simulate", "serve", "--replicas", "2", "--duration", "0.3", "--speed", "10",
                 "--targets-file", str(targets), "--deployment", "demo", "--model", "llama-3.1-8b",
                 "--gpu", "h100", "--tp", "1", "--workload", "chat"])
    assert code == 0
    entries = json.loads(targets.read_text())
    assert [e["labels"]["pod"] for e in entries] == ["sim-0", "sim-1"]
    assert all(e["labels"]["deployment"] == "demo" for e in entries)
    assert capsys.readouterr().out.count("/metrics") == 2


def test_sweep_command_json(capsys) -> None:  # type: ignore[no-untyped-def]
    code = main(["simulate", "sweep", "--concurrency", "1,16", "--warmup", "60", "--duration", "200",
                 "--fit", "5.2,1.65", "--output", "json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert code == 0 and [r["concurrency"] for r in rows] == [1, 16]
    assert set(rows[0]) >= {"concurrency", "aggregate_tps", "per_stream_tps", "ttft_p50_seconds",
                            "ttft_p95_seconds", "kv_usage", "preemptions", "prefix_hit_rate"}
    assert rows[1]["aggregate_tps"] > rows[0]["aggregate_tps"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--concurrency", "4,-1"], "--concurrency"),
    (["--fit", "oops"], "--fit"),
    (["--model", "gpt-9"], "unknown model"),
    (["--duration", "0"], "--duration must be > 0"),
])
def test_sweep_command_bad_input(argv: list[str], message: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["simulate", "sweep", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("engine_kind", ["vllm", "sglang"])
def test_the_hand_written_text_matches_prometheus_clients_own(engine_kind: str) -> None:
    # render() writes the exposition text itself for speed (the bench scrapes every pod every 15 s);
    # the library's collector over the same view is the reference it must match byte for byte.
    from prometheus_client import CollectorRegistry, generate_latest

    from infertune_lab.sim.exporter import ReplicaCollector

    for ready in (True, False):
        view = ReplicaView.of(busy_engine(SMALL.with_(engine=engine_kind)), ready=ready)
        registry = CollectorRegistry()
        registry.register(ReplicaCollector(lambda shown=view: shown))
        assert render(view) == generate_latest(registry)


@pytest.mark.parametrize("engine_kind", ["vllm", "sglang"])
def test_the_bench_reads_what_a_parser_of_the_text_would(engine_kind: str) -> None:
    # The bench hands PodsSource the samples instead of printing and parsing them at every poll.
    from infertune.observe.textformat import parse_payload, read_samples
    from infertune_lab.sim.exporter import samples

    view = ReplicaView.of(busy_engine(SMALL.with_(engine=engine_kind)))
    text = render(view).decode()
    parsed = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    assert list(samples(view)) == parsed
    reading = read_samples(samples(view))
    assert reading == parse_payload(text)
    assert reading.histograms["ttft"].count == 6 and reading.counters["generation_tokens"] > 0
