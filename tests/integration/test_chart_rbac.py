"""The operator's RBAC: exactly the verbs it uses, where it uses them, and no Secret beyond the named ones."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.chart_support import NAMESPACE, RELEASE, of_kind, render, scenario_values

pytestmark = pytest.mark.integration

Grants = dict[tuple[str, str], tuple[str, ...]]

WORKLOAD = ("get", "list", "watch", "create", "patch", "delete")
NAMESPACED: Grants = {
    ("infertune.io", "inferencedeployments"): ("get", "list", "watch", "patch"),
    ("infertune.io", "inferencedeployments/status"): ("get", "patch"),
    ("apps", "deployments"): WORKLOAD,
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): WORKLOAD,
    ("", "services"): WORKLOAD,
    ("", "configmaps"): ("get",),
    ("", "events"): ("create", "patch"),
    ("", "pods"): ("list", "watch"),
}
CLUSTER: Grants = {
    ("infertune.io", "servingpolicies"): ("get", "list", "watch"),
    ("apiextensions.k8s.io", "customresourcedefinitions"): ("list", "watch"),
}
PEERING = ("get", "list", "watch", "patch")


def _grants(role: dict[str, Any]) -> Grants:
    grants: Grants = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                key = (group, resource)
                assert key not in grants, f"{key} granted twice"
                grants[key] = tuple(rule["verbs"])
    return grants


def _operator_roles(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The roles bound to the operator's ServiceAccount (not the aggregated roles meant for people)."""
    bound = {(b["metadata"].get("namespace"), b["roleRef"]["name"])
             for b in of_kind(docs, f"{kind}Binding")
             if b["subjects"] == [{"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}]}
    return [r for r in of_kind(docs, kind)
            if (r["metadata"].get("namespace"), r["metadata"]["name"]) in bound]


def test_cluster_wide_grants_exactly_what_the_operator_uses() -> None:
    docs = render()
    (cluster_role,) = _operator_roles(docs, "ClusterRole")
    assert _grants(cluster_role) == CLUSTER | NAMESPACED
    assert _operator_roles(docs, "Role") == []


def test_secrets_are_readable_only_by_name() -> None:
    docs = render(scenario_values("ha"))
    secret_rules = [(r["metadata"].get("namespace"), rule)
                    for r in of_kind(docs, "ClusterRole") + of_kind(docs, "Role")
                    for rule in r["rules"] if "secrets" in rule["resources"]]
    assert sorted((ns or "", rule["resourceNames"], rule["verbs"]) for ns, rule in secret_rules) == [
        ("", ["prometheus-reader-token"], ["get"]),  # what InferenceDeployments may reference
        (NAMESPACE, ["prometheus-token"], ["get"]),  # the operator's own Prometheus token
    ]
    default_rules = [rule for r in of_kind(render(), "ClusterRole") for rule in r["rules"]]
    assert not any("secrets" in rule["resources"] for rule in default_rules)


def test_ha_adds_cluster_peering_and_drops_pods_when_asked() -> None:
    docs = render(scenario_values("ha"))
    (cluster,) = [r for r in _operator_roles(docs, "ClusterRole") if r["metadata"]["name"] == RELEASE]
    expected = CLUSTER | NAMESPACED | {("kopf.dev", "clusterkopfpeerings"): PEERING,
                                       ("", "secrets"): ("get",)}
    del expected[("", "pods")]  # rbac.podsMetricsSource=false
    assert _grants(cluster) == expected


def test_watch_namespaces_use_roles_and_keep_only_cluster_scoped_rules_cluster_wide() -> None:
    docs = render(scenario_values("namespaced"))
    (cluster_role,) = _operator_roles(docs, "ClusterRole")
    assert _grants(cluster_role) == CLUSTER | {("", "namespaces"): ("list", "watch")}  # kopf follows them
    roles = _operator_roles(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["llm-prod", "llm-staging"]
    for role in roles:
        assert _grants(role) == NAMESPACED | {("kopf.dev", "kopfpeerings"): PEERING}


def test_aggregated_roles_give_people_view_edit_and_scale() -> None:
    docs = render()
    people = {r["metadata"]["name"]: r for r in of_kind(docs, "ClusterRole")
              if any(k.startswith("rbac.authorization.k8s.io/aggregate-to") for k in r["metadata"]["labels"])}
    assert set(people) == {f"{RELEASE}-view", f"{RELEASE}-edit"}
    view, edit = people[f"{RELEASE}-view"], people[f"{RELEASE}-edit"]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert "rbac.authorization.k8s.io/aggregate-to-view" not in edit["metadata"]["labels"]
    assert _grants(edit)[("infertune.io", "inferencedeployments/scale")] == ("update", "patch")
    ha_names = [r["metadata"]["name"] for r in of_kind(render(scenario_values("ha")), "ClusterRole")]
    assert not [n for n in ha_names if n.endswith(("-view", "-edit"))]


def test_rbac_off_renders_no_rbac() -> None:
    docs = render({"rbac": {"create": False}})
    assert not {d["kind"] for d in docs} & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
