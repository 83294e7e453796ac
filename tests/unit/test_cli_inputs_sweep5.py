"""A fifth sweep of hostile inputs (docs/reliability.md, "A fifth sweep"): the holes the fourth left. Each case
here once took a value without a word or hung; each is now refused in one line that names the flag or the
field (exit 2), with nothing written. A few valid inputs the fixes must keep taking are checked beside them."""

from __future__ import annotations

import argparse
import json
import os
import stat
from pathlib import Path

import pytest

from infertune.commands._inputs import number
from tests.unit.test_cli_hostile_inputs import refused, write
from tests.unit.test_cli_inputs import run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = (REPO / "examples" / "kimi-k2.6-b200.yaml").read_text()
POLICY = REPO / "policies" / "coding-agent.yaml"


# --- 1. numbers not plainly written ----------------------------------------------------------------------
# int() and float() take `1_0`, other scripts' digits (Arabic-Indic, full-width), and float() `1_0.5`; each
# value here is in its flag's range, so only the way it is written can refuse it.
INTEGERS_NOT_PLAIN = ["1_0", "\u0661\u0662", "\uff11\uff12"]
NUMBERS_NOT_PLAIN = [*INTEGERS_NOT_PLAIN, "1_0.5", "\u0663.\u0665"]
INTEGER_FLAGS = [
    ("--pool-gpus", ["plan", "--model", "kimi-k2.6", "--gpu", "b200", "--pool-gpus", "{n}"]),
    ("--top", ["explain", "-f", "{example}", "--policy", "{policy}", "--top", "{n}"]),
    ("--max-num-seqs", ["simulate", "sweep", "--max-num-seqs", "{n}", "--concurrency", "1"]),
    # --metrics-window bogus: before the fix the number was taken and run refused the window instead
    ("--metrics-port", ["run", "--metrics-port", "{n}", "--metrics-window", "bogus"]),
    ("--priority", ["run", "--peering", "p", "--priority", "{n}", "--metrics-window", "bogus"]),
]
NUMBER_FLAGS = [
    ("--max-ttft", ["plan", "--model", "kimi-k2.6", "--gpu", "b200", "--max-ttft", "{n}"]),
    ("--timeout", ["observe", "--source", "pods", "--targets", "127.0.0.1:1", "--timeout", "{n}"]),
    ("--cycle-seconds", ["run", "--cycle-seconds", "{n}", "--metrics-window", "bogus"]),
]


@pytest.mark.parametrize(("written", "flag", "argv"),
                         [(n, *f) for f in INTEGER_FLAGS for n in INTEGERS_NOT_PLAIN]
                         + [(n, *f) for f in NUMBER_FLAGS for n in NUMBERS_NOT_PLAIN])
def test_a_number_flag_refuses_a_number_not_plainly_written(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                            written: str, flag: str, argv: list[str]) -> None:
    """`--pool-gpus 1_000` planned for 1,000 GPUs and `--max-ttft ١٢` for 12 s: a paste from a spreadsheet or
    another script's digits, read as a number without a word."""
    example = write(tmp_path / "r.yaml", EXAMPLE)
    args = [a.format(n=written, example=example, policy=POLICY) for a in argv]
    code, out, err = run(capsys, *args)
    assert refused(code, out, err, flag, "expected"), err


@pytest.mark.parametrize("fit", ["5_2,1.65", "5.2,1_0", "\u0665,1.65"])
def test_plan_fit_refuses_a_number_not_plainly_written(capsys: pytest.CaptureFixture[str], fit: str) -> None:
    code, out, err = run(capsys, "plan", "--model", "kimi-k2.6", "--gpu", "b200", "--fit", fit)
    assert refused(code, out, err, "--fit", "expected INTERCEPT_MS,SLOPE_MS"), err


@pytest.mark.parametrize(("text", "integer", "value"), [
    ("8", True, 8), ("+8", True, 8), ("-0", True, 0), (" 8 ", True, 8), ("007", True, 7),
    ("1.5", False, 1.5), ("+.5", False, 0.5), ("5.", False, 5.0), ("1e3", False, 1000.0), ("2.5E-3", False, 0.0025),
    ("-1e+2", False, -100.0), ("12", False, 12.0), (" 3 ", False, 3.0),
])
def test_every_plainly_written_number_is_still_taken(text: str, integer: bool, value: float) -> None:
    parsed = number(integer=integer)(text)
    assert parsed == value and type(parsed) is (int if integer else float)


@pytest.mark.parametrize("text", ["inf", "nan", "-Infinity", "0x10", "1e", ".", "", "+", "1.5.2", "8.0 x"])
def test_what_is_not_a_number_is_still_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected a"):
        number()(text)


# --- 2. YAML 1.1's sexagesimal numbers ---------------------------------------------------------------------
@pytest.mark.parametrize(("old", "new", "field"), [
    ("startupSeconds: 900", "startupSeconds: 15:00", "spec.engine.startupSeconds"),
    ("poolGpus: 32", "poolGpus: 1:30", "spec.hardware.poolGpus"),
    ("concurrency: {min: 4, max: 64}", "concurrency: {min: 4, max: 1:04}", "spec.tuning.concurrency.max"),
])
@pytest.mark.parametrize("command", [["render"], ["plan"], ["explain"]])
def test_a_sexagesimal_number_in_the_resource_is_a_string_as_kubernetes_reads_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str], old: str, new: str,
        field: str) -> None:
    """PyYAML reads YAML 1.1, where `15:00` is the base-60 integer 900: `startupSeconds: 15:00` rendered a
    startup of 900 s and `poolGpus: 1:30` planned for 90 GPUs. kubectl and the API server (sigs.k8s.io/yaml)
    read it as the string "15:00", which an integer field refuses; so does every command now."""
    resource = write(tmp_path / "r.yaml", EXAMPLE.replace(old, new))
    code, out, err = run(capsys, *command, "-f", resource, "--policy", str(POLICY))
    assert refused(code, out, err, field), err


def test_a_sexagesimal_number_in_the_policy_is_refused_naming_the_field(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    """`hysteresisPercent: 0:10` was the integer 10 (inside its range, so taken); `scaleUp: 1:00` was refused only
    as "Input should be a valid string", for a value the user wrote as a string."""
    for old, new, field in (("hysteresisPercent: 10", "hysteresisPercent: 0:10", "spec.tuning.hysteresisPercent"),
                            ("scaleUp: 1m", "scaleUp: 1:00", "spec.tuning.cooldowns.scaleUp")):
        policy = write(tmp_path / "p.yaml", POLICY.read_text().replace(old, new))
        code, out, err = run(capsys, "plan", "-f", write(tmp_path / "r.yaml", EXAMPLE), "--policy", policy)
        assert refused(code, out, err, field), err
        assert "valid string" not in err, err


def test_yaml_numbers_and_durations_are_still_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """What YAML 1.2 and Kubernetes read as numbers still are (a sign, an exponent), durations (`5s`, `1m`)
    are still durations, and the file renders as it did."""
    plain = write(tmp_path / "plain.yaml", EXAMPLE)
    signed = write(tmp_path / "signed.yaml", EXAMPLE.replace("startupSeconds: 900", "startupSeconds: +900")
                   .replace("poolGpus: 32", "poolGpus: +32"))
    outputs = []
    for resource in (plain, signed):
        code, out, err = run(capsys, "render", "-f", resource, "--policy", str(POLICY))
        assert code == 0, err
        outputs.append(out)
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize(("text", "read"), [
    ("15:00", "15:00"), ("-1:30", "-1:30"), ("1:30.5", "1:30.5"), ("190:20:30", "190:20:30"),  # base 60: strings
    ("900", 900), ("+32", 32), ("1.5", 1.5), ("-.inf", float("-inf")), ("0x10", 16), ("5m", "5m"), ("true", True),
])
def test_the_commands_yaml_reads_base_60_as_a_string_and_the_rest_as_before(text: str, read: object) -> None:
    import yaml

    from infertune.commands.render import _StrictLoader

    assert yaml.load(f"v: {text}", Loader=_StrictLoader) == {"v": read}


# --- 3. a FIFO or a device where a report file goes ---------------------------------------------------------
def fifo_at(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return str(path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("argv", "name"), [
    (["demo", "--fast", "--report", "{report}"], "operator.log"),
    (["bench", "--scenario", "spike", "--duration", "300", "--policies", "static", "--report", "{report}"], "bench.md"),
    (["crds", "--out", "{report}"], "infertune.io_inferencedeployments.yaml"),
])
def test_a_fifo_in_an_output_directory_is_refused_before_any_work(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path, argv: list[str], name: str) -> None:
    """`demo --report DIR` with a FIFO at DIR/operator.log hung at once, opening it to write; `bench` ran its
    scenarios for minutes, then hung writing bench.md; `crds --out` hung on its first file. The directory's
    files are written by name, so one that exists and is not a regular file is refused before any work."""
    report = tmp_path / "report"
    fifo = fifo_at(report / name)
    (report / "old.md").write_text("a report from before\n")
    code, out, err = run(capsys, *[a.format(report=report) for a in argv])
    assert refused(code, out, err, "not a regular file", name), err
    assert stat.S_ISFIFO(Path(fifo).stat().st_mode)
    assert sorted(p.name for p in report.iterdir()) == sorted([name, "old.md"])


@pytest.mark.parametrize("argv", [["crds", "--out", "{dir}"], ["crds", "--reference", "{dir}/ref.md"]])
def test_a_directory_where_a_named_file_is_written_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                              argv: list[str]) -> None:
    """A directory standing where `crds` writes one of its files, in `--out` or as `--reference`: one line
    names it, and nothing in the directory is written."""
    target = tmp_path / "ref.md" if "--reference" in argv else tmp_path / "infertune.io_inferencedeployments.yaml"
    target.mkdir()
    code, out, err = run(capsys, *[a.format(dir=tmp_path) for a in argv])
    assert refused(code, out, err, str(target), "is a directory, not a file"), err
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_crds_reference_beside_a_fifo_is_still_written(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Only the files a command writes are checked when it names them: a FIFO beside `--reference` is no hole."""
    fifo_at(tmp_path / "other")
    code, _, err = run(capsys, "crds", "--reference", str(tmp_path / "ref.md"))
    assert code == 0, err
    assert (tmp_path / "ref.md").read_text().strip()


# --- 5. explain -n with -f -----------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["-n", "--namespace"])
def test_explain_refuses_a_namespace_with_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 flag: str) -> None:
    """`-n` names the namespace of NAME in the cluster; with `-f FILE` it was ignored without a word (the file
    is explained offline, its own metadata.namespace or none)."""
    resource = write(tmp_path / "r.yaml", EXAMPLE)
    code, out, err = run(capsys, "explain", "-f", resource, "--policy", str(POLICY), flag, "prod")
    assert refused(code, out, err, "-n/--namespace", "goes with NAME"), err


def test_explain_file_without_a_namespace_still_explains(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    resource = write(tmp_path / "r.yaml", EXAMPLE)
    code, out, err = run(capsys, "explain", "-f", resource, "--policy", str(POLICY))
    assert code == 0 and out, err


# --- 6. one reader of JSON past Python's limits ----------------------------------------------------------------
@pytest.mark.parametrize(("text", "deep"), [('{"a": ' + "9" * 5000 + "}", False),
                                            ("[" * 100_000 + "]" * 100_000, True)])
def test_json_past_pythons_limits_is_one_error_both_layers_word(text: str, deep: bool) -> None:
    """The commands (`--model`, `--config-json`) and the planner (a ConfigMap's config.json) read config.json
    through one function, which says which limit it met; each words it for its own input."""
    from infertune.textfile import JsonPastLimits, load_json

    with pytest.raises(JsonPastLimits) as caught:
        load_json(text)
    assert caught.value.too_deep is deep
    with pytest.raises(json.JSONDecodeError):  # a syntax error is the caller's to word, as before
        load_json('{"a": 1,')
    assert load_json('{"a": [1, 2.5]}') == {"a": [1, 2.5]}


# --- 4. a step budget smaller than the batch -------------------------------------------------------------------
@pytest.mark.parametrize("sub", ["sweep", "replay", "serve"])
def test_simulate_refuses_fewer_batched_tokens_than_sequences(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                              sub: str) -> None:
    """`--max-num-batched-tokens 16 --max-num-seqs 64` simulated a replica vLLM will not start ("max_num_batched_
    tokens (16) must be greater than or equal to max_num_seqs (64)"): a step that cannot hold one token of each
    running stream."""
    extra = {"sweep": ["--concurrency", "1"], "replay": ["--trace", write(tmp_path / "t.csv", "TIMESTAMP,ContextTokens,"
                                                                        "GeneratedTokens\n0,100,10\n")],
             "serve": ["--duration", "1"]}[sub]
    code, out, err = run(capsys, "simulate", sub, "--max-num-seqs", "64", "--max-num-batched-tokens", "16", *extra)
    assert refused(code, out, err, "--max-num-batched-tokens 16", "--max-num-seqs 64"), err


def test_simulate_takes_as_many_batched_tokens_as_sequences(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "simulate", "sweep", "--max-num-seqs", "64", "--max-num-batched-tokens", "64",
                       "--concurrency", "1", "--warmup", "0", "--duration", "10", "--output", "json")
    assert code == 0, err


# --- what the sweep left: the lab's `simulate --fit` and a samples file's cells ---------------------------
@pytest.mark.parametrize("fit", ["5_2,1.65", "5.2,1_0", "\u0665,1.65"])
def test_simulate_fit_refuses_a_number_not_plainly_written(capsys: pytest.CaptureFixture[str], fit: str) -> None:
    code, out, err = run(capsys, "simulate", "sweep", "--fit", fit, "--concurrency", "1")
    assert refused(code, out, err, "--fit", "expected A_MS,B_MS"), err


@pytest.mark.parametrize("cell", ["1_0", "\u0661\u0662", "\uff18"])
def test_a_samples_cell_not_plainly_written_is_refused_naming_its_line(capsys: pytest.CaptureFixture[str],
                                                                       tmp_path: Path, cell: str) -> None:
    """A samples file's batch of `1_0` was read as 10, and `١٢` as 12: a paste, fitted without a word."""
    rows = "".join(f"{b},{5 + 1.6 * b:.2f}\n" for b in (1, 2, 4, 8))
    samples = write(tmp_path / "s.csv", f"batch,per_pass_ms\n{rows}{cell},20.0\n")
    plan = ["plan", "--model", "kimi-k2.6", "--gpu", "b200", "--samples", samples]
    for argv in (["fit", "--samples", samples], plan):
        code, out, err = run(capsys, *argv)
        assert refused(code, out, err, "line 6", "not a number"), err


def test_a_plainly_written_samples_file_is_still_fitted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rows = "".join(f"{b},{5 + 1.6 * b:.2f}\n" for b in (1, 2, 4, 8, 16))
    samples = write(tmp_path / "s.csv", f"batch,per_pass_ms\n{rows}+3.0E1,5.3e1\n")
    code, _, err = run(capsys, "fit", "--samples", samples)
    assert code == 0, err


@pytest.mark.parametrize("tp", ["+-4", "--4", "4,+-8", "4," + "9" * 5000])
def test_an_integer_list_with_signs_doubled_or_past_pythons_digits_is_refused(capsys: pytest.CaptureFixture[str],
                                                                              tp: str) -> None:
    """`--tp +-4` passed the list's own check (signs stripped, then digits) and int() raised: an internal error."""
    code, out, err = run(capsys, "plan", "--model", "kimi-k2.6", "--gpu", "b200", f"--tp={tp}")
    assert refused(code, out, err, "--tp", "expected comma-separated integers"), err
