"""The eighth sweep (2026-12-01): what the operator reads back each cycle, from its own status, from the
workload it applied, and from Prometheus, edited or answered to break it. Each case failed before its fix.

Found, in the resource's status (anyone with access to the status subresource can write it, and the CRD's
schema bounds little of it):
- `guardrails.recentRecommendations` holding an entry that is no `[time, replicas]` pair (`[1.0]`,
  `[t, 4, 0]`, `[t, null]`; the schema only says "arrays of numbers") ended every cycle in a ValueError or
  TypeError; `[t, 2.5]` was read as 2 replicas, `[t, -5]` as -5. Dropped now, as is a count above 1,024;
- a guardrail time in the future (`lastScaleUpAt` of the year 3000) held every scale and re-layout for ever,
  and an entry `[year 3000, 10^9]` held scale-down for ever; a time that is no number (a status written with
  no schema) ended the cycle. Such a time reads as now: its cooldown restarts once;
- `status.applied` with TP 0 or a negative count (the schema has no minimum) ended every cycle in a
  ValidationError once the workload was gone; TP 2^40 was written back as a LeaderWorkerSet. A layout read
  back must be one the operator could have applied (a TP of the allowed sizes, max-num-seqs up to 1,024,
  replicas up to 1,024), else it is not read;
- `applied.appliedAt` in the future kept every fit sample out for as long as that layout ran (the fit stopped
  learning), and `demandProfile.updatedAt` in the future kept the learnt profile from being written again;
- `fitSamples` rows dated in the future froze the fit (the newest sample decides a refit, the oldest is
  evicted), and rows with a pass of 10^6 s were fitted;
- `demandProfile` with an hour of 10^300 req/s was read and learnt on;
- a status field of the wrong type (`conditions: "x"`, `decisions: null`, `policy: "x"`, `fitSamples: []`),
  which only a CRD without its schema admits, ended the cycle in an AttributeError or TypeError.

In the workload: a pod-template annotation edited to `infertune.io/tensor-parallel-size: "3"` (or `"٨"`, `"4_0"`,
`"99999"`, max-num-seqs `"100000"`) was read as the layout that runs, and converge re-applied a workload at
TP 3, asking 3 GPUs of a model whose heads TP 3 does not split; a Deployment scaled past 1,024 replicas was
re-applied at that count. Such a workload's layout is not read: the operator's own record stands.

From Prometheus:
- a sample timestamp of NaN, +Inf, 1e12 or ten minutes after the poll was MetricsFresh, and then writing
  `status.observed.sampleTime` raised (ValueError, OverflowError), failing every cycle; a future one would also
  have held every later poll out of the history. Now NaNValues or ImplausibleValue;
- the deployment's TTFT quantiles (its own histogram query, which no pod check reads) of 10^9 s, 10^308 s or
  -5 s were trusted, and a TTFT past the SLO adds replicas at once. Now ImplausibleValue (0..1 day);
- the demand history (a range query a started operator seeds its bursts and season from) took rates of
  10^300 req/s, which sized the plan for 10^300 req/s, and points dated outside the range asked for.

A TTFT bucket bound sent twice, for the deployment or for a pod, was read by letting the last overwrite the first.

And four the CLI sweep (test_cli_inputs_sweep8.py) met in modules of this layer: a Prometheus URL with an unclosed
bracket or a port past 65535 taken in a spec, a spec that is a list read as an empty one, a pods target's port in
Arabic-Indic digits, and a guardrail wait that came out negative for a time after now.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from infertune.actuate.workload import TP_ANNOTATION, WorkloadKind, layout_of_workload
from infertune.api.observation import MetricsFault
from infertune.api.policy import parse_policy
from infertune.api.spec import parse_spec
from infertune.controller.status import (
    layout_of,
    observed,
    profile_from_status,
    state_from_status,
)
from infertune.errors import SpecError, UserError
from infertune.observe.figures import Expected
from infertune.observe.fitmemory import FitMemory
from infertune.observe.pods import PodTarget
from infertune.observe.prometheus import PrometheusSource, _answer
from infertune.planner.types import Layout, SloTarget
from tests.unit.test_fuzz import KEY as FUZZ_KEY
from tests.unit.test_fuzz import LIMITS
from tests.unit.test_reconciler import KEY, World

REPO = Path(__file__).resolve().parents[2]
NOW = 1_767_225_600.0
YEAR_3000 = 32_503_680_000.0


# --- status.guardrails ---------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", [[NOW - 60], [NOW - 60, 4, 0], [NOW - 60, None], [None, 4], [NOW - 60, 2.5],
                                   [NOW - 60, -5], [NOW - 60, 10**9], [NOW - 60, True], "4", None])
def test_a_recommendation_that_is_no_time_and_count_is_dropped(entry: object) -> None:
    status = {"guardrails": {"recentRecommendations": [entry, [NOW - 30, 3]], "lastScaleUpAt": NOW - 100}}
    state = state_from_status(status, NOW)
    assert state.recent_recommendations == ((NOW - 30, 3),)
    assert state.last_scale_up_at == NOW - 100  # the rest of the memory is kept


def test_a_recommendation_kept_as_numbers_still_reads_as_a_count() -> None:
    """The status model writes the pair as numbers, so 4 comes back as 4.0: still read."""
    assert state_from_status({"guardrails": {"recentRecommendations": [[NOW - 30, 4.0]]}}, NOW
                             ).recent_recommendations == ((NOW - 30, 4),)


@pytest.mark.parametrize("value", [YEAR_3000, NOW + 3600, -1.0, math.nan, math.inf, "yesterday", [1], True])
def test_a_guardrail_time_no_clock_of_ours_wrote_restarts_its_cooldown_once(value: object) -> None:
    """The year 3000 held every scale-up, scale-down and re-layout for ever; a garbled time ended the cycle."""
    status = {"guardrails": {"lastScaleUpAt": value, "lastScaleDownAt": value, "lastRelayoutAt": value,
                             "recentRecommendations": [[value, 8]]}}
    state = state_from_status(status, NOW)
    assert (state.last_scale_up_at, state.last_scale_down_at, state.last_relayout_at) == (NOW, NOW, NOW)
    assert state.recent_recommendations == ((NOW, 8),)  # held for one window, not for ever


@pytest.mark.parametrize("guardrails", ["x", [1, 2], 7])
def test_guardrails_that_are_no_object_are_not_read(guardrails: object) -> None:
    state = state_from_status({"guardrails": guardrails}, NOW)
    assert state.last_scale_up_at is None and state.recent_recommendations == ()


# --- status.applied and the workload's annotations --------------------------------------------------------
@pytest.mark.parametrize("applied", [
    {"tensorParallelSize": 0, "maxNumSeqs": 6, "replicas": 1},
    {"tensorParallelSize": -4, "maxNumSeqs": 6, "replicas": 1},
    {"tensorParallelSize": 3, "maxNumSeqs": 6, "replicas": 1},
    {"tensorParallelSize": 2**40, "maxNumSeqs": 6, "replicas": 1},
    {"tensorParallelSize": 4, "maxNumSeqs": 0, "replicas": 1},
    {"tensorParallelSize": 4, "maxNumSeqs": 10**9, "replicas": 1},
    {"tensorParallelSize": 4, "maxNumSeqs": 6, "replicas": -3},
    {"tensorParallelSize": 4, "maxNumSeqs": 6, "replicas": 10**9},
    {"tensorParallelSize": True, "maxNumSeqs": 6, "replicas": 1},
    {"tensorParallelSize": 4.5, "maxNumSeqs": 6, "replicas": 1},
])
def test_an_applied_layout_the_operator_could_not_have_applied_is_not_read(applied: object) -> None:
    assert layout_of(applied) is None  # type: ignore[arg-type]
    assert layout_of({"tensorParallelSize": 4, "maxNumSeqs": 6, "replicas": 0}) == Layout(4, 6, 0)


def _world_with_a_cycle() -> World:
    world = World()
    world.converge()
    world.observe(rate=1.0)
    world.tune()
    return world


def _workload(world: World) -> dict[str, Any]:
    return world.cluster.objects[(WorkloadKind.DEPLOYMENT.value, *KEY)]


@pytest.mark.parametrize("applied", [{"tensorParallelSize": 0}, {"maxNumSeqs": -1}, {"tensorParallelSize": 2**40}])
def test_a_garbled_applied_layout_with_the_workload_gone_does_not_end_the_cycle(applied: dict[str, int]) -> None:
    """TP 0 ended every cycle in a ValidationError (rolledFrom TP 0); TP 2^40 was written back as the layout
    that runs, a LeaderWorkerSet. The workload is re-created at the plan, as on a first visit."""
    world = _world_with_a_cycle()
    world.report.current["applied"] = {**world.report.current["applied"], **applied}
    del world.cluster.objects[(WorkloadKind.DEPLOYMENT.value, *KEY)]
    world.observe(rate=1.0)
    outcome = world.tune()
    assert outcome is not None
    written = world.report.current["applied"]
    assert written["tensorParallelSize"] in (1, 2, 4, 8) and written["workloadKind"] == "Deployment"


@pytest.mark.parametrize(("tp", "seqs"), [("3", "6"), ("٨", "6"), ("4_0", "6"), ("99999", "6"), ("+4", "6"),
                                          ("4", "100000"), ("4", "1_0")])
def test_a_layout_annotation_edited_on_the_workload_is_not_read(tp: str, seqs: str) -> None:
    world = World()
    world.converge()
    obj = copy.deepcopy(_workload(world))
    notes = obj["spec"]["template"]["metadata"]["annotations"]
    notes[TP_ANNOTATION], notes["infertune.io/max-num-seqs"] = tp, seqs
    assert layout_of_workload(obj) is None


def test_converge_does_not_apply_the_tp_an_edited_annotation_names() -> None:
    """Before, a resume re-applied the workload at TP 3: 3 GPUs a replica, a TP that splits no model's heads."""
    world = World()
    running = world.converge().layout
    _workload(world)["spec"]["template"]["metadata"]["annotations"][TP_ANNOTATION] = "3"
    again = world.converge()
    assert again.layout == running
    assert layout_of_workload(_workload(world)) in (running, None)  # nothing at TP 3 was applied
    gpus = {c["resources"]["limits"].get("nvidia.com/gpu") for obj in world.cluster.applied
            if obj["kind"] == "Deployment" for c in obj["spec"]["template"]["spec"]["containers"]}
    assert 3 not in gpus and "3" not in gpus


def test_a_workload_scaled_past_what_any_resource_may_run_is_not_read_as_the_layout() -> None:
    world = World()
    world.converge()
    obj = copy.deepcopy(_workload(world))
    obj["spec"]["replicas"] = 5_000
    assert layout_of_workload(obj) is None


# --- times the operator stamped in status -----------------------------------------------------------------
def test_an_applied_at_in_the_future_does_not_keep_every_fit_sample_out() -> None:
    from infertune.observe.fitmemory import FitSample

    world = _world_with_a_cycle()
    world.report.current["applied"] = {**world.report.current["applied"], "appliedAt": "2999-01-01T00:00:00Z"}
    world.observe(rate=1.0)
    world.hub.queue_samples(KEY, [FitSample(4.0 + i, 0.03 + 0.001 * i, 1.0, world.clock.now, 50_000.0)
                                  for i in range(8)])
    world.tune()
    rows = (world.report.current.get("fitSamples") or {}).get("layouts") or {}
    assert sum(len(r) for r in rows.values()) == 8


def test_a_demand_profile_written_in_the_future_is_written_again() -> None:
    world = _world_with_a_cycle()
    profile = {"daily": [1.0] * 24, "dailySamples": [10] * 24, "weekly": [1.0] * 7, "weeklySamples": [10] * 7,
               "updatedAt": "2999-01-01T00:00:00Z"}
    world.report.current["demandProfile"] = profile
    from infertune.controller.reconciler import Reconciler

    world.reconciler = Reconciler(world.cluster, world.hub, world.clock)  # a restart: read from status
    world.observe(rate=1.0)
    world.tune()
    assert world.report.current["demandProfile"]["updatedAt"] != "2999-01-01T00:00:00Z"


@pytest.mark.parametrize("hour", [1e300, 2e6])
def test_a_demand_profile_above_any_resources_demand_is_not_read(hour: float) -> None:
    raw = {"daily": [1.0] * 23 + [hour], "dailySamples": [10] * 24, "weekly": [1.0] * 7, "weeklySamples": [10] * 7}
    assert profile_from_status(raw).empty
    assert not profile_from_status({**raw, "daily": [1.0] * 24}).empty


def test_fit_rows_dated_in_the_future_or_past_physics_are_left_out() -> None:
    rows = [[4.0 + i, 0.03 + 0.001 * i, 1.0, NOW - 600 + i, 50_000.0] for i in range(6)]
    future = [[12.0, 0.05, 1.0, YEAR_3000, 50_000.0]]
    slow = [[12.0, 1e6, 1.0, NOW - 60, 50_000.0], [2e5, 0.05, 1.0, NOW - 60, 50_000.0]]
    memory = FitMemory.from_status({"version": 2, "layouts": {"8": rows + future + slow}}, now=NOW)
    assert len(memory.samples(8)) == 6


@pytest.mark.parametrize(("field", "value"), [("conditions", "x"), ("conditions", ["x"]), ("conditions", None),
                                              ("decisions", None), ("decisions", ["abc"]), ("policy", "x"),
                                              ("fitSamples", [1]), ("demandProfile", "x"), ("applied", ["x"])])
def test_a_status_field_of_the_wrong_type_does_not_end_the_cycle(field: str, value: object) -> None:
    """Only a CRD installed without its schema admits these; the cycle read them with .get() and iteration."""
    from infertune.controller.reconciler import Reconciler

    world = _world_with_a_cycle()
    world.report.current[field] = value
    world.reconciler = Reconciler(world.cluster, world.hub, world.clock)
    world.observe(rate=1.0)
    world.tune()  # no exception
    assert world.report.current["guardrails"] is not None


# --- Prometheus ----------------------------------------------------------------------------------------
SOURCE = PrometheusSource("http://prometheus.example:9090")
AT = 1_700_000_000.0
_VALUES = {"kv_usage": "0.4", "running": "4", "waiting": "0", "identity": "1", "resets": "0",
           "sample_time": f"{AT:.0f}"}


BUCKETS = (("0.1", "0"), ("1", "5"), ("+Inf", "10"))


def _poll(sample_time: str = f"{AT:.0f}", deployment_buckets: tuple[tuple[str, str], ...] = BUCKETS,
          pod_buckets: tuple[tuple[str, str], ...] = BUCKETS) -> Any:
    """One poll's answers for two healthy pods, with the sample time and the deployment's TTFT buckets given."""
    docs = []
    for query in SOURCE.queries:
        result: list[dict[str, Any]] = []
        if query.shape == "buckets" and query.level == "deployment":
            result = [{"metric": {"namespace": "ns", "deployment": "d", "le": le}, "value": [AT, v]}
                      for le, v in deployment_buckets]
        for pod in ("d-0", "d-1") if not result else ():
            metric = {"namespace": "ns", "deployment": "d", "pod": pod}
            if query.shape == "identity":
                metric["__name__"] = "vllm:kv_cache_usage_perc"
            if query.shape == "buckets":
                result += [{"metric": {**metric, "le": le}, "value": [AT, v]} for le, v in pod_buckets]
                continue
            if query.shape == "cache_config":
                metric |= {"num_gpu_blocks": "10000", "block_size": "16"}
            value = sample_time if query.key == "sample_time" else _VALUES.get(query.key, "1")
            result.append({"metric": metric, "value": [AT, value]})
        docs.append(json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode())
    snapshot = SOURCE._snapshot([_answer(doc, "vector") for doc in docs],
                                {FUZZ_KEY: Expected(replicas=2, limits=LIMITS)}, AT)
    return snapshot.get(*FUZZ_KEY)


def test_a_healthy_poll_is_still_fresh() -> None:
    """The control for the cases below (it passed before too)."""
    obs = _poll()
    assert obs.available and obs.ttft_p95_seconds == pytest.approx(1.0)


@pytest.mark.parametrize(("stamp", "fault"), [("NaN", MetricsFault.NOT_A_NUMBER), ("+Inf", MetricsFault.NOT_A_NUMBER),
                                              ("-Inf", MetricsFault.NOT_A_NUMBER), ("1e12", MetricsFault.IMPLAUSIBLE),
                                              (f"{AT + 600:.0f}", MetricsFault.IMPLAUSIBLE)])
def test_a_sample_time_that_is_no_time_is_a_fault_and_status_can_show_it(stamp: str, fault: MetricsFault) -> None:
    obs = _poll(sample_time=stamp)
    assert not obs.available and obs.fault is fault
    assert observed(obs, SloTarget())["sampleTime"].startswith("2023-")  # raised before, failing the cycle


@pytest.mark.parametrize("buckets", [(("0.1", "0"), ("1e9", "5"), ("+Inf", "10")),
                                     (("-5", "5"), ("1", "5"), ("+Inf", "10")),
                                     (("1e308", "1"), ("+Inf", "10"))])
def test_a_deployment_ttft_past_physics_is_not_trusted(buckets: tuple[tuple[str, str], ...]) -> None:
    obs = _poll(deployment_buckets=buckets)
    assert not obs.available and obs.fault is MetricsFault.IMPLAUSIBLE


def test_a_ttft_bucket_sent_twice_is_a_duplicate_series_not_one_overwriting_the_other() -> None:
    """`sum by (le)` answers one series a bound, and a pod's histogram has one a bound per scrape job. A repeated
    bound (two jobs scraping a pod, a relabelling that merged two histograms) was read by overwriting, and the SLO
    check reads the quantiles that came out."""
    twice = (("0.1", "0"), ("1", "5"), ("1", "9"), ("+Inf", "10"))
    for obs in (_poll(deployment_buckets=twice), _poll(pod_buckets=twice)):
        assert not obs.available and obs.fault is MetricsFault.DUPLICATE_SERIES


def _demand_history(values: list[list[Any]], start: float = AT - 3600, end: float = AT) -> list[float]:
    source = PrometheusSource("http://prometheus.example:9090")

    async def answer(*_: Any) -> list[dict[str, Any]]:
        return [{"metric": {"namespace": "ns", "deployment": "d"}, "values": values}]

    source._get = answer  # type: ignore[method-assign]
    found = asyncio.run(source.demand_history_async(start, end, "1m"))
    return [p.rate for p in found.get(("ns", "d"), [])]


@pytest.mark.parametrize("point", [[AT - 60, "1e300"], [AT - 60, "2e6"], [AT + 86_400, "5"], [YEAR_3000, "5"],
                                   [AT - 7200, "5"]])
def test_a_demand_history_point_past_physics_or_outside_the_range_is_dropped(point: list[Any]) -> None:
    """10^300 req/s seeded the burst figure and the plan was sized for it; a point in the future stays at the
    head of the history the burst and the trend read."""
    assert _demand_history([[AT - 120, "1.5"], point]) == [1.5]


# --- found by the CLI sweep, fixed where they belong (api/, observe/pods.py, planner/checks.py) -----------------
@pytest.mark.parametrize("url", ["http://[::1", "http://prometheus:99999", "https://prometheus:0"])
def test_a_prometheus_url_no_request_can_go_to_is_refused_in_the_spec(url: str) -> None:
    """The CRD's pattern admits these; `render` and `plan` planned on them, and the operator's source refused
    them only on every poll."""
    example = yaml.safe_load((REPO / "examples" / "kimi-k2.6-b200.yaml").read_text())
    spec = {**example["spec"], "metrics": {"source": "Prometheus", "prometheus": {"url": url}}}
    with pytest.raises(SpecError, match=r"spec\.metrics\.prometheus\.url"):
        parse_spec(spec)


def test_a_spec_that_is_not_an_object_is_named_as_such() -> None:
    """`raw or {}` read a list as an empty spec and named a missing field (`spec.model: Field required`)."""
    for raw in ([], ["model"], "x", 5):
        with pytest.raises(SpecError, match="must be an object"):
            parse_spec(raw)
        with pytest.raises(SpecError, match="must be an object"):
            parse_policy(raw)
    assert parse_policy(None) == parse_policy({})  # no spec at all: every default, as before


def test_a_pods_target_port_in_another_scripts_digits_is_refused() -> None:
    with pytest.raises(UserError, match="numeric port"):
        PodTarget.parse("127.0.0.1:\u0663")
    assert PodTarget.parse("127.0.0.1:8000").url == "http://127.0.0.1:8000/metrics"


def test_a_guardrail_time_after_now_counts_as_now_not_as_a_negative_wait() -> None:
    from infertune.planner.checks import since

    assert since(2_000.0, 1_000.0) == 0.0 and since(None, 1_000.0) == float("inf") and since(400.0, 1_000.0) == 600.0


def test_a_demand_history_with_two_series_for_one_deployment_is_not_seeded() -> None:
    """The range query sums by deployment: two series for one (a relabelling that split it) interleaved two
    histories at every step, and the burst figure read the higher of each pair."""
    source = PrometheusSource("http://prometheus.example:9090")
    one = [[AT - 120, "1.0"], [AT - 60, "1.0"]]

    async def answer(*_: Any) -> list[dict[str, Any]]:
        return [{"metric": {"namespace": "ns", "deployment": "d"}, "values": one},
                {"metric": {"namespace": "ns", "deployment": "d"}, "values": [[AT - 120, "9.0"], [AT - 60, "9.0"]]},
                {"metric": {"namespace": "ns", "deployment": "e"}, "values": one}]

    source._get = answer  # type: ignore[method-assign]
    found = asyncio.run(source.demand_history_async(AT - 3600, AT, "1m"))
    assert ("ns", "d") not in found and [p.rate for p in found[("ns", "e")]] == [1.0, 1.0]


@pytest.mark.parametrize(("section", "field", "text"), [("slo", "minStreamTokensPerSecond", "25"),
                                                        ("engine", "startupSeconds", "900"),
                                                        ("hardware", "poolGpus", "32")])
def test_a_number_written_as_a_string_is_refused_as_the_api_server_refuses_it(section: str, field: str,
                                                                              text: str) -> None:
    """pydantic's lax mode read `"25"` as 25, so `render` and `plan -f` planned a resource kubectl cannot apply."""
    example = yaml.safe_load((REPO / "examples" / "kimi-k2.6-b200.yaml").read_text())
    spec = copy.deepcopy(example["spec"])
    spec.setdefault(section, {})[field] = text
    with pytest.raises(SpecError, match=rf"spec\.{section}\.{field}: expected a number, got the string '{text}'"):
        parse_spec(spec)
    spec[section][field] = int(text)
    parse_spec(spec)  # the same figure unquoted is taken
