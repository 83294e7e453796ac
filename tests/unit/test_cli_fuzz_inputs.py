"""Hostile inputs a fuzzing pass over the commands found after test_cli_hostile_inputs.py: each case here
once hung, wrote where it should not, ended in an internal error, or took a figure outside its physical
range. Each is now refused in one line that names the flag or file and the problem (exit 2), before any
work, with nothing written."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.unit.test_cli_hostile_inputs import TRACE_HEADER, refused, write
from tests.unit.test_cli_inputs import run


# --- output paths ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("flag", "command"), [
    ("--records", ["simulate", "replay"]),
    ("--targets-file", ["simulate", "serve", "--duration", "1"]),
    ("--plot", ["simulate", "sweep", "--concurrency", "1", "--duration", "1"]),
    ("--plot", ["plan"]),
])
def test_an_output_path_that_is_not_a_regular_file_is_refused_not_replaced(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, command: list[str]) -> None:
    """The records and the targets were written beside the path and renamed over it: `--records /dev/null`,
    run as root, replaced the device node /dev/null with a regular file (exit 0). A FIFO stands for it here."""
    fifo = tmp_path / "out.png"
    os.mkfifo(fifo)
    trace = write(tmp_path / "trace.csv", TRACE_HEADER + "0,100,10\n")
    argv = [*command, flag, str(fifo), *(["--trace", trace] if command[-1] == "replay" else [])]
    code, out, err = run(capsys, *argv)
    assert refused(code, out, err, flag, str(fifo), "is not a regular file"), err
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.png", "trace.csv"]


@pytest.mark.parametrize(("name", "says"), [
    # matplotlib refused it only after the whole plan or sweep: an internal error (ValueError).
    ("plot.notpng", "got '.notpng'"),
    # matplotlib added ".png" and wrote "plot.png", a file the user did not name.
    ("plot", "got none"),
])
@pytest.mark.parametrize("command", [["plan"], ["simulate", "sweep", "--concurrency", "1", "--duration", "1"]])
def test_a_plot_whose_name_says_no_image_format_is_refused_before_the_work(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str], name: str, says: str) -> None:
    path = tmp_path / name
    code, out, err = run(capsys, *command, "--plot", str(path))
    assert refused(code, out, err, "--plot", str(path), ".png", says), err
    assert list(tmp_path.iterdir()) == []


# --- simulate replay ---------------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("multiplier", ["1e-12", "1e-300"])
def test_a_rate_multiplier_that_stretches_the_replay_past_a_year_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, multiplier: str) -> None:
    """Two requests a second apart at 1e-300x: 1e300 virtual seconds, where adding a minute to the clock no
    longer moved it, and the replay never ended; at 1e-12x it replayed 31,000 years, exit 0."""
    trace = write(tmp_path / "trace.csv", TRACE_HEADER + "0,100,10\n1,100,10\n")
    records = tmp_path / "records.csv"
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace, "--rate-multiplier", multiplier,
                         "--records", str(records), "--output", "json")
    assert refused(code, out, err, "--rate-multiplier", "more than a year"), err
    assert not records.exists()


# --- observe -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("targets", [",", " , ", ",,"])
def test_observe_pods_refuses_a_target_list_that_names_none(capsys: pytest.CaptureFixture[str],
                                                            targets: str) -> None:
    """`--targets ,` observed an empty fleet and said "ok" (exit 0): every deployment shown was trusted."""
    code, out, err = run(capsys, "observe", "--source", "pods", "--targets", targets, "--interval", "0")
    assert refused(code, out, err, "--targets", "at least one host:port"), err


@pytest.mark.parametrize("content", [b"", b"not a certificate\n", b"\x00\x01\x02 binary"])
def test_a_ca_bundle_without_a_certificate_is_refused_naming_the_flag(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes) -> None:
    """ssl's own words reached the user: "[X509: NO_CERTIFICATE_OR_CRL_FOUND] no certificate or crl found
    (_ssl.c:4154)", naming neither --ca nor the file."""
    ca = tmp_path / "ca.pem"
    ca.write_bytes(content)
    code, out, err = run(capsys, "observe", "--source", "prometheus", "--url", "https://127.0.0.1:1",
                         "--ca", str(ca), "--timeout", "1")
    assert refused(code, out, err, "--ca", str(ca)), err


# --- samples -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch", ["1e-300", "0.5"])
def test_a_samples_batch_under_one_stream_is_refused_at_its_line(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path, batch: str) -> None:
    """A pass runs one stream or more; a batch of 1e-300 was fitted ("B 1e-300..4") and planned on."""
    samples = write(tmp_path / "s.csv", f"batch,per_pass_ms\n{batch},10\n2,11\n4,13\n")
    for argv in (["fit", "--samples", samples], ["plan", "--samples", samples, "--fit-tp", "8"]):
        code, out, err = run(capsys, *argv)
        assert refused(code, out, err, "s.csv", "line 2", "batch must be in [1, 100,000]"), err


# --- plan --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cv", ["1e-320", "1e-300", "0.0009"])
def test_a_context_spread_too_small_to_measure_is_refused(capsys: pytest.CaptureFixture[str], cv: str) -> None:
    """--context-cv 1e-320 underflowed in the planner: numpy's "RuntimeWarning: overflow encountered in divide"
    and the source line under it reached stderr, exit 0."""
    code, out, err = run(capsys, "plan", "--model", "llama-3.1-8b", "--context-cv", cv, "--output", "json")
    assert refused(code, out, err, "--context-cv", "expected 0 (every context the mean) or a number from 0.001"), err
    assert "Warning" not in err


def test_a_context_spread_of_zero_or_a_measurable_one_is_planned(capsys: pytest.CaptureFixture[str]) -> None:
    for cv in ("0", "0.001", "0.5"):
        code, out, err = run(capsys, "plan", "--model", "llama-3.1-8b", "--context-cv", cv, "--output", "json")
        assert code in (0, 1) and err == "" and '"candidates"' in out, err


# --- empty paths and loose lists ---------------------------------------------------------------------
# Every path flag, with its value last.
PATH_FLAGS = [
    ["crds", "--out"],
    ["crds", "--reference"],
    ["bench", "--scenario", "drop", "--duration", "60", "--policies", "static", "--report"],
    ["demo", "--report"],
    ["plan", "-f"],
    ["render", "-f"],
    ["explain", "x", "-f"],
]


@pytest.mark.parametrize(("value", "refusal"), [
    # `Path("")` is ".": `crds --out ""` (a shell variable that expanded to nothing) wrote the CRDs into
    # whatever directory the command ran in, exit 0.
    ("", "an empty path"),
    # `crds --out -` wrote them into a new directory called "-", where by habit "-" means stdout.
    ("-", "not standard input or output"),
], ids=["empty", "dash"])
@pytest.mark.parametrize("argv", PATH_FLAGS, ids=lambda argv: f"{argv[0]} {argv[-1]}")
def test_a_path_that_names_no_file_is_refused_and_nothing_is_written(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str],
        value: str, refusal: str) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv, value)
    assert out == ""
    assert code == 2 and refusal in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("levels", ["1,,2", "1,2,", "\u0663", "4,\u0668"])
def test_a_list_of_integers_not_plainly_written_is_refused(capsys: pytest.CaptureFixture[str], levels: str) -> None:
    """Empty items were skipped ("1,,2" swept 1 and 2) and other scripts' digits read as numbers."""
    code, out, err = run(capsys, "simulate", "sweep", "--concurrency", levels, "--duration", "1")
    assert refused(code, out, err, "--concurrency", "expected comma-separated integers"), err


def test_plan_takes_no_larger_a_pool_than_a_resource_may_state(capsys: pytest.CaptureFixture[str]) -> None:
    """`spec.hardware.poolGpus` stops at 131,072 (api/schema.py POOL_GPUS_MAX); `plan --pool-gpus` took up to
    1,000,000, so the same deployment planned from flags and from its resource disagreed on what is valid."""
    code, _, err = run(capsys, "plan", "--pool-gpus", "131073")
    assert code == 2 and "--pool-gpus" in err and "131,072" in err and "Traceback" not in err, err
    code, out, _ = run(capsys, "plan", "--pool-gpus", "131072", "--output", "json")
    assert code == 0 and '"feasible"' in out
