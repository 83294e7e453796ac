"""Debian's Prometheus scrapes the twin's exporter and answers queries by the real vLLM names."""

from __future__ import annotations

import random

import pytest

from infertune_lab.sim import ReplicaConfig, shape
from infertune_lab.sim.live import LiveFleet
from infertune_lab.sim.traffic import OpenSessions, poisson
from tests.prometheus_fixture import ScrapeTarget

pytestmark = pytest.mark.integration

SMALL = ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, workload="chat", num_gpu_blocks=2000)


def test_prometheus_reads_kv_cache_usage_by_its_vllm_name(prometheus_factory) -> None:  # type: ignore[no-untyped-def]
    traffic = OpenSessions(shape("chat"), poisson(1.0, random.Random(0)), seed=0)
    with LiveFleet([SMALL, SMALL.with_(engine="sglang")], traffic, speed=5.0) as live:
        targets = [ScrapeTarget(address, namespace="team-a", deployment="sim", pod=pod)
                   for pod, address in live.endpoints.items()]
        prom = prometheus_factory(targets)
        usage = prom.wait_for_series('vllm:kv_cache_usage_perc{namespace="team-a"}', count=1, timeout=40)
        assert usage[0]["metric"]["pod"] == "sim-0"
        assert usage[0]["metric"]["__name__"] == "vllm:kv_cache_usage_perc"
        assert 0.0 <= float(usage[0]["value"][1]) <= 1.0
        blocks = prom.query("vllm:cache_config_info")
        assert blocks[0]["metric"]["num_gpu_blocks"] == "2000"
        # Two targets are scraped independently: the SGLang one may land a scrape later.
        assert prom.wait_for_series("sglang:token_usage", count=1, timeout=40)[0]["metric"]["pod"] == "sim-1"
        # Counters climb across scrapes: the twin is live, not a frozen page.
        prom.wait_for_series("increase(vllm:generation_tokens_total[5s]) > 0", timeout=30)
        assert not prom.query('{__name__=~"vllm_.*"}')  # no colon rewrite anywhere
