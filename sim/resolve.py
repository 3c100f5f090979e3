"""Plan resolution: the one rule that fills what a plan leaves open, for prediction and measurement.

`ppsd simulate`, `ppsd plan`, `ppsd run` and `ppsd validate` all resolve plans here, so the same
plan gets the same stage bounds whether it is predicted or measured.
"""

from __future__ import annotations

from dataclasses import replace

from ppsd.exit_heads import SHARED
from sim.costs import cost_model
from sim.modes import Mode
from sim.partition import balanced_bounds
from sim.plan import Plan


def stage_bounds(profile, exit_layer: int, stages: int, exit_head: str = SHARED,
                 num_layers: int | None = None) -> tuple[int, ...]:
    """PPSD stage bounds balanced by profiled time: stage 1 ends at the exit layer; layers [E, N)
    are cut to minimise the slowest later stage, one-token times at the smallest profiled context,
    the LM head counted in the last stage. Without a profile (`profile=None`, `num_layers` given)
    every layer counts the same and the head nothing: the best a runtime can do unprofiled."""
    if profile is None:
        return balanced_bounds(exit_layer, num_layers, stages)
    cm = cost_model(profile, exit_head)
    key = (exit_layer, stages)
    if key not in cm.bounds:  # a sweep resolves each (E, k) for every setting: cut once
        cm.bounds[key] = balanced_bounds(exit_layer, profile.num_layers, stages, cm.layer_costs(), cm.head(1))
    return cm.bounds[key]


def resolve_plan(plan: Plan, profile) -> Plan:
    """Fill what the plan leaves open: PPSD stage bounds balanced by profiled time when None
    (`stage_bounds`), and the hop from the profile when None (0 for single-device schemes).
    Validates the plan against the profile's layer count and exit heads (UserError on bad input)."""
    n = profile.num_layers
    plan.validate(n)
    changes: dict = {}
    if plan.mode is Mode.PPSD:
        if plan.stage_bounds is None:
            changes["stage_bounds"] = stage_bounds(profile, plan.exit_layer, plan.num_stages, plan.exit_head)
        if plan.hop_ms is None:
            changes["hop_ms"] = float(profile.hop_ms())
    elif plan.hop_ms is None:
        changes["hop_ms"] = 0.0
    if plan.mode is Mode.EESD:
        cost_model(profile, plan.exit_head)  # raises UserError for an unknown exit head
    out = replace(plan, **changes) if changes else plan
    return out.validate(n)
