"""Parsing engine payloads: dialects, label variants, duplicates, bad text."""

from __future__ import annotations

import math

import pytest

from infertune.observe.quantile import histogram_quantile
from infertune.observe.textformat import PayloadError, parse_payload
from tests.prometheus_fixture import EnginePayload


@pytest.mark.parametrize("dialect", ["vllm", "vllm-legacy", "sglang"])
def test_every_dialect_yields_the_same_readings(dialect: str) -> None:
    payload = EnginePayload(dialect=dialect, running=7, waiting=2, kv_usage=0.42, num_gpu_blocks=500)
    payload.advance(10, rps=2, itl_s=0.03)
    reading = parse_payload(payload.text())
    assert reading.dialect == dialect
    assert reading.gauges["running"] == 7 and reading.gauges["waiting"] == 2
    assert reading.gauges["kv_usage"] == pytest.approx(0.42)
    assert reading.capacity_tokens == 500 * 16
    assert reading.histograms["itl"].total / reading.histograms["itl"].count == pytest.approx(0.03)
    assert reading.counters["prefix_hits"] == pytest.approx(20 * 1500)


def test_label_variants_are_summed_and_kv_usage_is_the_fullest_engine() -> None:
    a = EnginePayload(running=3, kv_usage=0.2).text('engine="0",model_name="m"')
    b = EnginePayload(running=5, kv_usage=0.7).text('engine="1",model_name="m"')
    reading = parse_payload(a + b)
    assert reading.gauges["running"] == 8
    assert reading.gauges["kv_usage"] == pytest.approx(0.7)
    assert not reading.duplicate


def test_deprecated_names_beside_new_ones_count_once() -> None:
    # vLLM 0.10/0.11 keep gpu_cache_usage_perc and time_per_output_token_seconds beside their
    # replacements; the newer name wins and nothing is counted twice.
    new = EnginePayload(dialect="vllm", kv_usage=0.5)
    old = EnginePayload(dialect="vllm-legacy", kv_usage=0.9)
    for p, itl in ((new, 0.02), (old, 0.05)):
        p.advance(10, itl_s=itl)
    legacy_only = "\n".join(line for line in old.text().splitlines()
                             if "gpu_cache_usage" in line or "time_per_output" in line)
    reading = parse_payload(new.text() + legacy_only + "\n")
    assert reading.dialect == "vllm"
    assert reading.gauges["kv_usage"] == pytest.approx(0.5)
    assert reading.histograms["itl"].total / reading.histograms["itl"].count == pytest.approx(0.02)
    assert reading.counters["generation_tokens"] == pytest.approx(new.generation_tokens)


def test_a_sample_exposed_twice_is_flagged() -> None:
    text = EnginePayload().text()
    assert parse_payload(text + text).duplicate == "vllm:kv_cache_usage_perc"


def test_nan_is_kept_as_nan_not_zero() -> None:
    text = EnginePayload().text().replace("vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.3",
                                          "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} NaN")
    assert math.isnan(parse_payload(text).gauges["kv_usage"])


def test_garbage_is_a_payload_error() -> None:
    with pytest.raises(PayloadError):
        parse_payload("<html>502 Bad Gateway</html>\n{{{")


def test_an_unrelated_exporter_has_no_dialect() -> None:
    reading = parse_payload("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3.5\n")
    assert reading.dialect is None and not reading.gauges


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    # 10 observations <= 1, 10 more in (1, 2]: the median is the upper edge of the first bucket,
    # p75 halfway into the second; past the last finite bound the answer is that bound.
    buckets = {1.0: 10.0, 2.0: 20.0, 4.0: 20.0, math.inf: 22.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(1.1)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.55)
    assert histogram_quantile(0.99, buckets) == pytest.approx(4.0)
    assert histogram_quantile(0.5, {1.0: 0.0, math.inf: 0.0}) is None
    assert histogram_quantile(0.5, {1.0: 3.0}) is None  # no +Inf bucket
