"""The pods source: scrape each ready pod's `/metrics` directly, no Prometheus in between.

Rates are read over the last `window_seconds` of a pod's scrapes (60 s, as the chart's Prometheus
reads `rate(...[1m])`): from the oldest scrape kept within the window to this one. The arrival rate
alone is read over the last poll, as Prometheus' `irate()` reads it (`READ_OVER_ONE_SCRAPE`). The same window on
both sources means a resource is sized on the same reading whichever it names, and the benchmark,
which drives this source, measures what a Prometheus-backed operator does. The first poll of a pod has
gauges but no rates (None, not zero). A counter that went backwards is a reset (the engine
restarted): that pod's rates are withheld for the poll, its kept scrapes are dropped, and the
deployment reports CounterReset.
Scrapes go through `observe/http.py`: all pods at once (a few in flight), each within one total
deadline and a size cap, so one slow pod costs its own figures, not the poll.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import yarl

from infertune.api.observation import MetricsFault, Observation
from infertune.errors import UserError
from infertune.observe.dialects import READ_OVER_ONE_SCRAPE
from infertune.observe.figures import DeploymentKey, Expected, PodFigures, build_observation, faulted
from infertune.observe.http import Client, FetchFailed, MiB, UrlError, run, source_url
from infertune.observe.promql import DEFAULT_METRICS_WINDOW, range_seconds
from infertune.observe.quantile import quantiles
from infertune.observe.snapshot import Snapshot
from infertune.observe.textformat import PayloadError, Reading, parse_payload

# vLLM's /metrics is ~100 KiB; a payload of this size is not an engine's.
MAX_PAYLOAD_BYTES = 4 * MiB

DEFAULT_WINDOW_SECONDS = range_seconds(DEFAULT_METRICS_WINDOW)
# A scrape taken a hair more than the window ago (clock jitter) still opens it, as the poll meant it to.
_WINDOW_SLACK_SECONDS = 1e-6
# The most scrapes kept a pod (an hour of 15 s polls): a window of days (`--metrics-window` takes any
# PromQL range) would otherwise hold every payload of those days in memory. A longer window is read over
# the newest of them.
MAX_KEPT_SCRAPES = 240


def pod_metrics_url(address: str, port: int) -> str:
    """http://<pod IP>:<port>/metrics, built by yarl (an IPv6 address gets its brackets)."""
    return str(yarl.URL.build(scheme="http", host=address, port=port, path="/metrics"))


@dataclass(frozen=True)
class PodTarget:
    namespace: str
    deployment: str
    pod: str
    url: str  # the full /metrics URL

    @property
    def key(self) -> DeploymentKey:
        return (self.namespace, self.deployment)

    @classmethod
    def parse(cls, text: str, namespace: str = "default", deployment: str = "default") -> PodTarget:
        """`host:port`, a URL, or `namespace/deployment/pod=host:port`."""
        ident, equals, address = text.strip().rpartition("=")
        if not address:
            raise UserError(f"target {text!r}: expected host:port")
        pod = address
        if equals:  # `=host:port` names no pod: its identity was left out, not meant to be dropped
            parts = ident.split("/")
            if len(parts) != 3 or not all(parts):
                raise UserError(f"target {text!r}: expected namespace/deployment/pod=host:port")
            namespace, deployment, pod = parts
        url = address if "://" in address else f"http://{address}/metrics"
        host = url.split("://", 1)[1].split("/", 1)[0]
        port = host.rsplit(":", 1)[1] if ":" in host else ""
        if not (port.isascii() and port.isdigit()):  # isdigit() alone takes another script's digits (٣ is 3)
            raise UserError(f"target {text!r}: expected host:port with a numeric port")
        try:
            url = str(source_url(url, f"target {text!r}"))
        except UrlError as exc:
            raise UserError(str(exc)) from None
        return cls(namespace, deployment, pod, url)


@dataclass(frozen=True)
class _Scrape:
    target: PodTarget
    time: float
    reading: Reading | None = None
    fault: MetricsFault = MetricsFault.OK
    message: str = ""


def _delta_rates(prev: _Scrape, cur: _Scrape) -> tuple[dict[str, float], dict[float, float], bool]:
    """Per-second rates and TTFT bucket deltas between two scrapes; True when a counter reset."""
    assert prev.reading is not None and cur.reading is not None
    dt = cur.time - prev.time
    rates: dict[str, float] = {}
    for key, value in cur.reading.counters.items():
        before = prev.reading.counters.get(key)
        if before is None:
            continue
        if value < before:
            return {}, {}, True
        rates[key] = (value - before) / dt
    ttft_buckets: dict[float, float] = {}
    for key, hist in cur.reading.histograms.items():
        old = prev.reading.histograms.get(key)
        if old is None:
            continue
        if hist.count < old.count or hist.total < old.total:
            return {}, {}, True
        rates[f"{key}_sum"] = (hist.total - old.total) / dt
        rates[f"{key}_count"] = (hist.count - old.count) / dt
        if key == "ttft":
            ttft_buckets = {le: (n - old.buckets.get(le, 0.0)) / dt for le, n in hist.buckets.items()}
    return rates, ttft_buckets, False


class PodsSource:
    """`MetricsSource` that scrapes pods itself. Keeps each pod's scrapes of the last window for rates."""

    name = "pods"

    def __init__(self, targets: Sequence[PodTarget], *, timeout: float = 5.0, stale_after: float = 120.0,
                 workers: int = 16, clock: Callable[[], float] = time.time,
                 fetch: Callable[[PodTarget], str | Reading] | None = None,
                 window_seconds: float = DEFAULT_WINDOW_SECONDS) -> None:
        """`fetch` replaces the HTTP GET, for replaying exporters in virtual time: it returns the payload
        text, or a `Reading` already made by `read_samples` from samples the caller holds (the parsing
        then is skipped, and everything after it, deltas and faults, is the same). `window_seconds` is
        the span rates are read over; one poll interval or less reads each poll's own delta."""
        if not (window_seconds > 0 and math.isfinite(window_seconds)):
            raise ValueError(f"window_seconds must be a positive number of seconds, got {window_seconds!r}")
        self.window_seconds = window_seconds
        self.targets = list(targets)
        self.fetch = fetch
        self.timeout = timeout
        self.stale_after = stale_after
        self.clock = clock
        self.http = Client(timeout=timeout, max_bytes=MAX_PAYLOAD_BYTES, limit=max(1, workers))
        # Each pod's scrapes with a reading, oldest first, none older than the window before the newest.
        self._kept: dict[tuple[str, str, str], deque[_Scrape]] = {}

    def set_targets(self, targets: Sequence[PodTarget]) -> None:
        """The controller's list of ready pods; forgotten pods lose their kept scrapes."""
        self.targets = list(targets)
        live = {(t.namespace, t.deployment, t.pod) for t in self.targets}
        self._kept = {k: v for k, v in self._kept.items() if k in live}

    def _within_window(self, ident: tuple[str, str, str], at: float) -> list[_Scrape]:
        """The pod's kept scrapes taken within the window before `at`, oldest first."""
        return [s for s in self._kept.get(ident, ())
                if 0 < at - s.time <= self.window_seconds + _WINDOW_SLACK_SECONDS]

    def _keep(self, scrape: _Scrape, reset: bool) -> None:
        ident = (scrape.target.namespace, scrape.target.deployment, scrape.target.pod)
        kept = self._kept.setdefault(ident, deque())
        if reset:
            # Counts from before the restart cannot start a rate after it.
            kept.clear()
        kept.append(scrape)
        while scrape.time - kept[0].time > self.window_seconds + _WINDOW_SLACK_SECONDS or len(kept) > MAX_KEPT_SCRAPES:
            kept.popleft()

    def close(self) -> None:
        """Nothing to do from synchronous code: `poll` closes the session it opens, the poller its own."""

    async def aclose(self) -> None:
        await self.http.aclose()

    def _injected(self, target: PodTarget) -> _Scrape:
        assert self.fetch is not None
        try:
            payload = self.fetch(target)
            reading = payload if isinstance(payload, Reading) else parse_payload(payload)
            return _Scrape(target, self.clock(), reading=reading)
        except PayloadError as exc:
            return _Scrape(target, self.clock(), fault=MetricsFault.MALFORMED, message=f"{target.pod}: {exc}")

    async def _scrape(self, target: PodTarget) -> _Scrape:
        try:
            body = await self.http.get(yarl.URL(target.url))
            now = self.clock()
            # Off the loop: parsing a large payload takes a while, and the loop serves every resource.
            reading = await asyncio.to_thread(parse_payload, body.decode("utf-8", errors="replace"))
            return _Scrape(target, now, reading=reading)
        except FetchFailed as exc:
            failed = exc.at(target.pod)
            return _Scrape(target, self.clock(), fault=failed.fault, message=str(failed))
        except PayloadError as exc:
            return _Scrape(target, self.clock(), fault=MetricsFault.MALFORMED, message=f"{target.pod}: {exc}")

    def poll(self, expected: Mapping[DeploymentKey, Expected] | None = None,
             now: float | None = None) -> Snapshot:
        """The poll from synchronous code: the lab's replay (`fetch`), the observe command, the tests."""
        if self.fetch is not None:
            at = self.clock() if now is None else now
            return self._assemble([self._injected(t) for t in self.targets], expected, at)
        return run(self.http, lambda: self.poll_async(expected, now))

    async def poll_async(self, expected: Mapping[DeploymentKey, Expected] | None = None,
                         now: float | None = None) -> Snapshot:
        at = self.clock() if now is None else now
        if self.fetch is not None:
            return self._assemble([self._injected(t) for t in self.targets], expected, at)
        scrapes = list(await asyncio.gather(*(self._scrape(t) for t in self.targets)))
        return self._assemble(scrapes, expected, at)

    def _figures(self, scrape: _Scrape, copies: int) -> tuple[PodFigures, PodFigures, dict[float, float] | None]:
        """The pod's figures over the window, the same over this poll alone (for the fit), and the window's
        TTFT bucket rates (None when it has none to add to the deployment's)."""
        reading = scrape.reading
        assert reading is not None
        ident = (scrape.target.namespace, scrape.target.deployment, scrape.target.pod)
        within = self._within_window(ident, scrape.time)
        rates: dict[str, float] = {}
        poll_rates: dict[str, float] = {}
        buckets: dict[float, float] | None = None
        reset = False
        if within:
            rates, buckets, reset = _delta_rates(within[0], scrape)
            poll_rates = rates
            if len(within) > 1:
                # A restart and regrowth since the window opened shows only against the last poll.
                poll_rates, _, poll_reset = _delta_rates(within[-1], scrape)
                reset = reset or poll_reset
            if reset:
                rates, poll_rates, buckets = {}, {}, None
            else:
                rates = {**rates, **{key: poll_rates[key] for key in READ_OVER_ONE_SCRAPE if key in poll_rates}}
        fig = PodFigures(
            pod=scrape.target.pod, dialect=reading.dialect, sample_time=scrape.time, gauges=reading.gauges,
            rates=rates, ttft=quantiles(buckets or {}),
            capacity_tokens=reading.capacity_tokens,
            series_count=copies if not reading.duplicate else max(copies, 2), counter_reset=reset)
        self._keep(scrape, reset)
        return fig, dataclasses.replace(fig, rates=poll_rates), (buckets or None)

    def _assemble(self, scrapes: list[_Scrape], expected: Mapping[DeploymentKey, Expected] | None,
                  at: float) -> Snapshot:
        copies: dict[tuple[str, str, str], int] = defaultdict(int)
        for s in scrapes:
            copies[(s.target.namespace, s.target.deployment, s.target.pod)] += 1
        by_key: dict[DeploymentKey, list[_Scrape]] = defaultdict(list)
        for s in scrapes:
            by_key[s.target.key].append(s)
        expected = dict(expected or {})
        observations: dict[DeploymentKey, Observation] = {}
        for key in set(by_key) | set(expected):
            observations[key] = self._observe(key, by_key.get(key, []), expected.get(key), copies, at)
        return Snapshot(time=at, observations=observations, queries=len(self.targets), source=self.name)

    def _observe(self, key: DeploymentKey, scrapes: list[_Scrape], expected: Expected | None,
                 copies: Mapping[tuple[str, str, str], int], at: float) -> Observation:
        ok = [s for s in scrapes if s.reading is not None]
        failed = [s for s in scrapes if s.reading is None]
        if scrapes and not ok:
            return faulted(key, failed[0].fault, "; ".join(s.message for s in failed[:3]), at)
        figs: list[PodFigures] = []
        poll_figs: list[PodFigures] = []
        merged: dict[float, float] = defaultdict(float)
        complete = True
        for s in ok:
            fig, poll_fig, buckets = self._figures(s, copies[(key[0], key[1], s.target.pod)])
            figs.append(fig)
            poll_figs.append(poll_fig)
            if buckets is None:
                complete = False
            else:
                for le, v in buckets.items():
                    merged[le] += v
        pods = {s.target.pod for s in scrapes} | set(expected.pods if expected and expected.pods else ())
        want = dataclasses.replace(expected or Expected(), pods=frozenset(pods))
        # The fit takes each poll's own stretch, as it takes Prometheus' history in windows that do not
        # overlap: overlapping windows would count each stretch of traffic several times and average
        # away the spread of batches the line is fitted across.
        obs = build_observation(key, figs, want, at, self.stale_after, quantiles(merged) if complete else {},
                                fit_figs=poll_figs)
        if failed and obs.fault is MetricsFault.PARTIAL:
            why = "; ".join(s.message for s in failed[:3])
            obs = dataclasses.replace(obs, message=f"{obs.message} ({why})")
        return obs
