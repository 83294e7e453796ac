"""Fuzzing that stays: hypothesis over the inputs a tenant or a user controls. Each test states the
contract it holds the code to, and counts how each case ended (tests/fuzz_tally.py feeds
docs/reliability.md; `HYPOTHESIS_PROFILE=fuzz` runs 2,000 cases each).

- specs: the API server's admission (the CRD's schema and CEL rules) and the operator's parse agree that
  what is admitted is either acted on or refused with a SpecError naming a field; what is acted on
  renders objects with no owned flag from the user and JSON-clean values;
- metric payloads (Prometheus API answers, /metrics text): a fault, or an observation whose every figure
  is finite and in its physical range, which the planner turns into a plan without an error;
- CSV and JSON inputs (samples, traces, config.json): refused in one line, or read into finite, positive
  figures that plan without an error.
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infertune.actuate.workload import Owner, desired_objects
from infertune.api.flags import owned_flag
from infertune.api.observation import Observation
from infertune.api.spec import parse_spec
from infertune.cli import main
from infertune.commands._inputs import read_samples
from infertune.errors import InfertuneError, PendingError, SpecError, UserError
from infertune.model import load_gpu, load_model, profile_from_hf_config, workload_preset
from infertune.model.catalog import CatalogError
from infertune.observe import PodsSource, PodTarget
from infertune.observe.dialects import COUNTERS, GAUGES, HISTOGRAMS
from infertune.observe.figures import KV_USAGE_MAX, SAMPLE_AHEAD_MAX_SECONDS, Expected, ReplicaLimits
from infertune.observe.plausible import replica_limits
from infertune.observe.prometheus import PrometheusSource, _answer, _Malformed
from infertune.planner import PlanRequest, SloTarget, plan
from infertune.planner.request import resolve, starting_layout, tp_refusal
from infertune_lab.sim.trace import load_trace
from tests.fuzz_tally import tally
from tests.prometheus_fixture import EnginePayload
from tests.unit.test_crds_schema import admission_errors

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "examples/kimi-k2.6-b200.yaml").read_text())
POLICY = yaml.safe_load((ROOT / "policies/coding-agent.yaml").read_text())
KEY = ("ns", "d")
KIMI, B200 = load_model("kimi-k2.6"), load_gpu("b200")
LIMITS = replica_limits(KIMI, B200, (8,), 64)
REQUEST = PlanRequest(model=KIMI, gpu=B200, workload=workload_preset("coding-agent"), slo=SloTarget(25.0, 3.0),
                      tp_sizes=(4, 8), concurrency_max=64, demand_rps=1.0)
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# --- values a tenant or a payload may hold --------------------------------------------------------------
# Mostly what an engine would send, now and then anything: so that both the accepting and the refusing
# paths are exercised (a generator that only produces garbage tests only the first check).
nasty_text = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e308", "-1e308", "-0", "-3", "1e9", "1e12", "garbage", "", "0x1F"]),
    st.integers(-10**6, 10**6).map(str),
)
plausible_text = st.one_of(st.floats(0, 1).map(repr), st.floats(0, 500).map(repr), st.integers(0, 5000).map(str))
numbers_text = st.sampled_from([False] * 10 + [True] + [False] * 9).flatmap(
    lambda nasty: nasty_text if nasty else plausible_text)
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=True),
                      st.text(max_size=16))
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)


# --- specs -------------------------------------------------------------------------------------------------
SPEC_PATHS: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]] = [
    (("replicas",), st.one_of(json_leaf, st.integers(-5, 2000))),
    (("tuning", "mode"), st.sampled_from(["Auto", "Recommend", "Off", "auto", "", "x"])),
    (("tuning", "tensorParallelSizes"), st.lists(st.sampled_from([1, 2, 3, 4, 8, 16, 32, 64, 128, 0, -1]),
                                                 max_size=8)),
    (("tuning", "concurrency"), st.fixed_dictionaries({}, optional={"min": st.integers(-2, 5000),
                                                                    "max": st.integers(-2, 5000)})),
    (("tuning", "replicas"), st.fixed_dictionaries({}, optional={"min": st.integers(-2, 2000),
                                                                 "max": st.integers(-2, 2000)})),
    (("tuning", "interval"), st.sampled_from(["30s", "0s", "1ms", "1h", "90", "x", "1.5m", "9999999h"])),
    (("tuning", "kvHeadroomPercent"), st.integers(-10, 200)),
    (("tuning", "burstPercentile"), st.one_of(st.integers(-10, 200), st.sampled_from([98.5, "90", None]))),
    (("slo", "ttft", "limit"), st.sampled_from(["3s", "0ms", "1h30m", "forever", "1e9s"])),
    (("slo", "minStreamTokensPerSecond"), st.integers(-5, 10**6)),
    (("workload", "expectedRequestsPerSecond"), st.sampled_from(["1", "0", "1e12", "NaN", "5.5", "-1", "99999999"])),
    (("workload", "freshTokens"), st.integers(-1, 10**9)),
    (("hardware", "gpu"), st.sampled_from(["b200", "h100", "h200", "gb200", "a100", ""])),
    (("hardware", "pricePerGpuHour"), st.sampled_from(["6", "0", "5.50", "NaN", "inf", "-1", 6.5])),
    (("hardware", "poolGpus"), st.integers(-1, 10**6)),
    (("engine", "extraArgs"), st.lists(st.one_of(
        st.sampled_from(["--max_num_seqs=9", "--tensor", "-t", "--enable-prefix-caching", "--max-model-len=4096",
                         "--config", "x; rm -rf /", "$(id)", "--port", "--served-model-name"]),
        st.text(max_size=20)), max_size=6)),
    (("engine", "kind"), st.sampled_from(["vllm", "sglang", "tgi"])),
    (("engine", "port"), st.integers(-1, 70000)),
    (("model", "weights"), st.text(max_size=40)),
    (("model", "profile"), st.sampled_from(["kimi-k2.6", "llama-3.1-8b", "mixtral-8x7b", "nope"])),
    (("metrics",), st.fixed_dictionaries({"prometheus": st.fixed_dictionaries({}, optional={
        "url": st.sampled_from(["http://p:9090", "https://p/prom", "http://p:9090/?query=up&x=", "ftp://p",
                                "http://u:pw@p/", "http://p:99999", "http://p#frag", ""]),
        "timeout": st.sampled_from(["5s", "0ms", "31s", "1h", "x"]),
        "bearerTokenSecretRef": st.just({"name": "t", "key": "token"}),
        "allowTokenOverHttp": st.booleans()})})),
]


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    spec = copy.deepcopy(EXAMPLE["spec"])
    for path, values in draw(st.lists(st.sampled_from(SPEC_PATHS), min_size=1, max_size=5)):
        node = spec
        for part in path[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[path[-1]] = draw(values)
    if draw(st.booleans()):  # and now and then a field nobody declared, anywhere
        spec[draw(st.sampled_from(["tuning", "engine", "bogus"]))] = draw(json_value)
    return spec


@FUZZ
@given(specs())
def test_a_spec_is_acted_on_or_refused_with_a_named_field(spec: dict[str, Any]) -> None:
    admitted = admission_errors({"kind": "InferenceDeployment", "spec": spec}) == []
    where = "admitted" if admitted else "refused on admission"
    try:
        resolved = resolve(parse_spec(spec), parse_policy_spec(), None)
    except (SpecError, PendingError) as exc:
        assert str(exc).startswith(("spec", "ServingPolicy")), exc
        tally("specs", f"{where}; the operator refuses it (InvalidSpec)")
        return
    layout, _ = starting_layout(resolved, 0.0)
    objects = desired_objects(Owner("d", "ns", "uid"), resolved.spec, layout, resolved.gpu.gpus_per_node)
    json.dumps(objects, allow_nan=False)
    container = (objects[0]["spec"].get("template") or objects[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
                 )["spec"]["containers"][0]
    assert not any(owned_flag(resolved.spec.engine.kind, a) for a in resolved.spec.engine.extra_args)
    assert all(isinstance(a, str) for a in container["args"]) and 0 <= layout.replicas <= 1024
    tally("specs", f"{where}; the operator acts on it")


def parse_policy_spec() -> Any:
    from infertune.api.policy import parse_policy
    return parse_policy(POLICY["spec"])


# --- Prometheus answers ---------------------------------------------------------------------------------
SOURCE = PrometheusSource("http://prometheus.example:9090")
NAMES = ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage", "up"]


def rarely(common: Any, rare: st.SearchStrategy[Any], one_in: int = 20) -> st.SearchStrategy[Any]:
    """`common` (a value), except about one time in `one_in`: a draw from `rare`. The rare pick sits in
    the middle of the choices, because hypothesis favours the ends of a range (and shrinks to the first)."""
    choices = [False] * one_in
    choices[one_in // 2] = True
    return st.sampled_from(choices).flatmap(lambda pick: rare if pick else st.just(common))


def one_in(n: int) -> st.SearchStrategy[bool]:
    return rarely(False, st.just(True), n)


@st.composite
def series(draw: st.DrawFn, query: Any, pod: str) -> dict[str, Any]:
    metric = {"namespace": "ns", "deployment": draw(rarely("d", st.just("other"), 100)),
              "pod": draw(rarely(pod, st.sampled_from(["d-2", "Not A Pod!"]), 100))}
    if query.shape == "identity":
        metric["__name__"] = draw(rarely("vllm:kv_cache_usage_perc", st.sampled_from(NAMES)))
        return {"metric": metric, "value": [1_700_000_000.0, draw(rarely("1", nasty_text))]}
    if query.shape == "buckets":
        metric["le"] = draw(rarely(draw(st.sampled_from(["0.1", "1", "5", "+Inf"])), st.just("x"), 200))
    if query.shape == "cache_config":
        metric |= {"num_gpu_blocks": draw(rarely("10000", st.sampled_from(["0", "-1", "9" * 30, "x"]))),
                   "block_size": draw(rarely("16", st.sampled_from(["0", "x"])))}
    if query.key == "sample_time":
        return {"metric": metric, "value": [1_700_000_000.0, draw(rarely("1700000000", nasty_text))]}
    return {"metric": metric, "value": [1_700_000_000.0, draw(numbers_text)]}


@st.composite
def answers(draw: st.DrawFn) -> list[bytes]:
    docs = []
    for query in SOURCE.queries:
        result = [draw(series(query, pod)) for pod in ("d-0", "d-1") if not draw(one_in(100))]
        doc: Any = {"status": "success", "data": {"resultType": "vector", "result": result}}
        if draw(one_in(400)):  # very rarely, not the API's shape at all
            doc = draw(json_value)
        docs.append(json.dumps(doc).encode())
    return docs


def _in_range(obs: Observation, limits: ReplicaLimits, now: float) -> None:
    # A trusted observation is dated by a clock: finite, and not after the poll that read it (by more than a
    # store's rounding: figures.SAMPLE_AHEAD_MAX_SECONDS).
    assert math.isfinite(obs.sample_time) and obs.sample_time <= now + SAMPLE_AHEAD_MAX_SECONDS, obs.sample_time
    replicas = max(len(obs.replicas), 1)
    for name in ("running", "waiting", "preemption_rate", "arrival_rate", "completion_rate", "mean_prompt_tokens",
                 "mean_cached_tokens", "mean_generated_tokens", "ttft_p50_seconds", "ttft_p95_seconds",
                 "ttft_p99_seconds", "mean_inter_token_seconds", "prefix_hit_rate", "kv_usage"):
        value = getattr(obs, name)
        assert value is None or (math.isfinite(value) and value >= 0), (name, value)
    assert obs.kv_usage is None or obs.kv_usage <= KV_USAGE_MAX
    assert obs.running is None or obs.running <= replicas * (limits.running or math.inf)
    assert obs.arrival_rate is None or obs.arrival_rate <= replicas * (limits.requests or math.inf)


def _planned(obs: Observation) -> None:
    result = plan(REQUEST, obs, obs.sample_time)
    assert result.layout is None or 0 <= result.layout.replicas <= REQUEST.replicas_max


@FUZZ
@given(answers())
def test_any_prometheus_answer_is_a_fault_or_figures_in_their_physical_range(docs: list[bytes]) -> None:
    expected = {KEY: Expected(replicas=2, limits=LIMITS)}
    try:
        snapshot = SOURCE._snapshot([_answer(doc, "vector") for doc in docs], expected, 1_700_000_000.0)
    except _Malformed:
        tally("prometheus answers", "MalformedAnswer")
        return
    obs = snapshot.get(*KEY)
    tally("prometheus answers", obs.fault.value)
    if obs.available:
        _in_range(obs, LIMITS, 1_700_000_000.0)
        _planned(obs)


# --- /metrics text ---------------------------------------------------------------------------------------
METRIC_NAMES = [n for f in (*GAUGES, *COUNTERS) for n in f.names] + [
    f"{n}{part}" for f in HISTOGRAMS for n in f.names for part in ("_sum", "_count", "_bucket")]
nasty_float = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 1e308, -1e9, 5.0]),
                        st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def engine(draw: st.DrawFn) -> EnginePayload:
    """An engine's cumulative metrics: a plausible replica, with now and then a figure no engine reports."""
    return EnginePayload(
        dialect=draw(rarely("vllm", st.just("sglang"), 4)),
        running=draw(rarely(float(draw(st.integers(0, 64))), nasty_float)),
        waiting=draw(rarely(float(draw(st.integers(0, 20))), nasty_float)),
        kv_usage=draw(rarely(draw(st.floats(0, 1)), nasty_float)),
        num_gpu_blocks=draw(rarely(10_000, st.sampled_from([0, 10**20]))))


@st.composite
def payloads(draw: st.DrawFn) -> list[str]:
    """Two scrapes of one pod: the payload now and after `gap` seconds of traffic (rates come from both)."""
    payload = draw(engine())
    first = payload.text()
    traffic = {"rps": draw(rarely(draw(st.floats(0, 5)), nasty_float)),
               "itl_s": draw(rarely(draw(st.floats(0.005, 0.2)), st.sampled_from([1e-7, 1e6, math.nan]))),
               "preempt_rps": draw(rarely(0.0, st.floats(0, 1), 5))}
    payload.advance(draw(st.floats(1.0, 60.0)), **traffic)
    second = payload.text()
    if draw(one_in(30)):  # a line that is not the text format, or a duplicated series
        junk = draw(st.sampled_from([*METRIC_NAMES, "junk"]))
        second += f"{junk}{{le=\"{draw(st.sampled_from(['x', '1']))}\"}} {draw(numbers_text)}\n"
    if draw(one_in(40)):
        second += draw(st.text(max_size=30)).replace("\n", " ") + "\n"
    return [first, second]


@FUZZ
@given(st.lists(payloads(), min_size=2, max_size=2), st.floats(0.5, 60.0))
def test_any_metrics_payload_is_a_fault_or_figures_in_their_physical_range(pods: list[list[str]], gap: float) -> None:
    now = [1_700_000_000.0]
    served = {"d-0": pods[0], "d-1": pods[1]}
    source = PodsSource([PodTarget(*KEY, pod, f"http://{pod}:8000/metrics") for pod in served],
                        clock=lambda: now[0], fetch=lambda t: served[t.pod].pop(0))
    expected = {KEY: Expected(frozenset(served), 2, LIMITS)}
    source.poll(expected)
    now[0] += gap
    obs = source.poll(expected).get(*KEY)
    tally("/metrics payloads", obs.fault.value)
    if obs.available:
        _in_range(obs, LIMITS, now[0])
        _planned(obs)


# --- CSV and JSON files ------------------------------------------------------------------------------------
bad_cell = st.one_of(nasty_text, st.text(alphabet=",\"\n x", max_size=4))


def _encoded(text: str, how: str) -> bytes:
    if how == "junk":  # bytes no UTF-8 text holds, after a readable start
        return text.encode("utf-8", errors="surrogatepass") + b"\xff\xfe\x80"
    return text.encode(how, errors="surrogatepass")


def as_file(texts: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """A text as a user's file holds it: mostly UTF-8, now and then with a byte-order mark (as
    spreadsheets save CSV), in UTF-16, or with bytes that are no text at all."""
    return st.builds(_encoded, texts, rarely("utf-8", st.sampled_from(["utf-8-sig", "utf-16", "junk"]), 10))


@st.composite
def samples_csv(draw: st.DrawFn) -> str:
    header = draw(rarely("batch,per_pass_ms", st.sampled_from(["batch,per_pass_ms,context_tokens", "batch,latency",
                                                               " batch , per_pass_ms ", ""]), 3))
    width = header.count(",") + 1
    rows = []
    for _ in range(draw(st.integers(0, 12))):
        batch = draw(st.integers(1, 256))
        good = [str(batch), repr(5.2 + 1.65 * batch * draw(st.floats(0.8, 1.2))), str(draw(st.integers(0, 10**6)))]
        rows.append(",".join(draw(rarely(good[i] if i < 3 else "1", bad_cell, 40)) for i in range(width)))
    return "\n".join([header, *rows]) + "\n"


@FUZZ
@given(as_file(samples_csv()),
       st.sampled_from([[], ["--model", "kimi-k2.6", "--tp", "8", "--context-tokens", "8000"]]))
def test_a_samples_csv_is_refused_in_one_line_or_fitted(data: bytes, extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "samples.csv"
        path.write_bytes(data)
        try:
            samples = read_samples(str(path))
        except UserError:
            tally("samples CSV", "refused in one line")
            return
        assert all(math.isfinite(v) and v > 0 for v in (*samples.batches, *samples.seconds))
        code = main(["fit", "--samples", str(path), "--output", "json", *extra])
    assert code in (0, 2)
    tally("samples CSV", "fitted" if code == 0 else "read, then refused by the fit in one line")


@st.composite
def trace_csv(draw: st.DrawFn) -> str:
    """A request log in one of the formats `--trace` reads: Azure's or BurstGPT's CSV, or Mooncake's JSON lines."""
    fmt = draw(st.sampled_from(["azure", "azure", "burstgpt", "mooncake"]))
    if fmt == "mooncake":
        return draw(trace_jsonl())
    header, width = (("TIMESTAMP,ContextTokens,GeneratedTokens", 3) if fmt == "azure" else
                     ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type", 6))
    rows = [draw(rarely(header, st.text(max_size=20), 10))]
    clock = 0.0
    for _ in range(draw(st.integers(0, 10))):
        clock += draw(st.floats(0, 5))
        prompt, answer = str(draw(st.integers(0, 100_000))), str(draw(st.integers(0, 5_000)))
        good = ([f"{clock:.3f}", prompt, answer] if width == 3 else
                [f"{clock:.3f}", "ChatGPT", prompt, answer, "0", "Conversation log"])
        bad = st.one_of(bad_cell, st.sampled_from(["2023-11-16 18:17:03.9799600", "2023-13-45 99:99:99", "now"]))
        rows.append(",".join(draw(rarely(cell, bad, 30)) for cell in good))
    return "\n".join(rows) + "\n"


@st.composite
def trace_jsonl(draw: st.DrawFn) -> str:
    bad_value = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                          st.integers(-10**30, 10**30), st.lists(st.integers(), max_size=2))
    lines = []
    clock = 0
    for _ in range(draw(st.integers(0, 10))):
        clock += draw(st.integers(0, 5_000))
        doc: dict[str, Any] = {"timestamp": clock, "input_length": draw(st.integers(0, 100_000)),
                               "output_length": draw(st.integers(0, 5_000)), "hash_ids": [1, 2]}
        for key in list(doc):
            doc[key] = draw(rarely(doc[key], bad_value, 30))
        if draw(st.integers(0, 29)) == 0:
            del doc[draw(st.sampled_from(sorted(doc)))]
        line = json.dumps(doc)
        lines.append(draw(rarely(line, st.sampled_from([line[:-1], "[1, 2]", "", "{}"]), 30)))
    return "\n".join(lines) + "\n"


@FUZZ
@given(as_file(trace_csv()))
def test_a_trace_is_refused_naming_its_line_or_read_into_finite_requests(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.csv"
        path.write_bytes(data)
        try:
            rows = load_trace(path)
        except UserError as exc:
            assert "\n" not in str(exc)
            tally("trace file", "refused in one line")
            return
    assert all(math.isfinite(r.offset) and r.offset >= 0 for r in rows)
    tally("trace file", "read")


HF_KEYS = ["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
           "intermediate_size", "vocab_size", "torch_dtype", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
           "v_head_dim", "q_lora_rank", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
           "n_shared_experts", "first_k_dense_replace", "sliding_window", "layer_types", "quantization_config",
           "text_config", "tie_word_embeddings"]
LLAMA = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16"}
hf_value = st.one_of(json_leaf, st.sampled_from([0, 1, 7, 8, 64, 4096, 10**12, float("nan"), float("inf"), -1,
                                                 "bfloat16", "fp8", "int3"]))


@FUZZ
@given(st.dictionaries(st.sampled_from(HF_KEYS), hf_value, max_size=6), st.booleans())
def test_a_config_json_is_refused_naming_its_field_or_planned(changes: dict[str, Any], from_llama: bool) -> None:
    config = {**(LLAMA if from_llama else {}), **changes}
    try:
        model = profile_from_hf_config(config, "fuzzed")
    except CatalogError as exc:
        assert "\n" not in str(exc)
        tally("config.json", "refused naming the field")
        return
    sizes = tuple(tp for tp in (1, 2, 4, 8) if tp_refusal(model, tp) is None)
    if not sizes:
        tally("config.json", "read; no TP size splits its heads (refused by plan and the spec)")
        return
    request = PlanRequest(model=model, gpu=B200, workload=workload_preset("chat"), slo=SloTarget(),
                          tp_sizes=sizes, concurrency_max=64)
    result = plan(request, None, 0.0)
    assert result.layout is None or result.layout.replicas >= 0
    tally("config.json", "read and planned")


@FUZZ
@given(st.dictionaries(st.sampled_from(HF_KEYS), hf_value, max_size=6))
def test_a_config_json_through_the_plan_command_never_shows_a_traceback(changes: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps({**LLAMA, **changes}))
        try:
            code = main(["plan", "--model", str(path), "--tp", "1,2", "--output", "json"])
        except InfertuneError:  # pragma: no cover - main answers these itself
            pytest.fail("an InfertuneError escaped main")
    assert code in (0, 1, 2)
    tally("config.json via `infertune plan`", {0: "planned", 1: "planned, infeasible", 2: "refused in one line"}[code])
