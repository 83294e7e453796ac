"""The model against public measured sweeps: the napkin alone, and the fit on the smallest batches
predicting the rest (docs/model-validation.md; the sweeps are docs/validation/*.toml).

A sweep is a closed loop at fixed prompt and answer lengths, one row per concurrency c. From each row:

- per-pass time: the reported mean TPOT, or, where a source gives output throughput X (tokens/s, the
  whole replica) and TTFT but no TPOT, Little's law over one request,
      c x O = X x (TTFT + (O - 1) x per_pass)   =>   per_pass = (c x O / X - TTFT) / (O - 1);
- the decode batch: the c streams less those still waiting for their first token,
      B = c x (O x per_pass) / (TTFT + O x per_pass);
- the context a decoding stream attends over: the prompt plus half the answer.

TTFT in a closed loop is not the B200 load test's all-at-once prefill (fresh x c / prefill rate): arrivals are
spread, so a new request waits for a fixed cost (HTTP, tokenizer, scheduler) plus the steps in flight and
its own prefill step, each as long as a pass of the batch. The fit reads it as TTFT = t0 + k x per_pass(B)
with t0, k >= 0 fitted on the same smallest rows, and predicts held-out TTFT with the predicted per-pass.

The twin's replay learns two more things from the same training rows (prefillfit.py): the replica's prefill
rate, from their TTFT against the prompt tokens (bounded by the compute roofline, the napkin's rate where no
row gives TTFT), and the decode pass alone, the measured TPOT less the other streams' prefills it carried,
fitted the same way as the per-pass time. The twin steps those prefills itself, so it is given both.

A sweep may also give the same setup's pass at other TPs (`[[other_tp]]`, one concurrency each). Those check
what the planner does for a TP it never ran: the napkin calibrated at a measured TP, carried to another, with a
band that widens per octave of TP (perf.py `TRANSFER_SPREAD_PER_OCTAVE`). Every ordered pair is predicted at
the batch both ran, so the miss is the carry across TPs alone, not the napkin's shape across batches.

Pure: the caller reads the files; everything here is arithmetic on what they hold.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from infertune.model.catalog import CatalogError, GpuSpec, ModelProfile, load_gpu, load_model
from infertune.model.fit import FitError, fit_per_pass
from infertune.model.passfit import DEFAULT_NAPKIN, PassFit, fit_pass
from infertune.model.perf import PerformanceModel, calibration_ratio
from infertune.model.prefillfit import PrefillFit, PrefillRow, fit_prefill, request_rate, roofline_prefill_rate
from infertune.model.roofline import NapkinAssumptions, napkin_per_pass, overhead_seconds, prefill_tokens_per_second
from infertune.model.workload import Workload

# Profile fields a sweep may override (the dtypes its checkpoint was served in), with their types.
_OVERRIDES = {"expert_bytes_per_param": float, "weight_bytes_per_param": float, "kv_bytes_per_element": float,
              "compute_dtype": str}
TRAIN_POINTS = 3


class SweepError(ValueError):
    """A sweep file that is malformed or physically impossible; the message names the field."""


@dataclass(frozen=True)
class SweepPoint:
    concurrency: int
    output_tps: float | None  # output tokens/s of the whole replica
    tpot_seconds: float | None
    ttft_seconds: float | None
    outlier: str = ""  # why the source (or we) set this row apart; empty when it counts


@dataclass(frozen=True)
class OtherTpPoint:
    """The same setup's mean pass at another TP, at one concurrency."""

    tp: int
    concurrency: int
    tpot_seconds: float


@dataclass(frozen=True)
class Sweep:
    name: str
    title: str
    url: str
    date: str
    licence: str
    engine: str
    model: ModelProfile
    gpu: GpuSpec
    tp: int
    prompt_tokens: int
    output_tokens: int
    points: tuple[SweepPoint, ...]
    other_tps: tuple[OtherTpPoint, ...] = ()

    @property
    def decode_context(self) -> float:
        return self.prompt_tokens + self.output_tokens / 2


def _positive(raw: Mapping[str, Any], key: str, where: str, required: bool = True) -> float | None:
    value = raw.get(key)
    if value is None:
        if required:
            raise SweepError(f"{where}: missing {key}")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise SweepError(f"{where}: {key} must be a finite positive number, got {value!r}")
    return float(value)


def sweep_from_mapping(name: str, raw: Mapping[str, Any]) -> Sweep:
    """A Sweep from a parsed sweep file (docs/validation/*.toml). Raises SweepError naming the field."""
    source, setup, rows = raw.get("source"), raw.get("setup"), raw.get("points")
    if not isinstance(source, Mapping) or not isinstance(setup, Mapping) or not isinstance(rows, list) or not rows:
        raise SweepError(f"{name}: needs [source], [setup] and at least one [[points]]")
    for key in ("title", "url", "date", "licence"):
        if not source.get(key):
            raise SweepError(f"{name}: source.{key} is required (cite what you measure against)")
    try:
        model, gpu = load_model(str(setup.get("model", ""))), load_gpu(str(setup.get("gpu", "")))
    except CatalogError as exc:
        raise SweepError(f"{name}: {exc}") from None
    overrides = {k: t(setup[k]) for k, t in _OVERRIDES.items() if k in setup}
    model = dataclasses.replace(model, **overrides)
    tp = int(_positive(setup, "tp", f"{name}: setup") or 0)
    prompt = int(_positive(setup, "prompt_tokens", f"{name}: setup") or 0)
    output = int(_positive(setup, "output_tokens", f"{name}: setup") or 0)
    if output < 2:
        raise SweepError(f"{name}: setup.output_tokens must be at least 2 (a pass needs a second token)")
    points = []
    for where, row in _tables(name, "points", rows):
        per_gpu = _positive(row, "output_tps_per_gpu", where, required=False)
        replica = _positive(row, "output_tps", where, required=False)  # sources that print the replica's total
        if per_gpu is not None and replica is not None:
            raise SweepError(f"{where}: give output_tps_per_gpu or output_tps, not both")
        if replica is None and per_gpu is not None:
            replica = per_gpu * tp
        tpot_ms = _positive(row, "tpot_ms", where, required=False)
        if tpot_ms is None and replica is None:
            raise SweepError(f"{where}: needs tpot_ms, output_tps_per_gpu or output_tps")
        ttft_ms = _positive(row, "ttft_ms", where, required=False)
        if tpot_ms is None and ttft_ms is None:
            raise SweepError(f"{where}: deriving the per-pass time from throughput needs ttft_ms")
        points.append(SweepPoint(int(_positive(row, "concurrency", where) or 0), replica,
                                 None if tpot_ms is None else tpot_ms / 1e3,
                                 None if ttft_ms is None else ttft_ms / 1e3, str(row.get("outlier", ""))))
    points.sort(key=lambda p: p.concurrency)
    return Sweep(name, str(source["title"]), str(source["url"]), str(source["date"]), str(source["licence"]),
                 str(source.get("engine", "")), model, gpu, tp, prompt, output, tuple(points),
                 _other_tps(name, raw.get("other_tp", []), tp))


def _tables(name: str, key: str, rows: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """An array of tables (`[[key]]`), each with the place an error names."""
    if not isinstance(rows, list):
        raise SweepError(f"{name}: {key} must be an array of tables ([[{key}]])")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise SweepError(f"{name}: {key}[{i}]: must be a table")
        out.append((f"{name}: {key}[{i}]", row))
    return out


def _other_tps(name: str, rows: Any, tp: int) -> tuple[OtherTpPoint, ...]:
    out = []
    for where, row in _tables(name, "other_tp", rows):
        other = int(_positive(row, "tp", where) or 0)
        if other == tp or other & (other - 1):
            raise SweepError(f"{where}: tp {other} must be a power of two other than the sweep's own TP{tp}")
        out.append(OtherTpPoint(other, int(_positive(row, "concurrency", where) or 0),
                                (_positive(row, "tpot_ms", where) or 0.0) / 1e3))
    return tuple(out)


def per_pass_seconds(sweep: Sweep, point: SweepPoint) -> float:
    """The reported TPOT, or the one Little's law gives from throughput and TTFT (module docstring)."""
    if point.tpot_seconds is not None:
        return point.tpot_seconds
    assert point.output_tps is not None and point.ttft_seconds is not None  # sweep_from_mapping checked
    o = sweep.output_tokens
    return (point.concurrency * o / point.output_tps - point.ttft_seconds) / (o - 1)


def decode_batch(sweep: Sweep, point: SweepPoint, per_pass: float) -> float:
    """Streams decoding at once: the concurrency less the share of time a request waits for its first token."""
    decoding = sweep.output_tokens * per_pass
    return point.concurrency * decoding / ((point.ttft_seconds or 0.0) + decoding)


@dataclass(frozen=True)
class PointResult:
    concurrency: int
    batch: float
    held_out: bool
    outlier: str
    measured_ms: float
    napkin_ms: float
    line_ms: float  # the straight line through the training rows
    line_rule_ms: float  # the rule this fit replaced: the line, or past its samples max(line, calibrated napkin)
    fit_ms: float
    low_ms: float
    high_ms: float
    ttft_measured_s: float | None
    ttft_napkin_s: float
    ttft_fit_s: float | None
    throughput_measured: float | None
    throughput_fit: float | None

    @property
    def fit_error(self) -> float:
        return self.fit_ms / self.measured_ms - 1.0

    @property
    def napkin_error(self) -> float:
        return self.napkin_ms / self.measured_ms - 1.0

    @property
    def line_rule_error(self) -> float:
        return self.line_rule_ms / self.measured_ms - 1.0

    @property
    def ttft_error(self) -> float | None:
        if self.ttft_fit_s is None or self.ttft_measured_s is None:
            return None
        return self.ttft_fit_s / self.ttft_measured_s - 1.0

    @property
    def inside_interval(self) -> bool:
        return self.low_ms <= self.measured_ms <= self.high_ms

    @property
    def counts(self) -> bool:
        """A held-out row the targets are judged on."""
        return self.held_out and not self.outlier


@dataclass(frozen=True)
class SweepResult:
    sweep: Sweep
    fit: PassFit
    ttft_offset_s: float | None
    ttft_steps: float | None
    points: tuple[PointResult, ...]
    prefill: PrefillFit  # the replica's prefill rate, learnt on the training rows (the napkin's without TTFT)
    decode_fit: PassFit  # the decode pass alone on the training rows: what the twin steps besides prefill

    def worst(self, attribute: str) -> float | None:
        errors = [getattr(p, attribute) for p in self.points if p.counts and getattr(p, attribute) is not None]
        return max((abs(e) for e in errors), default=None)


def _ttft_fit(per_pass: Sequence[float], ttft: Sequence[float]) -> tuple[float, float]:
    """TTFT = t0 + k x per_pass with t0, k >= 0 (least squares, relative errors)."""
    x, y = np.asarray(per_pass), np.asarray(ttft)
    a = np.column_stack([np.ones_like(x), x]) / y[:, None]
    b = np.ones_like(y)
    best: tuple[float, float, float] | None = None
    for cols in ((0,), (1,), (0, 1)):
        coef, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
        if np.any(coef < 0):
            continue
        full = np.zeros(2)
        full[list(cols)] = coef
        cost = float(np.sum((a @ full - b) ** 2))
        if best is None or cost < best[2]:
            best = (float(full[0]), float(full[1]), cost)
    assert best is not None  # a single positive column always fits a positive target
    return best[0], best[1]


def validate(sweep: Sweep, train: int = TRAIN_POINTS, napkin: NapkinAssumptions = DEFAULT_NAPKIN) -> SweepResult:
    """Fits on the `train` smallest concurrencies and predicts every row (the rest are held out)."""
    rows = [p for p in sweep.points if not p.outlier]
    if len(rows) < train:
        raise SweepError(f"{sweep.name}: {len(rows)} usable rows, fewer than the {train} the fit is trained on")
    training = rows[:train]
    measured = {p.concurrency: per_pass_seconds(sweep, p) for p in sweep.points}
    batches = {p.concurrency: decode_batch(sweep, p, measured[p.concurrency]) for p in sweep.points}
    ctx = sweep.decode_context
    fit = fit_pass(sweep.model, sweep.gpu, sweep.tp, [batches[p.concurrency] for p in training],
                   [measured[p.concurrency] for p in training], [ctx] * len(training), napkin=napkin)
    with_ttft = [p for p in training if p.ttft_seconds is not None]
    offset = steps = None
    if len(with_ttft) >= 2:
        offset, steps = _ttft_fit([measured[p.concurrency] for p in with_ttft],
                                  [p.ttft_seconds for p in with_ttft if p.ttft_seconds is not None])
    prefill = prefill_tokens_per_second(sweep.model, sweep.gpu, sweep.tp, napkin)
    learnt, decode_fit = _replay_fits(sweep, training, measured, napkin, prefill)
    held = {p.concurrency for p in training}
    line = fit_per_pass([batches[p.concurrency] for p in training], [measured[p.concurrency] for p in training],
                        robust=False)
    mid = (line.batch_min + line.batch_max) / 2
    ratio = calibration_ratio(sweep.model, sweep.gpu, sweep.tp, mid, line.per_pass(mid), ctx, napkin)
    overhead = overhead_seconds(sweep.model, sweep.gpu, sweep.tp, napkin)
    results = []
    for p in sweep.points:
        b = batches[p.concurrency]
        mean, low, high = fit.per_pass(sweep.model, sweep.gpu, b, ctx)
        nap = float(napkin_per_pass(sweep.model, sweep.gpu, sweep.tp, b, ctx, napkin))
        straight = line.per_pass(b)
        rule = straight if line.covers(b) else max(straight, overhead + ratio * (nap - overhead))
        ttft_fit = None if offset is None or steps is None else offset + steps * mean
        throughput_fit = None  # Little's law over the predicted request; needs the predicted TTFT
        if ttft_fit is not None:
            throughput_fit = p.concurrency * sweep.output_tokens / (ttft_fit + (sweep.output_tokens - 1) * mean)
        results.append(PointResult(
            concurrency=p.concurrency, batch=b, held_out=p.concurrency not in held, outlier=p.outlier,
            measured_ms=measured[p.concurrency] * 1e3, napkin_ms=nap * 1e3, line_ms=straight * 1e3,
            line_rule_ms=rule * 1e3, fit_ms=mean * 1e3,
            low_ms=low * 1e3, high_ms=high * 1e3, ttft_measured_s=p.ttft_seconds,
            ttft_napkin_s=sweep.prompt_tokens * p.concurrency / prefill, ttft_fit_s=ttft_fit,
            throughput_measured=p.output_tps, throughput_fit=throughput_fit))
    return SweepResult(sweep, fit, offset, steps, tuple(results), learnt, decode_fit)


def _replay_fits(sweep: Sweep, training: Sequence[SweepPoint], measured: Mapping[int, float],
                 napkin: NapkinAssumptions, napkin_rate: float) -> tuple[PrefillFit, PassFit]:
    """What the twin replays the sweep with, from the training rows alone: the prefill rate their TTFTs give,
    and the physics fit of their decode passes without the other streams' prefills (prefillfit.py)."""
    rows = [PrefillRow(p.concurrency, sweep.prompt_tokens, sweep.output_tokens, p.ttft_seconds,
                       measured[p.concurrency], p.output_tps) for p in training if p.ttft_seconds is not None]
    try:
        learnt = fit_prefill(rows, roofline_prefill_rate(sweep.model, sweep.gpu, sweep.tp, napkin), napkin_rate)
    except FitError as exc:
        raise SweepError(f"{sweep.name}: {exc}") from None
    decode = {p.concurrency: learnt.decode_pass(
        measured[p.concurrency], p.concurrency, sweep.prompt_tokens,
        request_rate(p.concurrency, sweep.output_tokens, measured[p.concurrency], p.ttft_seconds, p.output_tps))
        for p in training}
    # The streams decoding at once spend their wall-clock TPOT decoding, prefill stalls included.
    batches = [decode_batch(sweep, p, measured[p.concurrency]) for p in training]
    fit = fit_pass(sweep.model, sweep.gpu, sweep.tp, batches, [decode[p.concurrency] for p in training],
                   [sweep.decode_context] * len(training), napkin=napkin)
    return learnt, fit


@dataclass(frozen=True)
class TransferResult:
    """A pass predicted at `to_tp` from the napkin calibrated on the pass measured at `from_tp`, same batch."""

    from_tp: int
    to_tp: int
    concurrency: int
    measured_ms: float
    predicted_ms: float
    low_ms: float
    high_ms: float

    @property
    def octaves(self) -> float:
        return abs(math.log2(self.to_tp) - math.log2(self.from_tp))

    @property
    def miss(self) -> float:
        """Measured over predicted: above 1, the TP ran slower than the carried calibration said."""
        return self.measured_ms / self.predicted_ms

    @property
    def miss_per_octave(self) -> float:
        """The miss as a factor per octave of TP, either way (>= 1)."""
        return float(max(self.miss, 1.0 / self.miss) ** (1.0 / self.octaves))

    @property
    def inside_band(self) -> bool:
        return self.low_ms <= self.measured_ms <= self.high_ms


def transfers(sweep: Sweep, napkin: NapkinAssumptions = DEFAULT_NAPKIN) -> tuple[TransferResult, ...]:
    """Every ordered pair of TPs the sweep measured at one concurrency, each predicted from the other as the
    planner predicts a TP it never ran (a measured point at one TP, nothing at the other). The rows of other
    TPs give no TTFT, so the batch is the concurrency for every TP alike."""
    passes = {(o.tp, o.concurrency): o.tpot_seconds for o in sweep.other_tps}
    for p in sweep.points:
        if p.tpot_seconds is not None and any(o.concurrency == p.concurrency for o in sweep.other_tps):
            passes[(sweep.tp, p.concurrency)] = p.tpot_seconds
    workload = Workload(fresh_tokens=sweep.prompt_tokens, cached_tokens=0.0, output_tokens=sweep.output_tokens)
    out = []
    for (src, c), measured in sorted(passes.items()):
        perf = PerformanceModel(sweep.model, sweep.gpu, workload, napkin=napkin,
                                measured_points={src: (float(c), measured)})
        for (dst, c_dst), truth in sorted(passes.items()):
            if c_dst != c or dst == src:
                continue
            carried = perf.per_pass(dst, float(c))
            out.append(TransferResult(src, dst, c, truth * 1e3, carried.seconds * 1e3, carried.low_seconds * 1e3,
                                      carried.high_seconds * 1e3))
    return tuple(out)


def transfer_report(sweeps: Sequence[Sweep]) -> str:
    """The carry across TPs as a Markdown table (docs/model-validation.md, "Across TPs")."""
    rows = [(s, t) for s in sweeps for t in transfers(s)]
    if not rows:
        return ""
    out = ["| sweep | measured at | predicted for | c | measured ms | predicted ms [band] | miss | per octave |",
           "|---|---|---|---|---|---|---|---|"]
    for s, t in rows:
        out.append(f"| {s.name} | TP{t.from_tp} | TP{t.to_tp} | {t.concurrency} | {t.measured_ms:.2f} | "
                   f"{t.predicted_ms:.2f} [{t.low_ms:.2f}, {t.high_ms:.2f}] | x{t.miss:.2f} | "
                   f"{t.miss_per_octave:.2f} |")
    return "\n".join(out) + "\n"


def report(results: Sequence[SweepResult]) -> str:
    """The validation tables as Markdown, one per sweep (what docs/model-validation.md shows)."""
    out = []
    for r in results:
        s = r.sweep
        terms = ", ".join(f"{name} {value:.3f}" for name, value in r.fit.terms)
        out.append(f"### {s.name}: {s.model.name} on {s.tp}x {s.gpu.name} ({s.engine}), "
                   f"{s.prompt_tokens}/{s.output_tokens} tokens\n")
        out.append(f"Source: [{s.title}]({s.url}), {s.date}. Fit on c = "
                   f"{', '.join(str(p.concurrency) for p in r.points if not p.held_out)}: {terms}"
                   + (f"; TTFT = {r.ttft_offset_s * 1e3:.0f} ms + {r.ttft_steps:.1f} x per-pass"
                      if r.ttft_offset_s is not None and r.ttft_steps is not None else "") + ". "
                   + _prefill_line(r.prefill) + "\n")
        out.append("| c | B | per-pass ms | napkin | line rule | fit [interval] | fit err | TTFT s | TTFT napkin | "
                   "TTFT fit | TTFT err | out tok/s | model tok/s |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for p in r.points:
            tag = "" if p.held_out else " (fit)"
            tag += f" (outlier: {p.outlier})" if p.outlier else ""
            ttft_err = p.ttft_error
            out.append(
                f"| {p.concurrency}{tag} | {p.batch:.1f} | {p.measured_ms:.2f} | {p.napkin_ms:.1f} "
                f"({p.napkin_error:+.0%}) | {p.line_rule_ms:.2f} ({p.line_rule_error:+.0%}) | "
                f"{p.fit_ms:.2f} [{p.low_ms:.2f}, {p.high_ms:.2f}] | {p.fit_error:+.1%} | "
                f"{_num(p.ttft_measured_s, 3)} | {p.ttft_napkin_s:.2f} | {_num(p.ttft_fit_s, 3)} | "
                f"{'' if ttft_err is None else f'{ttft_err:+.1%}'} | {_num(p.throughput_measured, 0)} | "
                f"{_num(p.throughput_fit, 0)} |")
        out.append("")
    return "\n".join(out)


def _prefill_line(p: PrefillFit) -> str:
    how = (f"fitted on {p.rows} rows' TTFT, fixed cost t0 = {p.offset_seconds * 1e3:.0f} ms" if p.source == "fit"
           else "no TTFT in the training rows: the napkin's")
    return (f"The twin's prefill: {p.tokens_per_second:,.0f} tok/s ({p.mfu:.1%} MFU; {how}; "
            f"napkin {p.napkin_tokens_per_second:,.0f}).")


def _num(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"
