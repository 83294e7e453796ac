"""Each simulated replica's /metrics, with the real names and types of vLLM (or SGLang).

The families are built per scrape from a snapshot of the replica, because the twin's histograms
take weighted observations that prometheus_client's own Histogram cannot. They are served in the
0.0.4 text format, whatever the scraper's Accept header asks: prometheus-client 0.23-0.26 rewrite
`vllm:` to `vllm_` under OpenMetrics negotiation, and the observers query the colon names.
/health answers 200 once the model is loaded, 503 before; /metrics is 503 while loading too, as a
pod whose server is not up.

`render` writes that text itself: the bench renders every pod at every poll, and building
prometheus_client's families for `generate_latest` cost about six times as much. Its output is
byte for byte what `generate_latest` prints for `ReplicaCollector` (the same families as
prometheus_client objects); values are formatted by the client's own `floatToGoString`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from infertune.errors import UserError
from infertune_lab.sim.engine import Engine
from infertune_lab.sim.records import Histogram, Meters, le_labels


@dataclass(frozen=True)
class ReplicaView:
    """What a scrape sees of one replica, copied under the fleet's lock."""

    pod: str
    model_name: str
    dialect: str
    ready: bool
    running: int
    waiting: int
    kv_usage: float
    num_gpu_blocks: int
    block_size: int
    gpu_memory_utilization: float
    max_num_seqs: int
    meters: Meters

    @staticmethod
    def of(engine: Engine, ready: bool = True) -> ReplicaView:
        c = engine.config
        return ReplicaView(engine.name, c.model_name, c.engine, ready, len(engine.running),
                           len(engine.waiting), engine.kv_usage, engine.total_blocks, engine.block_size,
                           c.gpu_memory_utilization, engine.max_num_seqs, engine.meters.copy())


Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family of a scrape: a gauge or counter with one value, or a histogram."""

    name: str  # a counter's without `_total`, as prometheus_client's families take it
    doc: str
    kind: str  # "gauge", "counter" or "histogram"
    labels: Labels
    value: float | Histogram

    def metric(self) -> Metric:
        """The same family as a prometheus_client object."""
        names, values = [k for k, _ in self.labels], [v for _, v in self.labels]
        if isinstance(self.value, Histogram):
            hist = HistogramMetricFamily(self.name, self.doc, labels=names)
            hist.add_metric(values, buckets=self.value.cumulative(), sum_value=self.value.total)
            return hist
        kind = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        fam = kind(self.name, self.doc, labels=names)
        fam.add_metric(values, self.value)
        return fam


def _histogram(name: str, doc: str, labels: dict[str, str], h: Histogram) -> Family:
    return Family(name, doc, "histogram", tuple(labels.items()), h)


def _gauge(name: str, doc: str, labels: dict[str, str], value: float) -> Family:
    return Family(name, doc, "gauge", tuple(labels.items()), value)


def _counter(name: str, doc: str, labels: dict[str, str], value: float) -> Family:
    return Family(name, doc, "counter", tuple(labels.items()), value)


# (name without _total, help, Meters field) per dialect; names and help as the engines print them.
_VLLM_COUNTERS = (
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", "preemptions"),
    ("vllm:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens"),
    ("vllm:generation_tokens", "Number of generation tokens processed.", "generation_tokens"),
    ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
     "prefix_queries"),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", "prefix_hits"),
)
_VLLM_HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "e2e"),
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "prompt_len"),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", "generation_len"),
)
_SGLANG_COUNTERS = (
    ("sglang:num_retracted_requests", "Number of retracted requests", "preemptions"),
    ("sglang:prompt_tokens", "Number of prefill tokens processed", "prompt_tokens"),
    ("sglang:generation_tokens", "Number of generation tokens processed", "generation_tokens"),
    ("sglang:cached_tokens", "Number of cached prompt tokens", "prefix_hits"),
    ("sglang:num_requests", "Number of requests processed", "successes"),
)
_SGLANG_HISTOGRAMS = (
    ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
    ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
    ("sglang:e2e_request_latency_seconds", "Histogram of E2E request latency in seconds", "e2e"),
)


def _meters(m: Meters, lab: dict[str, str], counters: tuple[tuple[str, str, str], ...],
            histograms: tuple[tuple[str, str, str], ...]) -> Iterator[Family]:
    for name, doc, attr in counters:
        yield _counter(name, doc, lab, getattr(m, attr))
    for name, doc, attr in histograms:
        yield _histogram(name, doc, lab, getattr(m, attr))


def vllm_families(v: ReplicaView) -> Iterator[Family]:
    lab = {"model_name": v.model_name, "engine": "0"}
    info = {"block_size": str(v.block_size), "num_gpu_blocks": str(v.num_gpu_blocks),
            "gpu_memory_utilization": str(v.gpu_memory_utilization), "cache_dtype": "auto",
            "enable_prefix_caching": "True", "engine": "0"}
    yield _gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", info, 1.0)
    yield _gauge("vllm:num_requests_running", "Number of requests in model execution batches.", lab,
                 v.running)
    yield _gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lab, v.waiting)
    yield _gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lab, v.kv_usage)
    yield _counter("vllm:request_success", "Count of successfully processed requests.",
                   {**lab, "finished_reason": "stop"}, v.meters.successes)
    yield from _meters(v.meters, lab, _VLLM_COUNTERS, _VLLM_HISTOGRAMS)


def sglang_families(v: ReplicaView) -> Iterator[Family]:
    lab = {"model_name": v.model_name}
    m = v.meters
    yield _gauge("sglang:token_usage", "The token usage", lab, v.kv_usage)
    yield _gauge("sglang:num_running_reqs", "The number of running requests", lab, v.running)
    yield _gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue", lab, v.waiting)
    yield _gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV pool", lab,
                 v.num_gpu_blocks * v.block_size)
    hit = m.prefix_hits / m.prefix_queries if m.prefix_queries else 0.0
    yield _gauge("sglang:cache_hit_rate", "The prefix cache hit rate", lab, hit)
    yield from _meters(m, lab, _SGLANG_COUNTERS, _SGLANG_HISTOGRAMS)


def families(v: ReplicaView) -> Iterator[Family]:
    return sglang_families(v) if v.dialect == "sglang" else vllm_families(v)


class ReplicaCollector(Collector):
    """A prometheus_client collector over whatever `view()` returns (None: nothing to show).

    `generate_latest` over it prints what `render` does; it is the reference `render` must match.
    """

    def __init__(self, view: Callable[[], ReplicaView | None]) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        v = self._view()
        if v is None:
            return
        yield from (f.metric() for f in families(v))


# prometheus_client's own formatting of a sample value (Go's, with +Inf/NaN); the library leaves it untyped.
_format_value: Callable[[float], str] = floatToGoString


def _escape(value: str) -> str:
    """A label value as the 0.0.4 format quotes it."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


# Label sets and headers repeat across scrapes (a pod's labels, a histogram's bounds): cache them.
@lru_cache(maxsize=4096)
def _label_text(labels: Labels) -> str:
    """`{k="v",...}` sorted by name, as `generate_latest` writes a sample's labels ("" for none)."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels)) + "}"


@lru_cache(maxsize=256)
def _header(name: str, doc: str, kind: str) -> str:
    help_text = doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"


@lru_cache(maxsize=256)
def _bucket_prefixes(name: str, labels: Labels, bounds: tuple[float, ...]) -> tuple[str, ...]:
    """Each bucket line up to its value: `name_bucket{...,le="0.5",...} `."""
    return tuple(f"{name}_bucket{_label_text((*labels, ('le', le)))} " for le in le_labels(bounds))


def _lines(f: Family) -> Iterator[str]:
    """One family's lines, in `generate_latest`'s order: buckets, then `_count`, then `_sum`."""
    go = _format_value
    if isinstance(f.value, Histogram):
        yield _header(f.name, f.doc, f.kind)
        counts = f.value.running_counts()
        for prefix, n in zip(_bucket_prefixes(f.name, f.labels, f.value.bounds), counts, strict=True):
            yield f"{prefix}{go(n)}\n"
        labels = _label_text(f.labels)
        yield f"{f.name}_count{labels} {go(counts[-1])}\n"
        yield f"{f.name}_sum{labels} {go(f.value.total)}\n"
        return
    name = f"{f.name}_total" if f.kind == "counter" else f.name
    yield _header(name, f.doc, f.kind)
    yield f"{name}{_label_text(f.labels)} {go(f.value)}\n"


def samples(view: ReplicaView) -> Iterator[tuple[str, dict[str, str], float]]:
    """The samples `render` prints, in its order, as (name, labels, value): what a parser of it returns."""
    for f in families(view):
        labels = dict(f.labels)
        if isinstance(f.value, Histogram):
            counts = f.value.running_counts()
            for le, n in zip(le_labels(f.value.bounds), counts, strict=True):
                yield f"{f.name}_bucket", {**labels, "le": le}, n
            yield f"{f.name}_count", labels, counts[-1]
            yield f"{f.name}_sum", labels, f.value.total
        else:
            yield (f"{f.name}_total" if f.kind == "counter" else f.name), labels, f.value


def render(view: ReplicaView) -> bytes:
    """The replica's /metrics payload in the 0.0.4 text format."""
    return "".join(line for f in families(view) for line in _lines(f)).encode("utf-8")


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        view = self.server.view()
        if path not in ("/metrics", "/health"):
            self._reply(404, b"not found\n", "text/plain")
        elif view is None or not view.ready:
            self._reply(503, b"model loading\n", "text/plain")
        elif path == "/health":
            self._reply(200, b"", "text/plain")
        else:
            self._reply(200, render(view), CONTENT_TYPE_LATEST)

    def _reply(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return  # scrapes every second would drown the console


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], view: Callable[[], ReplicaView | None]) -> None:
        super().__init__(address, _Handler)
        self.view = view


class MetricsServer:
    """Serves one replica's /metrics and /health on its own port (0: any free port)."""

    def __init__(self, view: Callable[[], ReplicaView | None], host: str = "127.0.0.1",
                 port: int = 0) -> None:
        try:
            self._server = _Server((host, port), view)
        except OSError as exc:
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"sim-metrics-{self.port}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
