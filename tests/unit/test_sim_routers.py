"""The twin's gateways: sticky sessions, and llm-d's default endpoint picker (prefix share, waiting queue
and free KV scored 3:2:2). What separates them is what a scale-up buys: behind sticky sessions a new
replica gets only sessions that start after it is ready, while the sessions that overloaded the old one
stay there; llm-d's picker moves a session once its replica's queue and KV outweigh its cached prefix."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

import pytest

from infertune.errors import UserError
from infertune_lab.bench.suite import Options, run_scenario
from infertune_lab.sim import Fleet, OpenSessions, ReplicaConfig, SessionShape
from infertune_lab.sim.traffic import poisson

# Eight-turn sessions of 2K fresh tokens and 300-token answers, 2 s of thought between turns: an agent's.
AGENT = SessionShape("agent", 2_000, 1_500, 300, 250, 8, 8, 200_000, 2.0, 0.5)
REPLICA = ReplicaConfig(model="llama-3.1-8b", gpu="h100", tp=1, workload="chat", max_num_seqs=8)
SCALE_UP_AT = 300.0


@dataclass(frozen=True)
class ScaleUp:
    ttft_p95_after: float  # of the requests arriving once the second replica is ready
    old_sessions_on_new: int  # turns the new replica served of sessions that began before it existed
    cached_share: float  # of every prompt token, served from the prefix cache


def scale_up(router: str) -> ScaleUp:
    """One replica overloaded for five minutes, then a second one: the fleet a scale-up leaves."""
    fleet = Fleet(OpenSessions(AGENT, poisson(0.1, random.Random(1)), seed=1), router=router)
    fleet.add_replica(REPLICA)
    fleet.run_until(SCALE_UP_AT)
    started_before = {r.spec.session for r in fleet.records}
    started_before |= {s.spec.session for r in fleet.replicas.values()
                       for s in (*r.engine.running, *r.engine.waiting)}
    new = fleet.add_replica(REPLICA)
    fleet.run_until(SCALE_UP_AT + 300.0)
    after = [r for r in fleet.records if r.spec.arrival >= SCALE_UP_AT + REPLICA.load_delay_seconds]
    return ScaleUp(
        statistics.quantiles([r.ttft for r in after], n=20)[-1],
        sum(r.replica == new and r.spec.session in started_before for r in fleet.records),
        sum(r.cached_tokens for r in fleet.records) / sum(r.spec.prompt_tokens for r in fleet.records))


@pytest.fixture(scope="module")
def runs() -> dict[str, ScaleUp]:
    return {router: scale_up(router) for router in ("session-affinity", "llm-d")}


def test_behind_sticky_sessions_a_new_replica_gets_no_session_already_running(runs: dict[str, ScaleUp]) -> None:
    assert runs["session-affinity"].old_sessions_on_new == 0


def test_llm_ds_picker_moves_sessions_off_the_overloaded_replica_and_cuts_ttft(runs: dict[str, ScaleUp]) -> None:
    sticky, llm_d = runs["session-affinity"], runs["llm-d"]
    assert llm_d.old_sessions_on_new > 10
    assert llm_d.ttft_p95_after < 0.8 * sticky.ttft_p95_after


def test_llm_ds_picker_still_keeps_most_turns_on_their_cached_prefix(runs: dict[str, ScaleUp]) -> None:
    """The prefix scorer's weight (3 against 2 and 2) keeps a session home while loads are close."""
    sticky, llm_d = runs["session-affinity"], runs["llm-d"]
    assert llm_d.cached_share > 0.9 * sticky.cached_share > 0.5


def test_bench_runs_behind_the_router_asked_for_and_refuses_an_unknown_one() -> None:
    """The same sessions, the same static fleet: only the router differs, so the requests' first tokens
    must too (had the option stopped short of the fleet, the two runs would match to the digit)."""
    runs = {router: run_scenario("spike", Options(duration=600.0, policies=("static",), processes=1, router=router),
                                 progress=lambda _: None) for router in ("session-affinity", "llm-d")}
    assert {router: run.router for router, run in runs.items()} == {"session-affinity": "session-affinity",
                                                                    "llm-d": "llm-d"}
    sticky, llm_d = (runs[r].results["static"] for r in ("session-affinity", "llm-d"))
    assert (sticky.ttft_p50_seconds, sticky.ttft_p95_seconds) != (llm_d.ttft_p50_seconds, llm_d.ttft_p95_seconds)
    with pytest.raises(UserError, match="unknown router 'nginx'"):
        run_scenario("random", Options(router="nginx"), progress=lambda _: None)
