"""Server-side apply of whole objects (field manager `infertune`, force), and the few reads the
operator needs, over the official kubernetes client. Blocking: callers run it off the event loop."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import kubernetes.client

from infertune.actuate.workload import INPUT_HASH
from infertune.errors import ApiError

FIELD_MANAGER = "infertune"
_PLURALS = {"Deployment": "deployments", "Service": "services", "LeaderWorkerSet": "leaderworkersets",
            "ConfigMap": "configmaps", "Secret": "secrets", "InferenceDeployment": "inferencedeployments",
            "ServingPolicy": "servingpolicies", "Pod": "pods"}
Obj = dict[str, Any]


def object_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    ns = f"/namespaces/{namespace}" if namespace else ""
    tail = f"/{name}" if name else ""
    return f"{base}{ns}/{_PLURALS[kind]}{tail}"


@dataclass
class KubeClient:
    """Thin JSON-over-HTTP on the kubernetes client's configuration (kubeconfig or in-cluster)."""

    api: kubernetes.client.ApiClient

    def _call(self, method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None,
              content_type: str = "application/json") -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = self.api.param_serialize(method, path, query_params=query or [], header_params=headers,
                                          body=body, auth_settings=["BearerToken"])
        response = self.api.call_api(*params, _request_timeout=30)
        response.read()  # type: ignore[no-untyped-call]
        text = response.data.decode("utf-8") if response.data else ""
        if response.status >= 400:
            try:
                message = json.loads(text).get("message", text)
            except ValueError:
                message = text
            raise ApiError(response.status, str(message)[:300])
        return json.loads(text) if text else None

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        try:
            found: Obj = self._call("GET", object_path(api_version, kind, namespace, name))
            return found
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None, label_selector: str = "") -> list[Obj]:
        """The items of a list call. The selector is a request to the server; callers filter again
        because the test emulator ignores selectors."""
        query = [("labelSelector", label_selector)] if label_selector else []
        found = self._call("GET", object_path(api_version, kind, namespace), query=query) or {}
        return list(found.get("items") or [])

    def apply(self, obj: Obj) -> Obj:
        """Server-side apply of the whole object. A 404 means a server that cannot create through
        apply (the test emulator); a real API server creates on apply and never gets there."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        try:
            applied: Obj = self._call("PATCH", path, obj, query, "application/apply-patch+yaml")
            return applied
        except ApiError as exc:
            if not exc.not_found:
                raise
        created: Obj = self._call("POST", object_path(obj["apiVersion"], obj["kind"], meta.get("namespace")),
                                  obj, [("fieldManager", FIELD_MANAGER)])
        return created

    def apply_if_changed(self, obj: Obj) -> bool:
        """Applies unless the live object already carries this input hash; True when it applied."""
        meta = obj["metadata"]
        live = self.get(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        wanted = meta.get("annotations", {}).get(INPUT_HASH)
        live_hash = (live or {}).get("metadata", {}).get("annotations", {}).get(INPUT_HASH)
        if wanted and live_hash == wanted:
            return False
        self.apply(obj)
        return True


def client_from_environment(host: str | None = None) -> KubeClient:
    """In-cluster config when running in a pod, else the kubeconfig; `host` overrides (tests)."""
    import kubernetes.config

    if host is not None:
        configuration = kubernetes.client.Configuration(host=host)
        configuration.verify_ssl = False
        return KubeClient(kubernetes.client.ApiClient(configuration))
    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return KubeClient(kubernetes.client.ApiClient())
