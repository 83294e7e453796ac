"""A sweep of hostile inputs through every command: each case here once ended in an internal error, a
figure that is not one (nan, inf%, a negative pass), or input taken silently. Now each is refused in one
line that says what is wrong (exit 2), or printed without a figure that is not finite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_cli_inputs import run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kimi-k2.6-b200.yaml"
POLICY = ROOT / "policies" / "coding-agent.yaml"
TRACE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def refused(code: int, out: str, err: str, *says: str) -> bool:
    """Exit 2, nothing on stdout, one line on stderr (no traceback, no warning) saying each of `says`."""
    return (code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
            and "internal error" not in err and all(s in err for s in says))


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# --- fit ---------------------------------------------------------------------------------------------
def test_a_batch_to_predict_past_any_replica_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """10**400 overflowed a float deep in the fit (an internal error); 10**22 printed a pass of 1e+23 ms."""
    samples = write(tmp_path / "s.csv", "batch,per_pass_ms\n1,10\n2,11\n4,13\n8,17\n")
    for huge in (str(10**400), str(10**22)):
        code, out, err = run(capsys, "fit", "--samples", samples, "--predict", f"1,{huge}")
        assert refused(code, out, err, "--predict", "at most 100,000"), err


@pytest.mark.parametrize("rows", [
    "1,30\n2,20\n4,10\n8,5\n",  # fitted a line predicting -104 ms and -9.6 tok/s at batch 64
    "1,10\n2,9.8\n4,9.6\n8,9.4\n",  # fitted a falling line, printed as faster streams at larger batches
    "1,10\n2,10\n4,10\n",  # batching for free: `plan --samples` planned the largest batch the KV holds
])
def test_samples_whose_pass_does_not_rise_with_the_batch_are_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, rows: str) -> None:
    """`fit` and `plan --samples` read the same file the same way; a declared load test is refused alike."""
    samples = write(tmp_path / "falling.csv", "batch,per_pass_ms\n" + rows)
    for argv in (["fit", "--samples", samples], ["plan", "--samples", samples, "--fit-tp", "8"]):
        code, out, err = run(capsys, *argv)
        assert refused(code, out, err, "falling.csv", "does not rise with the batch", "from batch 1"), err


def test_noisy_rows_that_rise_overall_and_rows_at_other_contexts_are_fitted(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Raw rows are judged by their least-squares slope, per context: one noisy row, or a larger batch of
    shorter contexts passing faster, is a measurement, not a mistake."""
    noisy = write(tmp_path / "noisy.csv", "batch,per_pass_ms\n1,10\n2,9.5\n4,12\n8,14\n")
    contexts = write(tmp_path / "contexts.csv", "batch,per_pass_ms,context_tokens\n"
                                                "1,10,8000\n4,14,8000\n8,9,1000\n16,12,1000\n")
    for samples in (noisy, contexts):
        code, out, err = run(capsys, "fit", "--samples", samples, "--output", "json")
        assert code == 0 and err == "" and '"slope_ms"' in out, err


def test_a_pass_shorter_than_any_engine_runs_is_refused_at_its_line(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:
    """1e-300 ms passes fitted every coefficient to zero: numpy warnings, then a ZeroDivisionError (the table)
    or predictions of 0 ms (JSON, exit 0); `plan --samples` planned on infinite tok/s."""
    samples = write(tmp_path / "tiny.csv", "batch,per_pass_ms\n1,1e-300\n2,1e-300\n4,2e-300\n")
    for argv in (["fit", "--samples", samples, "--model", "llama-3.1-8b", "--tp", "1", "--context-tokens", "1000"],
                 ["plan", "--model", "llama-3.1-8b", "--samples", samples, "--fit-tp", "1", "--output", "json"]):
        code, out, err = run(capsys, *argv)
        assert refused(code, out, err, "line 2", "per_pass_ms in [0.01"), err


@pytest.mark.parametrize(("text", "says"), [
    # The reader kept the last "batch": the fit ran on 2, 4, 8 instead of 1, 2, 4.
    ("batch,per_pass_ms,batch\n1,10,2\n2,11,4\n4,13,8\n", "names column(s) batch more than once"),
    # The third field was dropped without a word.
    ("batch,per_pass_ms\n1,10\n2,11,5\n4,13\n8,17\n", "line 3: 3 fields, but the header names 2"),
])
def test_a_samples_csv_whose_rows_do_not_match_its_header_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, says: str) -> None:
    samples = write(tmp_path / "s.csv", text)
    for argv in (["fit", "--samples", samples], ["plan", "--samples", samples, "--fit-tp", "8"]):
        code, out, err = run(capsys, *argv)
        assert refused(code, out, err, "s.csv", says), err


# --- plan and explain --------------------------------------------------------------------------------
def test_the_plan_table_has_no_infinite_or_nan_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """Where the weights leave no KV pool (Kimi at TP1, TP2) the KV column read "inf%"."""
    code, out, _ = run(capsys, "plan")
    assert code in (0, 1) and "TP" in out
    assert "inf" not in out.replace("infeasible", "") and "nan" not in out


def test_explain_of_a_layout_with_no_kv_pool_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    resource = write(tmp_path / "tp1.yaml", EXAMPLE.read_text().replace("[4, 8]", "[1]"))
    code, out, err = run(capsys, "explain", "-f", resource, "--policy", str(POLICY))
    assert code == 0, err
    assert "inf%" not in out and "no KV capacity left" in out


@pytest.mark.parametrize(("argv", "says"), [
    # A 1e-300 ms intercept planned on NaN tok/s (numpy warnings, "nan" in the table).
    (["plan", "--fit", "1e-300,0"], "--fit: the intercept must be at least 0.01 ms"),
    # A fit measured at a TP the plan does not consider was dropped without a word.
    (["plan", "--fit-tp", "3", "--fit", "5,1"], "--fit-tp: 3 is not one of the TP sizes planned (1, 2, 4, 8)"),
    (["plan", "-f", str(EXAMPLE), "--policy", str(POLICY), "--fit-tp", "2", "--fit", "5,1"], "--fit-tp: 2"),
    # The simulated replica's pass of 1e-300 ms printed "nan" throughout the sweep's table.
    (["simulate", "sweep", "--fit", "0,1e-300", "--concurrency", "1"], "--fit: "),
    # Replica i listens on PORT+i: the second replica's port 65536 was an OverflowError.
    (["simulate", "serve", "--port", "65535", "--replicas", "2", "--duration", "1"], "--port: 2 replicas"),
    # A timer of 1e-300 s (hammering the API server) or 1e300 s (never tuning) was taken.
    (["run", "--cycle-seconds", "1e-300"], "--cycle-seconds and --poll-seconds must be positive, from 0.1"),
    (["run", "--poll-seconds", "1e300"], "--cycle-seconds and --poll-seconds must be positive, from 0.1"),
])
def test_a_figure_outside_its_physical_range_is_refused(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                        says: str) -> None:
    code, out, err = run(capsys, *argv)
    assert refused(code, out, err, says), err


# --- simulate ------------------------------------------------------------------------------------------
def test_a_sweep_level_where_nothing_finishes_prints_no_nan(capsys: pytest.CaptureFixture[str]) -> None:
    """Every request larger than the KV pool: the table read "nan", "nans" and "nan%" without a word why."""
    argv = ["--num-gpu-blocks", "1", "--concurrency", "1", "--duration", "1", "--warmup", "0"]
    code, out, err = run(capsys, "simulate", "sweep", *argv)
    assert code == 0, err
    assert "nan" not in out and "no request finished within the" in out, out


def test_a_sweep_of_fixed_lengths_past_the_kv_pool_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Every request refused: the table was all gaps (before that, all nan), for a mistake one sum shows."""
    code, out, err = run(capsys, "simulate", "sweep", "--prompt-tokens", "10000000", "--output-tokens", "1",
                         "--concurrency", "1,2", "--duration", "60", "--warmup", "0")
    assert refused(code, out, err, "10,000,001 tokens, more than the replica's KV pool of", "at TP8"), err


# --- traces --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("rows", "says"), [
    # 31 million years of replay: `bench` never finished.
    ("0,100,10\n1e15,100,10\n", "the requests span 1e+15 s from line 2 to line 3"),
    # The span overflowed to infinity: the last request never arrived, and the replay said completed 1 of 2.
    ("-1e308,100,10\n1e308,100,10\n", "the requests span inf s"),
    # Seconds and dates mixed: 1.7e9 s between them.
    ("0,100,10\n2023-11-16 18:17:03.9799600,100,10\n", ":3: TIMESTAMP '2023-11-16 18:17:03.9799600' is a "
                                                       "date-time without a time zone, but line 2's is plain seconds"),
    # A prompt past any model's context; 10**400 tokens too.
    ("0,1000000000000000,10\n", ":2: ContextTokens '1000000000000000' is more than 10,000,000 tokens"),
    (f"0,100,{10**400}\n", ":2: GeneratedTokens"),
])
def test_a_trace_outside_its_physical_range_is_refused_naming_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, rows: str, says: str) -> None:
    trace = write(tmp_path / "trace.csv", TRACE_HEADER + rows)
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace, "--output", "json")
    assert refused(code, out, err, "trace.csv", says), err


def test_bench_names_a_trace_that_is_a_directory_as_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """It said "no such file" of a directory that exists."""
    code, out, err = run(capsys, "bench", "--trace", str(tmp_path), "--policies", "static", "--duration", "600")
    assert refused(code, out, err, "--trace", "is a directory, not a file"), err


# --- resources ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("nested", ["a: " + "{b: " * 3000 + "1" + "}" * 3000, "a: " + "[" * 5000 + "]" * 5000])
def test_yaml_nested_past_any_resource_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  nested: str) -> None:
    """The YAML reader recursed once per level: a RecursionError (internal error) in render, plan, explain."""
    resource = write(tmp_path / "deep.yaml", nested + "\n")
    for command in ("render", "plan", "explain"):
        code, out, err = run(capsys, command, "-f", resource)
        assert refused(code, out, err, "--file", "deep.yaml", "nested too deeply"), err
    code, out, err = run(capsys, "render", "-f", str(EXAMPLE), "--policy", resource)
    assert refused(code, out, err, "--policy", "nested too deeply"), err


def test_a_key_given_twice_is_refused_not_read_as_the_last(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    """`poolGpus` given twice was read as its last value, silently; kubectl's strict validation refuses
    such a file. A merge key (`<<`) still overrides, as YAML defines it."""
    text = EXAMPLE.read_text()
    twice = text.replace("    poolGpus: 32\n", "    poolGpus: 32\n    poolGpus: 320\n")
    resource = write(tmp_path / "twice.yaml", twice)
    line = text.splitlines().index("    poolGpus: 32") + 2
    for command in ("render", "plan", "explain"):
        code, out, err = run(capsys, command, "-f", resource)
        assert refused(code, out, err, "--file", "twice.yaml", f"line {line}", "'poolGpus' is given twice"), err
    policy_text = POLICY.read_text().replace("  tuning:\n", "  tuning:\n    hysteresisPercent: 50\n", 1)
    policy = write(tmp_path / "policy.yaml", policy_text)
    code, out, err = run(capsys, "render", "-f", str(EXAMPLE), "--policy", policy)
    assert refused(code, out, err, "--policy", "'hysteresisPercent' is given twice"), err
    anchored = text.replace("metadata:\n", "x-base: &base\n  name: other\nmetadata:\n  <<: *base\n", 1)
    merged = write(tmp_path / "merged.yaml", anchored)
    code, out, _ = run(capsys, "render", "-f", merged)
    assert code == 0 and "name: kimi-k2" in out


def test_a_policy_file_holding_another_kind_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A ConfigMap given as --policy was read as a ServingPolicy of all defaults."""
    config_map = write(tmp_path / "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n")
    for command in ("render", "explain", "plan"):
        code, out, err = run(capsys, command, "-f", str(EXAMPLE), "--policy", config_map)
        assert refused(code, out, err, "--policy", "is a ConfigMap, not a ServingPolicy"), err


@pytest.mark.parametrize(("field", "value", "says"), [
    ("name", "[1, 2]", "metadata.name [1, 2] is not a name"),
    ("name", "Kimi-K2", "metadata.name 'Kimi-K2'"),
    ("name", "kimi-k2.6", "metadata.name 'kimi-k2.6'"),  # an object name, but no Service's
    ("name", "kimé", "metadata.name 'kimé'"),
    ("name", "k" * 64, "metadata.name 'kkkk"),
    ("namespace", "Inference", "metadata.namespace 'Inference' is not a namespace name"),
])
def test_a_resource_name_the_api_server_would_refuse_is_refused(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path, field: str, value: str,
                                                                 says: str) -> None:
    """`render` printed a Deployment and a Service named "'[1, 2]'" (or "Kimi-K2", or 64 characters)."""
    text = EXAMPLE.read_text().replace("  name: kimi-k2\n  namespace: inference\n", f"  {field}: {value}\n")
    assert f"  {field}: {value}\n" in text
    resource = write(tmp_path / "named.yaml", text)
    for command in ("render", "plan", "explain"):
        code, out, err = run(capsys, command, "-f", resource, "--policy", str(POLICY))
        assert refused(code, out, err, "named.yaml", says), err


def test_a_file_with_several_resources_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The first of them was rendered, planned or explained without a word about the others."""
    second = EXAMPLE.read_text().replace("name: kimi-k2\n", "name: kimi-k2-b\n")
    resource = write(tmp_path / "two.yaml", EXAMPLE.read_text() + "---\n" + second)
    for command in ("render", "plan", "explain"):
        code, out, err = run(capsys, command, "-f", resource, "--policy", str(POLICY))
        assert refused(code, out, err, "two.yaml: 2 InferenceDeployment documents", "exactly one"), err


@pytest.mark.parametrize(("argv", "says"), [
    (["kimi-k2", "-f", str(EXAMPLE)], "give NAME or -f FILE, not both"),
    (["kimi-k2", "--policy", str(POLICY)], "--policy: goes with -f FILE"),
    (["kimi-k2", "--config-json", "config.json"], "--config-json: goes with -f FILE"),
])
def test_explain_refuses_what_it_would_ignore(capsys: pytest.CaptureFixture[str], argv: list[str],
                                             says: str) -> None:
    """NAME beside -f FILE was ignored (the file was explained); --policy or --config-json beside NAME too."""
    code, out, err = run(capsys, "explain", *argv)
    assert refused(code, out, err, says), err


@pytest.mark.parametrize(("flag", "says"), [
    ("--policy", "--policy: no-refs.yaml has no spec.policyRef"),
    ("--config-json", "--config-json: no-refs.yaml has no spec.model.configMapRef"),
])
def test_a_file_for_a_reference_the_resource_does_not_make_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, says: str) -> None:
    """--policy with no policyRef, or --config-json with a catalog profile, was read and ignored."""
    text = EXAMPLE.read_text().replace("  policyRef:\n    name: coding-agent\n", "")
    assert "policyRef" not in text and "configMapRef" not in text
    resource = write(tmp_path / "no-refs.yaml", text)
    config = write(tmp_path / "config.json", "{}")
    for command in ("render", "plan", "explain"):
        code, out, err = run(capsys, command, "-f", resource, flag, str(POLICY) if flag == "--policy" else config)
        assert refused(code, out, err, says.replace("no-refs.yaml", resource)), err


# --- observe -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("history", "window", "says"), [
    ("99999999y", "1m", "at most 11000m with --window 1m"),
    ("7d15h21m", "1m", "at most 11000m with --window 1m"),  # one point past Prometheus' 11,000
    ("8d", "30s", "at most 5500m with --window 30s"),
])
def test_a_fit_history_past_what_prometheus_answers_is_refused(capsys: pytest.CaptureFixture[str], history: str,
                                                               window: str, says: str) -> None:
    """The history's range queries failed on Prometheus' 11,000-point limit, and the fit said only "none yet"."""
    code, out, err = run(capsys, "observe", "--source", "prometheus", "--url", "http://127.0.0.1:1",
                         "--window", window, "--fit-history", history, "--timeout", "1")
    assert refused(code, out, err, "--fit-history: ", says, "11,000 points"), err
