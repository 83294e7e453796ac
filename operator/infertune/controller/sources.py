"""Where each resource's metrics come from: `spec.metrics` names a Prometheus (URL, bearer token from a
Secret, CA from a Secret or ConfigMap, timeout) or the pods themselves. Resources that name the same
source share one instance, so a poll still issues one query per metric per Prometheus however many
resources read it. Credentials are read through the Kubernetes API on every poll, so a rotated token
is picked up without a restart; a Secret that cannot be read is a fault of that source, not a crash.
A URL outside the platform's allow-list, or a token that would travel over plain http, is a fault
of that source too (the resource holds; nothing is sent).
"""

from __future__ import annotations

import base64
import hashlib
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infertune.actuate.apply import KubeClient
from infertune.actuate.workload import DEPLOYMENT_LABEL
from infertune.api.observation import MetricsFault
from infertune.api.quantities import parse_duration
from infertune.api.spec import InferenceDeploymentSpec
from infertune.errors import ApiError, SourceError
from infertune.observe import PrometheusSource
from infertune.observe.http import AllowList, UrlError, origin, source_url
from infertune.observe.pods import PodsSource, PodTarget, pod_metrics_url
from infertune.observe.promql import DEFAULT_METRICS_WINDOW, range_seconds
from infertune.observe.snapshot import MetricsSource

Key = tuple[str, str]
Ref = tuple[str, str, str, str]  # (kind, namespace, name, key)


@dataclass(frozen=True)
class SourceSpec:
    """What a resource asks for; equal specs share one source instance."""

    kind: str  # "Prometheus" | "Pods"
    url: str | None = None  # None: the operator's --prometheus-url
    token: Ref | None = None
    ca: Ref | None = None
    timeout: float = 5.0
    allow_token_over_http: bool = False

    @property
    def label(self) -> str:
        """How logs and messages name the source: its origin, never a path or anything a tenant wrote after it."""
        if self.kind == "Pods":
            return "pods"
        if self.url is None:
            return "the operator's default Prometheus"
        try:
            return origin(source_url(self.url))
        except UrlError:
            return "an invalid URL"


@dataclass(frozen=True)
class Route:
    """How the poller reaches one resource's replicas."""

    source: SourceSpec
    port: int  # the engine's port, for the pods source


class SourceUnavailable(SourceError):
    """The source a resource names cannot be built or reached; `fault` says why."""

    def __init__(self, fault: MetricsFault, message: str) -> None:
        super().__init__(message)
        self.fault = fault


def route_of(spec: InferenceDeploymentSpec, namespace: str) -> Route:
    metrics = spec.metrics
    if metrics.source == "Pods":
        return Route(SourceSpec("Pods"), spec.engine.port)
    prom = metrics.prometheus
    if prom is None:
        return Route(SourceSpec("Prometheus"), spec.engine.port)
    token = None if prom.bearer_token_secret_ref is None else (
        "Secret", namespace, prom.bearer_token_secret_ref.name, prom.bearer_token_secret_ref.key)
    ca_ref = prom.ca_secret_ref or prom.ca_config_map_ref
    ca = None if ca_ref is None else (
        "Secret" if prom.ca_secret_ref is not None else "ConfigMap", namespace, ca_ref.name, ca_ref.key)
    return Route(SourceSpec("Prometheus", prom.url, token, ca, parse_duration(prom.timeout),
                            prom.allow_token_over_http), spec.engine.port)


def _read(kube: KubeClient, ref: Ref, what: str) -> str:
    kind, namespace, name, key = ref
    try:
        obj = kube.get("v1", kind, namespace, name)
    except ApiError as exc:
        raise SourceUnavailable(MetricsFault.CREDENTIALS, f"{what}: cannot read {kind} {namespace}/{name}: "
                                                          f"{exc}") from None
    if obj is None:
        raise SourceUnavailable(MetricsFault.CREDENTIALS, f"{what}: {kind} {namespace}/{name} not found")
    if kind == "Secret":
        raw = (obj.get("data") or {}).get(key)
        if raw is None:
            raise SourceUnavailable(MetricsFault.CREDENTIALS, f"{what}: Secret {namespace}/{name} has no key {key!r}")
        try:
            return base64.b64decode(raw).decode("utf-8").strip()
        except (ValueError, UnicodeDecodeError):
            raise SourceUnavailable(MetricsFault.CREDENTIALS,
                                    f"{what}: Secret {namespace}/{name} key {key!r} is not base64 text") from None
    value = (obj.get("data") or {}).get(key)
    if value is None:
        raise SourceUnavailable(MetricsFault.CREDENTIALS, f"{what}: ConfigMap {namespace}/{name} has no key {key!r}")
    return str(value)


def _ready_pod(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return ready and bool(status.get("podIP")) and not (pod.get("metadata") or {}).get("deletionTimestamp")


def pod_targets(pods: Sequence[Mapping[str, Any]], ports: Mapping[Key, int]) -> list[PodTarget]:
    """The ready pods of the routed deployments, at the engine's port. Label selectors are also
    applied here because the test emulator ignores them."""
    targets = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str((meta.get("labels") or {}).get(DEPLOYMENT_LABEL, "")))
        if key in ports and _ready_pod(pod):
            try:
                url = pod_metrics_url(str(pod["status"]["podIP"]), ports[key])
            except ValueError:  # not an address: the pod is left out, and the deployment reports it missing
                continue
            targets.append(PodTarget(key[0], key[1], str(meta.get("name", "")), url))
    return targets


class SourceRegistry:
    """One instance per distinct SourceSpec, rebuilt when the credentials it was built with change.
    `default_token` is the operator's own token for its default Prometheus (`--prometheus-token-secret`),
    read like a resource's: through the API on every poll, a Secret that cannot be read a fault.
    `allowed` is the platform's allow-list for the URLs resources name (the operator's default
    Prometheus is the platform's own and is not checked). A replaced source is kept in `retired` until
    the poller closes it on its loop (`reap`)."""

    def __init__(self, kube: KubeClient, default: MetricsSource | None = None, window: str = DEFAULT_METRICS_WINDOW,
                 default_token: Ref | None = None, allowed: AllowList | None = None) -> None:
        self.kube = kube
        self.default = default
        self.window = window
        self.default_token = default_token
        self.allowed = allowed or AllowList()
        self._built: dict[SourceSpec, tuple[str, MetricsSource]] = {}
        self.retired: list[MetricsSource] = []
        self._ca_dir = tempfile.TemporaryDirectory(prefix="infertune-ca-")

    def get(self, spec: SourceSpec) -> MetricsSource:
        """The source for `spec`; raises SourceUnavailable when it cannot be built. Blocking (it reads
        Secrets through the API): the poller calls it off the event loop."""
        if spec.kind == "Pods":
            return self._cached(spec, "", lambda: PodsSource([], timeout=spec.timeout,
                                                             window_seconds=range_seconds(self.window)))
        if spec.url is None:
            if self.default is None:
                raise SourceUnavailable(MetricsFault.NOT_CONFIGURED,
                                        "no Prometheus: set spec.metrics.prometheus.url, or start the operator "
                                        "with --prometheus-url")
            if spec.token is None and spec.ca is None and self.default_token is None:
                return self.default
            default_url = getattr(self.default, "url", None)
            if default_url is None:
                raise SourceUnavailable(MetricsFault.NOT_CONFIGURED, "credentials given but no Prometheus URL")
            own = spec.token is None and self.default_token is not None
            # The platform's own token for its own Prometheus goes where the platform pointed it
            # (--prometheus-url); a resource's token only over https unless the resource says otherwise.
            spec = SourceSpec(spec.kind, default_url, spec.token or self.default_token, spec.ca, spec.timeout,
                              spec.allow_token_over_http or own)
        else:
            own = False
            self._check_allowed(spec.url)
        where = "spec.metrics.prometheus"
        token_field = "--prometheus-token-secret" if own else f"{where}.bearerTokenSecretRef"
        token = None if spec.token is None else _read(self.kube, spec.token, token_field)
        ca = None if spec.ca is None else _read(self.kube, spec.ca, f"{where} CA")
        fingerprint = hashlib.sha256(f"{token}\0{ca}".encode()).hexdigest()
        return self._cached(spec, fingerprint, lambda: self._prometheus(spec, token, ca, fingerprint))

    def _check_allowed(self, url: str) -> None:
        try:
            parsed = source_url(url, "spec.metrics.prometheus.url")
        except UrlError as exc:
            raise SourceUnavailable(MetricsFault.NOT_ALLOWED, str(exc)) from None
        if not self.allowed.allows(parsed):
            raise SourceUnavailable(MetricsFault.NOT_ALLOWED,
                                    f"spec.metrics.prometheus.url: {origin(parsed)} is not among the Prometheus "
                                    "URLs this operator may query (its --allowed-prometheus-url list); ask the "
                                    "platform team")

    def _prometheus(self, spec: SourceSpec, token: str | None, ca: str | None, fingerprint: str) -> MetricsSource:
        assert spec.url is not None
        ca_path = None
        if ca is not None:
            path = Path(self._ca_dir.name) / f"{fingerprint[:16]}.pem"
            path.write_text(ca)
            ca_path = str(path)
        try:
            return PrometheusSource(spec.url, token=token, ca_path=ca_path, timeout=spec.timeout, window=self.window,
                                    allow_token_over_http=spec.allow_token_over_http)
        except UrlError as exc:
            raise SourceUnavailable(MetricsFault.CREDENTIALS if token else MetricsFault.NOT_ALLOWED,
                                    f"spec.metrics.prometheus: {exc}") from None
        except OSError:  # a CA that is not a certificate
            raise SourceUnavailable(MetricsFault.CREDENTIALS, "spec.metrics.prometheus: the CA is not a PEM "
                                                              "certificate") from None

    def _cached(self, spec: SourceSpec, fingerprint: str, build: Any) -> MetricsSource:
        found = self._built.get(spec)
        if found is not None and found[0] == fingerprint:
            return found[1]
        source: MetricsSource = build()
        if found is not None:
            self.retired.append(found[1])
        self._built[spec] = (fingerprint, source)
        return source

    def forget_unused(self, used: set[SourceSpec]) -> None:
        """Sources no resource names any more are retired (a tenant's old URL is not polled again)."""
        for spec in [s for s in self._built if s not in used]:
            self.retired.append(self._built.pop(spec)[1])

    async def reap(self) -> None:
        """Closes the retired sources on the running loop (their sessions belong to it)."""
        retired, self.retired = self.retired, []
        for source in retired:
            await _aclose(source)

    async def aclose(self) -> None:
        self.forget_unused(set())
        await self.reap()
        if self.default is not None:
            await _aclose(self.default)
        self._ca_dir.cleanup()


async def _aclose(source: MetricsSource) -> None:
    closer = getattr(source, "aclose", None)
    if closer is not None:
        await closer()
    else:
        source.close()
