"""Holes a fuzzing pass found in the trace reader, the bench's sizing of a trace, the physics fit and the
replay: each was taken silently (or ran for minutes) and is now refused in one line (exit 2) that names the
problem, with nothing on stdout and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from infertune.errors import UserError
from infertune_lab.bench.capacity import CapacitySweep
from tests.unit.test_cli_hostile_inputs import TRACE_HEADER, refused, write
from tests.unit.test_cli_inputs import run


# --- a trace row with more fields than the header ----------------------------------------------------------
@pytest.mark.parametrize("command", [["simulate", "replay"], ["bench", "--policies", "static", "--duration", "60"]])
@pytest.mark.usefixtures("sweep_reached")  # a trace taken as it stands would start minutes of sweep
def test_a_trace_row_with_more_fields_than_the_header_is_refused_naming_its_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]) -> None:
    """`0,100,10,5` under a three-column header was read as its first three fields: a stray comma or a
    shifted row, whichever field was meant. The samples CSV refuses the same row with the same words."""
    trace = write(tmp_path / "trace.csv", TRACE_HEADER + "0,100,10\n1,100,10,5\n2,100,10\n")
    records = tmp_path / "records.csv"
    extra = ["--records", str(records)] if command[-1] == "replay" else []
    code, out, err = run(capsys, *command, "--trace", trace, *extra)
    assert refused(code, out, err, "trace.csv:3: 4 fields, but the header names 3"), err
    assert not records.exists()


def test_the_samples_csv_refuses_an_extra_field_in_the_same_words(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    samples = write(tmp_path / "s.csv", "batch,per_pass_ms\n1,10\n2,11,5\n4,13\n8,17\n")
    code, out, err = run(capsys, "fit", "--samples", samples)
    assert refused(code, out, err, "3 fields, but the header names 2"), err


# --- bench --trace on a trace too short to size a pool on ---------------------------------------------------
@pytest.fixture
def sweep_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    """The capacity sweep (minutes of the twin) says it was reached instead of running."""
    def measure(*_: object) -> None:
        raise UserError("the capacity sweep started")
    monkeypatch.setattr(CapacitySweep, "measure", measure)


MINIMUM = 100  # the rows a trace needs to be sized for the pool (bench.suite.TRACE_MIN_REQUESTS), as the user reads it


def _trace(tmp_path: Path, rows: int) -> str:
    return write(tmp_path / "short.csv", TRACE_HEADER + "".join(f"{i},2000,30\n" for i in range(rows)))


@pytest.mark.parametrize(("rows", "says"), [(1, "1 request,"), (50, "50 requests,"),
                                            (MINIMUM - 1, f"{MINIMUM - 1} requests,")])
@pytest.mark.usefixtures("sweep_reached")
def test_bench_refuses_a_trace_too_short_to_size_a_pool_on_before_the_sweep(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, rows: int, says: str) -> None:
    """A one-row trace was still in its capacity sweep after 4 CPU-minutes (--duration 60); a 50-row head of
    the Azure trace took 25 s to say that no layout meets the SLO. A trace's rate and request sizes are read
    off its rows, and one row gives no rate at all: the minimum is named before any sweep."""
    trace = _trace(tmp_path, rows)
    code, out, err = run(capsys, "bench", "--trace", trace, "--duration", "60", "--policies", "static",
                         "--report", str(tmp_path / "report"))
    assert refused(code, out, err, "short.csv", says, "too few to size a pool on",
                   f"at least {MINIMUM}"), err
    assert not (tmp_path / "report").exists()


@pytest.mark.usefixtures("sweep_reached")
def test_bench_takes_a_trace_of_the_minimum_length_on_to_the_sweep(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    code, out, err = run(capsys, "bench", "--trace", _trace(tmp_path, MINIMUM), "--duration", "60",
                         "--policies", "static")
    assert refused(code, out, err, "the capacity sweep started"), err


# --- fit --model with every sample at one batch size --------------------------------------------------------
ONE_BATCH = "batch,per_pass_ms\n8,20\n8,21\n8,19.5\n8,20.4\n"


def test_the_physics_fit_refuses_samples_all_at_one_batch_as_the_line_fit_does(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """It printed a fit with R² -0.000: the napkin's proportions scaled to one point, a slope from nowhere."""
    samples = write(tmp_path / "s.csv", ONE_BATCH)
    code, out, err = run(capsys, "fit", "--samples", samples, "--model", "kimi-k2.6", "--gpu", "b200", "--tp", "8",
                         "--context-tokens", "8000", "--predict", "8,16")
    assert refused(code, out, err, "s.csv", "all samples share one batch size (8)", "undetermined"), err
    code, out, line_err = run(capsys, "fit", "--samples", samples)
    assert refused(code, out, line_err, "s.csv: all samples share one batch size"), line_err


def test_the_physics_fit_still_takes_samples_at_two_batches(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    samples = write(tmp_path / "s.csv", "batch,per_pass_ms\n8,20\n8,21\n16,33\n16,34\n")
    code, out, err = run(capsys, "fit", "--samples", samples, "--model", "kimi-k2.6", "--gpu", "b200", "--tp", "8",
                         "--context-tokens", "8000", "--output", "json")
    assert code == 0 and err == "" and '"r2"' in out, err


# --- simulate replay where every request is larger than the KV pool ----------------------------------------
def test_replay_refuses_a_trace_whose_every_request_is_past_the_kv_pool_as_the_sweep_does(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """It exited 0 with `completed 0`: every request refused, one by one, after the replay."""
    trace = write(tmp_path / "trace.csv", TRACE_HEADER + "0,150,20\n1,300,10\n")
    records = tmp_path / "records.csv"
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace, "--num-gpu-blocks", "10",
                         "--records", str(records))
    tail = "more than the replica's KV pool of 160 tokens at TP8: every request would be refused"
    assert refused(code, out, err, "trace.csv", "170 tokens", tail), err
    assert not records.exists()
    code, out, sweep_err = run(capsys, "simulate", "sweep", "--prompt-tokens", "150", "--output-tokens", "20",
                               "--num-gpu-blocks", "10", "--concurrency", "1")
    assert refused(code, out, sweep_err, tail), sweep_err


def test_replay_serves_a_trace_whose_smallest_request_fits_the_pool(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.csv", TRACE_HEADER + "0,150,20\n1,300,10\n")
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace, "--num-gpu-blocks", "11", "--output", "json")
    assert code == 0 and '"completed": 1' in out and '"rejected": 1' in out, err
