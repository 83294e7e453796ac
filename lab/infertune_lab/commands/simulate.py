"""`infertune simulate sweep|serve|replay`: the digital twin from the command line."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import math
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from infertune.api.names import is_namespace_name, is_object_name
from infertune.api.quantities import format_figure
from infertune.api.schema import CONCURRENCY_MAX, CONTEXT_TOKENS_MAX
from infertune.commands._inputs import (
    SAMPLE_PASS_MS_MIN,
    check_tp,
    dump_json,
    number,
    parse_int_list,
    plain_floats,
    plot_file,
    writable_file,
)
from infertune.errors import UserError
from infertune.model import LinearFit, Workload, load_model
from infertune_lab.sim import (
    ARRIVALS,
    ROUTERS,
    SHAPES,
    Fleet,
    OpenSessions,
    ReplicaConfig,
    TraceReplay,
    arrivals,
    fixed,
    load_trace,
    shape,
    summarize,
    window,
)
from infertune_lab.sim.live import LiveFleet
from infertune_lab.sim.sweep import format_table, plot, sweep

# A virtual day is a long replay; a year is a typo, and NaN would never end a loop.
MAX_VIRTUAL_SECONDS = 365 * 86_400.0
# The KV pool of the largest GPU node in 16-token blocks is a few million; more is a typo.
MAX_GPU_BLOCKS = 100_000_000


def _replica_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="kimi-k2.6", help="catalog model name (default kimi-k2.6)")
    p.add_argument("--gpu", default="b200", help="catalog GPU name (default b200)")
    p.add_argument("--tp", type=number(1, 64, integer=True), default=8, help="tensor-parallel size (default 8)")
    p.add_argument("--max-num-seqs", type=number(1, CONCURRENCY_MAX, integer=True), default=256)
    p.add_argument("--max-num-batched-tokens", type=number(1, 1 << 20, integer=True), default=8192)
    p.add_argument("--num-gpu-blocks", type=number(1, MAX_GPU_BLOCKS, integer=True), default=None,
                   help="KV pool in 16-token blocks (default: the capacity model)")
    p.add_argument("--gpu-memory-utilization", type=number(0.05, 0.99), default=0.90)
    p.add_argument("--fit", default=None, metavar="A_MS,B_MS",
                   help="per-pass line a + b*B in ms for this TP (the Kimi B200 load test's: 5.2,1.65); "
                        "default: the napkin")
    p.add_argument("--noise", type=number(0, 1), default=0.0, help="relative std-dev of a step's time")
    p.add_argument("--engine", choices=("vllm", "sglang"), default="vllm", help="metric dialect")
    p.add_argument("--workload", choices=sorted(SHAPES), default="coding-agent")
    p.add_argument("--seed", type=number(0, 2**32 - 1, integer=True), default=0)


def _replica(args: argparse.Namespace) -> ReplicaConfig:
    # A TP that does not divide the attention heads is a replica vLLM will not start (`plan --tp` refuses it):
    # simulated, TP64 of a 32-head model ran, and TP3 of Kimi was refused only as "no KV blocks left".
    check_tp(load_model(args.model), (args.tp,), "--tp")
    if args.max_num_batched_tokens < args.max_num_seqs:  # every running stream decodes a token each step
        raise UserError(f"--max-num-batched-tokens {args.max_num_batched_tokens} is below --max-num-seqs "
                        f"{args.max_num_seqs}: a step could not hold a token of each stream, and vLLM refuses it "
                        "(max_num_batched_tokens must be >= max_num_seqs)")
    fits: dict[int, LinearFit] = {}
    if args.fit:
        written = plain_floats(args.fit, 2)
        if written is None:
            raise UserError(f"--fit: expected A_MS,B_MS such as 5.2,1.65, got {args.fit!r}")
        a_ms, b_ms = written
        if not (0 <= a_ms < 1e5 and 0 < b_ms < 1e5) or a_ms + b_ms < SAMPLE_PASS_MS_MIN:
            raise UserError(f"--fit: the intercept must be >= 0 and the slope > 0 ms, and a pass of one stream "
                            f"(their sum) at least {SAMPLE_PASS_MS_MIN:g} ms, got {args.fit!r}")
        fits[args.tp] = LinearFit(a_ms / 1e3, b_ms / 1e3, 1.0, 0, 1.0, 64.0)
    config = ReplicaConfig(
        model=args.model, gpu=args.gpu, tp=args.tp, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, num_gpu_blocks=args.num_gpu_blocks,
        gpu_memory_utilization=args.gpu_memory_utilization, engine=args.engine,
        workload=args.workload, fits=fits, noise=args.noise,
    )
    config.gpu_blocks()  # fails here, with the reason, when the model does not fit
    return config


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("simulate", help="the digital twin: sweep, serve, replay")
    cmds = p.add_subparsers(dest="simulate_command", required=True, metavar="SUBCOMMAND")

    s = cmds.add_parser("sweep", help="closed-loop concurrency sweep on one simulated replica")
    _replica_args(s)
    s.add_argument("--concurrency", default="1,2,4,8,16,24,32,40,48,64")
    s.add_argument("--warmup", type=number(0, MAX_VIRTUAL_SECONDS), default=300.0,
                   help="virtual seconds discarded per level")
    s.add_argument("--duration", type=number(0, MAX_VIRTUAL_SECONDS, above=True), default=900.0,
                   help="virtual seconds measured per level")
    s.add_argument("--think", type=number(0, MAX_VIRTUAL_SECONDS), default=0.0,
                   help="seconds between a session's turns")
    s.add_argument("--prompt-tokens", type=number(1, CONTEXT_TOKENS_MAX, integer=True), default=None,
                   help="fixed prompt length (with --output-tokens): a load generator's random prompts, one turn "
                        "each, closed loop without think time, instead of --workload's sessions")
    s.add_argument("--output-tokens", type=number(1, CONTEXT_TOKENS_MAX, integer=True), default=None,
                   help="fixed answer length (with --prompt-tokens)")
    s.add_argument("--plot", default=None, metavar="FILE.png")
    s.add_argument("--output", choices=("table", "json"), default="table")
    s.set_defaults(func=run_sweep)

    v = cmds.add_parser("serve", help="serve a live simulated fleet's /metrics, one port per replica")
    _replica_args(v)
    v.add_argument("--port", type=number(0, 65535, integer=True), default=0,
                   help="first port; replica i listens on PORT+i (0: any)")
    v.add_argument("--host", default="127.0.0.1")
    v.add_argument("--replicas", type=number(1, 64, integer=True), default=1)
    v.add_argument("--rate", type=number(0, 10_000, above=True), default=0.02, help="new sessions per virtual second")
    v.add_argument("--arrivals", choices=ARRIVALS, default="poisson")
    v.add_argument("--router", choices=ROUTERS, default="session-affinity")
    v.add_argument("--speed", type=number(0, 10_000, above=True), default=1.0, help="virtual seconds per wall second")
    v.add_argument("--duration", type=number(0, MAX_VIRTUAL_SECONDS, above=True), default=None,
                   help="wall seconds to serve (default: until ^C)")
    v.add_argument("--targets-file", default=None, help="write Prometheus file_sd targets here")
    v.add_argument("--namespace", default="default")
    v.add_argument("--deployment", default="sim")
    v.set_defaults(func=run_serve)

    r = cmds.add_parser("replay", help="replay a TIMESTAMP,ContextTokens,GeneratedTokens trace")
    _replica_args(r)
    r.add_argument("--trace", required=True)
    r.add_argument("--rate-multiplier", type=number(0, 1000, above=True), default=1.0)
    r.add_argument("--start", type=number(0, MAX_VIRTUAL_SECONDS), default=0.0, help="trace seconds to skip")
    r.add_argument("--window", type=number(0, MAX_VIRTUAL_SECONDS, above=True), default=None,
                   help="trace seconds to replay (default: all)")
    r.add_argument("--replicas", type=number(1, 256, integer=True), default=1)
    r.add_argument("--router", choices=ROUTERS, default="least-outstanding")
    r.add_argument("--records", default=None, metavar="FILE.csv", help="write one row per request")
    r.add_argument("--output", choices=("table", "json"), default="table")
    r.set_defaults(func=run_replay)


def _fixed_lengths(args: argparse.Namespace) -> tuple[int, int] | None:
    if args.prompt_tokens is None and args.output_tokens is None:
        return None
    if args.prompt_tokens is None or args.output_tokens is None:
        raise UserError("--prompt-tokens and --output-tokens go together")
    return args.prompt_tokens, args.output_tokens


def run_sweep(args: argparse.Namespace) -> int:
    plot_file("--plot", args.plot)
    levels = parse_int_list(args.concurrency, "--concurrency")
    if max(levels) > CONCURRENCY_MAX:
        raise UserError(f"--concurrency: at most {CONCURRENCY_MAX} streams, got {max(levels)}")
    config = _replica(args)
    lengths = _fixed_lengths(args)
    traffic, label, think = shape(args.workload), args.workload, args.think
    if lengths is not None:
        # The replica's model is referenced to these lengths, as the load test's requests are.
        prompt, output = lengths
        pool = config.gpu_blocks() * config.block_size
        if prompt + output > pool:  # every request would be refused, and the table would be all gaps
            raise UserError(f"--prompt-tokens + --output-tokens is {prompt + output:,} tokens, more than the "
                            f"replica's KV pool of {pool:,} tokens at TP{config.tp}: every request would be refused")
        perf = config.performance_model()
        config = config.with_(perf=dataclasses.replace(perf, workload=Workload(prompt, 0, output)))
        traffic, label, think = fixed(prompt, output), f"{prompt}/{output} tokens, closed loop", 0.0
    rows = sweep(config, traffic, levels, args.warmup, args.duration, args.seed, think)
    if args.plot:
        fit = f", fit {args.fit} ms" if args.fit else ""
        plot(rows, args.plot, f"{args.model} on {args.tp}x {args.gpu}, {label}{fit} (simulated)")
    if args.output == "json":
        print(dump_json({"rows": [r.as_json() for r in rows]}))
    else:
        print(format_table(rows))
        idle = [str(r.concurrency) for r in rows if r.requests == 0]
        if idle:
            print(f"no request finished within the {args.duration:g} s measured at "
                  f"concurrenc{'y' if len(idle) == 1 else 'ies'} {', '.join(idle)} (a request takes longer than "
                  "--duration, or needs more KV than the replica's pool holds)")
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    writable_file("--targets-file", args.targets_file)
    # They label the pods' series in the file_sd targets, as a Deployment's namespace and name would: an empty
    # or malformed one read as a deployment no resource could name.
    for flag, value, is_name in (("--namespace", args.namespace, is_namespace_name),
                                 ("--deployment", args.deployment, is_object_name)):
        if not is_name(value):
            raise UserError(f"{flag}: {value!r} is not a Kubernetes name (lower-case letters, digits, '-' and, "
                            "in a deployment's, '.'; a letter or digit first and last)")
    if args.port and args.port + args.replicas - 1 > 65535:  # replica i listens on PORT+i
        raise UserError(f"--port: {args.replicas} replicas from port {args.port} run past 65535; choose a lower "
                        "port, or 0 for any")
    config = _replica(args)
    rng = random.Random(args.seed)
    traffic = OpenSessions(shape(args.workload), arrivals(args.arrivals, args.rate, rng), seed=args.seed)
    live = LiveFleet([config] * args.replicas, traffic, speed=args.speed, host=args.host,
                     router=args.router, seed=args.seed, base_port=args.port)
    with live:
        for pod, address in live.endpoints.items():
            print(f"{pod} http://{address}/metrics", flush=True)
        if args.targets_file:
            _atomic_write(Path(args.targets_file),
                          json.dumps(live.file_sd(args.namespace, args.deployment), indent=2))
        deadline = math.inf if args.duration is None else time.monotonic() + args.duration
        while time.monotonic() < deadline:
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))
            if live.error is not None:
                raise UserError(f"simulation stopped: {live.error}")
    return 0


def _atomic_write(path: Path, text: str) -> None:
    """Readers never see a half-written file: write beside it, then rename over it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent or Path("."), prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_replay(args: argparse.Namespace) -> int:
    writable_file("--records", args.records)
    rows = window(load_trace(args.trace), args.start, args.window)  # all of it is checked first
    if not rows:
        raise UserError(f"{args.trace}: no requests in the chosen window")
    replayed = rows[-1].offset / args.rate_multiplier  # the last arrival, in virtual seconds
    if not replayed <= MAX_VIRTUAL_SECONDS:  # a replay of 1e20 s never ended: its clock stopped moving
        raise UserError(f"--rate-multiplier: {args.rate_multiplier:g} stretches {rows[-1].offset:g} s of trace to "
                        f"{replayed:.3g} s of replay, more than a year ({MAX_VIRTUAL_SECONDS:.0f} s)")
    config = _replica(args)
    pool = config.gpu_blocks() * config.block_size
    # The engine takes an empty prompt or answer as one token (TraceReplay.peek), and refuses a request
    # its pool cannot hold; when it cannot hold the smallest, the replay would only count refusals.
    smallest = min(max(r.context_tokens, 1) + max(r.generated_tokens, 1) for r in rows)
    if smallest > pool:
        raise UserError(f"{args.trace}: the smallest request's prompt + answer is {smallest:,} tokens, more than the "
                        f"replica's KV pool of {pool:,} tokens at TP{config.tp}: every request would be refused")
    fleet = Fleet(TraceReplay(rows, args.rate_multiplier), args.router, args.seed)
    for _ in range(args.replicas):
        fleet.add_replica(config)
    horizon = replayed
    fleet.run_until(horizon)
    while any(not r.engine.idle for r in fleet.replicas.values()):
        horizon += 60.0
        fleet.run_until(horizon)
    records = fleet.records
    summary = summarize(records)
    m = [r.engine.meters for r in fleet.replicas.values()]
    queries = sum(x.prefix_queries for x in m)
    makespan = max((r.finish for r in records), default=0.0)
    result = {
        "trace": args.trace, "requests": len(rows), "completed": len(records),
        "rejected": len(fleet.rejected),
        "replicas": args.replicas, "virtual_seconds": makespan,
        "output_tps": summary.get("output_tokens", 0) / makespan if makespan else 0.0,
        "preemptions": sum(x.preemptions for x in m),
        "prefix_hit_rate": sum(x.prefix_hits for x in m) / queries if queries else 0.0,
        **{k: v for k, v in summary.items() if k.startswith(("ttft", "stream"))},
    }
    if args.records:
        _write_records(Path(args.records), records)
    if args.output == "json":
        print(dump_json(result))
    else:
        for key, value in result.items():
            # A figure with no sample (no answer past its first token has a decode speed) is "-", never "nan".
            print(f"{key:>18}  {format_figure(value, '.4g')}" if isinstance(value, float) else f"{key:>18}  {value}")
    return 0


def _write_records(path: Path, records: list[Any]) -> None:
    buf = io.StringIO()
    out = csv.writer(buf)
    out.writerow(["arrival", "replica", "prompt_tokens", "output_tokens", "cached_tokens", "ttft_seconds",
                  "mean_itl_seconds", "e2e_seconds", "preemptions"])
    for r in records:
        out.writerow([f"{r.spec.arrival:.6f}", r.replica, r.spec.prompt_tokens, r.spec.output_tokens,
                      r.cached_tokens, f"{r.ttft:.6f}", f"{r.mean_itl:.6f}", f"{r.e2e:.6f}", r.preemptions])
    _atomic_write(path, buf.getvalue())
