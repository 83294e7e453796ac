"""The live view while the demo runs (rich, on stderr): the layout, the replicas, what the operator
reads (KV, per-stream speed, TTFT p95, whether its metrics are trusted) and each decision with its
reason. A `Quiet` view stands in when stderr is not a terminal or the output is JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from infertune_lab.demo.measure import Decision, Sample


class View(Protocol):
    def __enter__(self) -> View: ...
    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...
    def show(self, sample: Sample, status: Mapping[str, Any], decisions: Sequence[Decision]) -> None: ...
    def say(self, message: str) -> None: ...


class Quiet:
    def __enter__(self) -> Quiet:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def show(self, sample: Sample, status: Mapping[str, Any], decisions: Sequence[Decision]) -> None:
        return None

    def say(self, message: str) -> None:
        return None


def _condition(status: Mapping[str, Any], kind: str) -> str:
    for c in status.get("conditions") or []:
        if c.get("type") == kind:
            return f"{c.get('status')} ({c.get('reason')})"
    return "-"


def _fmt(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def panel(sample: Sample, status: Mapping[str, Any], decisions: Sequence[Decision]) -> Group:
    seen = status.get("observed") or {}
    layout = (f"TP{sample.tp}  max-num-seqs {sample.max_num_seqs}  x{sample.replicas_wanted}"
              if sample.tp is not None else "not applied yet")
    table = Table(title=f"infertune demo  t={sample.t:5.0f} s  [{sample.act}]", show_header=False,
                  title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("layout applied", layout)
    table.add_row("replicas", f"{sample.serving} serving, {sample.loading} loading")
    table.add_row("in flight", f"{sample.running} running, {sample.waiting} waiting")
    table.add_row("KV use (fleet)", f"{sample.kv_max:.0%} fullest, {sample.kv_mean:.0%} mean"
                  + ("  PREEMPTING" if sample.preemptions else ""))
    table.add_row("operator reads", f"KV {_fmt(seen.get('kvUsagePercent'), '%')}, "
                  f"{_fmt(seen.get('streamTokensPerSecond'))} tok/s per stream, "
                  f"TTFT {_fmt(seen.get('ttftSeconds'), ' s')}, {_fmt(seen.get('requestsPerSecond'))} req/s")
    table.add_row("MetricsAvailable", _condition(status, "MetricsAvailable"))
    table.add_row("SLOMet", _condition(status, "SLOMet"))
    table.add_row("CacheHeadroom", _condition(status, "CacheHeadroom"))
    log = Table(title="decisions", title_justify="left", show_lines=False)
    for name in ("t (s)", "action", "reason", "message"):
        log.add_column(name, overflow="fold")
    for d in decisions[-8:]:
        log.add_row(f"{d.t:.0f}", d.action, d.reason, Text(d.message[:110]))
    return Group(table, log)


class RichView:
    def __init__(self, console: Console) -> None:
        self.console = console
        self._live = Live(console=console, refresh_per_second=2, transient=False)

    def __enter__(self) -> RichView:
        self._live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._live.__exit__(kind, exc, tb)

    def show(self, sample: Sample, status: Mapping[str, Any], decisions: Sequence[Decision]) -> None:
        self._live.update(panel(sample, status, decisions))

    def say(self, message: str) -> None:
        self.console.log(message)
