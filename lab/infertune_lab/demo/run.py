"""One demo run: start the stack, apply the sample resource, let the first replica load, drive the
script while sampling the fleet and the resource's status every second, then write the report."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infertune.api.policy import parse_policy
from infertune.api.spec import parse_spec
from infertune.planner.request import resolve
from infertune.planner.types import SloTarget
from infertune_lab.demo import prometheus as prom
from infertune_lab.demo.display import Quiet, View
from infertune_lab.demo.measure import Recorder
from infertune_lab.demo.report import ReportInput, write_report
from infertune_lab.demo.resource import Compression, demo_resource, policies
from infertune_lab.demo.script import Script, fast, full
from infertune_lab.demo.stack import DemoStack, StackSettings
from infertune_lab.demo.summary import Summary, summarize, windows

NAMESPACE, NAME = "inference", "kimi-k2"


@dataclass(frozen=True)
class DemoOptions:
    fast: bool = False
    report_dir: Path = Path("demo-report")
    prometheus: bool = True
    seed: int = 0


@dataclass(frozen=True)
class Profile:
    script: Script
    compression: Compression
    settings: StackSettings


def profile(fast_run: bool, seed: int = 0) -> Profile:
    if fast_run:
        compression = Compression(startup_seconds=5, interval="1s", scale_up="1s", scale_down="10s",
                                  relayout="5s", stabilization="5s", stale_after="15s")
        return Profile(fast(), compression, StackSettings(load_delay=5, window="10s", seed=seed))
    compression = Compression()
    return Profile(full(), compression, StackSettings(load_delay=compression.startup_seconds, seed=seed))


def slo_of(resource: dict[str, Any]) -> tuple[SloTarget, float]:
    """The SLA and KV headroom the operator itself works to: the resource merged with its policy."""
    by_name = {p["metadata"]["name"]: p["spec"] for p in policies()}
    spec = parse_spec(resource["spec"])
    policy = parse_policy(by_name[spec.policy_ref.name]) if spec.policy_ref is not None else None
    request = resolve(spec, policy).request
    return request.slo, request.kv_headroom


async def follow(stack: DemoStack, recorder: Recorder, until: float, act: Callable[[float], str] = lambda t: "",
                 view: View | None = None, namespace: str = NAMESPACE, name: str = NAME) -> dict[str, Any]:
    """Samples the fleet and the resource's status once a second until scenario time `until`;
    returns the last status seen."""
    status: dict[str, Any] = {}
    view = view or Quiet()
    while (t := stack.scenario_time()) < until:
        status = ((await stack.resource(namespace, name)) or {}).get("status") or {}
        sample = recorder.sample(act(t), status.get("applied"))
        recorder.note_decisions(status.get("decisions") or [], t)
        view.show(sample, status, recorder.decisions)
        await asyncio.sleep(max(0.0, 1.0 - (stack.scenario_time() - t)))
    return status


async def run_demo(options: DemoOptions, view: View) -> tuple[Summary, Path]:
    started = time.monotonic()
    p = profile(options.fast, options.seed)
    use_prometheus = options.prometheus and prom.installed()
    if options.prometheus and not use_prometheus:
        view.say(f"{prom.PROMETHEUS_BIN} is not installed: the operator reads the pods directly")
    with tempfile.TemporaryDirectory(prefix="infertune-demo-") as tmp:
        server = None
        if use_prometheus:
            server = prom.PrometheusProcess(Path(tmp), file_sd_dir=Path(tmp) / "targets").start()
        try:
            async with DemoStack(p.settings, server) as stack:
                resource = demo_resource(stack.port, stack.prometheus_url, compression=p.compression,
                                         namespace=NAMESPACE, name=NAME)
                slo, headroom = slo_of(resource)
                await stack.apply(resource)
                view.say("applied inference/kimi-k2; waiting for its first replica to load")
                await stack.wait_ready(1, NAMESPACE, NAME)
                recorder = Recorder(stack.live, stack.start_traffic(p.script.scenario.traffic(options.seed)))
                await follow(stack, recorder, p.script.duration, p.script.act_at, view)
        finally:
            if server is not None:
                server.stop()
    source = "Debian's Prometheus" if use_prometheus else "the pods' own /metrics"
    summary = summarize(recorder, slo, headroom, p.script.scenario.name, source, time.monotonic() - started)
    wins = windows(recorder.requests(), recorder.origin, p.script.duration)
    report = write_report(ReportInput(summary, recorder, wins, slo, headroom, p.compression,
                                      p.settings.load_delay), options.report_dir)
    return summary, report
