"""Acceptance: the online fit, fed by the pods source polling the twin's exporter, recovers the
per-pass line the twin was configured with, within 10%, after 5 simulated minutes of bursty load.

The twin runs in virtual time; each poll renders every replica's real /metrics text (the sim's
exporter) and hands it to PodsSource, so parsing, deltas, the preemption filter and FitMemory
are the production path. Only the HTTP GET is skipped.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

import pytest

from infertune.model import LinearFit
from infertune.observe import FitMemory, PodsSource, PodTarget
from infertune_lab.sim import Fleet, OpenSessions, ReplicaConfig, shape
from infertune_lab.sim.exporter import ReplicaView, render
from infertune_lab.sim.traffic import bursty

A, B = 5.2e-3, 1.65e-3  # the B200 load test's line, as the twin's configured fit


@pytest.mark.parametrize(("workload", "rate"), [("chat", 2.0), ("coding-agent", 0.3)])
def test_fit_recovers_the_twins_line_after_five_simulated_minutes(workload: str, rate: float) -> None:
    fleet = Fleet(OpenSessions(shape(workload), bursty(rate, random.Random(1))), seed=1)
    config = ReplicaConfig(tp=8, fits={8: LinearFit(A, B, 1.0, 10, 1, 64)}, workload=workload)
    pods = [fleet.add_replica(config, f"sim-{i}") for i in range(2)]
    now = [0.0]
    source = PodsSource([PodTarget("ns", "d", p, f"http://{p}:8000/metrics") for p in pods],
                        clock=lambda: now[0],
                        fetch=lambda t: render(ReplicaView.of(fleet.replicas[t.pod].engine)).decode())
    memory = FitMemory()
    for poll in range(1, 41):  # every 7.5 s for 300 s
        now[0] = poll * 7.5
        fleet.run_until(now[0])
        obs = source.poll().get("ns", "d")
        assert obs.available, obs.message
        memory.add(8, obs.fit_samples, now[0])
    fit = memory.fit(8)
    assert fit is not None
    batches = [s.batch for s in memory.samples(8)]
    assert max(batches) / min(batches) > 4  # the load really varied
    assert fit.intercept_s == pytest.approx(A, rel=0.10)
    assert fit.slope_s == pytest.approx(B, rel=0.10)
    # Every sample carries its batch's context, read from the exporter's KV use and cache_config_info, and
    # the physics fit explains the samples at their own batch and context about as well as the line does.
    samples = memory.samples(8)
    assert all(s.context > 0 for s in samples)
    learnt = replace(config.performance_model(), fits={8: memory.sample_set(8)})
    physics = learnt.pass_fit(8)
    assert physics is not None and physics.r2 >= fit.r2 - 0.02
    errors = [abs(learnt.per_pass(8, s.batch, context=s.context).seconds / s.seconds - 1) for s in samples]
    # (The twin's passes are a line by construction, and its windows mix in prefill chunks: the samples
    # scatter by ~8% about the line itself.)
    assert statistics.median(errors) < 0.15
