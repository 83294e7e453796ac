"""Where the real operator reads each resource's metrics, and what it keeps: a Prometheus named in
`spec.metrics` (bearer token from a Secret), the pods themselves, the fit across a restart, a model
ConfigMap edited in place, and the cliff early warning in CacheHeadroom and on /metrics."""

from __future__ import annotations

import base64
import http.server
import json
import random
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import generate_latest

from infertune.api.observation import Observation
from infertune.observe.snapshot import Snapshot
from infertune_lab.sim import ReplicaConfig
from infertune_lab.sim.live import LiveFleet
from infertune_lab.sim.traffic import OpenSessions, poisson, shape
from tests.integration.test_operator_lifecycle import (
    INFD,
    NS,
    condition,
    declare,
    eventually,
    operator,
    post,
    post_policies,
    resource,
    stored,
)
from tests.prometheus_fixture import ScrapeTarget
from tests.unit.test_hf_config import LLAMA_8B

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
NAME = "kimi-k2"


def _fleet(rate: float = 0.3) -> LiveFleet:
    traffic = OpenSessions(shape("coding-agent"), poisson(rate, random.Random(3)))
    return LiveFleet([ReplicaConfig(tp=4, max_num_seqs=8)], traffic, names=[f"{NAME}-0"])


class TokenProxy:
    """What a secured Prometheus looks like to a client (kube-rbac-proxy or oauth-proxy in front of it):
    Debian's Prometheus 2.42 has no bearer-token auth of its own, so this stdlib proxy demands the
    token and forwards everything else to the real server untouched."""

    def __init__(self, upstream: str, token: str) -> None:
        self.token = token
        self.accepted = 0
        self.refused = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                if self.headers.get("Authorization") != f"Bearer {proxy.token}":
                    proxy.refused += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                proxy.accepted += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                request = urllib.request.Request(upstream + self.path, data=body, method=self.command)
                if self.headers.get("Content-Type"):
                    request.add_header("Content-Type", self.headers["Content-Type"])
                try:
                    with urllib.request.urlopen(request, timeout=10) as answer:
                        code, payload = answer.status, answer.read()
                except urllib.error.HTTPError as exc:
                    code, payload = exc.code, exc.read()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _forward

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _secret(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "1"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def _declare_more(kmock: Any) -> None:
    verbs = {"get", "list", "watch", "create", "patch", "delete"}
    kmock.resources["v1/secrets"] = kmock.ResourceInfo(kind="Secret", namespaced=True, verbs=verbs)
    kmock.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", namespaced=True, verbs=verbs)


async def test_a_resource_reads_its_own_prometheus_with_a_token_from_a_secret(kmock: Any,
                                                                            prometheus_factory: Any) -> None:
    declare(kmock)
    _declare_more(kmock)
    await post_policies(kmock)
    with _fleet() as fleet:
        prom = prometheus_factory([ScrapeTarget(fleet.targets[0], namespace=NS, deployment=NAME,
                                                pod=f"{NAME}-0")])
        prom.wait_for_samples("vllm:kv_cache_usage_perc", samples=3)
        proxy = TokenProxy(prom.url, "s3cret")
        try:
            await post(kmock, _secret("prom-token", token="s3cret"), "v1/secrets")
            doc = resource()
            # The proxy is plain http on loopback: the resource says explicitly that the token may go there.
            doc["spec"]["metrics"] = {"source": "Prometheus", "prometheus": {
                "url": proxy.url, "bearerTokenSecretRef": {"name": "prom-token", "key": "token"},
                "allowTokenOverHttp": True}}
            locked_out = resource()
            locked_out["metadata"] |= {"name": "other", "uid": "uid-other"}
            locked_out["spec"]["metrics"] = {"prometheus": {
                "url": proxy.url, "bearerTokenSecretRef": {"name": "missing-token", "key": "token"},
                "allowTokenOverHttp": True}}
            async with operator(kmock, metrics_window="10s"):
                await post(kmock, doc, INFD)
                await post(kmock, locked_out, INFD)
                fresh = await eventually(lambda: (c := condition(stored(kmock, INFD, NAME), "MetricsAvailable"))
                                         and c["status"] == "True" and c, timeout=40)
                refused = await eventually(
                    lambda: (c := condition(stored(kmock, INFD, "other"), "MetricsAvailable"))
                    and c["status"] == "False" and c, timeout=20)
                observed = stored(kmock, INFD, NAME)["status"]["observed"]
        finally:
            proxy.close()
    assert fresh["reason"] == "MetricsFresh"
    assert 0 <= observed["kvUsagePercent"] <= 100
    assert proxy.accepted > 0 and proxy.refused == 0  # every query carried the Secret's token
    assert refused["reason"] == "CredentialsUnavailable"
    assert "missing-token" in refused["message"]


def _pod(name: str, ip: str, ready: bool) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "1",
                         "labels": {"infertune.io/deployment": NAME}},
            "status": {"phase": "Running", "podIP": ip,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


async def test_the_pods_source_scrapes_the_ready_pods_of_the_deployment(kmock: Any) -> None:
    declare(kmock)
    _declare_more(kmock)
    await post_policies(kmock)
    with _fleet() as fleet:
        host, port = fleet.targets[0].rsplit(":", 1)
        await post(kmock, _pod(f"{NAME}-0", host, ready=True), "v1/pods")
        # Loading: not ready, so neither scraped nor counted as missing.
        await post(kmock, _pod(f"{NAME}-1", "127.0.0.2", ready=False), "v1/pods")
        doc = resource()
        doc["spec"]["metrics"] = {"source": "Pods"}
        doc["spec"]["engine"]["port"] = int(port)
        async with operator(kmock, poll_seconds=0.5):
            await post(kmock, doc, INFD)
            fresh = await eventually(lambda: (c := condition(stored(kmock, INFD, NAME), "MetricsAvailable"))
                                     and c["status"] == "True" and c, timeout=30)
            observed = stored(kmock, INFD, NAME)["status"]["observed"]
    assert fresh["reason"] == "MetricsFresh"
    assert "kvUsagePercent" in observed and observed["running"] >= 0


@dataclass
class LearningSource:
    """Feeds the timer (batch, seconds per pass) windows, one new window per poll, as a pods source
    accumulates them; the observe suite tests the real sources' windows."""

    batches: tuple[float, ...] = (2, 4, 8, 16)
    name: str = "learning"
    polls: int = 0
    observations: dict[tuple[str, str], Observation] = field(default_factory=dict)

    def poll(self, expected: Any = None, now: float | None = None) -> Snapshot:
        self.polls += 1
        at = now or time.time()
        batch = self.batches[self.polls % len(self.batches)]
        obs = Observation(namespace=NS, deployment=NAME, sample_time=at, available=True, running=batch,
                          waiting=0.0, kv_usage=0.3, mean_inter_token_seconds=0.0052 + 0.00165 * batch,
                          fit_samples=((batch, 0.0052 + 0.00165 * batch, 84_000.0),))
        return Snapshot(time=at, observations={(NS, NAME): obs}, source=self.name)

    def close(self) -> None:
        pass


def _fit_rows(infd: dict[str, Any] | None) -> int:
    return len(_rows(infd))


def _rows(infd: dict[str, Any] | None) -> set[tuple[float, ...]]:
    layouts = (((infd or {}).get("status") or {}).get("fitSamples") or {}).get("layouts") or {}
    return {tuple(row) for rows in layouts.values() for row in rows}


async def test_what_the_fit_learned_survives_an_operator_restart(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    async with operator(kmock, LearningSource(), poll_seconds=0.2):
        await post(kmock, resource(), INFD)
        learned = await eventually(lambda: (o := stored(kmock, INFD, NAME)) and _fit_rows(o) >= 6 and o,
                                   timeout=30)
    before = _fit_rows(learned)
    assert learned["status"]["fit"]["samples"] >= 6
    async with operator(kmock, LearningSource(), poll_seconds=0.2):
        grown = await eventually(lambda: (o := stored(kmock, INFD, NAME)) and _fit_rows(o) > before and o,
                                 timeout=30)
    # The restarted operator added to what the first one learned instead of starting from nothing:
    # every window the first one kept is still there, beside the new ones.
    assert _rows(learned) < _rows(grown)
    assert grown["status"]["fit"]["samples"] > learned["status"]["fit"]["samples"]
    # The physics fit of the line's samples: it explains them, over the batches and context they span.
    fit = grown["status"]["fit"]
    assert fit["r2"] > 0.95 and (fit["batchMin"], fit["batchMax"]) == (2, 16) and fit["contextMin"] == 84_000
    assert set(fit["terms"]) == {"overhead", "weights", "kv", "compute"}


async def test_an_edited_model_configmap_is_noticed_on_the_next_cycle(kmock: Any) -> None:
    declare(kmock)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m-config", "namespace": NS,
                                                                "uid": "cm", "resourceVersion": "1"},
          "data": {"config.json": json.dumps(LLAMA_8B)}}
    await post(kmock, cm, "v1/configmaps")
    doc = resource(tensorParallelSizes=[1, 2])
    doc["spec"].pop("policyRef")
    doc["spec"]["model"] = {"weights": "meta-llama/Llama-3.1-8B", "configMapRef": {"name": "m-config"}}
    doc["spec"]["hardware"] |= {"gpu": "h100", "gpusPerNode": 8, "poolGpus": 8}
    async with operator(kmock):
        await post(kmock, doc, INFD)
        await eventually(lambda: (c := condition(stored(kmock, INFD, NAME), "InvalidSpec"))
                         and c["status"] == "False")
        async with kmock.patch(f"/api/v1/namespaces/{NS}/configmaps/m-config",
                               json={"data": {"config.json": '{"num_hidden_layers": 32,'}},
                               headers={"Content-Type": "application/merge-patch+json"}) as response:
            assert response.status < 300
        broken = await eventually(lambda: (c := condition(stored(kmock, INFD, NAME), "InvalidSpec"))
                                  and c["status"] == "True" and c)
    assert broken["message"].startswith("spec.model.configMapRef")


@dataclass
class FillingSource:
    """KV use climbing 1% of the pool per 10 s of sample time: the trend the early warning extrapolates."""

    name: str = "filling"
    start: float = field(default_factory=lambda: time.time() - 120)

    def poll(self, expected: Any = None, now: float | None = None) -> Snapshot:
        at = now or time.time()
        usage = 0.40 + 0.001 * (at - self.start)
        obs = Observation(namespace=NS, deployment=NAME, sample_time=at, available=True, running=6.0,
                          waiting=0.0, kv_usage=usage, mean_inter_token_seconds=0.02, preemption_rate=0.0)
        return Snapshot(time=at, observations={(NS, NAME): obs}, source=self.name)

    def close(self) -> None:
        pass


async def test_a_rising_working_set_sets_cache_headroom_and_exports_time_to_cliff(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    source = FillingSource()
    # Pre-history: the trend needs 30 s of points, which a test does not wait for in real time.
    async with operator(kmock, source, poll_seconds=0.2) as ctx:
        for back in range(120, 0, -10):
            ctx.hub.history.record(source.poll(now=time.time() - back))
        await post(kmock, resource(mode="Recommend"), INFD)
        warned = await eventually(lambda: (c := condition(stored(kmock, INFD, NAME), "CacheHeadroom"))
                                  and c["status"] == "False" and c, timeout=20)
        observed = stored(kmock, INFD, NAME)["status"]["observed"]
        exposition = generate_latest(ctx.telemetry.registry).decode()
    assert warned["reason"] == "ApproachingCliff" and "cliff in ~" in warned["message"]
    # 0.1%/s from ~52%: about 480 s to the cliff, inside the 900 s warning horizon.
    assert 300 < observed["timeToCliffSeconds"] < 700
    assert 40 < observed["kvHeadroomPercent"] < 60
    line = next(x for x in exposition.splitlines() if x.startswith("infertune_time_to_cliff_seconds{"))
    assert 300 < float(line.rsplit(" ", 1)[1]) < 700
