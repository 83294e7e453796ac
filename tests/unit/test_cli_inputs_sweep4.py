"""A fourth sweep of hostile inputs (docs/reliability.md, "A fourth sweep"): each case here once hung, read a
device until memory ran out, ended in an internal error, or took a value without a word. Each is now refused
in one line that names the flag or the file and the problem (exit 2), with nothing written; a few valid inputs
the fixes must keep taking are checked beside them."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.unit.test_cli_hostile_inputs import TRACE_HEADER, refused, write
from tests.unit.test_cli_inputs import run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = (REPO / "examples" / "kimi-k2.6-b200.yaml").read_text()
POLICY = REPO / "policies" / "coding-agent.yaml"
SAMPLES = "batch,per_pass_ms\n1,5\n2,7\n4,11\n"
# Python will not read an integer of more than 4,300 digits (int() raises ValueError).
HUGE_INT = "9" * 5000


def fifo_at(path: Path) -> str:
    os.mkfifo(path)
    return str(path)


# --- a FIFO or a device named as an input --------------------------------------------------------------
@pytest.mark.timeout(30)
@pytest.mark.parametrize(("flag", "argv"), [
    ("--file", ["plan", "--file", "{input}"]),
    ("--policy", ["render", "-f", "{example}", "--policy", "{input}"]),
    ("--trace", ["simulate", "replay", "--trace", "{input}"]),
    ("--samples", ["fit", "--samples", "{input}"]),
    ("--token-file", ["observe", "--source", "prometheus", "--url", "http://127.0.0.1:1", "--token-file", "{input}"]),
    ("--ca", ["observe", "--source", "prometheus", "--url", "https://127.0.0.1:1", "--ca", "{input}"]),
])
def test_a_fifo_no_one_writes_to_is_read_as_empty_not_waited_on_for_ever(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, argv: list[str]) -> None:
    """Every file a flag names was read with a blocking open: a FIFO with no writer hung the command for ever
    (`--ca` opened it a second time, in ssl). It now reads as empty, which each reader refuses in its words."""
    fifo = fifo_at(tmp_path / "input")
    example = write(tmp_path / "example.yaml", EXAMPLE)
    args = [a.format(input=fifo, example=example) for a in argv]
    code, out, err = run(capsys, *args)
    assert refused(code, out, err, str(fifo)), err
    assert stat.S_ISFIFO(Path(fifo).stat().st_mode)


def test_a_pipe_with_a_writer_is_still_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`--samples <(zcat samples.csv.gz)` names a pipe whose writer is there: it must still be read whole."""
    read_end, write_end = os.pipe()
    os.write(write_end, SAMPLES.encode())
    os.close(write_end)
    try:
        code, out, err = run(capsys, "fit", "--samples", f"/proc/self/fd/{read_end}", "--output", "json")
    finally:
        os.close(read_end)
    assert code == 0, err
    assert json.loads(out)["samples"] == 3


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("flag", "argv"), [
    ("--samples", ["fit", "--samples", "/dev/zero"]),
    ("--trace", ["simulate", "replay", "--trace", "/dev/urandom"]),
    ("--file", ["render", "-f", "/dev/zero"]),
    ("--ca", ["observe", "--source", "prometheus", "--url", "https://127.0.0.1:1", "--ca", "/dev/zero"]),
])
def test_a_device_is_refused_not_read_until_memory_runs_out(capsys: pytest.CaptureFixture[str], flag: str,
                                                             argv: list[str]) -> None:
    """/dev/zero was read to the end that never comes: a MemoryError (an internal error) once the process
    had taken all it could, or the machine's memory first."""
    code, out, err = run(capsys, *argv)
    assert refused(code, out, err, flag, argv[-1], "is not a regular file"), err


# --- traces and samples: CSV the csv module refuses -------------------------------------------------------
@pytest.mark.parametrize("row", ["0," + "1" * 200_000 + ",10", "x" * 200_000 + ",1,10"])
def test_a_trace_line_past_the_csv_field_limit_is_refused_at_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, row: str) -> None:
    """csv's "field larger than field limit (131072)" was an internal error."""
    trace = write(tmp_path / "trace.csv", TRACE_HEADER + "0,100,10\n" + row + "\n")
    records = tmp_path / "records.csv"
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace, "--records", str(records))
    assert refused(code, out, err, f"{trace}:3:", "longer than 131,072 characters"), err
    assert not records.exists()


@pytest.mark.parametrize("command", [["fit"], ["plan", "--fit-tp", "8"]])
def test_a_samples_line_past_the_csv_field_limit_is_refused_at_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]) -> None:
    samples = write(tmp_path / "s.csv", "batch,per_pass_ms\n1,5\n2," + "7" * 200_000 + "\n4,11\n")
    code, out, err = run(capsys, *command, "--samples", samples)
    assert refused(code, out, err, samples, "line 3", "longer than 131,072 characters"), err


def test_a_samples_value_the_error_quotes_is_cut_short(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The refusal quoted the whole row: a value of 100,000 characters made a line of 100,000 characters."""
    samples = write(tmp_path / "s.csv", "batch,per_pass_ms\n1,5\n2," + "x" * 100_000 + "\n4,11\n")
    code, out, err = run(capsys, "fit", "--samples", samples)
    assert refused(code, out, err, samples, "line 3", "not a number", "(100000 characters)"), err
    assert len(err) < 500


@pytest.mark.parametrize(("header", "column"), [
    ("TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens", "ContextTokens"),
    ("Timestamp,Timestamp,Request tokens,Response tokens", "Timestamp"),
])
def test_a_trace_header_naming_a_column_twice_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                         header: str, column: str) -> None:
    """The first of the two was read and the other ignored: a BurstGPT export with two Timestamp columns
    replayed whichever came first, exit 0 (the samples CSV refused the same header)."""
    width = header.count(",") + 1
    rows = "".join(",".join([str(i)] + ["100"] * (width - 1)) + "\n" for i in range(5))
    trace = write(tmp_path / "trace.csv", header + "\n" + rows)
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace)
    assert refused(code, out, err, f"{trace}:1:", column, "more than once"), err


def test_a_mooncake_timestamp_past_a_floats_range_is_refused(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    """A JSON integer of 400 digits: `ms / 1000.0` raised OverflowError, an internal error."""
    trace = write(tmp_path / "trace.jsonl", '{"timestamp": %s, "input_length": 1, "output_length": 1}\n' % ("9" * 400))
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace)
    assert refused(code, out, err, f"{trace}:1:", "not a finite number of milliseconds", "(400 characters)"), err


def test_a_mooncake_line_holding_a_line_separator_in_a_string_is_read(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path) -> None:
    """JSON lets a string hold U+2028 as it is; splitlines() cut the line there and refused it as "not a JSON
    object". Lines end at a newline (a CRLF's carriage return is JSON's whitespace)."""
    trace = write(tmp_path / "trace.jsonl",
                  '{"timestamp": 0, "input_length": 100, "output_length": 10, "x": "a\u2028b"}\r\n'
                  '{"timestamp": 500, "input_length": 100, "output_length": 10}\n')
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace, "--output", "json")
    assert code == 0, err
    assert json.loads(out)["requests"] == 2


# --- YAML and config.json: numbers Python will not read ---------------------------------------------------
@pytest.mark.parametrize("command", [["render"], ["plan"], ["explain"]])
def test_a_yaml_integer_of_thousands_of_digits_is_refused_naming_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]) -> None:
    """PyYAML's int() raised "Exceeds the limit (4300 digits)": an internal error."""
    resource = write(tmp_path / "r.yaml", EXAMPLE.replace("poolGpus: 32", f"poolGpus: {HUGE_INT}"))
    code, out, err = run(capsys, *command, "-f", resource, "--policy", str(POLICY))
    assert refused(code, out, err, "--file", resource, "line 21", "5,000 digits"), err


def test_a_policy_integer_of_thousands_of_digits_is_refused_naming_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = POLICY.read_text().replace("hysteresisPercent: 10", f"hysteresisPercent: {HUGE_INT}")
    policy = write(tmp_path / "p.yaml", text)
    resource = write(tmp_path / "r.yaml", EXAMPLE)
    code, out, err = run(capsys, "plan", "-f", resource, "--policy", policy)
    assert refused(code, out, err, "--policy", policy, "5,000 digits"), err


CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192,
          "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
          "torch_dtype": "bfloat16", "max_position_embeddings": 131072}


@pytest.mark.parametrize(("text", "says"), [
    (json.dumps(CONFIG).replace('"hidden_size": 8192', f'"hidden_size": {HUGE_INT}'), "more than 4,300 digits"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
])
def test_a_config_json_python_cannot_read_is_refused_naming_the_flag(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, says: str) -> None:
    """json.loads raised ValueError (an integer past 4,300 digits) or RecursionError, neither of them the
    JSONDecodeError the readers caught: an internal error from `plan --model`, `fit --model` and
    `--config-json`."""
    config = write(tmp_path / "config.json", text)
    samples = write(tmp_path / "s.csv", "batch,per_pass_ms,context_tokens\n1,20,1000\n2,21,1000\n4,23,1000\n")
    resource = write(tmp_path / "r.yaml", EXAMPLE.replace("    profile: kimi-k2.6",
                                                          "    configMapRef: {name: cfg, key: config.json}"))
    for argv, flag in ((["plan", "--model", config, "--gpu", "h200"], "--model"),
                       (["fit", "--samples", samples, "--model", config, "--gpu", "h200"], "--model"),
                       (["render", "-f", resource, "--policy", str(POLICY), "--config-json", config], "--config-json")):
        code, out, err = run(capsys, *argv)
        assert refused(code, out, err, flag, config, says), (argv, err)


# --- YAML booleans where an integer goes -----------------------------------------------------------------
@pytest.mark.parametrize(("old", "new", "field"), [
    ("poolGpus: 32", "poolGpus: true", "spec.hardware.poolGpus"),
    ("tensorParallelSizes: [4, 8]", "tensorParallelSizes: [4, yes]", "spec.tuning.tensorParallelSizes"),
    ("replicas: {min: 1, max: 4}", "replicas: {min: on, max: 4}", "spec.tuning.replicas.min"),
])
@pytest.mark.parametrize("command", [["render"], ["plan"]])
def test_a_boolean_where_the_resource_wants_an_integer_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str], old: str, new: str,
        field: str) -> None:
    """pydantic read `true` as 1: `poolGpus: true` planned a pool of one GPU (infeasible, exit 1) and
    `tensorParallelSizes: [4, yes]` took TP 1 as allowed. The API server refuses a boolean for an integer."""
    resource = write(tmp_path / "r.yaml", EXAMPLE.replace(old, new))
    code, out, err = run(capsys, *command, "-f", resource, "--policy", str(POLICY))
    assert refused(code, out, err, field, "expected an integer, got the boolean true"), err


def test_a_boolean_where_the_policy_wants_an_integer_is_refused(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    policy = write(tmp_path / "p.yaml", POLICY.read_text().replace("percentile: 95", "percentile: on"))
    resource = write(tmp_path / "r.yaml", EXAMPLE)
    code, out, err = run(capsys, "plan", "-f", resource, "--policy", policy)
    assert refused(code, out, err, "spec.slo.ttft.percentile", "the boolean true"), err


def test_a_boolean_field_still_takes_a_boolean(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    resource = write(tmp_path / "r.yaml", EXAMPLE.replace(
        "url: http://prometheus-operated.monitoring:9090", "url: https://prometheus-operated.monitoring:9090\n"
        "      allowTokenOverHttp: false"))
    code, _, err = run(capsys, "render", "-f", resource, "--policy", str(POLICY))
    assert code == 0, err


# --- outputs ---------------------------------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_crds_reference_at_a_fifo_is_refused_not_written_into(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    """`crds --reference FIFO` opened the FIFO to write and waited for a reader for ever."""
    fifo = fifo_at(tmp_path / "reference.md")
    code, out, err = run(capsys, "crds", "--reference", fifo)
    assert refused(code, out, err, "--reference", fifo, "not a regular file"), err
    assert stat.S_ISFIFO(Path(fifo).stat().st_mode)


# --- flags taken without a word, or refused only after the work -------------------------------------------
@pytest.mark.parametrize(("policies", "says"), [
    ("static,static", "static named more than once"),
    ("static,,oracle", "expected some of"),
])
def test_bench_policies_naming_one_twice_or_an_empty_item_are_refused(capsys: pytest.CaptureFixture[str],
                                                                      policies: str, says: str) -> None:
    """`static,static` ran static twice and printed its row twice; `static,,oracle` skipped the empty item."""
    code, out, err = run(capsys, "bench", "--policies", policies, "--scenario", "spike", "--duration", "600")
    assert refused(code, out, err, "--policies", says), err


@pytest.mark.parametrize("scenario", ["spike", "all"])
def test_bench_refuses_a_duration_the_spike_has_no_room_in_before_any_work(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, scenario: str) -> None:
    """`--scenario spike --duration 60` raised "phases must be in time order" (an internal error); with
    `--scenario all` only after coding-agent-day had run for minutes."""
    report = tmp_path / "report"
    code, out, err = run(capsys, "bench", "--scenario", scenario, "--duration", "100", "--report", str(report))
    assert refused(code, out, err, "--duration", "at least 300 s", "got 100"), err
    assert not report.exists()


@pytest.mark.timeout(240)
def test_bench_refuses_a_duration_no_session_starts_in(capsys: pytest.CaptureFixture[str]) -> None:
    """`--scenario ramp --duration 1`: no session arrived, so sizing the pool divided by zero (an internal
    error, ZeroDivisionError)."""
    code, out, err = run(capsys, "bench", "--scenario", "ramp", "--duration", "1", "--policies", "static")
    assert code == 2 and out == "", err
    last = err.strip().splitlines()[-1]  # the scenario's progress lines come first
    assert "internal error" not in err and "--duration 1 s: no session of the ramp scenario" in last, err


@pytest.mark.parametrize("flag", [["--tp", "3"], ["--gpu", "h100"]])
def test_fit_refuses_a_gpu_or_tp_it_would_ignore_without_model(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path, flag: list[str]) -> None:
    """Without --model the fit is a line through the samples: --tp 3 and --gpu h100 were ignored, exit 0."""
    samples = write(tmp_path / "s.csv", SAMPLES)
    code, out, err = run(capsys, "fit", "--samples", samples, *flag)
    assert refused(code, out, err, flag[0], "goes with --model"), err


@pytest.mark.parametrize(("argv", "flag"), [
    (["--source", "prometheus", "--url", "http://127.0.0.1:1", "--targets", "127.0.0.1:1"], "--targets"),
    (["--source", "pods", "--targets", "127.0.0.1:1", "--interval", "0", "--url", "http://127.0.0.1:1"], "--url"),
    (["--source", "pods", "--targets", "127.0.0.1:1", "--interval", "0", "--insecure"], "--insecure"),
])
def test_observe_refuses_a_flag_of_the_other_source(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                    flag: str) -> None:
    """`--source prometheus --targets ...` read Prometheus and ignored the pods named, without a word."""
    code, out, err = run(capsys, "observe", *argv, "--timeout", "1")
    assert refused(code, out, err, flag, "does not go with --source"), err
