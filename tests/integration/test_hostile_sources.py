"""One tenant must not hurt another: the real poller against sources that answer slowly, drip bytes,
send too much, lie, redirect or ask for a token, beside a healthy real Prometheus; and the real
operator (kopf on kmock's emulator) shutting down while a source is still dripping.

The hostile peers are small aiohttp servers on loopback, hand-written because they are what is under
test: no library plays a Prometheus that misbehaves on purpose. The healthy source is Debian's
Prometheus scraping a vLLM payload.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from infertune.api.observation import MetricsFault
from infertune.controller.hub import MetricsHub
from infertune.controller.poller import Poller, poll_deadline
from infertune.controller.sources import Route, SourceRegistry, SourceSpec
from infertune.observe import Expected, PrometheusSource
from infertune.observe.http import AllowList
from infertune.observe.prometheus import MAX_ANSWER_BYTES
from tests.integration.test_operator_lifecycle import (
    INFD,
    condition,
    declare,
    eventually,
    operator,
    post,
    post_policies,
    resource,
    stored,
)
from tests.prometheus_fixture import EnginePayload, PayloadServer, ScrapeTarget

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
SECRET = "tenant-b-secret-label"
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Hostile:
    """An HTTP peer that misbehaves as `handler` says; it records what it was sent."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[web.Request] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> Hostile:
        async def record(request: web.Request) -> web.StreamResponse:
            self.requests.append(request)
            return await self.handler(request)

        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", record)
        self.runner = web.AppRunner(app, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *_: Any) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


def slow(seconds: float) -> Handler:
    """Answers every query correctly, each after `seconds`: fine alone, ruinous one after another."""
    async def handler(_: web.Request) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return web.json_response(EMPTY)
    return handler


DISCONNECTED: list[float] = []  # when a dripping answer's client hung up


async def drip(request: web.Request) -> web.StreamResponse:
    """Promises a megabyte and sends a byte every 100 ms: a per-read timeout never fires."""
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.content_length = 1 << 20
    await response.prepare(request)
    try:
        while True:
            await response.write(b" ")
            await asyncio.sleep(0.1)
    except (asyncio.CancelledError, ConnectionError):
        DISCONNECTED.append(time.monotonic())
        raise


async def flood(request: web.Request) -> web.StreamResponse:
    """Streams far more than any Prometheus answer, with no length announced."""
    response = web.StreamResponse(status=200)
    await response.prepare(request)
    chunk = b"[" * 65536
    for _ in range(MAX_ANSWER_BYTES // len(chunk) + 16):
        await response.write(chunk)
    return response


async def lies(_: web.Request) -> web.StreamResponse:
    """API-shaped JSON whose values are another team's label values instead of numbers."""
    return web.json_response({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "vllm:kv_cache_usage_perc", "namespace": "ns", "deployment": "d", "pod": SECRET},
         "value": [1, SECRET]}]}})


async def rejects(_: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "error", "errorType": "bad_data", "error": f"parse error near {SECRET}"},
                             status=400)


def redirect_to(target: str) -> Handler:
    async def handler(_: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(target)
    return handler


def _hub(specs: dict[tuple[str, str], SourceSpec]) -> MetricsHub:
    hub = MetricsHub()
    for key, spec in specs.items():
        hub.route(key, Route(spec, 8000))
    return hub


async def _run(poller: Poller, seconds: float) -> None:
    task = asyncio.create_task(poller.run_forever())
    await asyncio.sleep(seconds)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await poller.aclose()


@pytest.fixture
async def healthy(prometheus_factory: Any) -> AsyncIterator[str]:
    """A real Prometheus scraping one vLLM replica of ns/healthy."""
    payload = EnginePayload(running=4, kv_usage=0.4)
    engine = PayloadServer(lambda: payload.text())
    prom = prometheus_factory([ScrapeTarget(engine.address, namespace="ns", deployment="healthy",
                                            pod="healthy-0")])
    await asyncio.to_thread(prom.wait_for_samples, "vllm:kv_cache_usage_perc", samples=3)
    try:
        yield prom.url
    finally:
        engine.close()


async def test_a_slow_and_a_dripping_source_hold_only_their_own_resources(healthy: str) -> None:
    async with Hostile(slow(0.8)) as slow_prom, Hostile(drip) as drip_prom:
        good = SourceSpec("Prometheus", healthy, timeout=1.0)
        sluggish = SourceSpec("Prometheus", slow_prom.url, timeout=1.0)
        dripping = SourceSpec("Prometheus", drip_prom.url, timeout=1.0)
        hub = _hub({("ns", "healthy"): good, ("team-b", "slow"): sluggish, ("team-c", "drip"): dripping})
        polls: dict[SourceSpec, list[float]] = {good: [], sluggish: [], dripping: []}
        ingest = hub.ingest

        def counted(spec: SourceSpec, *args: Any, **kwargs: Any) -> None:
            polls[spec].append(time.monotonic())
            ingest(spec, *args, **kwargs)

        hub.ingest = counted  # type: ignore[method-assign]
        poller = Poller(None, hub, SourceRegistry(None), time.time, poll_seconds=0.25)  # type: ignore[arg-type]
        started = time.monotonic()
        await _run(poller, 5.0)

    # The healthy tenant is read every interval, its first snapshot long before any hostile deadline.
    assert polls[good] and polls[good][0] - started < 1.0 and len(polls[good]) >= 8
    assert hub.observation(("ns", "healthy")).available
    # Each hostile source ends its poll at its own deadline with SourceTimeout (25 queries x 0.8 s one
    # after another would have taken 20 s; the drip would never have ended).
    for spec in (sluggish, dripping):
        assert polls[spec] and polls[spec][0] - started < poll_deadline(spec) + 1.0
    assert hub.observation(("team-b", "slow")).fault is MetricsFault.TIMEOUT
    drip_obs = hub.observation(("team-c", "drip"))
    assert drip_obs.fault is MetricsFault.TIMEOUT and not drip_obs.available
    assert "within 1s" in drip_obs.message  # the request's own deadline, not a per-read timeout


async def test_stopping_the_poller_does_not_wait_for_a_dripping_source() -> None:
    async with Hostile(drip) as drip_prom:
        spec = SourceSpec("Prometheus", drip_prom.url, timeout=30.0)
        poller = Poller(None, _hub({("team-c", "drip"): spec}), SourceRegistry(None), time.time,  # type: ignore[arg-type]
                        poll_seconds=0.1)
        task = asyncio.create_task(poller.run_forever())
        await eventually(lambda: drip_prom.requests, timeout=5)
        await asyncio.sleep(0.5)
        started = time.monotonic()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await poller.aclose()
        assert time.monotonic() - started < 0.5
        # What asyncio.run does last, and what hung the operator's exit before: no worker thread is
        # left blocked in a read from the source.
        await asyncio.wait_for(asyncio.get_running_loop().shutdown_default_executor(), 1.0)


@pytest.mark.parametrize("handler, fault", [
    (flood, MetricsFault.MALFORMED), (lies, MetricsFault.MALFORMED), (rejects, MetricsFault.MALFORMED),
])
async def test_a_lying_source_is_a_fault_that_quotes_nothing_it_sent(handler: Handler, fault: MetricsFault) -> None:
    async with Hostile(handler) as evil:
        source = PrometheusSource(evil.url, timeout=5)
        snap = await source.poll_async({("ns", "d"): Expected()})
        await source.aclose()
    assert snap.fault is fault and not snap.get("ns", "d").available
    assert SECRET not in snap.message and SECRET not in snap.get("ns", "d").message
    assert snap.message.startswith(evil.url)


async def test_a_redirect_is_not_followed_and_the_token_stays_home() -> None:
    async with Hostile(slow(0)) as elsewhere, Hostile(redirect_to("/moved")) as bouncing:
        bouncing.handler = redirect_to(elsewhere.url + "/api/v1/query")
        source = PrometheusSource(bouncing.url, token="s3cret", allow_token_over_http=True, timeout=2)
        snap = await source.poll_async()
        await source.aclose()
    assert snap.fault is MetricsFault.UNREACHABLE and "redirect" in snap.message
    assert elsewhere.requests == []  # the token never reached the server it was redirected to


async def test_the_token_is_never_sent_over_plain_http_unless_the_resource_says_so() -> None:
    async with Hostile(slow(0)) as plain:
        registry = SourceRegistry(None)  # type: ignore[arg-type]
        spec = SourceSpec("Prometheus", plain.url, token=("Secret", "ns", "t", "token"))
        registry.get = lambda s: _built(registry, s)  # type: ignore[method-assign]
        hub = _hub({("ns", "d"): spec})
        await Poller(None, hub, registry, time.time).poll_once()  # type: ignore[arg-type]
        assert plain.requests == []
        assert hub.observation(("ns", "d")).fault is MetricsFault.CREDENTIALS
        allowed = SourceSpec("Prometheus", plain.url, token=("Secret", "ns", "t", "token"), allow_token_over_http=True)
        hub = _hub({("ns", "d"): allowed})
        await Poller(None, hub, registry, time.time).poll_once()  # type: ignore[arg-type]
        assert plain.requests and all(r.headers.get("Authorization") == "Bearer s3cret" for r in plain.requests)


def _built(registry: SourceRegistry, spec: SourceSpec) -> Any:
    """The registry's own build, with the token a Secret would hold (this test has no API server)."""
    return registry._cached(spec, "fp", lambda: registry._prometheus(spec, "s3cret", None, "fp"))


async def test_a_url_outside_the_allow_list_is_never_queried() -> None:
    async with Hostile(slow(0)) as outside, Hostile(slow(0)) as inside:
        registry = SourceRegistry(None, allowed=AllowList.parse([inside.url + "/"]))  # type: ignore[arg-type]
        hub = _hub({("a", "x"): SourceSpec("Prometheus", outside.url),
                    ("b", "y"): SourceSpec("Prometheus", inside.url)})
        await Poller(None, hub, registry, time.time).poll_once()  # type: ignore[arg-type]
        await registry.aclose()
        assert outside.requests == [] and inside.requests
        refused = hub.observation(("a", "x"))
        assert refused.fault is MetricsFault.NOT_ALLOWED and "allowed-prometheus-url" in refused.message


async def test_the_operator_shuts_down_while_a_source_drips(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    DISCONNECTED.clear()
    async with Hostile(drip) as drip_prom:
        doc = resource()
        doc["spec"]["metrics"] = {"prometheus": {"url": drip_prom.url, "timeout": "30s"}}
        async with operator(kmock):
            await post(kmock, doc, INFD)
            await eventually(lambda: drip_prom.requests, timeout=20)
            await asyncio.sleep(0.5)
        # The operator stopped with its poll 0.5 s into a 30 s deadline: the poll was cancelled and the
        # connection closed, nothing left reading from the source.
        await eventually(lambda: DISCONNECTED, timeout=1)


async def test_a_query_smuggled_into_the_url_is_refused_before_any_request(kmock: Any) -> None:
    declare(kmock)
    await post_policies(kmock)
    async with Hostile(slow(0)) as prom:
        doc = resource()
        doc["spec"]["metrics"] = {"prometheus": {"url": prom.url + "/?query=up&x="}}
        async with operator(kmock):
            await post(kmock, doc, INFD)
            invalid = await eventually(lambda: (c := condition(stored(kmock, INFD, "kimi-k2"), "InvalidSpec"))
                                       and c["status"] == "True" and c, timeout=20)
        assert prom.requests == []
    assert "spec.metrics.prometheus.url" in invalid["message"] and "query" in invalid["message"]
    assert stored(kmock, "apps/v1/deployments", "kimi-k2") is None  # nothing was acted on
