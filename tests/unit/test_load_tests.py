"""spec.model.loadTests: a load test the team already ran, which the planner starts from instead of the
napkin. Refused alike by the parser and on admission when it cannot be a measurement; planned on from the
first cycle; replaced by the fleet's own samples of that TP; shown by `explain` and in status."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from infertune.api.spec import parse_spec
from infertune.errors import SpecError
from infertune.model.perf import PerformanceModel
from infertune.planner.request import resolve
from tests.unit.test_cli_inputs import run
from tests.unit.test_crds_schema import admission_errors
from tests.unit.test_reconciler import KEY, World

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())
# The B200 load test of docs/sources.md#kimi-b200: TP8, a pass of 5.2 + 1.65 B ms at an ~80K-token context.
B200_TP8 = {"tensorParallelSize": 8, "contextTokens": 80_000,
            "points": [{"batch": b, "perPassMs": f"{5.2 + 1.65 * b:.2f}"} for b in (1, 8, 16, 32)]}


def with_load_tests(*tests: dict[str, Any], **tuning: Any) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(EXAMPLE)
    doc["spec"]["model"]["loadTests"] = list(tests)
    doc["spec"]["tuning"].update(tuning)
    return doc


def _points(*pairs: tuple[int, str]) -> list[dict[str, Any]]:
    return [{"batch": b, "perPassMs": ms} for b, ms in pairs]


@pytest.mark.parametrize(("test", "says"), [
    ({"tensorParallelSize": 3, "points": _points((1, "6"), (8, "18"))}, "tensorParallelSize"),
    ({"tensorParallelSize": 8, "points": _points((1, "6"))}, "points"),
    ({"tensorParallelSize": 8, "points": _points((1, "6"), (1, "7"))}, "batch 1"),
    ({"tensorParallelSize": 8, "points": _points((1, "0.001"), (8, "18"))}, "perPassMs"),
    ({"tensorParallelSize": 8, "points": _points((1, "6"), (8, "200000"))}, "perPassMs"),
    # A throughput, or the columns swapped: it fell from 60 ms to 10 ms as the batch grew.
    ({"tensorParallelSize": 8, "points": _points((1, "60"), (8, "40"), (32, "10"))}, "falls"),
])
def test_a_load_test_that_cannot_be_a_measurement_is_refused_by_both(test: dict[str, Any], says: str) -> None:
    doc = with_load_tests(test)
    with pytest.raises(SpecError) as info:
        parse_spec(doc["spec"])
    assert str(info.value).startswith("spec.model.loadTests") and says in str(info.value), info.value
    errors = admission_errors(doc)
    assert errors and all("spec.model.loadTests" in e for e in errors), errors


def test_two_load_tests_of_one_tp_are_refused_by_both() -> None:
    doc = with_load_tests(B200_TP8, B200_TP8)
    with pytest.raises(SpecError, match="one load test per tensorParallelSize"):
        parse_spec(doc["spec"])
    assert any("one load test per tensorParallelSize" in e for e in admission_errors(doc))


def test_a_flat_load_test_is_admitted_but_the_operator_refuses_it_naming_the_field() -> None:
    """CEL checks that no point falls by more than a mean's noise; that the whole test rises, the operator."""
    doc = with_load_tests({"tensorParallelSize": 8, "points": _points((1, "20"), (32, "19"))})
    assert admission_errors(doc) == []
    with pytest.raises(SpecError, match=r"^spec.model.loadTests.*does not rise from batch 1 to batch 32"):
        parse_spec(doc["spec"])


def test_the_b200_load_test_is_admitted_and_planned_on_from_the_first_cycle() -> None:
    doc = with_load_tests(B200_TP8)
    assert admission_errors(doc) == []
    resolved = resolve(parse_spec(doc["spec"]))
    napkin = resolve(parse_spec(EXAMPLE["spec"]))
    perf = PerformanceModel(resolved.request.model, resolved.request.gpu, resolved.request.workload,
                            fits=resolved.request.fits)
    bare = PerformanceModel(napkin.request.model, napkin.request.gpu, napkin.request.workload)
    # TP8 is the test's own measurement where it sampled (at its context), not the napkin's estimate.
    at_16 = perf.per_pass(8, 16, context=80_000)
    assert at_16.source == "fit" and at_16.seconds == pytest.approx(0.0316, rel=0.05)
    # TP4 never ran: the test carried an octave has the cross-TP band, far narrower than the napkin's.
    carried, guessed = perf.per_pass(4, 6), bare.per_pass(4, 6)
    assert carried.source == "calibrated-napkin" and guessed.source == "napkin"
    assert carried.high_seconds / carried.low_seconds < 0.5 * guessed.high_seconds / guessed.low_seconds


def test_a_load_test_at_a_tp_the_model_cannot_split_is_refused_naming_it() -> None:
    doc = with_load_tests(B200_TP8)
    doc["spec"]["model"] = {"weights": "x", "architecture": {
        "layers": 2, "hiddenSize": 768, "attentionHeads": 12, "kvHeads": 12, "headDim": 64, "ffnWidth": 3072,
        "totalParams": 10**8, "activeParams": 10**8}, "loadTests": [B200_TP8]}
    doc["spec"]["tuning"]["tensorParallelSizes"] = [1, 2, 4]
    with pytest.raises(SpecError, match=r"^spec.model.loadTests\[0\].tensorParallelSize"):
        resolve(parse_spec(doc["spec"]))


@pytest.mark.parametrize("points", [
    # Within what any decode step may take, but 20-300x faster than a trillion-parameter model's weights read.
    _points((1, "0.0185"), (8, "0.0210"), (32, "0.0300")),
    # One point in range, and a robust fit that reads the others as outliers and plans a 0.01 ms pass.
    _points((1022, "0.01"), (1023, "0.01"), (1024, "60000")),
])
def test_a_load_test_faster_than_the_model_can_decode_is_refused_naming_the_floor(
        points: list[dict[str, Any]], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = with_load_tests({"tensorParallelSize": 8, "points": points})
    with pytest.raises(SpecError, match=r"^spec.model.loadTests\[0\].points.perPassMs: .* faster than kimi-k2.6 "
                                        r"can decode at TP8 on b200 \(at least 0.0312 ms"):
        resolve(parse_spec(doc["spec"]))
    resource = tmp_path / "resource.yaml"
    resource.write_text(yaml.safe_dump(doc))
    code, out, err = run(capsys, "plan", "-f", str(resource))
    assert code == 2 and out == "" and "faster than kimi-k2.6 can decode" in err and err.count("\n") == 1, err


def _observe_tp8_passes(world: World, batch: float, seconds: float) -> None:
    """A fleet reporting its own passes: the fit samples an engine's metrics give each window."""
    world.observe(rate=1.0)
    source = world.hub.routes[KEY].source
    snap = world.hub.snapshots[source]
    obs = snap.observations[KEY]
    samples = tuple((batch * f, seconds * (0.6 + 0.4 * f), 80_000.0) for f in (0.5, 0.75, 1.0, 1.25, 1.5, 2.0))
    world.hub.ingest(source, dataclasses.replace(snap, observations={KEY: dataclasses.replace(
        obs, fit_samples=samples)}), poll_samples=True)


def test_status_says_the_fit_is_the_load_tests_until_the_fleet_measured_the_tp() -> None:
    world = World()
    world.spec = with_load_tests(B200_TP8, tensorParallelSizes=[8])["spec"]
    world.converge()
    world.observe(rate=1.0)
    world.tune()
    fit = world.report.current["fit"]
    assert fit["tensorParallelSize"] == 8 and fit["source"] == "LoadTest" and fit["samples"] == 4
    for _ in range(3):  # the fleet's own TP8 passes, twice as slow as the test's line
        _observe_tp8_passes(world, 8.0, 2 * 0.0184)
        world.tune()
    fit = world.report.current["fit"]
    assert fit["source"] == "Fleet" and fit["samples"] >= 6


def test_explain_shows_each_load_test(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "kimi.yaml"
    path.write_text(yaml.safe_dump(with_load_tests(B200_TP8)))
    code, out, err = run(capsys, "explain", "-f", str(path))
    assert code == 0, err
    assert ("load test:    TP8, 4 batches (1..32) (spec.model.loadTests): planned on until the fleet measures TP8 "
            "itself") in out
    assert "calibrated-napkin); this TP is not measured" in out


def test_a_bad_load_test_added_to_a_running_resource_is_reported_and_changes_nothing() -> None:
    world = World()
    first = world.converge().layout
    applied = len(world.cluster.applied)
    world.spec["model"]["loadTests"] = [{"tensorParallelSize": 8, "points": _points((1, "20"), (32, "19"))}]
    assert world.tune() is None
    assert world.condition("InvalidSpec")["status"] == "True"
    assert "spec.model.loadTests[0]" in world.condition("InvalidSpec")["message"]
    with pytest.raises(SpecError):
        world.converge()
    assert len(world.cluster.applied) == applied and world.running() == first
