"""Observation cost: one poll of 1,000 deployments x 8 replicas through a real Prometheus, and the
pods source's parse path for the same fleet.

Debian's Prometheus scrapes 8 static exporter shards (honor_labels) that together serve 8,000
pods' engine series with the namespace/deployment/pod labels a PodMonitor would add. Polls are
then timed against namespaces holding 10, 100 and 890 of the deployments and against all of
them: the query count must stay the same. TTFT histograms carry 8 buckets, not vLLM's 23, to
keep the head (~230K series) comfortable on a small machine; it is said in the output.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.prometheus_fixture import EnginePayload, PayloadServer, PrometheusProcess, ScrapeTarget

from infertune.observe import PrometheusSource
from infertune.observe.textformat import parse_payload

DEPLOYMENTS = 1_000
REPLICAS = 8
SHARDS = 8
NAMESPACES = {"bench-a": 10, "bench-b": 100, "bench-c": DEPLOYMENTS - 110}
TTFT_LE = ("0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf")
SCRAPE = "5s"
WINDOW = "30s"


def _pods() -> list[tuple[str, str, str]]:
    out, index = [], 0
    for ns, count in NAMESPACES.items():
        for _ in range(count):
            out += [(ns, f"dep-{index:04d}", f"dep-{index:04d}-{r}") for r in range(REPLICAS)]
            index += 1
    return out


def _shard_body(pods: list[tuple[str, str, str]], t0: float) -> str:
    t = time.time() - t0
    lines = []
    for i, (ns, dep, pod) in enumerate(pods):
        lab = f'namespace="{ns}",deployment="{dep}",pod="{pod}",model_name="m",engine="0"'
        running, n = 4 + i % 12, t * (0.5 + (i % 5) * 0.1)
        tokens = running * t / 0.03
        lines += [
            f"vllm:kv_cache_usage_perc{{{lab}}} {0.2 + (i % 7) * 0.1}",
            f"vllm:num_requests_running{{{lab}}} {running}",
            f"vllm:num_requests_waiting{{{lab}}} {i % 3}",
            f'vllm:cache_config_info{{{lab},block_size="16",num_gpu_blocks="160000"}} 1',
            f"vllm:num_preemptions_total{{{lab}}} 0",
            f"vllm:prompt_tokens_total{{{lab}}} {n * 9000}",
            f"vllm:generation_tokens_total{{{lab}}} {tokens}",
            f"vllm:prefix_cache_queries_total{{{lab}}} {n * 9000}",
            f"vllm:prefix_cache_hits_total{{{lab}}} {n * 7000}",
            f"vllm:request_success_total{{{lab}}} {n}",
        ]
        lines += [f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} {n * min(1.0, 0.15 * (k + 1))}'
                  for k, le in enumerate(TTFT_LE)]
        lines += [f"vllm:time_to_first_token_seconds_sum{{{lab}}} {n * 0.8}",
                  f"vllm:time_to_first_token_seconds_count{{{lab}}} {n}",
                  f'vllm:inter_token_latency_seconds_bucket{{{lab},le="+Inf"}} {tokens}',
                  f"vllm:inter_token_latency_seconds_sum{{{lab}}} {tokens * 0.03}",
                  f"vllm:inter_token_latency_seconds_count{{{lab}}} {tokens}"]
        for name, per in (("vllm:request_prompt_tokens", 9000), ("vllm:request_generation_tokens", 400)):
            lines += [f'{name}_bucket{{{lab},le="+Inf"}} {n}', f"{name}_sum{{{lab}}} {n * per}",
                      f"{name}_count{{{lab}}} {n}"]
    return "\n".join(lines) + "\n"


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _poll_cost(prom: PrometheusProcess, pid: int, namespace: str | None, repeats: int = 3) -> tuple:
    source = PrometheusSource(prom.url, window=WINDOW, timeout=60, namespace=namespace)
    walls, cpus, servers = [], [], []
    snap = None
    for _ in range(repeats):
        s0, c0, w0 = _proc_cpu(pid), time.process_time(), time.perf_counter()
        snap = source.poll()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        servers.append(_proc_cpu(pid) - s0)
    if namespace is None:  # which queries cost the most, at full scale
        timed = []
        for query in source.queries:
            w0 = time.perf_counter()
            source._query(query, time.time())
            timed.append((time.perf_counter() - w0, query.key, query.level))
        slow = ", ".join(f"{key}/{level} {sec:.2f}s" for sec, key, level in sorted(timed, reverse=True)[:4])
        print(f"  slowest queries at {DEPLOYMENTS:,} deployments: {slow}")
    source.close()
    assert snap is not None
    ok = sum(o.available for o in snap.observations.values())
    return snap, ok, statistics.median(walls), statistics.median(cpus), statistics.median(servers)


def _prometheus_poll() -> None:
    pods = _pods()
    t0 = time.time()
    shards = [pods[i::SHARDS] for i in range(SHARDS)]
    servers = [PayloadServer(lambda shard=shard: _shard_body(shard, t0)) for shard in shards]
    targets = [ScrapeTarget(s.address, honor_labels=True) for s in servers]
    with tempfile.TemporaryDirectory() as workdir:
        prom = PrometheusProcess(Path(workdir), targets, scrape_interval=SCRAPE, scrape_timeout="5s")
        try:
            prom.start()
            pid = prom._proc.pid if prom._proc else 0
            series = len(_shard_body(pods[:1], t0).splitlines())
            print(f"Prometheus 2.42 (Debian) scraping {len(pods):,} pods in {SHARDS} shards every {SCRAPE}, "
                  f"{series} series per pod ({series * len(pods):,} in all; TTFT with {len(TTFT_LE)} "
                  f"buckets, not vLLM's 23), rate window {WINDOW}")
            prom.wait_for_series(f"count_over_time(vllm:num_requests_running[{WINDOW}]) >= 4", count=len(pods),
                                 timeout=180)
            print(f"  Prometheus RSS after warm-up: {_proc_rss_mib(pid):,.0f} MiB")
            b0 = _proc_cpu(pid)
            time.sleep(10)
            idle = (_proc_cpu(pid) - b0) / 10
            print(f"  Prometheus CPU while only scraping: {idle:.2f} s/s (included in the column below)")
            print("  deployments | queries | wall s | client CPU s | Prometheus CPU s | trusted")
            for ns, count in (*NAMESPACES.items(), (None, DEPLOYMENTS)):
                snap, ok, wall, cpu, server = _poll_cost(prom, pid, ns)
                print(f"  {count:>11,} | {snap.queries:>7} | {wall:>6.2f} | {cpu:>12.2f} | {server:>16.2f} | "
                      f"{ok:,}/{len(snap.observations):,}")
        finally:
            prom.stop()
            for s in servers:
                s.close()


def _pods_parse_path() -> None:
    payload = EnginePayload(running=12, kv_usage=0.4)
    payload.advance(60)
    text = payload.text()
    start = time.process_time()
    n = 2_000
    for _ in range(n):
        parse_payload(text)
    per_pod = (time.process_time() - start) / n
    print(f"pods source: parsing one vLLM /metrics payload ({len(text.splitlines())} lines, {len(text):,} bytes) "
          f"takes {per_pod * 1e3:.2f} ms CPU; a poll of {DEPLOYMENTS * REPLICAS:,} pods is "
          f"{DEPLOYMENTS * REPLICAS:,} GETs and ~{per_pod * DEPLOYMENTS * REPLICAS:.1f} s of parsing "
          f"(HTTP not included): use Prometheus at that scale")


def run() -> None:
    _pods_parse_path()
    _prometheus_poll()


if __name__ == "__main__":
    run()
