"""`infertune bench` refuses bad input with one clear line and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from infertune.cli import main


def test_malformed_trace_is_one_error_naming_the_line_and_nothing_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0.0,100,10\n1.0,lots,10\n")
    report = tmp_path / "report"
    code = main(["bench", "--trace", str(trace), "--report", str(report), "--output", "json"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.strip().splitlines()[-1] == f"infertune bench: error: {trace}:3: ContextTokens 'lots' is not an integer"
    assert out == ""
    assert not report.exists()


def test_missing_trace_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--trace", str(tmp_path / "nope.csv")])
    assert code == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "nope.csv" in err


def test_rate_multiplier_needs_a_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--scenario", "spike", "--rate-multiplier", "3"]) == 2
    assert "--rate-multiplier applies to --trace" in capsys.readouterr().err


def test_unknown_policy_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--policies", "infertune,vpa"]) == 2
    assert "expected some of infertune,static,hpa-kv,keda-queue,keda-slo,oracle" in capsys.readouterr().err


def test_unknown_router_is_refused_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--router", "nginx"]) == 2
    err = capsys.readouterr().err
    assert "--router" in err and "session-affinity" in err and "llm-d" in err and "Traceback" not in err


def test_the_json_names_the_router_the_run_was_behind(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--scenario", "random", "--seed", "1", "--duration", "600", "--pool-gpus", "16",
                 "--policies", "static", "--processes", "1", "--router", "llm-d", "--output", "json"])
    assert code == 0
    assert '"router": "llm-d"' in capsys.readouterr().out
