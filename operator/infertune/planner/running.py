"""What the engine's own figures say of the running shape: past the cliff, too slow, the SLO missed.

The model judges layouts before they run; these judge what runs, on what the fleet reports. They
overrule the model only where it matters (planner/guardrails.py): a running shape the engine reports
past the cliff or decoding below the floor may go for a roomier one, and a miss skips the scale-up
cooldown.
"""

from __future__ import annotations

import math

from infertune.api.observation import FEW_STREAMS, Observation
from infertune.model.early_warning import CLIFF_USAGE
from infertune.planner.candidates import RUNNING_KV_RISK
from infertune.planner.plan import Plan
from infertune.planner.types import Layout


def past_cliff(obs: Observation | None) -> bool:
    if obs is None or not obs.available:
        return False
    return preempting_or_full(obs.preemption_rate, obs.kv_usage)


def preempting_or_full(preemption_rate: float | None, kv_usage: float | None) -> bool:
    """The engine's word that it is past the cliff: it preempts, or its KV use is at the cliff's."""
    return (preemption_rate or 0.0) > 0 or (kv_usage is not None and kv_usage >= CLIFF_USAGE)


def staying_past_cliff(applied: Layout, obs: Observation, running_rps: float) -> float:
    """Requests/s the running pods carry while the engine reports some of them past the cliff: a pod
    preempting, or at the cliff's KV use, what it completes now (measured: its throughput is what the
    recompute leaves), every other pod what it carries flat out. The fleet's figures are the fullest
    pod's, and one pod holding the longest sessions is not a fleet that serves nothing. Without per-pod
    figures nothing is counted on; past the running count, the pods past the cliff are counted first."""
    past = [rep for rep in obs.replicas if preempting_or_full(rep.preemption_rate, rep.kv_usage)][:applied.replicas]
    below = min(len(obs.replicas) - len(past), applied.replicas - len(past))
    completing = [min(max(rep.completion_rate, 0.0), running_rps) for rep in past
                  if rep.completion_rate is not None and math.isfinite(rep.completion_rate)]
    return below * running_rps + sum(completing)


def too_slow(plan: Plan, obs: Observation | None) -> bool:
    floor = plan.table.min_stream_tps
    tps = obs.stream_tps if obs is not None and obs.available else None
    return floor is not None and tps is not None and tps < floor


def slo_missed(plan: Plan, obs: Observation | None) -> bool:
    limit = plan.table.max_ttft_seconds
    ttft = obs.ttft_at(plan.table.ttft_percentile) if obs is not None and obs.available else None
    return too_slow(plan, obs) or (limit is not None and ttft is not None and ttft > limit)


def roomier(proposed: Layout | None, applied: Layout) -> bool:
    """More KV pool per stream (the pool grows with TP): a move away from the cliff."""
    return proposed is not None and (proposed.tensor_parallel_size * applied.max_num_seqs
                                     > applied.tensor_parallel_size * proposed.max_num_seqs)


def measured_working_set_holds(plan: Plan, applied: Layout, obs: Observation | None) -> bool:
    """Whether the running shape, which the model puts over the KV line, stays under it at the working set
    the fleet measures: the KV a running stream holds (`running_working_set`: the larger of its mean over
    the last load and over the metrics history's memory, or the latter alone while few streams ran),
    carried one load ahead along its own significant rise.

    The model judges the finished requests' mean prompt, and on a quiet night that mean, over the few
    long sessions that finish in a load, swings by half again while what the running streams hold stays
    put (91-134K against 81-92K on the bench's week, docs/bench-history.md); a re-layout on it costs a
    model load of double pay. Contexts that really grow grow in the running streams first, and their rise
    is carried ahead, so a growing workload still moves a load early. An engine at the cliff, or one
    without KV figures, leaves the model's verdict standing."""
    risk = _measured_risk(plan, applied, obs)
    return risk is not None and risk <= RUNNING_KV_RISK


def measured_hold_note(plan: Plan, applied: Layout, obs: Observation | None) -> str:
    """What `explain` says of a running shape kept by `measured_working_set_holds`: the model's context, the
    working set measured, and the risk the shape runs at it."""
    held = running_working_set(obs) or 0.0
    growth = _growth(obs)
    ahead = f" and {growth:,.0f} more a load ahead" if growth > 0 else ""
    return (f"TP{applied.tensor_parallel_size} max-num-seqs {applied.max_num_seqs} stays though the model puts it over "
            f"the KV line at the finished requests' {plan.workload.context_tokens:,.0f} tokens: a running stream holds "
            f"{held:,.0f}{ahead} (measured), at which it is past the line "
            f"{_measured_risk(plan, applied, obs) or 0.0:.0%} of the time (a running shape is torn down past "
            f"{RUNNING_KV_RISK:.0%})")


def _measured_risk(plan: Plan, applied: Layout, obs: Observation | None) -> float | None:
    """The running shape's KV risk at the working set held plus its rise a load ahead; None when the engine
    is at the cliff, the working set is unmeasured, or the plan did not consider the shape."""
    held = running_working_set(obs)
    if held is None or past_cliff(obs):
        return None
    return plan.kv_risk_measured(applied, held + _growth(obs))


def running_working_set(obs: Observation | None) -> float | None:
    """The working set a running shape is kept or torn down on: the one held (`working_set_held`), or its
    level over the metrics history's memory while fewer than FEW_STREAMS ran on average over the last load.
    Those are a few sessions, and one long one fills a short load's mean: ramp-load60 read 157K with no stream
    running, where the level was 96K, and tore a running TP4 c=6 down for c=4, then came back. A cost move is
    still judged at the larger (a trough is not the level either), so this only ever keeps what runs."""
    held = working_set_held(obs)
    if held is None or obs is None:
        return held
    few = obs.stream_context_streams is not None and obs.stream_context_streams < FEW_STREAMS
    if few and obs.stream_context_recent_tokens is not None:
        return obs.stream_context_recent_tokens
    return held


def _growth(obs: Observation | None) -> float:
    return (obs.stream_context_growth_tokens or 0.0) if obs is not None else 0.0


def working_set_held(obs: Observation | None) -> float | None:
    """The KV a running stream holds, as the fleet measures it: the larger of its mean over the last model
    load and over the metrics history's memory, since with few streams running it swings as sessions end
    and start, and a trough is not its level. None when unmeasured."""
    if obs is None or not obs.available or obs.stream_context_tokens is None:
        return None
    return max(obs.stream_context_tokens, obs.stream_context_recent_tokens or 0.0)


def working_set_level(obs: Observation | None) -> float | None:
    """The KV a running stream holds at its level: its mean over the metrics history's memory, or over the
    last load before the history has one. The last load alone is a few sessions on a quiet night (a 60 s
    load can be one 157K-token session where the level is 96K: the bench's ramp-load60), and the finished
    requests' mean swings by half again over the few that finish; neither is a level worth remembering.
    None when unmeasured."""
    if obs is None or not obs.available:
        return None
    return obs.stream_context_recent_tokens or obs.stream_context_tokens


def applied_unsafe(plan: Plan, applied: Layout | None, current: Layout | None, obs: Observation | None) -> bool:
    if applied is None:
        return False
    if current is None:
        return True  # by the model, the running shape's working set crosses the KV line
    # The engine's own figures overrule the model only for a move that gives each stream more room:
    # a TTFT miss, or preemptions from overload, are fixed by replicas, not by a restart.
    return (past_cliff(obs) or too_slow(plan, obs)) and roomier(plan.layout, applied)
