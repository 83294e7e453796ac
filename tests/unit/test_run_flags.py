"""`infertune run`'s flags: every bad value is one line and exit 2 before anything starts; the log
format and level reach kopf's records and the operator's own; the peering priority makes the replica
that started first the one that acts."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from infertune.cli import main
from infertune.commands import run


@pytest.mark.parametrize(("argv", "says"), [
    (["--namespace=Bad_Name"], "--namespace 'Bad_Name' is not a namespace name"),
    (["--peering=Not/A/Name"], "--peering 'Not/A/Name' is not an object name"),
    (["--priority=5"], "--priority needs --peering"),
    (["--prometheus-token-secret=tok"], "--prometheus-token-secret needs --prometheus-url"),
    (["--prometheus-url=http://p:9090", "--prometheus-token-secret=tok", "--prometheus-token-key=a b"],
     "--prometheus-token-key 'a b' is not a Secret key"),
    # A key with no Secret to read it from was ignored without a word.
    (["--prometheus-token-key=bearer"], "--prometheus-token-key needs --prometheus-token-secret"),
    (["--cycle-seconds=nan"], "--cycle-seconds and --poll-seconds must be positive"),
    (["--poll-seconds=inf"], "--cycle-seconds and --poll-seconds must be positive"),
    (["--poll-seconds=-1"], "--cycle-seconds and --poll-seconds must be positive"),
    (["--metrics-port=70000"], "--metrics-port must be 0..65535"),
    # PromQL refuses fractional ranges: caught here rather than as a failed query on every poll.
    (["--metrics-window=1.5m"], "--metrics-window: '1.5m' is not a PromQL range"),
    (["--metrics-window=0s"], "--metrics-window: '0s' is a range of zero"),
    # kopf reads the liveness endpoint only once started, and fails in its probe task.
    (["--liveness=::::"], "--liveness '::::': must be an http:// URL"),
    (["--liveness=https://0.0.0.0:8080/healthz"], "must be an http:// URL"),
    (["--liveness=http://0.0.0.0:99999/healthz"], "the port must be a number from 0 to 65535"),
    (["--liveness=http://0.0.0.0:8080"], "needs a path such as /healthz"),
])
def test_a_bad_flag_is_one_line_and_exit_2(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and err.startswith("infertune run: error: ") and says in err, err


@pytest.mark.parametrize("argv", [["--peering=a", "--standalone"], ["--log-format=xml"], ["--log-level=loud"]])
def test_argparse_refuses_contradictions_and_unknown_choices(argv: list[str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *argv]) == 2  # argparse's refusal, answered by main as one line
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and err.startswith("infertune run: error: "), err


def test_the_token_secret_needs_to_know_the_operators_namespace(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setattr(run, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    assert main(["run", "--prometheus-url=http://p:9090", "--prometheus-token-secret=tok"]) == 2
    assert "set POD_NAMESPACE" in capsys.readouterr().err
    (tmp_path / "namespace").write_text("from-the-service-account\n")
    monkeypatch.setattr(run, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "namespace")
    assert run.own_namespace() == "from-the-service-account"
    monkeypatch.setenv("POD_NAMESPACE", "infertune-system")
    assert run.own_namespace() == "infertune-system"  # the downward API wins


def test_the_replica_that_started_first_has_the_higher_priority() -> None:
    first, second = run.default_priority(1_700_000_000_000_000_000), run.default_priority(1_700_000_000_000_001_000)
    assert first > second
    assert run.default_priority(1_700_000_000_000_000_000) != run.default_priority(1_700_000_000_000_002_000)


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


@pytest.mark.usefixtures("restored_logging")
def test_json_logs_are_one_object_per_line_from_kopf_and_the_operator(capsys: pytest.CaptureFixture[str]) -> None:
    run.configure_logging("json", "info")
    logging.getLogger("kopf.objects").info("from kopf")
    structlog.get_logger("infertune.controller").info("from infertune", namespace="ns", name="n")
    structlog.get_logger("infertune.controller").debug("hidden at info")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert [line.get("message") or line.get("event") for line in lines] == ["from kopf", "from infertune"]
    assert lines[1]["namespace"] == "ns" and lines[1]["level"] == "info"


@pytest.mark.usefixtures("restored_logging")
def test_plain_logs_are_for_people_and_debug_shows_more(capsys: pytest.CaptureFixture[str]) -> None:
    run.configure_logging("plain", "debug")
    logging.getLogger("kopf.objects").debug("kopf detail")
    structlog.get_logger("infertune.controller").debug("operator detail", replicas=2)
    err = capsys.readouterr().err
    assert "kopf detail" in err and "[DEBUG" in err
    assert "operator detail" in err and "replicas=2" in err
    assert not any(line.startswith("{") for line in err.splitlines())
