"""`infertune observe`: bad input is one line and exit 2; the pods source prints per-replica JSON."""

from __future__ import annotations

import json

import pytest

from infertune.cli import main
from tests.prometheus_fixture import EnginePayload


@pytest.mark.parametrize(("argv", "needle"), [
    (["--source", "prometheus"], "--url"),
    (["--source", "prometheus", "--url", "prometheus:9090"], "--url"),
    (["--source", "prometheus", "--url", "http://p:9090", "--window", "5 minutes"], "--window"),
    # PromQL refuses a fractional or empty range: refused here, not by Prometheus on every query.
    (["--source", "prometheus", "--url", "http://p:9090", "--window", "1.5m"], "not a PromQL range"),
    (["--source", "prometheus", "--url", "http://p:9090", "--window", "0s"], "a range of zero"),
    (["--source", "prometheus", "--url", "http://p:9090", "--fit-history", "1x"], "--fit-history"),
    # Past int64 milliseconds Prometheus refuses a duration; a float of it would be inf or overflow.
    (["--source", "prometheus", "--url", "http://p:9090", "--window", "9" * 310 + "y"], "longer than any range"),
    (["--source", "prometheus", "--url", "http://p:9090", "--fit-history", "9" * 300 + "s"], "longer than any range"),
    (["--source", "pods", "--targets", "127.0.0.1:9", "--interval", "0", "--window", "9" * 20 + "y"],
     "longer than any range"),
    (["--source", "prometheus", "--url", "http://p:9090", "--ca", "/nonexistent/ca.pem"], "--ca"),
    (["--source", "prometheus", "--url", "http://p:9090", "--timeout", "0"], "--timeout"),
    (["--source", "pods"], "--targets"),
    (["--source", "pods", "--targets", "a/b=127.0.0.1:1"], "target"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["observe", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_pods_source_json_has_replicas_fit_and_headroom(payload_servers, capsys) -> None:
    payloads = [EnginePayload(running=4, kv_usage=0.3), EnginePayload(running=12, kv_usage=0.6)]
    servers = [payload_servers(p.text) for p in payloads]
    targets = ",".join(f"ns/chat/pod-{i}={s.address}" for i, s in enumerate(servers))
    for p in payloads:
        p.advance(1.0)
    code = main(["observe", "--source", "pods", "--targets", targets, "--interval", "0", "--output", "json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    (dep,) = data["deployments"]
    assert (dep["namespace"], dep["deployment"], dep["available"]) == ("ns", "chat", True)
    assert [r["pod"] for r in dep["replicas"]] == ["pod-0", "pod-1"]
    assert [r["running"] for r in dep["replicas"]] == [4, 12]
    assert dep["kv_usage"] == 0.6 and dep["arrival_rate"] is None  # one scrape: no rates, not zero
    assert dep["cache_headroom"]["reason"] == "HeadroomOK"
    assert dep["fit"] is None


def test_unreachable_pod_exits_1_with_the_reason(payload_servers, capsys) -> None:
    server = payload_servers(EnginePayload().text)
    server.status = 503
    code = main(["observe", "--source", "pods", "--targets", server.address, "--interval", "0"])
    out = capsys.readouterr().out
    assert code == 1 and "SourceServerError" in out and "503" in out
    # The header does not call the source ok above a deployment it could not read.
    assert out.splitlines()[0] == "source pods: 1 queries, 1 of 1 deployment(s) not trusted", out
