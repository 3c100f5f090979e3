"""Same-budget baselines: a plan against what the same hardware does without speculating.

A PPSD plan of k single-thread stages keeps k cores (or k GPUs) busy, while `speedup_vs_ar`
compares it with AR on one thread (one GPU): the timing model's native figure, but not a speedup a
user gets. The fair baseline is AR on the whole budget: all B threads of the CPU (the profiler
measures the tables at each thread count: `latency.parallel`, kind "threads") or tensor parallelism
over all B GPUs (estimated: kind "tensor_parallel"). Within a budget of B units
  AR, EESD   one process using all B units
  PPSD, k    each stage B // k units (1 when k > B: stages share cores, which the co-run model prices)
and a plan's units the profile has no tables for fall back to the largest it has below them.
`speedup_vs_ar_tp` = AR on B units / the plan on B units, on the same token stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppsd.errors import UserError
from ppsd.modes import Mode
from sim.plan import Plan

THREADS, TENSOR_PARALLEL = "threads", "tensor_parallel"


@dataclass(frozen=True)
class Budget:
    units: int
    kind: str  # THREADS (CPU cores) or TENSOR_PARALLEL (GPUs)

    @property
    def label(self) -> str:
        return f"{self.units} {'cores' if self.kind == THREADS else 'GPUs'}"


def default_budget(profile, requested: int | None = None) -> Budget | None:
    """The budget to compare within: `requested` units (cores or GPUs), else the most the profile
    has tables for; None when the profile holds the main tables only (no same-budget figures)."""
    kind = profile.parallel_kind
    if kind is None:
        return None
    units = profile.parallel_units()
    if requested is None:
        return Budget(max(units), kind)
    if int(requested) < 1:
        raise UserError(f"budget {requested} must be at least 1", "give --cores / --devices of 1 or more")
    return Budget(int(requested), kind)


def units_for(plan: Plan, budget: Budget, available: list[int]) -> int:
    """Threads (GPUs) each worker of `plan` gets within `budget`, as the profile can price them."""
    want = plan.scheme.workers(plan, budget.units)
    fitting = [u for u in available if u <= want]
    return max(fitting) if fitting else min(available)


def in_budget(profile, plan: Plan, stream, budget: Budget, base_ms: float, run_plan) -> tuple[float, float]:
    """(the plan's time, AR's time) in ms on `stream` within `budget`. `base_ms` is the plan's time
    on the main tables (reused when its units are the main ones); `run_plan` is sim.run.run_plan."""
    from sim.schemes.ar import step_ms

    available = profile.parallel_units()
    ar_view = profile.at_parallel(units_for(Plan(Mode.AR), budget, available))
    ar_ms = float(np.sum(step_ms(ar_view, stream.context, plan.exit_head, plan.sampled)))
    u = units_for(plan, budget, available)
    if u == profile.parallel_base:
        return base_ms, ar_ms
    if not plan.scheme.speculative:  # the plan is AR itself
        return ar_ms, ar_ms
    stats, _ = run_plan(profile.at_parallel(u), plan, stream, "fast", False)
    return stats.time_ms, ar_ms
