"""Plan resolution: the one rule that fills what a plan leaves open, for prediction and measurement.

`ppsd simulate`, `ppsd plan`, `ppsd run` and `ppsd validate` all resolve plans here, so the same
plan gets the same stage bounds whether it is predicted or measured. What a plan leaves open, and
how it is filled, is its scheme's (`Scheme.resolved`: PPSD's stage bounds and hop, nothing but a
zero hop for the single-device schemes).
"""

from __future__ import annotations

from dataclasses import replace

from sim.plan import Plan


def resolve_plan(plan: Plan, profile) -> Plan:
    """Fill what the plan leaves open: PPSD stage bounds balanced by profiled time when None
    (`sim.schemes.ppsd.partition.stage_bounds`), and the hop from the profile when None (0 for
    single-device schemes). Validates the plan against the profile's layer count and exit heads
    (UserError on bad input)."""
    plan.validate(profile.num_layers)
    changes = plan.scheme.resolved(plan, profile)
    out = replace(plan, **changes) if changes else plan
    return out.validate(profile.num_layers)
