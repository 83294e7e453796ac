"""`infertune run` as a process, for what its flags do that the chart tests cannot see: the default
Prometheus is queried with the bearer token from a Secret in the operator's own namespace
(`--prometheus-token-secret/-key`, POD_NAMESPACE), a rotated token is picked up without a restart, and
`--log-format=plain` writes lines for people. Against kmock's emulator in-process and Debian's
Prometheus behind a proxy that demands the token (test_operator_sources.TokenProxy)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_operator_lifecycle import (
    INFD,
    NS,
    condition,
    declare,
    eventually,
    post,
    post_policies,
    resource,
    stored,
)
from tests.integration.test_operator_sources import TokenProxy, _fleet
from tests.prometheus_fixture import ScrapeTarget, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
OWN_NAMESPACE = "infertune-system"
NAME_EXAMPLE = "kimi-k2"  # resource()'s name


def _secret(token: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "prometheus-token", "namespace": OWN_NAMESPACE, "uid": "uid-prometheus-token",
                         "resourceVersion": "1"},
            "data": {"token": base64.b64encode(token.encode()).decode()}}


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": server}}],
        "users": [{"name": "kmock", "user": {}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}]}))
    return path


async def test_the_default_prometheus_gets_the_token_from_the_operators_namespace(
        kmock: Any, prometheus_factory: Any, tmp_path: Path) -> None:
    declare(kmock)
    verbs = {"get", "list", "watch", "create", "patch", "delete"}
    kmock.resources["v1/secrets"] = kmock.ResourceInfo(kind="Secret", namespaced=True, verbs=verbs)
    await post_policies(kmock)
    await post(kmock, _secret("s3cret"), "v1/secrets")
    with _fleet() as fleet:
        prom = prometheus_factory([ScrapeTarget(fleet.targets[0], namespace=NS, deployment=NAME_EXAMPLE,
                                                pod=f"{NAME_EXAMPLE}-0")])
        prom.wait_for_samples("vllm:kv_cache_usage_perc", samples=3)
        proxy = TokenProxy(prom.url, "s3cret")
        env = {**os.environ, "KUBECONFIG": str(_kubeconfig(tmp_path / "kubeconfig", str(kmock.url).rstrip("/"))),
               "POD_NAMESPACE": OWN_NAMESPACE, "POD_NAME": "infertune-test"}
        log = tmp_path / "operator.log"
        argv = [sys.executable, "-m", "infertune.cli", "run", f"--prometheus-url={proxy.url}",
                "--prometheus-token-secret=prometheus-token", "--prometheus-token-key=token",
                f"--liveness=http://127.0.0.1:{free_port()}/healthz", "--metrics-port=0", "--log-format=plain",
                "--poll-seconds=1", "--cycle-seconds=1", "--metrics-window=10s"]
        with open(log, "wb") as out:
            process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            doc = resource()
            doc["spec"]["metrics"] = {"source": "Prometheus"}  # the operator's default Prometheus
            await post(kmock, doc, INFD)
            fresh = await eventually(lambda: (c := condition(stored(kmock, INFD, NAME_EXAMPLE), "MetricsAvailable"))
                                     and c["status"] == "True" and c, timeout=60)
            assert proxy.accepted > 0 and proxy.refused == 0  # every query carried the Secret's token

            # Rotation: the Secret changes, the proxy wants the new token; no restart in between.
            async with kmock.patch(f"/api/v1/namespaces/{OWN_NAMESPACE}/secrets/prometheus-token",
                                   json={"data": _secret("n3w")["data"]},
                                   headers={"Content-Type": "application/merge-patch+json"}) as answer:
                assert answer.status < 300
            proxy.token = "n3w"
            accepted_before = proxy.accepted
            await eventually(lambda: proxy.accepted > accepted_before, timeout=20)
        finally:
            process.terminate()
            await asyncio.to_thread(process.wait, 20)
            proxy.close()
    assert fresh["reason"] == "MetricsFresh"
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert lines and not any(line.startswith("{") for line in lines), lines[:5]  # plain, not JSON
    assert any("[INFO" in line for line in lines)
