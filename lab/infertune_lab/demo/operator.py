"""The real operator, in-process: kopf with the production registry against the emulator's URL.
Each resource names its metrics source (spec.metrics), so no default Prometheus is given here.

It runs on a thread with its own event loop: on stop, kopf cancels every task of its loop that
it did not find at startup, which in a shared loop would include the caller's own tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import kopf

from infertune.actuate.apply import client_from_environment
from infertune.controller import OperatorContext, build_registry


@contextlib.asynccontextmanager
async def running_operator(api_url: str, poll_seconds: float, cycle_seconds: float,
                           metrics_window: str) -> AsyncIterator[OperatorContext]:
    """Cluster-wide and standalone (the emulator breaks `--namespace` and has no peering)."""
    ctx = OperatorContext(kube=client_from_environment(host=api_url), poll_seconds=poll_seconds,
                          cycle_seconds=cycle_seconds, metrics_window=metrics_window)
    registry = build_registry(cycle_seconds=cycle_seconds)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=api_url, insecure=True)

    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=asyncio.run, name="operator", daemon=True, args=(
        kopf.operator(registry=registry, clusterwide=True, standalone=True, memo=kopf.Memo(ctx=ctx),
                      stop_flag=stop, ready_flag=ready),))
    thread.start()
    try:
        if not await asyncio.to_thread(ready.wait, 30):
            raise TimeoutError("the operator did not start within 30 s")
        yield ctx
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 15)
