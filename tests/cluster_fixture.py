"""An emulated cluster that runs what the Helm chart renders as real processes.

- The API: kmock's emulator as a standalone HTTPS server (tests/kube_api_server.py), with bearer-token
  users, RBAC from the Roles it stores, and an audit log of every request with its source address.
- The network: a Linux bridge, and one network namespace per pod with its own address on it, so two
  operator replicas both listen on :8080 and :9090 as they do in a cluster, and the audit log tells
  them apart. Needs root (CAP_NET_ADMIN); the tests skip with that reason without it.
- The kubelet: `Kubelet.start_pod` runs a pod template's container (command, args, env with the
  downward API) in its pod's namespace through a `Runtime` (the project's venv standing in for the
  image, or the built image under buildah); `probe` does what the kubelet's httpGet probes do; Pods
  created through the API (the `helm test` hook) are run too and their phase reported back.
- kube-proxy: each Service gets an address on the bridge, forwarding its ports to the ready pods its
  selector matches; pods resolve `NAME.NAMESPACE.svc` to it through /etc/netns/POD/hosts, which
  `ip netns exec` mounts over /etc/hosts.
- Helm: helm-python-sdk installs into it with its release storage in memory (Helm stores releases as
  protobuf-encoded Secrets, which the emulator cannot decode), so `helm test` reuses the same Config.

None of this exists as a library that runs without a container engine or a real cluster; it is kept
to what the chart's Deployment, Service and test Pod use, and fails loudly on anything else.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import helm_python
import yaml

REPO = Path(__file__).resolve().parents[1]
Obj = dict[str, Any]


def network_namespaces_available() -> str | None:
    """None when pods can have network namespaces here, else why not."""
    if os.geteuid() != 0:
        return "needs root for network namespaces (pods listen on the chart's fixed ports)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip` (make deps installs it)"
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create network namespaces: {probe.stderr.strip()}"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


# --- the network -----------------------------------------------------------------------------------
class PodNetwork:
    """A bridge with a /24 of its own; each pod a network namespace with a veth on it."""

    def __init__(self) -> None:
        self.id = secrets.token_hex(3)
        self.bridge = f"itb{self.id}"
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
        while True:
            self.prefix = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
            if f" {self.prefix}." not in used:
                break
        self.gateway = f"{self.prefix}.1"
        self.namespaces: list[str] = []
        self._next_pod, self._next_service = 2, 200
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add_pod(self) -> tuple[str, str]:
        """(network namespace, address) of a new pod."""
        n = self._next_pod
        self._next_pod += 1
        netns, host_end, address = f"infertune-{self.id}-{n}", f"itv{self.id}{n:02x}", f"{self.prefix}.{n}"
        _ip("netns", "add", netns)
        self.namespaces.append(netns)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("link", "set", host_end, "master", self.bridge, "up")
        for args in (("addr", "add", f"{address}/24", "dev", "eth0"), ("link", "set", "eth0", "up"),
                     ("link", "set", "lo", "up"), ("route", "add", "default", "via", self.gateway)):
            _ip("-n", netns, *args)
        return netns, address

    def add_service_address(self) -> str:
        address = f"{self.prefix}.{self._next_service}"
        self._next_service += 1
        _ip("addr", "add", f"{address}/32", "dev", self.bridge)
        return address

    def close(self) -> None:
        for netns in self.namespaces:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / netns, ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


# --- the API server --------------------------------------------------------------------------------
ADMIN_TOKEN = "admin-" + secrets.token_hex(8)


@dataclass
class ApiServer:
    """tests/kube_api_server.py as a process on the bridge's address."""

    workdir: Path
    host: str
    service_accounts: tuple[str, ...]  # "NAMESPACE/NAME" of every ServiceAccount that gets a token
    process: subprocess.Popen[str] | None = None
    url: str = ""
    tokens: dict[str, str] = field(default_factory=dict)  # service account -> token

    def start(self) -> ApiServer:
        self.tokens = {sa: "sa-" + secrets.token_hex(8) for sa in self.service_accounts}
        users = [f"{ADMIN_TOKEN},admin,system:masters"] + [
            f"{token},system:serviceaccount:{sa.replace('/', ':')}" for sa, token in self.tokens.items()]
        cmd = [sys.executable, "-m", "tests.kube_api_server", "--host", self.host, "--tls-dir", str(self.workdir),
               "--audit-log", str(self.audit_path)] + [a for u in users for a in ("--token", u)]
        self.process = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening "):
            self.process.kill()
            raise RuntimeError(f"the API server did not start: {line}{self.process.stdout.read()}")
        self.url = line.split()[1]
        threading.Thread(target=self.process.stdout.read, daemon=True).start()  # drain
        return self

    @property
    def audit_path(self) -> Path:
        return self.workdir / "audit.jsonl"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "apiserver.crt"

    def kubeconfig(self, token: str, directory: Path) -> Path:
        """`directory`/kubeconfig, with the server's CA beside it (referred to relatively, so the
        directory can be mounted anywhere)."""
        from tests.kube_api_server import kubeconfig

        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.ca_file, directory / "ca.crt")
        path = directory / "kubeconfig"
        path.write_text(kubeconfig(self.url, token, "ca.crt"))
        return path

    def audit(self) -> list[Obj]:
        from tests.kube_api_server import read_audit

        return read_audit(str(self.audit_path))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()


class Kube:
    """The cluster admin's client: plain JSON over HTTPS, the way kubectl talks to an API server."""

    def __init__(self, server: ApiServer) -> None:
        self.base = server.url
        self.context = ssl.create_default_context(cafile=str(server.ca_file))
        self.headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Accept": "application/json"}

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={**self.headers, "Content-Type": content_type})
        with urllib.request.urlopen(request, context=self.context, timeout=30) as answer:
            text = answer.read()
        return json.loads(text) if text else None

    def get(self, path: str) -> Obj | None:
        try:
            found: Obj = self.call("GET", path)
            return found
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def items(self, path: str) -> list[Obj]:
        return list((self.call("GET", path) or {}).get("items") or [])

    def apply(self, obj: Obj) -> Obj:
        """`kubectl apply --server-side`: the whole object, created when absent."""
        applied: Obj = self.call("PATCH", object_path(obj) + "?fieldManager=kubectl&force=true", obj,
                                 "application/apply-patch+yaml")
        return applied

    def patch_status(self, obj: Obj, status: Obj) -> None:
        self.call("PATCH", object_path(obj) + "/status", {"status": status}, "application/merge-patch+json")

    def delete(self, obj: Obj) -> None:
        with contextlib.suppress(urllib.error.HTTPError):
            self.call("DELETE", object_path(obj))


_PLURALS = {"Namespace": "namespaces", "Secret": "secrets", "ServiceAccount": "serviceaccounts", "Pod": "pods",
            "Service": "services", "ConfigMap": "configmaps", "Deployment": "deployments",
            "CustomResourceDefinition": "customresourcedefinitions", "ServingPolicy": "servingpolicies",
            "InferenceDeployment": "inferencedeployments", "ClusterKopfPeering": "clusterkopfpeerings",
            "KopfPeering": "kopfpeerings"}


def object_path(obj: Obj) -> str:
    """The REST path of an object of one of the kinds the tests create."""
    api_version, meta = obj["apiVersion"], obj["metadata"]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{base}{ns}/{_PLURALS[obj['kind']]}/{meta['name']}"


# --- what runs a container -------------------------------------------------------------------------
class Runtime(Protocol):
    """Turns a pod's container into an argv run in the pod's network namespace."""

    def argv(self, pod: str, netns: str, spec: Obj, container: Obj, env: Mapping[str, str],
             mounts: Mapping[str, str]) -> list[str]:
        """`spec` is the pod's (security context, volumes); `mounts`: node directory -> where the
        container sees it (read-only)."""
        ...

    def visible_path(self, node_path: Path, mount_point: str) -> str:
        """Where the container sees `node_path`, a file in a directory mounted at `mount_point`."""
        ...

    def release(self, pod: str) -> None:
        ...


def dockerfile_entrypoint(dockerfile: Path = REPO / "Dockerfile") -> tuple[list[str], list[str]]:
    """The runtime stage's ENTRYPOINT and CMD (JSON form), as a container runtime combines them with
    a pod's command and args."""
    runtime = dockerfile.read_text().rsplit("\nFROM ", 1)[1]
    entrypoint = re.search(r"^ENTRYPOINT (\[.*\])$", runtime, re.M)
    cmd = re.search(r"^CMD (\[.*\])$", runtime, re.M)
    assert entrypoint and cmd, "the Dockerfile's runtime stage needs JSON-form ENTRYPOINT and CMD"
    return json.loads(entrypoint.group(1)), json.loads(cmd.group(1))


def container_argv(container: Obj, entrypoint: list[str], cmd: list[str]) -> list[str]:
    """Kubernetes' rule: `command` replaces ENTRYPOINT (and drops CMD); `args` replaces CMD."""
    if container.get("command"):
        return list(container["command"]) + list(container.get("args") or [])
    return entrypoint + list(container.get("args", cmd))


@dataclass
class VenvRuntime:
    """The project's venv in place of the image's /opt/infertune: the same entry point and arguments,
    without building an image (make image-test runs the image itself)."""

    venv: Path = Path(sys.executable).parent.parent

    def argv(self, pod: str, netns: str, spec: Obj, container: Obj, env: Mapping[str, str],
             mounts: Mapping[str, str]) -> list[str]:
        argv = container_argv(container, *dockerfile_entrypoint())
        path = f"{self.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"
        return ["ip", "netns", "exec", netns, "env", "-i", f"PATH={path}",
                *[f"{k}={v}" for k, v in env.items()], *argv]

    def visible_path(self, node_path: Path, mount_point: str) -> str:
        return str(node_path)  # no mount namespace: the process sees the node's files

    def release(self, pod: str) -> None:
        pass


# --- pods ------------------------------------------------------------------------------------------
@dataclass
class Pod:
    name: str
    namespace: str
    labels: dict[str, str]
    container: Obj
    netns: str
    address: str
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def port(self, port: int | str) -> int:
        """A probe's or a Service's port, by number or by the container port's name."""
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in self.container.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise AssertionError(f"pod {self.name} has no container port named {port!r}")

    def has_port(self, port: int | str) -> bool:
        return isinstance(port, int) or str(port).isdigit() or any(
            p.get("name") == port for p in self.container.get("ports") or [])

    def probe(self, probe: Obj, timeout: float = 5.0) -> tuple[int, str]:
        """An httpGet probe as the kubelet runs it: from the node, to the pod's address."""
        get = probe["httpGet"]
        url = f"http://{self.address}:{self.port(get['port'])}{get.get('path', '/')}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def ready(self) -> bool:
        probe = self.container.get("readinessProbe")
        return self.running and (probe is None or 200 <= self.probe(probe, 2.0)[0] < 400)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Every process of the pod (all that run in its network namespace: a runtime may start the
        container's process outside the kubelet's process group)."""
        if not self.running:
            return
        assert self.process is not None
        found = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout
        for pid in {self.process.pid, *map(int, found.split())}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


# Not under /var/run: Debian links it to /run, which the image runtime covers with its own tmpfs.
SERVICE_ACCOUNT_MOUNT = "/var/lib/infertune-test"


class Kubelet:
    """Runs pods from pod templates and from Pod objects, each in its own network namespace."""

    def __init__(self, network: PodNetwork, kube: Kube, runtime: Runtime, workdir: Path,
                 kubeconfigs: Callable[[str, str], Path]) -> None:
        self.network, self.kube, self.runtime, self.workdir = network, kube, runtime, workdir
        self.kubeconfigs = kubeconfigs  # (namespace, service account) -> kubeconfig path on the node
        self.pods: list[Pod] = []
        self.services: dict[str, tuple[str, Obj]] = {}  # "name.namespace" -> (address, Service)
        self._proxies: list[socketserver.BaseServer] = []
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def start_pod(self, template: Obj, namespace: str, name: str) -> Pod:
        spec = template["spec"]
        (container,) = spec["containers"]  # the chart's pods have one container
        netns, address = self.network.add_pod()
        env = self._env(container, namespace, name, address)
        mounts: dict[str, str] = {}
        account = spec.get("serviceAccountName", "default")
        if spec.get("automountServiceAccountToken", True):
            # In place of the in-cluster config (the API is on the bridge, not kubernetes.default.svc):
            # the pod's ServiceAccount's token and the server's CA, through KUBECONFIG.
            kubeconfig = self.kubeconfigs(namespace, account)
            mounts[str(kubeconfig.parent)] = SERVICE_ACCOUNT_MOUNT
            env["KUBECONFIG"] = self.runtime.visible_path(kubeconfig, SERVICE_ACCOUNT_MOUNT)
        hosts = Path("/etc/netns") / netns / "hosts"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        # The pod's own hostname at its address, as the kubelet writes it (the pod shares the node's
        # hostname here): kopf looks it up when no POD_ID names the pod, and this network has no DNS to
        # answer, so without it every such start waited out the resolver's timeouts (~20 s).
        hosts.write_text(f"127.0.0.1 localhost\n{address} {socket.gethostname()}\n" + "".join(
            f"{addr} {key}.svc {key}.svc.cluster.local\n" for key, (addr, _) in self.services.items()))
        pod = Pod(name, namespace, dict((template.get("metadata") or {}).get("labels") or {}), container, netns,
                  address, self.workdir / f"{name}.log")
        argv = self.runtime.argv(name, netns, spec, container, env, mounts)
        with open(pod.log_path, "wb") as log:
            pod.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True, cwd=self.workdir)
        self.pods.append(pod)
        return pod

    def _env(self, container: Obj, namespace: str, name: str, address: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for var in container.get("env") or []:
            if "value" in var:
                env[var["name"]] = str(var["value"])
                continue
            field_path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            known = {"metadata.name": name, "metadata.namespace": namespace, "status.podIP": address}
            if field_path not in known:
                raise AssertionError(f"the kubelet stand-in does not resolve env {var}")
            env[var["name"]] = known[field_path]
        return env

    # kube-proxy ----------------------------------------------------------------------------------
    def expose(self, service: Obj) -> str:
        """The Service's address; each port forwards to a ready pod its selector matches."""
        address = self.network.add_service_address()
        meta = service["metadata"]
        self.services[f"{meta['name']}.{meta['namespace']}"] = (address, service)
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            self._proxies.append(self._forward(address, int(port["port"]), service, target))
        return address

    def endpoints(self, service: Obj, target: int | str) -> list[Pod]:
        """Ready pods the selector matches that have the target port (a named port a pod lacks
        leaves it out, as the endpoints controller does: the helm test pod carries the labels)."""
        selector = service["spec"].get("selector") or {}
        return [p for p in self.pods if p.namespace == service["metadata"]["namespace"]
                and selector.items() <= p.labels.items() and p.has_port(target) and p.ready()]

    def _forward(self, address: str, port: int, service: Obj, target: int | str) -> socketserver.BaseServer:
        kubelet = self

        class Pipe(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                ready = kubelet.endpoints(service, target)
                if not ready:
                    return  # no endpoints: the connection is closed, as kube-proxy rejects it
                pod = random.choice(ready)
                with socket.create_connection((pod.address, pod.port(target)), timeout=10) as upstream:
                    _pipe(self.request, upstream)

        server = socketserver.ThreadingTCPServer((address, port), Pipe)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()
        return server

    # Pods created through the API (helm test) ---------------------------------------------------
    def watch_pods(self, namespace: str) -> None:
        """Runs every Pod created in `namespace` and reports its phase, as a node would."""
        def loop() -> None:
            seen: set[str] = set()
            while not self._stop.wait(0.2):
                for obj in self.kube.items(f"/api/v1/namespaces/{namespace}/pods"):
                    uid = obj["metadata"].get("uid", obj["metadata"]["name"])
                    if uid not in seen:
                        seen.add(uid)
                        threading.Thread(target=self._run_pod_object, args=(obj,), daemon=True).start()

        self._watcher = threading.Thread(target=loop, daemon=True)
        self._watcher.start()

    def _run_pod_object(self, obj: Obj) -> None:
        meta = obj["metadata"]
        pod = self.start_pod({"metadata": meta, "spec": obj["spec"]}, meta["namespace"], meta["name"])
        self.kube.patch_status(obj, {"phase": "Running", "podIP": pod.address})
        assert pod.process is not None
        code = pod.process.wait()
        self.kube.patch_status(obj, {"phase": "Succeeded" if code == 0 else "Failed", "podIP": pod.address,
                                     "containerStatuses": [{"name": pod.container["name"], "state": {
                                         "terminated": {"exitCode": code}}}]})

    def close(self) -> None:
        self._stop.set()
        for pod in self.pods:  # the cluster goes away with them: no graceful shutdown to wait for
            pod.kill(signal.SIGKILL)
            if pod.process is not None:
                pod.process.wait(15)
            self.runtime.release(pod.name)
        for proxy in self._proxies:
            proxy.shutdown()
            proxy.server_close()


def _pipe(a: socket.socket, b: socket.socket) -> None:
    def copy_(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=copy_, args=(b, a), daemon=True)
    other.start()
    copy_(a, b)
    other.join(10)


# --- Helm and kubectl as the README uses them ------------------------------------------------------
class UnknownStep(AssertionError):
    pass


def console_commands(block: str) -> list[list[str]]:
    """The commands of a ```console block: continuation lines joined, comments dropped, split as a shell would."""
    joined = re.sub(r"\\\n\s*", " ", block)
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append(words)
    return commands


def _deep_merge(base: Obj, extra: Obj) -> Obj:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _flags(words: list[str], takes_value: set[str],
           switches: frozenset[str] = frozenset()) -> tuple[list[str], list[tuple[str, str]]]:
    """Positional words and (flag, value) pairs; an unknown flag fails, so the README cannot say more
    than the test does."""
    positional, flags = [], []
    it = iter(words)
    for word in it:
        if word.startswith("-"):
            name, eq, value = word.partition("=")
            if name in switches and not eq:
                flags.append((name, ""))
            elif name in takes_value:
                flags.append((name, value if eq else next(it)))
            else:
                raise UnknownStep(f"unknown flag {word!r} in {' '.join(words)!r}")
        else:
            positional.append(word)
    return positional, flags


@dataclass
class Console:
    """kubectl and helm, for the subset of their command lines the README uses, against the emulated
    cluster. Helm is helm-python-sdk (Helm's Go SDK); kubectl's verbs map onto the admin client."""

    kube: Kube
    kubeconfig: Path
    on_installed: Callable[[str, str], None]  # (release, namespace): play the Deployment controller
    helm: dict[str, helm_python.Config] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def run(self, words: list[str]) -> Any:
        self.log.append(" ".join(words))
        tool, *rest = words
        if tool == "kubectl":
            return self._kubectl(rest)
        if tool == "helm":
            return self._helm(rest)
        raise UnknownStep(f"the test does not know how to run {words[0]!r}")

    def _config(self, namespace: str) -> helm_python.Config:
        if namespace not in self.helm:
            self.helm[namespace] = helm_python.Config(kubeconfig_path=self.kubeconfig, namespace=namespace,
                                                      storage_driver="memory")
        return self.helm[namespace]

    def _helm(self, words: list[str]) -> Any:
        verb, *rest = words
        if verb == "install":
            (name, chart), flags = _flags(rest, {"-n", "--namespace", "--set", "--set-string", "-f", "--values"})
            values: Obj = {}
            for flag, value in flags:  # Helm's order: files, then --set, then --set-string
                if flag in ("-f", "--values"):
                    values = _deep_merge(values, yaml.safe_load((REPO / value).read_text()) or {})
            for flag, value in flags:
                if flag == "--set":
                    values = _deep_merge(values, helm_python.parse_set_string(value))
            for flag, value in flags:
                if flag == "--set-string":
                    values = _deep_merge(values, helm_python.parse_set_string_values(value))
            namespace = dict(flags).get("-n") or dict(flags).get("--namespace") or "default"
            release = self._config(namespace).install(REPO / chart, name, values, namespace=namespace, timeout=60)
            self.on_installed(name, namespace)
            return release
        if verb == "test":
            (name,), flags = _flags(rest, {"-n", "--namespace"})
            namespace = dict(flags).get("-n") or dict(flags).get("--namespace") or "default"
            return self._config(namespace).test(name, timeout=120)
        raise UnknownStep(f"helm {verb}: not a step the test knows")

    def _kubectl(self, words: list[str]) -> Any:
        positional, flags = _flags(words, {"-n", "--namespace", "-f", "--filename", "--from-literal"})
        namespace = dict(flags).get("-n") or dict(flags).get("--namespace")
        match positional:
            case ["create", "namespace", name]:
                return self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            case ["create", "serviceaccount", name]:
                return self.kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                                        "metadata": {"name": name, "namespace": namespace or "default"}})
            case ["create", "secret", "generic", name]:
                data = dict(v.split("=", 1) for f, v in flags if f == "--from-literal")
                return self.kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                                        "metadata": {"name": name, "namespace": namespace or "default"},
                                        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})
            case ["apply"]:
                applied = []
                for flag, value in flags:
                    if flag in ("-f", "--filename"):
                        target = REPO / value
                        for path in sorted(target.glob("*.yaml")) if target.is_dir() else [target]:
                            for doc in yaml.safe_load_all(path.read_text()):
                                if doc:
                                    if namespace and "namespace" not in doc["metadata"]:
                                        doc["metadata"]["namespace"] = namespace
                                    applied.append(self.kube.apply(doc))
                return applied
            case ["rollout", "status", target] if target.startswith("deployment/"):
                return self._rollout_status(namespace or "default", target.split("/", 1)[1])
        raise UnknownStep(f"kubectl {' '.join(words)}: not a step the test knows")

    def _rollout_status(self, namespace: str, name: str, timeout: float = 60.0) -> Obj:
        """What `kubectl rollout status` waits for: every replica updated and ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}") or {}
            status, want = found.get("status") or {}, (found.get("spec") or {}).get("replicas", 1)
            if status.get("updatedReplicas") == want and status.get("readyReplicas") == want:
                return found
            time.sleep(0.2)
        raise AssertionError(f"deployment {namespace}/{name} did not roll out in {timeout:.0f} s")


def readme_block(name: str, readme: Path = REPO / "README.md") -> str:
    """The text between `<!-- BEGIN name -->` and `<!-- END name -->` in the README."""
    text = readme.read_text()
    found = re.search(rf"<!-- BEGIN {re.escape(name)} -->\n(.*?)<!-- END {re.escape(name)} -->", text, re.S)
    assert found, f"README.md has no {name} block"
    return found.group(1)


def console_blocks(markdown: str) -> list[str]:
    return re.findall(r"```console\n(.*?)```", markdown, re.S)


def wait_for(what: str, probe: Callable[[], Any], timeout: float, every: float = 0.1) -> Any:
    """probe()'s first truthy value; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


# --- all of it together ----------------------------------------------------------------------------
@dataclass
class EmulatedCluster:
    network: PodNetwork
    server: ApiServer
    kube: Kube
    kubelet: Kubelet
    console: Console

    def roll_out(self, release: str, namespace: str) -> None:
        """What the cluster does after `helm install`: Services get addresses (kube-proxy), each
        Deployment of the release gets its replicas as pods (the Deployment controller and the
        kubelet), and its status says so once their readiness probes pass."""
        for service in self.kube.items(f"/api/v1/namespaces/{namespace}/services"):
            self.kubelet.expose(service)
        self.kubelet.watch_pods(namespace)
        for deployment in self.kube.items(f"/apis/apps/v1/namespaces/{namespace}/deployments"):
            if (deployment["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") != release:
                continue
            self.scale(deployment)

    def scale(self, deployment: Obj, replicas: int | None = None) -> list[Pod]:
        meta, spec = deployment["metadata"], deployment["spec"]
        want = spec.get("replicas", 1) if replicas is None else replicas
        pods = [self.kubelet.start_pod(spec["template"], meta["namespace"],
                                       f"{meta['name']}-{secrets.token_hex(5)[:10]}-{secrets.token_hex(3)[:5]}")
                for _ in range(want)]

        def report() -> None:
            with contextlib.suppress(AssertionError):
                wait_for("pods ready", lambda: all(p.ready() for p in pods), 60, every=0.3)
                ready = sum(p.ready() for p in pods)
                self.kube.patch_status(deployment, {"observedGeneration": meta.get("generation", 1),
                                                    "replicas": want, "updatedReplicas": want,
                                                    "readyReplicas": ready, "availableReplicas": ready})

        threading.Thread(target=report, daemon=True).start()
        return pods

    def operator_pods(self) -> list[Pod]:
        return [p for p in self.kubelet.pods if p.container["name"] == "operator"]


@contextlib.contextmanager
def emulated_cluster(workdir: Path, runtime: Runtime, service_accounts: tuple[str, ...]) -> Iterator[EmulatedCluster]:
    """The network, the API server (with tokens for `service_accounts`, "NAMESPACE/NAME"), the admin
    client, the kubelet and the console, torn down in reverse."""
    network = PodNetwork()
    server = ApiServer(workdir / "apiserver", network.gateway, service_accounts)
    kubelet: Kubelet | None = None
    try:
        server.workdir.mkdir(parents=True, exist_ok=True)
        server.start()
        kube = Kube(server)
        admin = server.kubeconfig(ADMIN_TOKEN, workdir / "admin")

        def kubeconfig_of(namespace: str, account: str) -> Path:
            token = server.tokens.get(f"{namespace}/{account}")
            assert token, f"no token for ServiceAccount {namespace}/{account}: add it to service_accounts"
            return server.kubeconfig(token, workdir / f"sa-{namespace}-{account}")

        kubelet = Kubelet(network, kube, runtime, workdir, kubeconfig_of)
        cluster = EmulatedCluster(network, server, kube, kubelet, Console(kube, admin, lambda r, n: None))
        cluster.console.on_installed = cluster.roll_out
        yield cluster
    finally:
        if kubelet is not None:
            kubelet.close()
        server.stop()
        network.close()
