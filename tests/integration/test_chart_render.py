"""The chart lints and renders for every `ci/*-values.yaml` scenario, and what it renders is valid.

Built-in kinds are checked by kubernetes-validate --strict against Kubernetes 1.30. Kinds from
CRDs are checked against their own schemas: kopf's peering kinds against the CRDs the chart ships,
the PrometheusRule by `promtool check rules` (tests/unit/test_alert_rules.py). ServiceMonitor and
PodMonitor have no schema here (prometheus-operator's CRDs are not vendored), so they are checked
by the focused assertions below instead.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.integration.chart_support import (
    CHART,
    NAMESPACE,
    SCENARIOS,
    of_kind,
    one,
    render,
    render_files,
    scenario_values,
)

pytestmark = pytest.mark.integration
KUBE_VERSION = "1.30"
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ClusterKopfPeering", "KopfPeering"}


def _args(docs: list[dict[str, Any]]) -> list[str]:
    args: list[str] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _clean(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "__template__"}


def test_scenarios_cover_the_main_shapes() -> None:
    assert {"default", "ha", "namespaced", "no-monitoring", "no-crds"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_is_clean(scenario: str) -> None:
    report = helm_python.lint(CHART, scenario_values(scenario), strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, report


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_builtin_kinds_pass_kubernetes_validate_strict(scenario: str) -> None:
    docs = render(scenario_values(scenario))
    checked = 0
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(_clean(doc), KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['__template__']}: {doc['kind']}/{doc['metadata']['name']}: {exc.message}")
        checked += 1
    assert checked >= 6


@pytest.mark.parametrize("scenario", ["ha", "namespaced"])
def test_peering_objects_match_the_shipped_peering_crds(scenario: str) -> None:
    docs = render(scenario_values(scenario))
    crds = {c["spec"]["names"]["kind"]: c for c in of_kind(docs, "CustomResourceDefinition")}
    peerings = of_kind(docs, "ClusterKopfPeering") + of_kind(docs, "KopfPeering")
    assert peerings
    for obj in peerings:
        crd = crds[obj["kind"]]
        assert (crd["spec"]["scope"] == "Namespaced") == ("namespace" in obj["metadata"])
        jsonschema.validate(_clean(obj), crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def test_one_replica_recreates_and_two_roll_with_peering() -> None:
    single = one(render(), "Deployment")
    assert single["spec"]["replicas"] == 1 and single["spec"]["strategy"]["type"] == "Recreate"
    assert not any(a.startswith("--peering") for a in _args(render()))
    ha = render(scenario_values("ha"))
    deployment = one(ha, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert "--peering=infertune-ha" in _args(ha)
    assert one(ha, "ClusterKopfPeering")["metadata"]["name"] == "infertune-ha"


def test_operator_command_line() -> None:
    assert _args(render()) == [
        "--liveness=http://0.0.0.0:8080/healthz",
        "--metrics-port=9090",
        "--log-format=json",
        "--prometheus-url=http://prometheus-operated.monitoring.svc:9090",
    ]
    namespaced = _args(render(scenario_values("namespaced")))
    assert "--namespace=llm-prod" in namespaced and "--namespace=llm-staging" in namespaced
    ha = _args(render(scenario_values("ha")))
    assert "--prometheus-token-secret=prometheus-token" in ha and "--prometheus-token-key=token" in ha
    bare = _args(render(scenario_values("no-monitoring")))
    assert not any(a.startswith(("--metrics-port", "--prometheus-url")) for a in bare)


def test_the_allow_list_reaches_the_operator_as_flags_it_reads() -> None:
    from infertune.cli import build_parser

    urls = ["https://prometheus.monitoring.svc:9090/", "https://thanos.observability.svc/prom"]
    allowed = [a for a in _args(render({"prometheus": {"allowedUrls": urls}}))
               if a.startswith("--allowed-prometheus-url")]
    assert allowed == [f"--allowed-prometheus-url={u}" for u in urls]
    parsed = build_parser().parse_args(["run", *allowed])
    assert parsed.allowed_prometheus_url == urls


def test_pod_runs_non_root_on_a_read_only_root_filesystem() -> None:
    pod = one(render(), "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/tmp"]
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_image_digest_wins_over_tag() -> None:
    assert one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "ghcr.io/infertune/infertune:0.1.0"
    image = one(render(scenario_values("no-crds")), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert re.fullmatch(r"ghcr\.io/infertune/infertune@sha256:[0-9a-f]{64}", image["image"])


def test_podmonitor_relabels_into_the_labels_the_operator_groups_by() -> None:
    monitor = one(render(), "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "infertune"}
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    relabelings = monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in relabelings}
    # Prometheus exposes pod label `infertune.io/deployment` as this meta label (non-alphanumerics -> `_`).
    meta = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", "infertune.io/deployment")
    assert relabel == {"namespace": ["__meta_kubernetes_namespace"], "deployment": [meta],
                       "pod": ["__meta_kubernetes_pod_name"]}
    namespaced = one(render(scenario_values("namespaced")), "PodMonitor")
    assert namespaced["spec"]["namespaceSelector"] == {"matchNames": ["llm-prod", "llm-staging"]}


def test_servicemonitor_scrapes_the_metrics_service_and_keeps_resource_labels() -> None:
    docs = render()
    service = one(docs, "Service")
    monitor = one(docs, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    # The operator's gauges carry the InferenceDeployment's `namespace`; it must not be overwritten.
    assert endpoint["honorLabels"] is True


def test_no_monitoring_scenario_renders_no_prometheus_operator_kinds() -> None:
    kinds = {d["kind"] for d in render(scenario_values("no-monitoring"))}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule", "Service", "ConfigMap", "Pod"}


def test_helm_test_pod_probes_the_metrics_service() -> None:
    docs = render()
    test_pod = one(docs, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = test_pod["spec"]["containers"][0]["args"][0]
    assert f"http://infertune-metrics.{NAMESPACE}.svc:9090/metrics" in script
    compile(script, "helm-test", "exec")  # the embedded check is valid Python


def test_notes_show_a_valid_first_apply() -> None:
    from infertune.api.spec import parse_spec

    notes = render_files()["infertune/templates/NOTES.txt"]
    manifest = re.search(r"<<'YAML'\n(.*?)\n\s*YAML\n", notes, re.S)
    assert manifest, notes
    obj = yaml.safe_load(textwrap.dedent(manifest.group(1)))
    assert obj["kind"] == "InferenceDeployment"
    parse_spec(obj["spec"])
    assert "kubectl apply -f policies/" in notes


CONTRADICTIONS = [
    ({"operator": {"replicas": 2}}, "operator.replicas > 1 requires operator.peering.enabled=true"),
    ({"metrics": {"enabled": False}}, "serviceMonitor.enabled=true requires metrics.enabled=true"),
    ({"metrics": {"enabled": False}, "serviceMonitor": {"enabled": False}},
     "prometheusRule.enabled=true requires metrics.enabled=true"),
    ({"serviceMonitor": {"enabled": False}},
     "prometheusRule.enabled=true requires serviceMonitor.enabled=true"),
    ({"prometheus": {"url": "", "tokenSecret": {"name": "tok"}}}, "prometheus.tokenSecret.name is set but"),
    ({"operator": {"watchNamespaces": ["a", "b"]}, "podMonitor": {"namespaces": ["a"]}},
     'podMonitor.namespaces leaves out watched namespace "b"'),
    ({"serviceAccount": {"create": False}}, "serviceAccount.create=false requires serviceAccount.name"),
]


@pytest.mark.parametrize(("values", "message"), CONTRADICTIONS,
                         ids=[m.split(" ")[0] for _, m in CONTRADICTIONS])
def test_contradictory_values_fail_with_one_clear_line(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmError) as failure:
        render_files(values)
    text = str(failure.value)
    assert message in text and "\n" not in text.strip()


SCHEMA_REJECTS = [
    ({"operator": {"replica": 2}}, "additional properties 'replica' not allowed"),
    ({"prometheusRule": {"kvUsageRatio": 1.5}}, "/prometheusRule/kvUsageRatio"),
    ({"operator": {"watchNamespaces": ["Bad_Name"]}}, "/operator/watchNamespaces/0"),
    ({"serviceMonitor": {"interval": "soon"}}, "/serviceMonitor/interval"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"prometheus": {"allowedUrls": ["http://p:9090/?query=up"]}}, "/prometheus/allowedUrls/0"),
]


@pytest.mark.parametrize(("values", "where"), SCHEMA_REJECTS, ids=[w for _, w in SCHEMA_REJECTS])
def test_strict_schema_names_the_bad_value(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm_python.HelmValuesError, match=re.escape(where)):
        render_files(values)


def test_schema_is_closed_everywhere() -> None:
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("properties"):
            assert node.get("additionalProperties") is False, f"{path} accepts unknown keys"
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}")

    walk(schema, "values")
    assert set(schema["properties"]) - {"global"} == set(yaml.safe_load((CHART / "values.yaml").read_text()))
