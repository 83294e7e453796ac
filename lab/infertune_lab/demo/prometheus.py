"""Debian's Prometheus as a plain process on a free loopback port: the demo's and the tests' scraper.

    prom = PrometheusProcess(workdir, file_sd_dir=workdir / "targets").start()
    write_file_sd(workdir / "targets" / "demo.json", [FileSdGroup("127.0.0.2:8000", {...})])
    prom.kill()      # SIGKILL, as an outage
    prom.start()     # same port, same TSDB

Static targets each become their own static_config, so their `namespace`/`deployment`/`pod` labels
attach to every series scraped from them, as a PodMonitor's relabelling does in a cluster. A
`file_sd_dir` adds one job reading every `*.json` there; Prometheus notices a rewritten file by
itself (inotify), so a fleet agent only rewrites its file when pods come and go. The first sample
lands ~5-6 s after start (scrape offset plus head append).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROMETHEUS_BIN = shutil.which("prometheus") or "/usr/bin/prometheus"


def installed() -> bool:
    return os.path.exists(PROMETHEUS_BIN)


@dataclass(frozen=True)
class ScrapeTarget:
    address: str  # host:port
    namespace: str = "default"
    deployment: str = ""
    pod: str = ""
    path: str = "/metrics"
    honor_labels: bool = False
    extra_labels: dict[str, str] = field(default_factory=dict)

    def labels(self) -> dict[str, str]:
        out = {k: v for k, v in (("namespace", self.namespace), ("deployment", self.deployment),
                                 ("pod", self.pod)) if v}
        out.update(self.extra_labels)
        return out


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def write_file_sd(path: Path, groups: Sequence[Mapping[str, Any]]) -> None:
    """Replaces a file_sd file atomically: Prometheus must never read half a JSON document."""
    tmp = path.with_name(f".{path.name}.tmp")  # outside the *.json glob while being written
    tmp.write_text(json.dumps(list(groups), indent=1, sort_keys=True))
    tmp.replace(path)


def _scrape_configs(targets: Sequence[ScrapeTarget], file_sd_dir: Path | None) -> list[dict[str, Any]]:
    # One job per (path, honor_labels) pair: both are job-level settings in Prometheus.
    jobs: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for t in targets:
        jobs.setdefault((t.path, t.honor_labels), []).append({"targets": [t.address], "labels": t.labels()})
    configs: list[dict[str, Any]] = [
        {"job_name": f"infertune-test-{i}", "metrics_path": path, "honor_labels": honor,
         "static_configs": statics}
        for i, ((path, honor), statics) in enumerate(sorted(jobs.items()))
    ]
    if file_sd_dir is not None:
        configs.append({"job_name": "infertune-pods",
                        "file_sd_configs": [{"files": [str(file_sd_dir / "*.json")], "refresh_interval": "5s"}]})
    return configs


class PrometheusProcess:
    """One Prometheus server whose port and TSDB survive kill()/start(), for outages."""

    def __init__(self, workdir: Path, targets: Sequence[ScrapeTarget] = (), port: int | None = None,
                 scrape_interval: str = "1s", scrape_timeout: str = "900ms",
                 file_sd_dir: Path | None = None) -> None:
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.scrape_interval = scrape_interval
        self.scrape_timeout = scrape_timeout
        self.targets: list[ScrapeTarget] = list(targets)
        self.file_sd_dir = file_sd_dir
        self.tsdb = self.workdir / "tsdb"
        self.config_path = self.workdir / "prometheus.yml"
        self.log_path = self.workdir / "prometheus.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self.tsdb.mkdir(parents=True, exist_ok=True)
        if file_sd_dir is not None:
            file_sd_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _write_config(self) -> None:
        config = {
            "global": {"scrape_interval": self.scrape_interval, "scrape_timeout": self.scrape_timeout,
                       "evaluation_interval": self.scrape_interval},
            "scrape_configs": _scrape_configs(self.targets, self.file_sd_dir),
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def start(self, timeout: float = 30.0) -> PrometheusProcess:
        if self.running:
            return self
        if not installed():
            raise FileNotFoundError(f"{PROMETHEUS_BIN} is not installed (make system-deps)")
        log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [PROMETHEUS_BIN, f"--config.file={self.config_path}", f"--storage.tsdb.path={self.tsdb}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle",
             "--storage.tsdb.retention.time=1d", "--log.level=warn",
             # The web UI assets are irrelevant here; Debian ships them elsewhere anyway.
             "--web.console.templates=/dev/null", "--web.console.libraries=/dev/null"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, start_new_session=True,
        )
        log.close()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._proc.returncode}: {self.log_tail()}")
            with contextlib.suppress(OSError, urllib.error.URLError), \
                    urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                if resp.status == 200:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"prometheus not ready on {self.url} after {timeout}s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL: an outage, not a shutdown. The TSDB's WAL replays on the next start."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(timeout=10)
        self._proc = None

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None

    def restart(self, timeout: float = 30.0) -> PrometheusProcess:
        self.kill()
        return self.start(timeout)

    def set_targets(self, targets: Sequence[ScrapeTarget]) -> None:
        """Rewrites the config and reloads it in place (POST /-/reload)."""
        self.targets = list(targets)
        self._write_config()
        if self.running:
            req = urllib.request.Request(f"{self.url}/-/reload", method="POST")
            with urllib.request.urlopen(req, timeout=10):
                pass

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": promql}
        if at is not None:
            params["time"] = repr(at)
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {body}")
        return list(body["data"]["result"])

    def wait_for_series(self, promql: str, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Polls until the query returns at least `count` series; the first scrape takes a few seconds."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, urllib.error.URLError):
                result = self.query(promql)
                if len(result) >= count:
                    return result
            time.sleep(0.25)
        raise TimeoutError(f"{promql!r}: {len(result)} of {count} series after {timeout}s: {self.log_tail()}")

    def wait_for_samples(self, promql: str, samples: int, timeout: float = 60.0) -> None:
        """Waits until every series of `promql` holds `samples` points (for rate() windows)."""
        self.wait_for_series(f"count_over_time({promql}[10m]) >= {samples}", timeout=timeout)
