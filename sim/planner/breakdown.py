"""Where one token's time goes in each stage of a pipelined plan, as its scheme prices it.

The parts come from the scheme (`Scheme.stage_parts`: for PPSD the same pieces its engines add up,
embedding and per-pass overhead included), so the dashboard's chart shows the model it explains.
"""

from __future__ import annotations

from sim.plan import Plan
from sim.planner.resolve import resolve_plan
from sim.schemes.base import StagePart


def stage_breakdown(profile, plan: Plan, context: float | None = None) -> list[StagePart]:
    """Per-stage parts of one token's time (resolved here if the plan is not yet), at `context`
    (default the smallest profiled): the stage parts but the hop sum to the stage's time in the
    simulator, before co-run slowdown. UserError for a plan without pipeline stages."""
    return plan.scheme.stage_parts(profile, resolve_plan(plan, profile), context)
