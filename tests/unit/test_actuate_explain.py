"""`infertune explain -f`: the recommended layout with its predictions and the rejected layouts' reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from infertune.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_explain_shows_the_choice_and_why_others_were_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "-f", str(ROOT / "examples/kimi-k2.6-b200.yaml"),
                 "--policy", str(ROOT / "policies/coding-agent.yaml")]) == 0
    out = capsys.readouterr().out
    assert "recommended:  TP4 max-num-seqs" in out
    assert "OverKVHeadroom" in out  # past the headroom line is a named rejection
    assert "StreamTPSBelowSLO" in out  # so is missing the coding-agent 25 tok/s floor


def test_explain_needs_a_name_or_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain"]) == 2
    assert "give NAME" in capsys.readouterr().err


def test_explain_shows_the_pass_interval_and_the_fit_the_operator_learnt() -> None:
    """The choice's per-pass time with its interval and source, and (from a resource's status) the fit's terms."""
    import numpy as np
    import yaml

    from infertune.api.policy import parse_policy
    from infertune.api.spec import parse_spec
    from infertune.commands.explain import render_explanation
    from infertune.model.passfit import SampleSet
    from infertune.planner import plan
    from infertune.planner.request import resolve

    spec = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())["spec"]
    policy = yaml.safe_load((ROOT / "policies/coding-agent.yaml").read_text())["spec"]
    resolved = resolve(parse_spec(spec), parse_policy(policy), None)
    batch = np.array([1.0, 2.0, 3.0])  # learnt at 1..3 streams: everything above is extrapolated
    samples = SampleSet(tuple(batch), tuple(0.0052 + 0.00165 * batch), (84_528.0,) * 3, (1.0,) * 3)
    request = resolved.request.__class__(**{**resolved.request.__dict__, "fits": {4: samples, 8: samples}})
    the_plan = plan(request, None, 0.0)
    status = {"fit": {"tensorParallelSize": 4, "terms": {"overhead": 1.0, "weights": 0.3, "kv": 4.1, "compute": 0.3},
                      "r2": 0.99, "samples": 3, "batchMin": 1, "batchMax": 3, "contextMin": 84528,
                      "contextMax": 84528}}
    out = render_explanation(resolved, status, the_plan, 4)
    line = next(x for x in out.splitlines() if x.startswith("per pass:"))
    assert "interval" in line and "fit+napkin" in line and "slow end" in line
    assert "fit:          TP4 per-pass = napkin terms x (overhead 1, weights 0.3, kv 4.1, compute 0.3)" in out


def test_explain_shows_the_demand_sized_for_the_headroom_cost_and_the_rollout() -> None:
    """From a resource's status: the four demand figures and what drove the sizing, the GPUs the burst
    headroom holds, and how a re-layout from what runs would roll within the pool."""
    import yaml

    from infertune.api.policy import parse_policy
    from infertune.api.spec import parse_spec
    from infertune.commands.explain import render_explanation
    from infertune.planner import plan
    from infertune.planner.request import resolve

    spec = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())["spec"]
    policy = parse_policy(yaml.safe_load((ROOT / "policies/coding-agent.yaml").read_text())["spec"])
    resolved = resolve(parse_spec(spec), policy)
    status = {"applied": {"tensorParallelSize": 8, "maxNumSeqs": 17, "replicas": 2},
              "recommendation": {"demand": {"currentRps": 1.2, "burstRps": 2.5, "sizedRps": 2.5,
                                            "drivenBy": "burst", "recentPeakRps": 3.1}, "burstHeadroomGpus": 4}}
    out = render_explanation(resolved, status, plan(resolved.request, None, 0.0), 3)
    assert "sized for 2.5 req/s one model load ahead (now 1.2, bursts p98 2.5; driven by burst)" in out
    assert "read up to 3.1 req/s within the last model load: a re-layout for cost must still save there" in out
    assert "burst headroom 15% holds 4 GPU(s): 4 GPU-hours an hour, 96 a day" in out
    assert "the recent bursts are held to their p98 (spec.tuning.burstPercentile)" in out
    assert "re-layout:    rolls out in" in out and "wave(s)" in out
    # The policy's 5m window is raised to the example's 15-minute load, and explain says so.
    assert ("scale-down:   waits until 15m of recommendations ask for fewer (spec.tuning.cooldowns."
            "scaleDownStabilization 5m is raised to the 15m model load") in out
    # A scale-up's step is stated with where it comes from: HPA's default, the shipped policy setting none.
    assert ("scale-up:     adds at most 4 replica(s) or 100% of those that run, whichever is more (HPA's default; "
            "spec.tuning.maxReplicaStep sets a bound both ways), 1m after the last scale-up") in out
    batch = parse_policy(yaml.safe_load((ROOT / "policies/batch.yaml").read_text())["spec"])
    stepped = resolve(parse_spec(spec), batch)
    out = render_explanation(stepped, status, plan(stepped.request, None, 0.0), 3)
    assert "scale-up:     adds at most 8 replica(s) a decision (spec.tuning.maxReplicaStep), 2m after" in out


def test_explain_says_a_start_on_the_napkin_alone_was_sized_on_a_slower_pass() -> None:
    """Before any pass is measured, at a batch where the napkin missed its anchor, the per-pass line says
    the replicas were sized on a slower pass, and by how much."""
    import yaml

    from infertune.api.policy import parse_policy
    from infertune.api.spec import parse_spec
    from infertune.commands.explain import render_explanation
    from infertune.planner import plan
    from infertune.planner.request import resolve

    spec = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())["spec"]
    spec["workload"] = {"freshTokens": 1150, "cachedTokens": 0, "outputTokens": 210, "expectedRequestsPerSecond": "9"}
    spec["tuning"]["concurrency"] = {"min": 20, "max": 20}
    policy = yaml.safe_load((ROOT / "policies/coding-agent.yaml").read_text())["spec"]
    resolved = resolve(parse_spec(spec), parse_policy(policy), None)
    out = render_explanation(resolved, {}, plan(resolved.request, None, 0.0), 4)
    line = next(x for x in out.splitlines() if x.startswith("per pass:"))
    assert "napkin" in line and "sized on a pass up to 14% slower" in line
