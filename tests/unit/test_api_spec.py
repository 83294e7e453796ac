"""The spec models as the operator reads them: one-line errors naming the field, the policy merge in
which a resource's own fields win, and the translation into the planner's request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infertune.api.conditions import Condition, ConditionUpdate, initial_conditions, merge_conditions
from infertune.api.observation import Observation
from infertune.api.policy import apply_policy, parse_policy
from infertune.api.quantities import format_duration, parse_decimal, parse_duration
from infertune.api.spec import parse_spec
from infertune.errors import SpecError
from infertune.planner.plan import plan
from infertune.planner.request import resolve

ROOT = Path(__file__).resolve().parents[2]


def _load(path: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / path).read_text())


def _spec(**changes: Any) -> dict[str, Any]:
    spec = _load("examples/kimi-k2.6-b200.yaml")["spec"]
    spec.update(changes)
    return spec


@pytest.mark.parametrize(("raw", "field"), [
    ({"tuning": {"concurrency": {"min": 9, "max": 2}}}, "spec.tuning.concurrency"),
    ({"tuning": {"tensorParallelSizes": [4, 3]}}, "spec.tuning.tensorParallelSizes[1]"),
    ({"tuning": {"mode": "Automatic"}}, "spec.tuning.mode"),
    ({"engine": {"extraArgs": ["--trust-remote-code", "--max-num-seqs=9"]}}, "spec.engine.extraArgs[1]"),
    ({"hardware": {"pricePerGpuHour": "six"}}, "spec.hardware.pricePerGpuHour"),
    ({"tuning": {"interval": 30}}, "spec.tuning.interval"),
    ({"tunning": {}}, "spec.tunning"),
    ({"tuning": {"burstPercentile": 100}}, "spec.tuning.burstPercentile"),
    ({"engine": {"kind": "sglang"}}, "spec.engine.image"),
    ({"tuning": {"burstPercentile": 40}}, "spec.tuning.burstPercentile"),
])
def test_bad_fields_are_named_in_one_line(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**_spec(), **raw})
    message = str(info.value)
    assert message.startswith(field), message
    assert "\n" not in message


def test_missing_model_source_is_named() -> None:
    with pytest.raises(SpecError, match=r"^spec.model: exactly one of"):
        parse_spec({"model": {"weights": "x"}})


def test_the_resource_overrides_its_policy_field_by_field() -> None:
    policy = parse_policy(_load("policies/chat.yaml")["spec"])
    spec = parse_spec(_load("examples/llama-3.3-70b-h200.yaml")["spec"])
    merged = apply_policy(spec, policy)
    assert merged.slo is not None and merged.slo.ttft is not None
    assert merged.slo.ttft.limit == "800ms"  # the resource's own
    assert merged.slo.ttft.percentile == 95  # inherited
    assert merged.slo.min_stream_tokens_per_second == 30  # inherited
    assert merged.tuning.kv_headroom_percent == 15
    assert merged.tuning.mode == "Recommend"


def test_resolve_builds_the_planner_request() -> None:
    policy = parse_policy(_load("policies/coding-agent.yaml")["spec"])
    resolved = resolve(parse_spec(_spec()), policy)
    req = resolved.request
    assert resolved.model.name == "kimi-k2.6" and resolved.gpu.name == "b200"
    assert req.slo.min_stream_tps == 25 and req.slo.max_ttft_seconds == 3.0
    assert req.tp_sizes == (4, 8) and (req.concurrency_min, req.concurrency_max) == (4, 64)
    assert req.price_per_gpu_hour == 6.0 and req.pool_gpus == 32 and req.kv_headroom == 0.10
    assert req.guardrails.relayout_cooldown_s == 1800 and req.guardrails.model_load_seconds == 900
    assert req.workload.cached_tokens == 71_000
    assert req.burst_quantile == 0.98  # the default, named by neither
    tuned = resolve(parse_spec(_spec(tuning={**_spec()["tuning"], "burstPercentile": 90})), policy)
    assert tuned.request.burst_quantile == 0.90


def test_a_replica_step_set_bounds_a_scale_up_and_unset_leaves_the_hpas_doubling() -> None:
    """Unset (the shipped policies leave it), a scale-up adds 4 pods or as many as run, whichever is more;
    a `maxReplicaStep` the resource or its policy sets bounds both ways, as it says."""
    unset = resolve(parse_spec(_spec()), parse_policy(_load("policies/coding-agent.yaml")["spec"])).request
    assert (unset.guardrails.max_step_replicas, unset.guardrails.scale_up_share) == (4, 1.0)
    stepped = resolve(parse_spec(_spec(tuning={**_spec()["tuning"], "maxReplicaStep": 2}))).request
    assert (stepped.guardrails.max_step_replicas, stepped.guardrails.scale_up_share) == (2, 0.0)
    batch = resolve(parse_spec(_spec()), parse_policy(_load("policies/batch.yaml")["spec"])).request
    assert (batch.guardrails.max_step_replicas, batch.guardrails.scale_up_share) == (8, 0.0)


def test_min_zero_replicas_scales_an_idle_deployment_down_to_one_not_holds_it() -> None:
    """`replicas.min: 0` (gpt-oss's example had it) planned no layout at all for no traffic, so the
    guardrails held every running replica (NoFeasibleLayout) for as long as the idle lasted. There is no
    scale to zero (a running replica is what the demand is measured on): 0 is read as 1."""
    spec = _spec(tuning={**_spec()["tuning"], "replicas": {"min": 0, "max": 8}})
    req = resolve(parse_spec(spec)).request
    assert req.replicas_min == 1
    idle = Observation("ns", "kimi", sample_time=0.0, available=True, arrival_rate=0.0, waiting=0.0)
    planned = plan(req, idle, 0.0)
    assert planned.feasible and planned.layout is not None and planned.layout.replicas == 1


def test_the_planner_sizes_the_kv_cache_on_the_memory_share_the_engine_is_given() -> None:
    """gpuMemoryUtilizationPercent went to the engine's flag only: the planner judged the KV line on 90%
    whatever the pods ran with, so at 70% it planned streams into KV the engine did not have."""
    engine = _spec()["engine"]
    shares = {}
    for percent in (90, 70):
        req = resolve(parse_spec(_spec(engine={**engine, "gpuMemoryUtilizationPercent": percent}))).request
        assert req.capacity.gpu_memory_utilization == percent / 100
        planned = plan(req, None, 0.0)
        shares[percent] = {(c.tp, c.max_num_seqs): c.kv_working_set_fraction for c in planned.table.rows()}
    same = shares[90].keys() & shares[70].keys()
    assert same and all(shares[70][k] > shares[90][k] for k in same)


def test_an_unknown_gpu_is_a_spec_error_naming_the_field() -> None:
    with pytest.raises(SpecError, match=r"^spec.hardware.gpu: unknown GPU 'a100'"):
        resolve(parse_spec(_spec(hardware={"gpu": "a100"})))


def test_a_malformed_config_json_is_a_spec_error() -> None:
    spec = parse_spec(_spec(model={"weights": "org/m", "configMapRef": {"name": "m-config"}}))
    with pytest.raises(SpecError, match=r"^spec.model.configMapRef .*malformed config.json"):
        resolve(spec, config_json='{"num_hidden_layers": 4,')
    with pytest.raises(SpecError, match=r"^spec.model.configMapRef .*hidden_size"):
        resolve(spec, config_json='{"num_hidden_layers": 4}')


def test_a_configmap_config_json_past_pythons_limits_is_a_spec_error_not_a_crash() -> None:
    """A reconcile that raised here would be retried for ever with nothing said; the resource must be
    told what is wrong, as for any other malformed config.json."""
    spec = parse_spec(_spec(model={"weights": "org/m", "configMapRef": {"name": "m-config"}}))
    with pytest.raises(SpecError, match=r"^spec.model.configMapRef .*more than 4,300 digits"):
        resolve(spec, config_json='{"num_hidden_layers": ' + "9" * 5000 + "}")
    with pytest.raises(SpecError, match=r"^spec.model.configMapRef .*nested too deeply"):
        resolve(spec, config_json="[" * 100_000 + "]" * 100_000)


def test_a_config_json_from_a_configmap_resolves() -> None:
    cfg = ('{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,'
           ' "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,'
           ' "torch_dtype": "bfloat16"}')
    spec = parse_spec(_spec(model={"weights": "org/m", "configMapRef": {"name": "m-config"}}))
    model = resolve(spec, config_json=cfg).model
    assert model.layers == 32 and model.kv_heads == 8


def test_inline_architecture_resolves() -> None:
    arch = {"layers": 80, "hiddenSize": 8192, "attentionHeads": 64, "kvHeads": 8, "headDim": 128,
            "ffnWidth": 28672, "totalParams": 70_600_000_000, "activeParams": 70_600_000_000}
    model = resolve(parse_spec(_spec(model={"weights": "org/m", "architecture": arch}))).model
    assert model.attention == "gqa" and model.weight_bytes_per_param == 2.0


def test_durations_and_decimals() -> None:
    assert parse_duration("1h30m") == 5400 and parse_duration("1500ms") == 1.5
    assert parse_decimal("5.50") == 5.5
    assert format_duration(1800) == "30m" and format_duration(0.25) == "250ms"
    with pytest.raises(SpecError, match=r"spec\.x"):
        parse_duration("soon", "spec.x")


def test_conditions_keep_transition_time_unless_status_flips() -> None:
    start = initial_conditions("t0", 1)
    assert {c.type for c in start} == {"Ready", "SLOMet", "CacheHeadroom", "MetricsAvailable", "Progressing"}
    assert all(c.status == "Unknown" for c in start)
    unchanged = ConditionUpdate("Ready", "Unknown", "FirstVisit", "not evaluated yet")
    same = merge_conditions(start, [unchanged], "t1", 1)
    assert same == start
    flipped = merge_conditions(start, [ConditionUpdate("Ready", "True", "Stable")], "t2", 2)
    ready = next(c for c in flipped if c.type == "Ready")
    assert ready.last_transition_time == "t2" and ready.observed_generation == 2
    assert Condition.from_wire(ready.wire()) == ready
