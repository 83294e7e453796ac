"""The planner: candidate layouts, SLO and headroom checks, cost, replica sizing, guardrails.

Pure functions: `plan(request, observation, now)` then `decide(plan, state, observation, rails, now)`.
"""

from infertune.planner.candidates import Candidate, CandidateTable, Verdict
from infertune.planner.guardrails import Check, Decision, decide, next_state
from infertune.planner.plan import Plan, effective_workload, plan
from infertune.planner.types import Action, Guardrails, Layout, PlannerState, PlanRequest, SloTarget

__all__ = [
    "Action",
    "Candidate",
    "CandidateTable",
    "Check",
    "Decision",
    "Guardrails",
    "Layout",
    "Plan",
    "PlanRequest",
    "PlannerState",
    "SloTarget",
    "Verdict",
    "decide",
    "effective_workload",
    "next_state",
    "plan",
]
