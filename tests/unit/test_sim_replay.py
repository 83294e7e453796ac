"""The twin replays each published sweep (fixed lengths, closed loop, no think time) with the fit trained on
its three smallest concurrencies, and produces the measured output throughput at every concurrency."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from infertune.model import PerformanceModel, Workload
from infertune.model.validation import sweep_from_mapping, validate
from infertune_lab.sim import ReplicaConfig, fixed
from infertune_lab.sim.sweep import run_level

SWEEPS = sorted((Path(__file__).resolve().parents[2] / "docs" / "validation").glob("*.toml"))

# A known miss, measured, not bent (docs/model-validation.md, "What is not covered"): the twin prefills at the
# B200 load test's 6.4% MFU (an MoE stack), so a 5,000-token prompt of the dense 70B takes 2.8 s on 2x H100
# where the source's whole TTFT is 0.41 s (at least 44% MFU); prefill-bound, the twin's output throughput is
# 20% (c=1) to 80% (c=50) below the measured.
_PREFILL_BOUND = pytest.mark.xfail(
    strict=True, reason="twin prefill at 6.4% MFU: dense 70B 5000/500 output throughput -20% (c=1) to -80% (c=50)")
CASES = [pytest.param(p, id=p.stem, marks=_PREFILL_BOUND if p.stem == "llama33-70b-fp8-h100-nim-tp2" else ())
         for p in SWEEPS]


@pytest.mark.parametrize("path", CASES)
def test_the_twin_reproduces_the_published_throughput(path: Path):
    result = validate(sweep_from_mapping(path.stem, tomllib.loads(path.read_text(encoding="utf-8"))))
    s = result.sweep
    perf = PerformanceModel(s.model, s.gpu, Workload(s.prompt_tokens, 0, s.output_tokens), fits={s.tp: result.fit})
    config = ReplicaConfig(model=s.model.name, gpu=s.gpu.name, tp=s.tp, perf=perf,
                           max_num_seqs=max(p.concurrency for p in s.points))
    for point in s.points:
        if point.output_tps is None or point.outlier:
            continue
        row = run_level(config, fixed(s.prompt_tokens, s.output_tokens), point.concurrency, warmup=60.0,
                        duration=300.0, think=0.0)
        assert row.preemptions == 0 and row.prefix_hit_rate == 0.0  # random prompts: nothing to reuse
        assert row.aggregate_tps == pytest.approx(point.output_tps, rel=0.15), point.concurrency


def test_a_fixed_shape_is_exactly_its_lengths():
    import random

    shape = fixed(1024, 512)
    rng = random.Random(3)
    assert {shape.fresh(rng, 0) for _ in range(50)} == {1024} and {shape.output(rng) for _ in range(50)} == {512}
    with pytest.raises(ValueError):
        fixed(0, 10)
