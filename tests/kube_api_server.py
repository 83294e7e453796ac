"""kmock's Kubernetes emulator as a standalone API server that a separate process reaches through a
kubeconfig, with what a process started from the chart needs on top of kmock: bearer-token users,
RBAC from the Roles and bindings stored in it, CRDs that are served once created, server-side apply
that creates, and an audit log of every request (who, from which address, what, the answer).

    python -m tests.kube_api_server --host 10.0.0.1 --tls-dir DIR --audit-log audit.jsonl \
        --token admin-token,admin,system:masters \
        --token sa-token,system:serviceaccount:infertune-system:infertune

It serves HTTPS with a self-signed certificate made in --tls-dir, and prints
`listening https://HOST:PORT` once it answers. kmock's gaps that this works around are
named where they are handled; those it leaves (no selectors, no validation, no garbage collector, no
controllers, strategic merge acting as a merge) are written down here and the tests live with them.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import dataclasses
import json
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.test_utils
import aiohttp.web
import kmock
import kmock._internal.parsing as kmock_parsing

# The emulator with the API server's generateName (kopf names its Events that way).
from infertune_lab.demo.cluster import NamingEmulator, seeded

ALL_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
# What a cluster running kube-prometheus-stack serves besides the built-ins (all namespaced); the
# chart's monitors and rules need them.
PROMETHEUS_OPERATOR_KINDS = (
    ("monitoring.coreos.com/v1/servicemonitors", "ServiceMonitor"),
    ("monitoring.coreos.com/v1/podmonitors", "PodMonitor"),
    ("monitoring.coreos.com/v1/prometheusrules", "PrometheusRule"),
)
INTERNAL_HEADER = "X-Kube-Api-Server-Internal"
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}


def _parse_path(path: str) -> kmock_parsing.ParsedPath:
    """kmock 0.8 reads `/api/v1/namespaces[/NAME[/status]]` (the Namespace resource itself) as a
    namespace prefix with nothing after it and answers 500. kopf lists and watches Namespaces whenever
    it is given `--namespace`, so namespaced operators never started against the emulator.
    Parse those paths as the Namespace resource; every other path as kmock does."""
    parts = path.strip("/").split("/")
    if len(parts) in (3, 4, 5) and parts[0] == "api" and parts[2] == "namespaces" and (
            len(parts) < 5 or parts[4] in _NAMESPACE_SUBRESOURCES):
        return kmock_parsing.ParsedPath(group="", version=parts[1], plural="namespaces", namespace=None,
                                        name=parts[3] if len(parts) > 3 else None,
                                        subresource=parts[4] if len(parts) > 4 else None)
    return _kmock_parse_path(path)


_kmock_parse_path = kmock_parsing.parse_path
# kmock's request parser looks the function up on its module at every request; there is no hook.
kmock_parsing.parse_path = _parse_path


@dataclass(frozen=True)
class User:
    name: str
    groups: frozenset[str]

    @property
    def is_admin(self) -> bool:
        return "system:masters" in self.groups


@dataclass(frozen=True)
class Attributes:
    """What RBAC decides on: the request's verb, API group, resource[/subresource], namespace, name."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str | None
    name: str | None

    @property
    def scope(self) -> str:
        return f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"


def parse_token(text: str) -> tuple[str, User]:
    """`TOKEN,USER[,GROUP...]`: a line of kube-apiserver's --token-auth-file, without the uid. A
    ServiceAccount's user (`system:serviceaccount:NS:NAME`) gets its groups as on a real cluster."""
    token, user, *groups = next(csv.reader([text]))
    if not token or not user:
        raise argparse.ArgumentTypeError(f"--token wants TOKEN,USER[,GROUP...], got {text!r}")
    found = {g for g in groups if g} | {"system:authenticated"}
    if user.startswith("system:serviceaccount:"):
        found |= {"system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}"}
    return token, User(user, frozenset(found))


def _rule_allows(rule: dict[str, Any], attrs: Attributes) -> bool:
    """One PolicyRule against the request, as Kubernetes' RBAC authorizer matches it
    (k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac, RuleAllows)."""
    verbs, groups = rule.get("verbs") or [], rule.get("apiGroups") or []
    resources, names = rule.get("resources") or [], rule.get("resourceNames") or []
    wanted = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    return (("*" in verbs or attrs.verb in verbs)
            and ("*" in groups or attrs.group in groups)
            and ("*" in resources or wanted in resources
                 or (bool(attrs.subresource) and f"*/{attrs.subresource}" in resources))
            and (not names or (attrs.name is not None and attrs.name in names)))


def _subject_is(subject: dict[str, Any], user: User) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "ServiceAccount":
        return user.name == f"system:serviceaccount:{subject.get('namespace')}:{name}"
    if kind == "User":
        return user.name == name
    return kind == "Group" and name in user.groups


class ApiServer(NamingEmulator):
    """The emulator plus authentication, RBAC, served CRDs, apply-creates and an audit log."""

    def __init__(self, tokens: dict[str, User], audit: Any = None) -> None:
        super().__init__()
        self.tokens = tokens
        # Marks the server's own requests to itself (an apply that creates is re-sent as a POST).
        self._internal_secret = f"{time.time_ns()}-{id(self)}"
        self.audit = audit
        self.resources.load_bundled()  # the built-in kinds of a recent cluster, as kmock ships them
        for path, kind in PROMETHEUS_OPERATOR_KINDS:
            self.resources[path] = kmock.ResourceInfo(kind=kind, namespaced=True, verbs=ALL_VERBS)
        # kubectl and Helm ask OpenAPI v3 whether a kind validates fields on the server; without an
        # answer they fall back to OpenAPI v2, which kmock does not serve either, and refuse to apply.
        self["get", re.compile(r"/openapi/v3(/.*)?")] << self._serve_openapi
        # kmock streams watches as application/octet-stream; client-go (Helm waiting for the test
        # pod) decodes only a JSON content type. Above kmock's own fallback, below everything else.
        (self ** -1e9)[kmock.action.WATCH] << {"Content-Type": "application/json"} << self._serve_watch

    # --- discovery ---------------------------------------------------------------------------------
    async def _serve_server_version(self, request: Any) -> dict[str, Any]:
        # kmock reports 1.26; the chart requires >= 1.27 and is validated against 1.30.
        return {"major": "1", "minor": "30", "gitVersion": "v1.30.0", "platform": "linux/amd64"}

    async def _serve_version(self, request: Any) -> Any:
        doc = await super()._serve_version(request)
        # kmock names the core group-version "/v1"; clients then find no core kinds at all.
        doc["groupVersion"] = str(doc["groupVersion"]).lstrip("/")
        return doc

    async def _serve_list(self, request: Any) -> Any:
        doc = await super()._serve_list(request)
        # kmock's lists carry no kind; client-go's list-watch (Helm's wait for the test pod) rejects them.
        res = request.resource
        info = self.resources.get(res)
        kind = info.kind if info is not None and info.kind else res.plural.capitalize()
        return {"apiVersion": f"{res.group}/{res.version}".lstrip("/"), "kind": f"{kind}List", **doc}

    async def _serve_watch(self, request: Any) -> Any:
        """kmock's watch, plus client-go's WatchList (Helm 4 waits for the test pod that way): with
        `sendInitialEvents=true` the existing objects are followed by a bookmark annotated
        `k8s.io/initial-events-end`, without which client-go waits for ever."""
        if request.params.get("sendInitialEvents") != "true":
            async for item in super()._serve_watch(request):
                yield item
            return
        yield b""
        res = request.resource
        async with self._lock:  # kmock's own: nothing changes between the listing and the mark
            mark = await self._buses[res].mark()
            initial = [obj.raw for (r, ns, name), obj in self.objects.items()
                       if r == res and self._watched(request, ns, name) and not obj.deleted]
        for raw in initial:
            yield {"type": "ADDED", "object": raw}
        yield {"type": "BOOKMARK", "object": {
            "apiVersion": f"{res.group}/{res.version}".lstrip("/"), "kind": self.resources[res].kind,
            "metadata": {"resourceVersion": "1", "annotations": {"k8s.io/initial-events-end": "true"}}}}
        async for event in mark:
            meta = (event.get("object") or {}).get("metadata") or {}
            if self._watched(request, meta.get("namespace"), meta.get("name")):
                yield event

    @staticmethod
    def _watched(request: Any, namespace: str | None, name: str | None) -> bool:
        return (request.namespace is None or namespace == request.namespace) and (
            request.name is None or name == request.name)

    def _group_versions(self) -> dict[str, list[Any]]:
        found: dict[str, list[Any]] = {}
        for res in self._get_resources():
            path = f"api/{res.version}" if res.group == "" else f"apis/{res.group}/{res.version}"
            found.setdefault(path, []).append(res)
        return found

    async def _serve_openapi(self, request: Any) -> dict[str, Any]:
        """A minimal OpenAPI v3: every kind's PATCH takes `fieldValidation`, so clients leave
        validation to the server. This one does not validate; the chart tests validate what is
        rendered with kubernetes-validate --strict instead."""
        served = self._group_versions()
        tail = request.url.path.removeprefix("/openapi/v3").strip("/")
        if not tail:
            return {"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}"} for gv in served}}
        if tail not in served:
            raise kmock.KubernetesNotFoundError()
        paths = {}
        for res in served[tail]:
            info = self.resources[res]
            ns = "/namespaces/{namespace}" if info.namespaced else ""
            paths[f"/{tail}{ns}/{res.plural}/{{name}}"] = {"patch": {
                "x-kubernetes-group-version-kind": {"group": res.group, "version": res.version, "kind": info.kind},
                "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": {"description": "OK"}}}}
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.30.0"}, "paths": paths}

    # --- requests ----------------------------------------------------------------------------------
    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        if request.headers.get(INTERNAL_HEADER) == self._internal_secret:
            return await self._admitted(request)
        user = self.tokens.get(request.headers.get("Authorization", "").removeprefix("Bearer ").strip())
        attrs = self._attributes(request)
        creating = request.action == kmock.action.CREATE or self._is_apply_create(request)
        # An apply that creates needs `create` as well as `patch`, as on a real API server.
        needed = [attrs] if attrs is None or attrs.verb == "create" or not creating else \
            [attrs, dataclasses.replace(attrs, verb="create")]
        if user is None:
            response = self._status(401, "Unauthorized", "Unauthorized")
        elif attrs is not None and not user.is_admin and not all(self._allowed(user, a) for a in needed if a):
            what = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
            response = self._status(403, "Forbidden", (
                f'{what} is forbidden: User "{user.name}" cannot {attrs.verb} resource "{what}" '
                f'in API group "{attrs.group}" {attrs.scope}'))
        else:
            try:
                response = await self._admitted(request)
            except kmock.KubernetesError as exc:  # kmock's 404s and 409s, rendered by its caller
                self._log(request, user, attrs, exc.status)
                raise
            except Exception:
                self._log(request, user, attrs, 500)
                raise
        self._log(request, user, attrs, response.status, created=creating and response.status < 300)
        return response

    async def _admitted(self, request: Any) -> aiohttp.web.StreamResponse:
        if self._is_apply_create(request):
            return await self._create_by_apply(request)
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            # The emulator assigns no uid, resourceVersion or generation; kopf's patches need them.
            seeded(request.data)
            request.data["metadata"].setdefault("creationTimestamp", _now())
        response = await super()._handle(request)
        if request.action == kmock.action.CREATE and request.resource is not None and response.status < 300 \
                and request.resource.plural == "customresourcedefinitions":
            self._serve_crd(request.data)
        return response

    def _is_apply_create(self, request: Any) -> bool:
        """Server-side apply of an object that does not exist creates it on a real API server; kmock
        answers 404. Helm 4 installs everything by server-side apply."""
        if request.method != "PATCH" or "apply-patch" not in request.headers.get("Content-Type", ""):
            return False
        if request.resource is None or request.name is None or request.subresource:
            return False
        key = (request.resource, request.namespace, request.name)
        return key not in self.objects or self.objects[key].deleted

    async def _create_by_apply(self, request: Any) -> aiohttp.web.StreamResponse:
        body = dict(request.data or {})
        meta = body.setdefault("metadata", {})
        meta.setdefault("name", request.name)
        if request.namespace:
            meta.setdefault("namespace", request.namespace)
        path = request.url.path.rsplit("/", 1)[0]
        async with self.post(path, json=body, headers={INTERNAL_HEADER: self._internal_secret}) as answer:
            payload = await answer.read()
            return aiohttp.web.Response(body=payload, status=answer.status, content_type="application/json")

    def _serve_crd(self, crd: dict[str, Any]) -> None:
        """A created CustomResourceDefinition's kind is served from then on, as on an API server."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            subresources = set((version.get("subresources") or {}).keys())
            self.resources[f"{spec['group']}/{version['name']}/{names['plural']}"] = kmock.ResourceInfo(
                kind=names.get("kind"), singular=names.get("singular"), namespaced=spec.get("scope") == "Namespaced",
                verbs=ALL_VERBS, shortnames=set(names.get("shortNames") or []),
                categories=set(names.get("categories") or []), subresources=subresources)

    # --- RBAC --------------------------------------------------------------------------------------
    def _attributes(self, request: Any) -> Attributes | None:
        """None for non-resource URLs (discovery, OpenAPI, /version), which every authenticated user
        may read (the system:discovery ClusterRole of a real cluster)."""
        res = request.resource
        if res is None or res.plural is None:
            return None
        method = str(request.method.value if hasattr(request.method, "value") else request.method).upper()
        watch = request.params.get("watch") in ("true", "1")
        if method == "GET":
            verb = "watch" if watch else ("get" if request.name else "list")
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                    "DELETE": "delete" if request.name else "deletecollection"}.get(method, method.lower())
        return Attributes(verb, res.group or "", res.plural, request.subresource or "", request.namespace,
                          request.name)

    def _stored(self, plural: str) -> Iterator[tuple[str | None, dict[str, Any]]]:
        for (res, namespace, _), obj in list(self.objects.items()):
            if res.group == "rbac.authorization.k8s.io" and res.plural == plural and not obj.deleted:
                yield namespace, dict(obj.raw)

    def _role_rules(self, kind: str, name: str, namespace: str | None) -> list[dict[str, Any]]:
        plural = "clusterroles" if kind == "ClusterRole" else "roles"
        for ns, role in self._stored(plural):
            if role["metadata"]["name"] == name and (kind == "ClusterRole" or ns == namespace):
                return list(role.get("rules") or [])
        return []

    def _allowed(self, user: User, attrs: Attributes) -> bool:
        """Aggregated ClusterRoles are not expanded; the operator is bound to none."""
        grants: list[dict[str, Any]] = []
        for _, binding in self._stored("clusterrolebindings"):
            if any(_subject_is(s, user) for s in binding.get("subjects") or []):
                grants += self._role_rules("ClusterRole", binding["roleRef"]["name"], None)
        if attrs.namespace:
            for ns, binding in self._stored("rolebindings"):
                if ns == attrs.namespace and any(_subject_is(s, user) for s in binding.get("subjects") or []):
                    grants += self._role_rules(binding["roleRef"]["kind"], binding["roleRef"]["name"], ns)
        return any(_rule_allows(rule, attrs) for rule in grants)

    # --- answers and the audit log -----------------------------------------------------------------
    @staticmethod
    def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                                          "message": message, "reason": reason, "code": code}, status=code)

    def _log(self, request: Any, user: User | None, attrs: Attributes | None, code: int,
             created: bool = False) -> None:
        if self.audit is None:
            return
        raw = getattr(request, "_raw_request", None)  # kmock keeps aiohttp's request privately
        entry = {"time": time.time(), "user": None if user is None else user.name,
                 "source": None if raw is None else raw.remote, "method": str(request.method.value),
                 "path": request.url.path_qs, "code": code, "created": created}
        if attrs is not None:
            entry |= {"verb": attrs.verb, "group": attrs.group, "resource": attrs.resource,
                      "subresource": attrs.subresource, "namespace": attrs.namespace, "name": attrs.name}
        self.audit.write(json.dumps(entry) + "\n")
        self.audit.flush()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def read_audit(path: str) -> list[dict[str, Any]]:
    """The audit log's entries, oldest first."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def kubeconfig(server: str, token: str, ca_file: str, namespace: str = "default") -> str:
    """A kubeconfig for one user of the server."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulated",
        "clusters": [{"name": "emulated", "cluster": {"server": server, "certificate-authority": ca_file}}],
        "users": [{"name": "user", "user": {"token": token}}],
        "contexts": [{"name": "emulated", "context": {"cluster": "emulated", "user": "user", "namespace": namespace}}],
    }, indent=2)


def make_certificate(directory: Path, host: str) -> tuple[Path, Path]:
    """A self-signed serving certificate for `host` (openssl): (certificate, key). The certificate is
    its own CA; clients trust it through the kubeconfig's certificate-authority."""
    cert, key = directory / "apiserver.crt", directory / "apiserver.key"
    if not cert.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "2", "-subj", "/CN=kube-api-server-emulated",
                        "-addext", f"subjectAltName=IP:{host},IP:127.0.0.1,DNS:localhost",
                        "-addext", "basicConstraints=critical,CA:TRUE",
                        "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


class _TlsTestServer(aiohttp.test_utils.RawTestServer):
    """aiohttp's test server (what kmock.Server runs) with TLS. Go clients (Helm, kubectl) send a
    kubeconfig's bearer token only over TLS (kubernetes/kubectl#744), so the emulator must speak it."""

    ssl_context: ssl.SSLContext

    async def start_server(self, **kwargs: Any) -> None:
        await super().start_server(ssl=self.ssl_context, **kwargs)


def _insecure_session(url: Any) -> aiohttp.ClientSession:
    # kmock's own client, used only for the server's requests to itself (it trusts its certificate).
    return aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(ssl=False))


async def serve(host: str, port: int, tokens: Iterable[tuple[str, User]], audit_path: str | None,
                tls_dir: Path) -> None:
    cert, key = make_certificate(tls_dir, host)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server_cls = type("TlsTestServer", (_TlsTestServer,), {"ssl_context": context})
    audit = open(audit_path, "a", encoding="utf-8") if audit_path else None  # noqa: SIM115 (closed below)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with ApiServer(dict(tokens), audit) as api, \
                kmock.Server(api, host=host, port=port, server_cls=server_cls, client_fct=_insecure_session) as server:
            print(f"listening {str(server.url).rstrip('/')}", flush=True)
            await stop.wait()
    finally:
        if audit is not None:
            audit.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kube_api_server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--token", type=parse_token, action="append", default=[], metavar="TOKEN,USER[,GROUP...]")
    parser.add_argument("--audit-log", help="JSON lines, one per request")
    parser.add_argument("--tls-dir", type=Path, required=True,
                        help="where the serving certificate is (made there with openssl if absent)")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.token, args.audit_log, args.tls_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
