"""`infertune bench` end to end on a short spike: the JSON a user scripts against, every policy over
its own knob (`--frontier`), the pool every policy shares, and the headline comparisons."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from infertune.cli import main

FIELDS = {"sla_attainment_ttft", "sla_attainment_tps", "ttft_p95_seconds", "per_stream_tps_p5", "gpu_hours",
          "cost_per_million_tokens", "goodput_tokens_per_gpu_hour", "preemptions", "seconds_past_cliff", "relayouts",
          "peak_gpus"}
FRONTIER_FIELDS = {"setting", "sla_attainment_ttft", "sla_attainment_tps", "gpu_hours", "seconds_past_cliff",
                   "peak_gpus"}
POLICIES = ["infertune", "static", "hpa-kv", "keda-queue", "keda-slo", "oracle"]
POOL = 64


def bench(args: list[str], report: Path | None = None) -> dict[str, Any]:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["bench", *args, "--output", "json", *(["--report", str(report)] if report else [])])
    assert code == 0
    doc: dict[str, Any] = json.loads(stdout.getvalue())
    return doc


@pytest.fixture(scope="module")
def spike(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two hours of the spike scenario, every policy over its knob, as a user would run it."""
    report = tmp_path_factory.mktemp("bench")
    doc = bench(["--scenario", "spike", "--duration", "7200", "--frontier"], report)
    doc["_report"] = sorted(p.name for p in report.iterdir())
    return doc


def test_json_names_every_policy_and_every_field(spike: dict[str, Any]) -> None:
    assert spike["scenario"] == "spike"
    assert list(spike["policies"]) == POLICIES
    for name, figures in spike["policies"].items():
        assert set(figures) >= FIELDS, name
        assert 0.0 <= figures["sla_attainment_ttft"] <= 1.0
        assert figures["gpu_hours"] > 0
    assert spike["_report"] == ["bench-spike-frontier.png", "bench-spike.png", "bench.md"]


def test_the_frontier_sweeps_each_policys_own_knob_around_its_default(spike: dict[str, Any]) -> None:
    frontier = spike["frontier"]
    assert list(frontier) == POLICIES
    for name, points in frontier.items():
        assert all(set(p) >= FRONTIER_FIELDS for p in points), name
        defaults = [p for p in points if p["default"]]
        assert len(defaults) == 1, name
        # The default setting's run is the one the policies table reports.
        assert defaults[0]["gpu_hours"] == spike["policies"][name]["gpu_hours"], name
        assert len({p["setting"] for p in points}) == len(points), name
    assert {p["setting"] for p in frontier["infertune"]} == {"p90 burst 0%", "burst 0%", "burst 15%", "burst 40%"}
    assert len(frontier["static"]) >= 3 and len(frontier["oracle"]) == 1
    # More spare capacity costs more: infertune's GPU-hours rise with its burst headroom, and with its
    # percentile (sized for the 90th of the recent bursts, it spends no more than at the 98th). Within 2%:
    # each setting takes its own re-layouts, and since a saving is weighed over two hours the paths part by
    # a GPU-hour or so (burst 40% 117.95 GPU-h against burst 15% 118.93; p90 115.42 against p98 114.77).
    hours = {p["setting"]: p["gpu_hours"] for p in frontier["infertune"]}
    assert hours["burst 0%"] <= 1.02 * hours["burst 40%"]
    assert hours["p90 burst 0%"] <= 1.02 * hours["burst 0%"]


def test_no_policy_holds_more_gpus_than_the_pool(spike: dict[str, Any]) -> None:
    assert spike["pool_gpus"] == POOL
    for name, points in spike["frontier"].items():
        assert all(p["peak_gpus"] <= POOL for p in points), name


def test_the_oracle_meets_the_sla_and_static_pays_for_the_peak(spike: dict[str, Any]) -> None:
    oracle, static = spike["policies"]["oracle"], spike["policies"]["static"]
    assert oracle["sla_attainment_ttft"] >= 0.99 and oracle["sla_attainment_tps"] >= 0.99
    assert static["gpu_hours"] > oracle["gpu_hours"]
    assert static["relayouts"] == 0


@pytest.mark.xfail(strict=True, reason="since the fit's batch is read from the inter-token sum (14e8c53) the operator "
                                       "stays on TP4 c=5-6 through this 2-hour spike at 106-120 GPU-h (99.7-99.9%): "
                                       "keda-queue spends 96.1 at 80.93%: TP8 c=16, the oracle's shape, is predicted "
                                       "22% slow from TP4's small-batch windows and never tried "
                                       "(docs/bench-history.md)")
def test_infertune_uses_fewer_gpu_hours_than_keda_at_no_worse_attainment(spike: dict[str, Any]) -> None:
    ours, keda = spike["policies"]["infertune"], spike["policies"]["keda-queue"]
    assert ours["gpu_hours"] < keda["gpu_hours"]
    assert ours["sla_attainment_ttft"] >= keda["sla_attainment_ttft"]
    assert ours["sla_attainment_tps"] >= keda["sla_attainment_tps"]


def test_at_its_default_infertune_meets_the_sla_on_the_spike(spike: dict[str, Any]) -> None:
    """The promise at the default setting: >= 99% of requests within both SLAs through a 3x step. Two
    sizing changes that helped the 4-hour spike put this cut of it at 70% and 82% (docs/bench.md)."""
    ours = spike["policies"]["infertune"]
    assert min(ours["sla_attainment_ttft"], ours["sla_attainment_tps"]) >= 0.99


@pytest.mark.xfail(strict=True, reason="infertune's frontier has no point as cheap as the baselines' cheapest "
                                       "settings: on this 2 h spike static TP4 c=8 x9 reaches 94.3% on 72 GPU-h, where "
                                       "its default (burst 15%) costs 120.1 GPU-h at 99.73% (docs/bench.md)")
def test_infertunes_frontier_dominates_every_baselines(spike: dict[str, Any]) -> None:
    summary = spike["frontier_summary"]
    assert all(summary[name]["dominated_by_infertune"] for name in ("static", "hpa-kv", "keda-queue", "keda-slo"))


def test_a_fast_model_load_variant_runs_with_a_60_second_load() -> None:
    doc = bench(["--scenario", "drop-load60", "--duration", "1800", "--policies", "static"])
    assert doc["scenario"] == "drop-load60" and doc["model_load_seconds"] == 60
    assert "frontier" not in doc


@pytest.mark.xfail(strict=True, reason=(
    "seed 5 ends at 99.23% TTFT but 45 s past the cliff (85.9% and 230 s while a re-layout's saving was weighed "
    "over one hour): the 3x step comes on a full pool of TP4 pods and the shapes the grown contexts then need "
    "cannot roll (RelayoutWouldDropCapacity). Seed 15 ends at 99.90% / 100% with 5 s past the cliff (79.13% "
    "before the two hours' payback). Seeds 1-20: past the cliff on 14, under 99% on 7 (docs/bench.md, 'The "
    "spike on other seeds')"))
@pytest.mark.parametrize("seed", ["5", "15"])
def test_the_spike_drawn_from_another_seed_stays_below_the_cliff_at_the_default(seed: str) -> None:
    ours = bench(["--scenario", "spike", "--duration", "7200", "--seed", seed, "--policies", "infertune"])
    figures = ours["policies"]["infertune"]
    assert figures["seconds_past_cliff"] == 0
    assert min(figures["sla_attainment_ttft"], figures["sla_attainment_tps"]) >= 0.99


def test_a_step_meets_the_shape_the_measured_plan_wanted_not_the_start_on_the_hints() -> None:
    """Seed 15 of the 2-hour spike starts on TP8 c=14, first on the hints; from its first measured cycle the
    plan wants TP4 c=6, 8 GPUs fewer at 975 s. Weighed over one hour that saving did not pay the rollout's
    10 GPU-h, so the 3x step met TP8 pods that carry 3.6 req/s on the whole pool against 5.8 for TP4 c=6
    (79.13% TTFT within SLA). Weighed over the two hours a shape runs, the move goes before the step."""
    ours = bench(["--scenario", "spike", "--duration", "7200", "--seed", "15", "--policies", "infertune"])
    figures = ours["policies"]["infertune"]
    assert figures["relayouts"] >= 1
    assert min(figures["sla_attainment_ttft"], figures["sla_attainment_tps"]) >= 0.99


def test_the_spike_is_not_met_on_a_fleet_rolled_for_a_shape_chosen_in_the_first_minutes() -> None:
    """Seed 13 of the 2-hour spike: judged on the working set of its first 105 s, a cost move went from TP4
    c=6 to c=8, the settled working set sent it back at 1,845 s, and the 3x step met a fleet just rolled
    (90.43% TTFT, 105 s past the cliff). A tighter shape now waits for a working set measured over a load
    (`WorkingSetUnsettled`), and the same draw is met."""
    figures = bench(["--scenario", "spike", "--duration", "7200", "--seed", "13", "--policies", "infertune"])
    ours = figures["policies"]["infertune"]
    assert ours["relayouts"] == 0
    assert min(ours["sla_attainment_ttft"], ours["sla_attainment_tps"]) >= 0.99


def test_random_scenario_19_keeps_below_the_cliff_without_flapping_between_shapes() -> None:
    """Random scenario 19 (32 GPUs, an hour): TP4 c=13 was left as unsafe at 675 s with the working set's level
    at 44K tokens a stream, came back for cost at 2,625 s on a 41K trough, and the next rise held it at 99% of
    its KV under the re-layout cooldown (93.11% TTFT, 35 s past the cliff). Judged at that level for a
    re-layout horizon, it stayed away (96.56%, one re-layout). Since a start on nothing measured keeps a
    margin below the KV line it starts on c=12 and is never left (99.27% at 22.9 GPU-h, static 99.41% at
    28.0); the rule itself is held by test_guardrails.py's
    test_a_shape_left_as_unsafe_is_judged_at_the_working_set_that_sent_it_away_for_one_horizon."""
    figures = bench(["--scenario", "random", "--seed", "19", "--pool-gpus", "32", "--duration", "3600",
                     "--policies", "infertune"])
    ours = figures["policies"]["infertune"]
    assert ours["relayouts"] <= 1
    assert ours["seconds_past_cliff"] == 0
    assert min(ours["sla_attainment_ttft"], ours["sla_attainment_tps"]) >= 0.99
