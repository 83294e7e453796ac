"""Acceptance: the online fit, fed by the pods source polling the twin's exporter, recovers the
per-pass line the twin was configured with, within 10%, after 5 simulated minutes of bursty load.
The batch of each window is the mean number of streams decoding in it, read exactly from the
inter-token histogram's sum.

The twin runs in virtual time; each poll renders every replica's real /metrics text (the sim's
exporter) and hands it to PodsSource, so parsing, deltas, the preemption filter and FitMemory
are the production path. Only the HTTP GET is skipped.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

import pytest

from infertune.model import LinearFit, workload_preset
from infertune.observe import FitMemory, PodsSource, PodTarget
from infertune_lab.bench.cases import BenchCase
from infertune_lab.sim import Fleet, OpenSessions, ReplicaConfig, shape
from infertune_lab.sim.exporter import ReplicaView, render
from infertune_lab.sim.steptime import StepTimer
from infertune_lab.sim.traffic import CHAT_TRACE, bursty, chat_trace

A, B = 5.2e-3, 1.65e-3  # the B200 load test's line, as the twin's configured fit


def learnt_from_two_pods(fleet: Fleet, config: ReplicaConfig, polls: int, every: float) -> FitMemory:
    """Two pods of `config` serve `fleet`'s traffic; the pods source polls their /metrics text every
    `every` seconds and the fit memory takes each poll's samples, as the operator's would."""
    pods = [fleet.add_replica(config, f"sim-{i}") for i in range(2)]
    now = [0.0]
    source = PodsSource([PodTarget("ns", "d", p, f"http://{p}:8000/metrics") for p in pods],
                        clock=lambda: now[0],
                        fetch=lambda t: render(ReplicaView.of(fleet.replicas[t.pod].engine)).decode())
    memory = FitMemory()
    for poll in range(1, polls + 1):
        now[0] = poll * every
        fleet.run_until(now[0])
        obs = source.poll().get("ns", "d")
        assert obs.available, obs.message
        memory.add(config.tp, obs.fit_samples, now[0])
    return memory


@pytest.mark.parametrize(("workload", "rate"), [("chat", 2.0), ("coding-agent", 0.3)])
def test_fit_recovers_the_twins_line_after_five_simulated_minutes(workload: str, rate: float) -> None:
    fleet = Fleet(OpenSessions(shape(workload), bursty(rate, random.Random(1))), seed=1)
    config = ReplicaConfig(tp=8, fits={8: LinearFit(A, B, 1.0, 10, 1, 64)}, workload=workload)
    memory = learnt_from_two_pods(fleet, config, polls=40, every=7.5)  # 300 s
    fit = memory.fit(8)
    assert fit is not None
    batches = [s.batch for s in memory.samples(8)]
    assert max(batches) / min(batches) > 4  # the load really varied
    assert fit.slope_s == pytest.approx(B, rel=0.10)
    # A pass predicted anywhere in the sampled range is the twin's within 10%. (The intercept alone reads a
    # little high on chat: its short prompts' prefill chunks share the passes the streams wait on.)
    for batch in (min(batches), max(batches) ** 0.5, max(batches)):
        assert fit.per_pass(batch) == pytest.approx(A + B * batch, rel=0.10)
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


@pytest.mark.parametrize("rate", [2.0, 3.3])
def test_a_fit_learnt_on_small_batches_predicts_the_twins_pass_well_beyond_them(rate: float) -> None:
    """Two TP4 pods capped at six streams serve the generated chat trace (short prompts, bursts); what
    the operator learns from their windows must carry to the 40 streams it would raise max-num-seqs to.
    With the batch read from two samples of the running gauge, the fit came out 19-52% fast at 40
    streams, outside its own band, and the operator raised max-num-seqs past the per-stream floor."""
    case = BenchCase("chat", 600.0, 3, trace=tuple(chat_trace(rate, 700.0, 3)), warmup=100.0,
                     shape=CHAT_TRACE.session_shape())
    fleet = Fleet(case.traffic(), router="session-affinity", seed=3)
    config = ReplicaConfig(tp=4, max_num_seqs=6, fits={8: LinearFit(A, B, 1.0, 10, 1, 64)})
    memory = learnt_from_two_pods(fleet, config, polls=40, every=15.0)  # the operator's poll, 10 minutes
    assert max(s.batch for s in memory.samples(4)) <= 6.0
    truth = config.performance_model()
    learnt = replace(truth, workload=workload_preset("chat"), fits={4: memory.sample_set(4)})
    twin = StepTimer(truth, 4)
    for streams in (12, 24, 40):
        predicted = learnt.per_pass(4, streams)
        actual = twin.decode(streams, learnt.decode_context_tokens)
        assert predicted.seconds == pytest.approx(actual, rel=0.15), streams
        assert predicted.low_seconds <= actual <= predicted.high_seconds, streams
