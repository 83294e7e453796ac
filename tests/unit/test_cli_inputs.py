"""Every command-line input is answered: each case issue 14 found, and hypothesis over every numeric
flag of every command. A bad value is one line on stderr that names the flag (exit 2), checked before
any work starts; JSON output is JSON any parser reads; no traceback ever reaches the user."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infertune.cli import build_parser, main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own refusal
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> bool:
    return err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN and Infinity, as JavaScript's JSON.parse and jq do."""
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(("argv", "flag"), [
    (["plan", "--context-cv", "nan"], "--context-cv"),
    (["plan", "--demand-rps", "inf"], "--demand-rps"),
    (["plan", "--demand-rps", "1e12"], "--demand-rps"),
    (["plan", "--demand-rps", "-1"], "--demand-rps"),
    # A bound reads as a person writes it, not 4.29497e+09.
    (["plan", "--demand-rps", "2e6"], "from 0 to 1,000,000"),
    (["demo", "--seed", "-1"], "from 0 to 4,294,967,295"),
    (["plan", "--max-concurrency", "100000"], "--max-concurrency"),
    (["plan", "--kv-headroom", "nan"], "--kv-headroom"),
    (["plan", "--model", "kimi-k2.6", "--tp", "3"], "--tp"),
    (["plan", "--model", "llama-3.1-8b", "--tp", "1,2,64"], "--tp"),  # 64 ranks for 32 attention heads
    (["fit", "--samples", "x.csv", "--tp", "0"], "--tp"),
    (["simulate", "sweep", "--duration", "nan"], "--duration"),
    (["simulate", "sweep", "--max-num-seqs", "100000"], "--max-num-seqs"),
    (["simulate", "replay", "--trace", "x.csv", "--rate-multiplier", "inf"], "--rate-multiplier"),
    (["bench", "--duration", "nan"], "--duration"),
    (["bench", "--startup-seconds", "inf"], "--startup-seconds"),
    (["bench", "--pool-gpus", "1.5"], "--pool-gpus"),
    (["bench", "--pool-gpus", "3"], "--pool-gpus"),  # under the example's smallest layout (TP4)
    (["observe", "--source", "pods", "--targets", "h:1", "--timeout", "0"], "--timeout"),
    (["render", "-f", "examples/kimi-k2.6-b200.yaml", "--replicas", "-1"], "--replicas"),
])
def test_each_bad_value_is_one_line_naming_its_flag(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                    flag: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and flag in err and one_line(err) and out == "", err


def test_a_tp_the_model_cannot_split_is_refused_and_one_it_can_is_planned(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--model", "kimi-k2.6", "--tp", "3")
    assert code == 2 and "TP3 does not divide the 64 attention heads" in err
    code, out, _ = run(capsys, "plan", "--model", "llama-3.1-8b", "--tp", "1,2,4", "--output", "json")
    assert code in (0, 1) and {c["tensor_parallel_size"] for c in strict_json(out)["candidates"]} == {1, 2, 4}


def test_a_demand_no_pool_serves_is_infeasible_not_a_choice(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--demand-rps", "1000000", "--pool-gpus", "64", "--output", "json")
    doc = strict_json(out)
    assert code == 1 and doc["feasible"] is False and doc["capacity_shortfall_gpus"] > 0


@pytest.mark.parametrize("argv_of", [
    lambda out: ["plan", "--plot", str(out / "missing" / "plan.png")],
    lambda out: ["simulate", "sweep", "--concurrency", "1", "--plot", str(out / "missing" / "sweep.png")],
    lambda out: ["simulate", "replay", "--trace", "x.csv", "--records", str(out / "missing" / "records.csv")],
    lambda out: ["bench", "--report", str(out / "a-file" / "report")],
    lambda out: ["demo", "--report", str(out / "a-file")],
    lambda out: ["crds", "--out", str(out / "a-file")],
    lambda out: ["crds", "--reference", str(out / "a-file" / "reference.md")],
])
def test_an_output_path_that_cannot_be_written_fails_before_any_work(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, argv_of: Any) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    started = time.monotonic()
    argv = argv_of(tmp_path)
    code, out, err = run(capsys, *argv)
    assert code == 2 and one_line(err) and out == "", err
    assert argv[-2] in err  # the flag whose path it is
    assert time.monotonic() - started < 5  # refused up front, not after the sweep, replay or benchmark
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_replay_json_is_json_even_when_a_figure_is_not_a_number(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    trace = tmp_path / "one-token.csv"  # one-token answers have no decode speed: NaN before
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,1\n"
                     "2023-11-16 18:17:04.0319600,3180,1\n")
    code, out, _ = run(capsys, "simulate", "replay", "--trace", str(trace), "--tp", "8", "--output", "json")
    doc = strict_json(out)
    assert code == 0 and doc["completed"] == 2 and doc["stream_tps_mean"] is None
    # The table says there is no figure, as every other table does, rather than printing nan.
    code, out, _ = run(capsys, "simulate", "replay", "--trace", str(trace), "--tp", "8")
    rows = dict(line.split(None, 1) for line in out.splitlines() if line.strip())
    assert code == 0 and rows["stream_tps_mean"] == "-" and rows["stream_tps_p5"] == "-", out
    assert "nan" not in out.lower(), out


@pytest.mark.parametrize(("rows", "says"), [
    # Two samples a millionfold apart one batch away: a line of no time, 1e9 tok/s a stream.
    ("99999,0.01\n100000,60000\n100000,60000\n", "1e-07 ms at batch 1"),
    # A perfect line 1,000 ms a stream steep, carried to the default batches: minutes a pass.
    ("1,6\n1.0000000001,6.0000001\n1.0000000002,6.0000002\n", "at batch 64"),
])
def test_a_fit_that_predicts_a_pass_no_engine_runs_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                              rows: str, says: str) -> None:
    csv = tmp_path / "samples.csv"
    csv.write_text("batch,per_pass_ms\n" + rows)
    code, out, err = run(capsys, "fit", "--samples", str(csv))
    assert code == 2 and out == "" and says in err and "0.01..60,000 ms" in err and one_line(err), err


@pytest.mark.parametrize("argv", [
    ["fit", "--samples", "{csv}", "--model", "kimi-k2.6", "--tp", "8"],
    ["plan", "--model", "kimi-k2.6", "--tp", "8", "--samples", "{csv}", "--fit-tp", "8"],
    ["plan", "--model", "kimi-k2.6", "--tp", "8", "--fit", "0.02,0.001", "--fit-tp", "8"],
])
def test_samples_faster_than_the_model_can_decode_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                              argv: list[str]) -> None:
    # Seconds written as ms: a trillion-parameter model reads 32 GB of weights a pass, 0.5 ms at TP8 at best.
    csv = tmp_path / "samples.csv"
    csv.write_text("batch,per_pass_ms\n1,0.02\n8,0.03\n16,0.04\n")
    code, out, err = run(capsys, *[a.replace("{csv}", str(csv)) for a in argv])
    assert code == 2 and out == "" and one_line(err), err
    assert "faster than kimi-k2.6 can decode at TP8 on b200 (at least 0.0312 ms" in err, err


def test_a_samples_row_with_infinity_is_named_not_dropped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    csv = tmp_path / "samples.csv"
    csv.write_text("batch,per_pass_ms\n4,11.8\n8,inf\n16,31.6\n32,57\n")
    code, _, err = run(capsys, "fit", "--samples", str(csv))
    assert code == 2 and "line 3" in err and one_line(err)


# --- hypothesis over every numeric flag ------------------------------------------------------------
def _numeric_flags() -> list[tuple[tuple[str, ...], str, argparse.Action]]:
    """(command path, flag, action) for every flag whose type is the validated number."""
    found = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
            elif action.option_strings and getattr(action.type, "__name__", "") in ("number", "integer"):
                found.append((path, action.option_strings[-1], action))

    walk(build_parser(), ())
    return found


NUMERIC = _numeric_flags()
nasty = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "+Infinity", "1e400", "-1e400", "1e308", "-0", "0", "-1",
                     "1e-320", "0x10", "1_000", " 5 ", "", "five", "1e12", "99999999999999999999"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**12, 10**12).map(str),
    st.text(max_size=8),
)


def test_every_numeric_flag_of_every_command_is_validated() -> None:
    commands = {path[0] for path, _, _ in NUMERIC}
    assert {"plan", "fit", "observe", "explain", "render", "simulate", "bench", "demo"} <= commands
    assert len(NUMERIC) >= 40


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(NUMERIC), nasty)
def test_any_value_of_any_numeric_flag_is_a_bounded_number_or_one_line(flag: Any, text: str) -> None:
    _, _, action = flag
    try:
        value = action.type(text)
    except argparse.ArgumentTypeError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("expected ")  # one line, argparse adds the flag
        return
    assert isinstance(value, int | float) and math.isfinite(value)


# capsys is read (and so emptied) after every example.
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries({}, optional={
    "--demand-rps": nasty, "--context-cv": nasty, "--kv-headroom": nasty, "--max-concurrency": nasty,
    "--min-stream-tps": nasty, "--max-ttft": nasty, "--pool-gpus": nasty, "--price-per-gpu-hour": nasty,
    "--prompt-tokens": st.sampled_from(["2000", "1", "1e7", "nan"]), "--output-tokens": st.sampled_from(
        ["300", "1", "nan"]), "--tp": st.sampled_from(["1,2,4,8", "3", "16,32,64", "0", "1,x"]),
}))
def test_plan_answers_any_flags_without_a_traceback(capsys: pytest.CaptureFixture[str], flags: dict[str, str]) -> None:
    argv = ["plan", "--model", "llama-3.1-8b", "--output", "json"]
    if ("--prompt-tokens" in flags) != ("--output-tokens" in flags):
        flags.pop("--prompt-tokens", None)
        flags.pop("--output-tokens", None)
    for option, value in flags.items():
        argv += [f"{option}={value}"]
    code, out, err = run(capsys, *argv)
    assert code in (0, 1, 2) and "Traceback" not in err and "internal error" not in err
    if code == 2:
        assert one_line(err)
    else:
        strict_json(out)


def test_samples_no_fit_can_be_solved_from_are_one_line_not_a_bug(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    """Found by the fuzzing: a pass of 1e-97 ms left the physics fit a singular system (LinAlgError). Such
    a pass is now refused at its line, as no pass is shorter than 10 µs."""
    csv = tmp_path / "samples.csv"
    csv.write_text("batch,per_pass_ms\n1,6.85\n1,6.85\n1,1.8100864249840522e-97\n")
    code, _, err = run(capsys, "fit", "--samples", str(csv), "--model", "kimi-k2.6", "--tp", "8",
                       "--context-tokens", "8000")
    assert code == 2 and one_line(err) and "line 4" in err


EXAMPLE_RESOURCE = str(Path(__file__).resolve().parents[2] / "examples" / "kimi-k2.6-b200.yaml")


def _named_file_cases(tmp: Path) -> list[tuple[list[str], str]]:
    """Every flag that names a file to read, each given a file it cannot use."""
    binary = tmp / "binary.dat"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    broken = tmp / "broken.yaml"
    broken.write_text("spec: [\n")
    a_list = tmp / "list.yaml"
    a_list.write_text("- a\n- b\n")
    samples = tmp / "samples.csv"
    samples.write_text("batch,per_pass_ms\n1,10\n2,11\n4,13\n")
    return [
        (["render", "-f", str(binary)], "--file"),
        (["render", "-f", str(tmp)], "--file"),
        (["plan", "-f", str(binary)], "--file"),
        (["explain", "-f", str(binary)], "--file"),
        (["render", "-f", EXAMPLE_RESOURCE, "--policy", str(binary)], "--policy"),
        (["render", "-f", EXAMPLE_RESOURCE, "--policy", str(broken)], "--policy"),
        (["render", "-f", EXAMPLE_RESOURCE, "--policy", str(a_list)], "--policy"),
        (["render", "-f", EXAMPLE_RESOURCE, "--config-json", str(binary)], "--config-json"),
        (["fit", "--samples", str(binary)], "--samples"),
        (["fit", "--samples", str(tmp)], "--samples"),
        (["fit", "--samples", str(samples), "--model", str(binary), "--gpu", "b200", "--tp", "8"], "--model"),
        (["observe", "--source", "prometheus", "--url", "http://127.0.0.1:9", "--token-file", str(binary)],
         "--token-file"),
        (["bench", "--trace", str(binary), "--rate-multiplier", "2"], "--trace"),
        (["simulate", "replay", "--trace", str(binary)], "--trace"),
    ]


def test_a_named_file_that_is_not_text_or_not_a_file_is_one_line_naming_its_flag(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Bytes that are not UTF-8, a directory, YAML that does not parse or is not one mapping: each is
    refused in one line that names the flag (exit 2), never an internal error."""
    for argv, flag in _named_file_cases(tmp_path):
        code, _, err = run(capsys, *argv)
        assert code == 2 and one_line(err) and flag in err, (argv, err)


def test_a_samples_file_with_a_byte_order_mark_reads_as_text(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    """Spreadsheets save CSV with a UTF-8 byte-order mark; its first column is still `batch`."""
    samples = tmp_path / "bom.csv"
    samples.write_bytes("batch,per_pass_ms\n1,10\n2,11\n4,13\n".encode("utf-8-sig"))
    code, out, err = run(capsys, "fit", "--samples", str(samples), "--output", "json")
    assert code == 0, err
    assert json.loads(out)["samples"] == 3


@pytest.mark.parametrize(("extra", "flag"), [
    (["--model", "llama-3.1-8b"], "--model"), (["--max-concurrency", "32"], "--max-concurrency"),
    (["--pool-gpus", "8"], "--pool-gpus"), (["--prompt-tokens", "100", "--output-tokens", "10"], "--prompt-tokens"),
])
def test_plan_with_a_resource_refuses_a_flag_the_resource_already_says(
        capsys: pytest.CaptureFixture[str], extra: list[str], flag: str) -> None:
    """With -f the resource says the model, the SLO and the pool: a flag saying otherwise would be ignored,
    so it is refused in one line rather than silently dropped."""
    code, _, err = run(capsys, "plan", "-f", EXAMPLE_RESOURCE, *extra)
    assert code == 2 and one_line(err) and flag in err


def test_policy_and_config_json_without_a_resource_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--policy", "--config-json"):
        code, _, err = run(capsys, "plan", flag, EXAMPLE_RESOURCE)
        assert code == 2 and one_line(err) and flag in err


def test_plan_with_a_resource_takes_measured_samples_and_a_demand_on_top(capsys: pytest.CaptureFixture[str],
                                                                         tmp_path: Path) -> None:
    """The measurements are not in the resource: --samples and --demand-rps change the plan of -f."""
    samples = tmp_path / "samples.csv"
    samples.write_text("batch,per_pass_ms\n1,9\n2,10.5\n4,13\n8,18\n")
    _, plain, _ = run(capsys, "plan", "-f", EXAMPLE_RESOURCE, "--output", "json")
    _, measured, _ = run(capsys, "plan", "-f", EXAMPLE_RESOURCE, "--samples", str(samples), "--demand-rps", "2",
                         "--output", "json")
    before, after = json.loads(plain), json.loads(measured)
    assert after["demand_rps"] == 2 and before["demand_rps"] != 2
    sources = {c["pass_source"] for c in after["candidates"] if c["tensor_parallel_size"] == 8}
    assert sources <= {"fit", "fit+napkin"} and "fit" in sources
    assert not any(c["pass_source"].startswith("fit") for c in before["candidates"])


def test_explain_without_a_cluster_says_there_is_none(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a pod and without a kubeconfig, `explain NAME` says so in one line (`run` shares the
    function, but configures the process-wide logging first, so it is not run in-process here)."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    code, _, err = run(capsys, "explain", "my-model", "-n", "default")
    assert code == 2 and one_line(err) and "no cluster" in err and "missing-kubeconfig" in err
