"""The bench's resource declares the traffic it replays as a model team would: the first window's
demand and its mean request (tokens new to the engine, tokens its sessions cache, tokens answered)."""

from __future__ import annotations

import statistics

import pytest

from infertune.planner.request import starting_layout
from infertune_lab.bench.cases import BenchCase, RequestShape
from infertune_lab.bench.tuned import bench_resource
from infertune_lab.sim.scenario import Phase, Scenario
from infertune_lab.sim.trace import TraceRow
from infertune_lab.sim.traffic import CODING_AGENT


def test_a_trace_is_hinted_with_its_first_windows_prompts_as_fresh_and_nothing_cached() -> None:
    rows = tuple(TraceRow(float(t), 1_000 + 10 * t, 100 + t) for t in range(200))
    case = BenchCase("trace", 100.0, seed=1, trace=rows, warmup=50.0)
    shape = case.request_shape(0.0, 100.0)
    scored = rows[50:150]
    assert shape == RequestShape(statistics.mean(r.context_tokens for r in scored), 0.0,
                                 statistics.mean(r.generated_tokens for r in scored))


def test_a_sessions_later_turns_are_hinted_with_their_history_as_cached() -> None:
    case = BenchCase("sessions", 900.0, seed=3, warmup=1_800.0,
                     scenario=Scenario("flat", 900.0, CODING_AGENT, (Phase(0.0, 0.02),)))
    shape = case.request_shape(0.0, 900.0)
    assert shape is not None
    # Fresh tokens are the shape's own per-turn mean (13K); the history the turns carry is cached.
    assert shape.fresh_tokens == pytest.approx(CODING_AGENT.fresh_mean, rel=0.25)
    assert shape.cached_tokens > 2 * shape.fresh_tokens
    assert shape.output_tokens == pytest.approx(CODING_AGENT.output_mean, rel=0.25)


def test_no_request_in_the_window_gives_no_hint() -> None:
    rows = (TraceRow(0.0, 1_000, 100), TraceRow(500.0, 1_000, 100))
    assert BenchCase("sparse", 100.0, seed=1, trace=rows, warmup=0.0).request_shape(10.0, 20.0) is None


def test_a_chat_replay_starts_on_a_layout_for_chat_not_on_the_policys_coding_agent_preset() -> None:
    """The resource names the coding-agent policy (its SLO); its own hints say the traffic is chat, so
    the first layout, made before any metric, runs more streams a pod on fewer GPUs."""
    chat = RequestShape(1_145.0, 0.0, 208.0)
    hinted = bench_resource(64, None, 25.0, expected_shape=chat).resolved()
    preset = bench_resource(64, None, 25.0).resolved()
    workload = hinted.request.workload
    assert (workload.fresh_tokens, workload.cached_tokens, workload.output_tokens) == (1_145, 0, 208)
    assert preset.request.workload.cached_tokens > 50_000
    (first, _), (mis_hinted, _) = starting_layout(hinted, 0.0), starting_layout(preset, 0.0)
    assert first.max_num_seqs > 2 * mis_hinted.max_num_seqs
    assert first.gpus < mis_hinted.gpus


def test_a_declared_mean_prompt_keeps_the_presets_median_for_ttft() -> None:
    """The TTFT chain reads the median prompt (the B200 load test's 9.4K against a 13K mean); a resource
    that declares twice the preset's mean gets twice its median, not its own mean, as the observed shape
    does once metrics exist."""
    preset = bench_resource(64, None, 1.0).resolved().request.workload
    doubled = bench_resource(64, None, 1.0, expected_shape=RequestShape(2 * preset.fresh_tokens, 71_000.0,
                                                                          1_056.0)).resolved().request.workload
    assert preset.prefill_tokens_for_ttft < preset.fresh_tokens
    assert doubled.prefill_tokens_for_ttft == pytest.approx(2 * preset.prefill_tokens_for_ttft)
