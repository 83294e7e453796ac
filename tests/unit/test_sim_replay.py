"""The twin replays each published sweep (fixed lengths, closed loop, no think time) with the decode pass and the
prefill rate learnt on its three smallest concurrencies, and produces the measured output throughput at every
concurrency."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from infertune.model.validation import sweep_from_mapping, validate
from infertune_lab.sim import fixed
from infertune_lab.sim.replay import replay, replay_config
from infertune_lab.sim.sweep import run_level

SWEEPS = sorted((Path(__file__).resolve().parents[2] / "docs" / "validation").glob("*.toml"))

# A measured miss, recorded rather than tolerated (docs/model-validation.md, "Where the fit misses: Llama-3-8B on
# one H100"): the case fails, and is expected to until the model changes.
KNOWN_MISSES = {
    "llama3-8b-h100-nim-tp1-200in": "twin output throughput -15.8%, -16.5%, -17.5%, -18.2% at c = 100, 150, 200, "
                                    "250 (target 15%): the pass fitted on c = 1, 2, 5 runs 17-19% slow there",
}
CASES = [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[p.stem]))
         if p.stem in KNOWN_MISSES else p for p in SWEEPS]


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in SWEEPS])
def test_the_twin_reproduces_the_published_throughput(path: Path):
    result = validate(sweep_from_mapping(path.stem, tomllib.loads(path.read_text(encoding="utf-8"))))
    rows = replay(result)
    assert rows
    for row in rows:
        assert row.twin.preemptions == 0 and row.twin.prefix_hit_rate == 0.0  # random prompts: nothing to reuse
        assert row.twin.aggregate_tps == pytest.approx(row.measured_tps, rel=0.15), row.concurrency


def test_the_replay_prefills_at_the_learnt_rate_not_the_napkins():
    """The dense 70B's 5,000-token prompts: at the napkin's 6.4% MFU one takes 2.8 s where the source's whole TTFT
    is 0.41 s; the rate learnt from the training rows' TTFT gives the twin a first token near the measured."""
    path = next(p for p in SWEEPS if p.stem == "llama33-70b-fp8-h100-nim-tp2")
    result = validate(sweep_from_mapping(path.stem, tomllib.loads(path.read_text(encoding="utf-8"))))
    napkin = replay_config(result).with_(prefill_tokens_per_second=None)
    row = run_level(napkin, fixed(5000, 500), 1, warmup=60.0, duration=300.0, think=0.0)
    learnt = replay(result)[0]
    assert learnt.concurrency == 1 and learnt.measured_ttft_seconds is not None
    assert row.ttft_p50_seconds > 2.5  # the napkin's prefill alone
    assert learnt.twin.ttft_p50_seconds == pytest.approx(learnt.measured_ttft_seconds, rel=0.25)


def test_a_fixed_shape_is_exactly_its_lengths():
    import random

    shape = fixed(1024, 512)
    rng = random.Random(3)
    assert {shape.fresh(rng, 0) for _ in range(50)} == {1024} and {shape.output(rng) for _ in range(50)} == {512}
    with pytest.raises(ValueError):
        fixed(0, 10)
