"""A real Prometheus for tests: Debian's /usr/bin/prometheus as a plain process on a free loopback port.

The process management lives in the product (infertune_lab.demo.prometheus, which the demo runs too);
this plugin adds the fixtures and the canned scrape targets.

tests/conftest.py registers this module as a plugin, so any test can ask for the fixtures:

    def test_x(prometheus_factory):
        prom = prometheus_factory([ScrapeTarget("127.0.0.1:9100", namespace="ns", deployment="d", pod="p0")])
        prom.wait_for_series('vllm:num_requests_running', count=1)
        ...
        prom.kill()      # SIGKILL, as an outage
        prom.start()     # same port, same TSDB

Each target becomes its own static_config so its `namespace`/`deployment`/`pod` labels attach to
every series scraped from it, which is what the PodMonitor's relabelling produces in a cluster.
`honor_labels` targets keep the labels the exporter wrote (one exporter serving many pods' series,
as the benchmark does). The first sample lands ~5-6 s after start (scrape offset plus head append).
"""

from __future__ import annotations

import contextlib
import http.server
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from infertune_lab.demo.prometheus import PROMETHEUS_BIN, PrometheusProcess, ScrapeTarget, free_port

__all__ = ["PROMETHEUS_BIN", "PayloadServer", "PrometheusProcess", "ScrapeTarget", "free_port"]


@pytest.fixture
def prometheus_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Returns `make(targets, **kwargs) -> PrometheusProcess` (started); every one is stopped at teardown."""
    started: list[PrometheusProcess] = []

    def make(targets: Sequence[ScrapeTarget] = (), **kwargs: Any) -> PrometheusProcess:
        if not os.path.exists(PROMETHEUS_BIN):
            pytest.skip("Debian's prometheus is not installed (make system-deps)")
        prom = PrometheusProcess(tmp_path_factory.mktemp("prometheus"), targets, **kwargs)
        started.append(prom)
        return prom.start()

    yield make
    for prom in started:
        prom.stop()


# --- Scrape targets for tests -------------------------------------------------------------------
# Until (and beside) the twin's exporter, tests need endpoints whose answers they control exactly:
# a given payload, a 5xx, a delay past the timeout. A stdlib HTTP server serving canned text is
# the smallest honest thing that does it; the payloads follow vLLM's real exposition.

VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                     10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_NAMES = {
    "vllm": {"kv": "vllm:kv_cache_usage_perc", "running": "vllm:num_requests_running",
             "waiting": "vllm:num_requests_waiting", "preempt": "vllm:num_preemptions",
             "ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds"},
    "vllm-legacy": {"kv": "vllm:gpu_cache_usage_perc", "running": "vllm:num_requests_running",
                    "waiting": "vllm:num_requests_waiting", "preempt": "vllm:num_preemptions",
                    "ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:time_per_output_token_seconds"},
    "sglang": {"kv": "sglang:token_usage", "running": "sglang:num_running_reqs",
               "waiting": "sglang:num_queue_reqs", "preempt": "sglang:num_retracted_requests",
               "ttft": "sglang:time_to_first_token_seconds", "itl": "sglang:inter_token_latency_seconds"},
}


@dataclass
class EnginePayload:
    """Cumulative engine metrics of one pod, advanced in steps of steady traffic, rendered as text."""

    dialect: str = "vllm"
    running: float = 4.0
    waiting: float = 0.0
    kv_usage: float = 0.3
    num_gpu_blocks: int = 10_000
    block_size: int = 16
    preemptions: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    successes: float = 0.0
    ttft: dict[float, float] = field(default_factory=dict)  # le -> cumulative count (incl. +Inf)
    ttft_sum: float = 0.0
    itl: dict[float, float] = field(default_factory=dict)
    itl_sum: float = 0.0
    prompt_len: tuple[float, float] = (0.0, 0.0)  # sum, count
    gen_len: tuple[float, float] = (0.0, 0.0)

    def advance(self, seconds: float, *, rps: float = 1.0, prompt: float = 2000, cached: float = 1500,
                output: float = 200, ttft_s: float = 0.3, itl_s: float = 0.02,
                preempt_rps: float = 0.0) -> None:
        n = rps * seconds
        tokens = self.running * seconds / itl_s  # every running stream decodes one token per pass
        self.prompt_tokens += n * prompt
        self.generation_tokens += tokens
        self.prefix_queries += n * prompt
        self.prefix_hits += n * cached
        self.successes += n
        self.preemptions += preempt_rps * seconds
        for le in (*VLLM_TTFT_BUCKETS, math.inf):
            self.ttft[le] = self.ttft.get(le, 0.0) + (n if ttft_s <= le else 0.0)
        self.ttft_sum += n * ttft_s
        for le in (*VLLM_ITL_BUCKETS, math.inf):
            self.itl[le] = self.itl.get(le, 0.0) + (tokens if itl_s <= le else 0.0)
        self.itl_sum += tokens * itl_s
        self.prompt_len = (self.prompt_len[0] + n * prompt, self.prompt_len[1] + n)
        self.gen_len = (self.gen_len[0] + n * output, self.gen_len[1] + n)

    def text(self, labels: str = 'engine="0",model_name="m"') -> str:
        names = _NAMES[self.dialect]
        lines = []

        def sample(name: str, value: float, extra: str = "") -> None:
            lab = ",".join(x for x in (labels, extra) if x)
            lines.append(f"{name}{{{lab}}} {_num(value)}")

        def typed(name: str, kind: str) -> None:
            lines.append(f"# HELP {name} test payload\n# TYPE {name} {kind}")

        for key, value in (("kv", self.kv_usage), ("running", self.running), ("waiting", self.waiting)):
            typed(names[key], "gauge")
            sample(names[key], value)
        if self.dialect == "sglang":
            typed("sglang:max_total_num_tokens", "gauge")
            sample("sglang:max_total_num_tokens", self.num_gpu_blocks * self.block_size)
        else:
            typed("vllm:cache_config_info", "gauge")
            sample("vllm:cache_config_info", 1.0,
                   f'block_size="{self.block_size}",num_gpu_blocks="{self.num_gpu_blocks}"')
        prefix = "sglang" if self.dialect == "sglang" else "vllm"
        counters = [(names["preempt"], self.preemptions), (f"{prefix}:prompt_tokens", self.prompt_tokens),
                    (f"{prefix}:generation_tokens", self.generation_tokens)]
        if prefix == "vllm":
            counters += [("vllm:prefix_cache_queries", self.prefix_queries),
                         ("vllm:prefix_cache_hits", self.prefix_hits),
                         ("vllm:request_success", self.successes)]
        else:
            counters += [("sglang:cached_tokens", self.prefix_hits), ("sglang:num_requests", self.successes)]
        for name, value in counters:
            typed(name, "counter")
            sample(f"{name}_total", value)
        hists = [(names["ttft"], self.ttft, self.ttft_sum), (names["itl"], self.itl, self.itl_sum)]
        for name, buckets, total in hists:
            typed(name, "histogram")
            for le, count in sorted(buckets.items()):
                sample(f"{name}_bucket", count, f'le="{_num(le)}"')
            sample(f"{name}_sum", total)
            sample(f"{name}_count", buckets.get(math.inf, 0.0))
        if prefix == "vllm":
            for name, (total, count) in (("vllm:request_prompt_tokens", self.prompt_len),
                                         ("vllm:request_generation_tokens", self.gen_len)):
                typed(name, "histogram")
                sample(f"{name}_bucket", count, 'le="+Inf"')
                sample(f"{name}_sum", total)
                sample(f"{name}_count", count)
        return "\n".join(lines) + "\n"


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


class PayloadServer:
    """Serves `body` (a string, or a callable returning one) at any path, with a settable status and delay."""

    def __init__(self, body: str | Callable[[], str] = "", port: int | None = None) -> None:
        self.body = body
        self.status = 200
        self.delay = 0.0
        self.requests = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests += 1
                if server.delay:
                    time.sleep(server.delay)
                payload = (server.body() if callable(server.body) else server.body).encode()
                # The client may have given up (timeout tests); that is the point, not an error.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(server.status)
                    self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port or 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def payload_servers() -> Iterator[Callable[..., PayloadServer]]:
    """Returns `make(body) -> PayloadServer`; all are closed at teardown."""
    made: list[PayloadServer] = []

    def make(body: str | Callable[[], str] = "", port: int | None = None) -> PayloadServer:
        made.append(PayloadServer(body, port))
        return made[-1]

    yield make
    for s in made:
        s.close()
