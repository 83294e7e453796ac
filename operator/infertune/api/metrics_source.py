"""Where a resource's engine figures come from (`spec.metrics`): a Prometheus that scrapes the pods, with
its URL, credentials and timeout checked before any query is built, or the pods' own /metrics.
"""

from __future__ import annotations

from typing import Annotated, Literal

import yarl
from pydantic import ConfigDict, Field, model_validator

from infertune.api.formats import PROMETHEUS_URL
from infertune.api.quantities import DURATION_PATTERN, parse_duration
from infertune.api.schema import DURATION_FORMAT, ApiModel, Formatted, KeyRef, rule

SOURCE_TIMEOUT_MIN, SOURCE_TIMEOUT_MAX = "100ms", "30s"


class PrometheusSource(ApiModel):
    """The Prometheus that scrapes this deployment's engine pods, and how to reach it."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        rule(f"duration(self.timeout) >= duration('{SOURCE_TIMEOUT_MIN}') && "
             f"duration(self.timeout) <= duration('{SOURCE_TIMEOUT_MAX}')",
             f"timeout must be between {SOURCE_TIMEOUT_MIN} and {SOURCE_TIMEOUT_MAX}", ".timeout"),
        rule("!has(self.bearerTokenSecretRef) || !has(self.url) || self.url.startsWith('https://') || "
             "self.allowTokenOverHttp",
             "bearerTokenSecretRef with a plain http url sends the token in the clear: use https, or set "
             "allowTokenOverHttp", ".url"),
    ]})

    url: Annotated[str, Formatted(PROMETHEUS_URL)] | None = Field(
        default=None,
        description="Default: the operator's --prometheus-url. http(s)://host[:port][/path] in printable ASCII, no "
                    "space, user, query or fragment; the platform may restrict it to an allow-list.")
    bearer_token_secret_ref: KeyRef | None = Field(default=None, description=(
        "A Secret key of the resource's namespace holding the bearer token sent to Prometheus; it is read on "
        "every poll, so a rotated token is picked up. Unset: no token, or with url unset the operator's own "
        "(--prometheus-token-secret)."))
    ca_config_map_ref: KeyRef | None = Field(default=None, description=(
        "A ConfigMap key of the resource's namespace holding the PEM CA bundle that verifies an https url. "
        "caSecretRef wins when both are set. Unset, with no caSecretRef: the system's CAs."))
    ca_secret_ref: KeyRef | None = Field(default=None, description=(
        "A Secret key of the resource's namespace holding the PEM CA bundle that verifies an https url. Unset: "
        "caConfigMapRef, else the system's CAs."))
    timeout: Annotated[str, Field(pattern=DURATION_PATTERN, max_length=32)] = Field(
        default="5s", description="Deadline of each request (a poll may take twice it), 100ms..30s. "
                                   + DURATION_FORMAT)
    allow_token_over_http: bool = Field(default=False, description=(
        "Send the bearer token to a plain http url: only on a network you trust."))

    @model_validator(mode="after")
    def _bounded(self) -> PrometheusSource:
        seconds = parse_duration(self.timeout, "spec.metrics.prometheus.timeout")
        if not parse_duration(SOURCE_TIMEOUT_MIN) <= seconds <= parse_duration(SOURCE_TIMEOUT_MAX):
            raise ValueError(f"spec.metrics.prometheus.timeout: {self.timeout} is outside "
                             f"{SOURCE_TIMEOUT_MIN}..{SOURCE_TIMEOUT_MAX}")
        if self.url is not None:
            _check_url_parses(self.url)
        if (self.bearer_token_secret_ref is not None and self.url is not None and not self.url.startswith("https://")
                and not self.allow_token_over_http):
            raise ValueError("spec.metrics.prometheus.url: a bearer token would be sent over plain http; use "
                             "https, or set allowTokenOverHttp: true")
        return self


def _check_url_parses(url: str) -> None:
    """The CRD's pattern admits an unclosed IPv6 bracket (`http://[::1`) and a port past 65535, which no request
    can go to: refused here, as the operator's source would refuse them on every poll (observe/http.py)."""
    try:
        port = yarl.URL(url).port  # an unclosed bracket, or a port out of range, raises
    except ValueError:
        raise ValueError(f"spec.metrics.prometheus.url: {url[:80]!r} is not a URL (a bracket left open, or a port "
                         f"past 65535)") from None
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"spec.metrics.prometheus.url: port {port} is outside 1..65535")


class Metrics(ApiModel):
    """Where the operator reads the engine's figures (KV use, queue, TTFT, decode speed, request rate)."""

    source: Literal["Prometheus", "Pods"] = Field(default="Prometheus", description=(
        "Prometheus: query a Prometheus that scrapes the engine pods (spec.metrics.prometheus). Pods: the "
        "operator scrapes each ready pod's /metrics on spec.engine.port itself, which needs its RBAC to list "
        "pods. Default Prometheus."))
    prometheus: PrometheusSource | None = Field(default=None, description=(
        "The Prometheus to query when source is Prometheus; ignored for Pods. Unset: the operator's own "
        "(--prometheus-url), with the operator's token if it has one."))
