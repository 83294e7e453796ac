"""A published sweep replayed end to end on the twin (docs/model-validation.md): the replica the training rows
describe (the decode pass and the prefill rate learnt on the three smallest concurrencies), run in a closed
loop at the sweep's fixed lengths and every concurrency it measured."""

from __future__ import annotations

from dataclasses import dataclass

from infertune.model import PerformanceModel, Workload
from infertune.model.validation import SweepResult
from infertune_lab.sim.config import ReplicaConfig
from infertune_lab.sim.sweep import SweepRow, run_level
from infertune_lab.sim.traffic import fixed


@dataclass(frozen=True)
class ReplayRow:
    concurrency: int
    measured_tps: float  # output tokens/s of the replica, as published
    measured_ttft_seconds: float | None  # mean, as published
    twin: SweepRow

    @property
    def error(self) -> float:
        return self.twin.aggregate_tps / self.measured_tps - 1.0


def replay_config(result: SweepResult) -> ReplicaConfig:
    """The replica as the training rows taught it: their decode passes and their prefill rate."""
    s = result.sweep
    perf = PerformanceModel(s.model, s.gpu, Workload(s.prompt_tokens, 0, s.output_tokens),
                            fits={s.tp: result.decode_fit})
    return ReplicaConfig(model=s.model.name, gpu=s.gpu.name, tp=s.tp, perf=perf,
                         max_num_seqs=max(p.concurrency for p in s.points),
                         prefill_tokens_per_second=result.prefill.tokens_per_second)


def replay(result: SweepResult, warmup: float = 60.0, duration: float = 300.0) -> list[ReplayRow]:
    """Every row with a published throughput that is not set apart, replayed (closed loop, no think time)."""
    s = result.sweep
    config = replay_config(result)
    rows = []
    for p in s.points:
        if p.output_tps is None or p.outlier:
            continue
        twin = run_level(config, fixed(s.prompt_tokens, s.output_tokens), p.concurrency, warmup, duration, think=0.0)
        rows.append(ReplayRow(p.concurrency, p.output_tps, p.ttft_seconds, twin))
    return rows
