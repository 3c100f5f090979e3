"""Plans priced by their schemes' closed forms (torch-free): the planner's instant preview.

  acceptance_by_exit   acceptance per exit layer as the closed forms take it (what-if scale, T)
  closed_form          one resolved plan by its scheme's closed form, against AR's
  closed_form_result   the same as a Result
  closed_form_sweep    every plan of a sweep priced so, as Results: milliseconds for a whole sweep,
                       what the planner shows of a setting not swept yet
Recommendations come from `sim.planner.verdict`, head comparisons from `sim.planner.heads`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ppsd.exit_heads import SHARED
from ppsd.modes import Mode
from sim.plan import Plan, Result, SimulatedDetails
from sim.planner.resolve import resolve_plan
from sim.planner.sweep_spec import SweepSpec
from sim.schemes import scheme

CLOSED_FORM = "closed form"  # SimulatedDetails.engine of a closed-form Result
IID = "iid"                  # its acceptance_source: i.i.d. acceptance at the exit's mean rate
ALPHA_CAP = 0.999            # acceptance kept below 1 so the closed forms stay finite


def acceptance_by_exit(profile, scale: float = 1.0, temperature: float = 0.0, category: str | None = None,
                       head: str = SHARED) -> dict[int, float]:
    """{exit layer: acceptance} as the closed forms use it: the greedy match rate α at T = 0, the
    mean β at a temperature the profile holds when sampling (`Profile.beta_by_exit`: along sampled
    trajectories when recorded; UserError naming the recorded temperatures otherwise); times the
    what-if scale, capped at ALPHA_CAP."""
    if temperature <= 0:
        means = profile.alpha_by_exit(category=category, head=head)
    else:
        means = profile.beta_by_exit(temperature, category=category, head=head)
    return {int(e): float(min(v * scale, ALPHA_CAP)) for e, v in means.items()}


def closed_form(profile, plan: Plan, alpha: float, context: float | None = None) -> dict:
    """A resolved plan priced by its scheme's closed form (i.i.d. acceptance α, costs at one
    context, default the smallest profiled): {time_per_token_ms, ar_time_per_token_ms,
    speedup_vs_ar, tokens_per_s}. Milliseconds for a whole sweep: the planner's instant preview.
    PPSD needs one device per stage (ValueError otherwise: simulate shared placements)."""
    c = float(profile.context_values[0]) if context is None else float(context)
    ar = scheme(Mode.AR).closed_form(profile, plan, 0.0, c)
    t = plan.scheme.closed_form(profile, plan, alpha, c)
    return {"time_per_token_ms": t, "ar_time_per_token_ms": ar, "speedup_vs_ar": ar / t, "tokens_per_s": 1000.0 / t}


def closed_form_result(profile, plan: Plan, alpha: float) -> Result:
    """A plan priced by its scheme's closed form (`closed_form`: i.i.d. acceptance α, costs at the
    smallest profiled context) as a Result: tokens_per_s and speedup_vs_ar as the formula gives
    them, time_s the expected time of one token, mean_accepted the scheme's expected tokens per
    round; details.engine "closed form", acceptance_source "iid"."""
    plan = resolve_plan(plan, profile)
    sch = plan.scheme
    a = float(alpha) if sch.speculative else 0.0
    cf = closed_form(profile, plan, a)
    return Result(
        plan=plan, source="simulated", tokens=1, time_s=cf["time_per_token_ms"] / 1e3,
        tokens_per_s=cf["tokens_per_s"], speedup_vs_ar=cf["speedup_vs_ar"],
        mean_accepted=sch.tokens_per_round(plan, a), acceptance_rate=a if sch.speculative else None,
        details=SimulatedDetails(engine=CLOSED_FORM, acceptance_source=IID, stream_alpha=a if sch.speculative else None,
                                 ar_tokens_per_s=1000.0 / cf["ar_time_per_token_ms"], label=plan.label()))


def closed_form_sweep(profile, alpha_by_exit: Mapping[int, float], gammas: Iterable[int], devices: int,
                      hop_ms: float | None = None, exit_head: str = SHARED, temperature: float = 0.0) -> list[Result]:
    """AR and every scheme's sweep plans (`SweepSpec.plans_at`: EESD per γ, PPSD per k up to
    `devices` as far as it fits after the exit) at every exit of `alpha_by_exit`, each priced by
    `closed_form_result` at that exit's acceptance; at `temperature` > 0 priced as sampled decoding
    (`Plan.temperature`). Sorted by speedup, best first (ties keep that order), like `sim.run.sweep`."""
    n = profile.num_layers
    spec = SweepSpec(devices=int(devices), gammas=tuple(gammas), hop_ms=hop_ms, exit_head=exit_head,
                     temperature=temperature)
    results = [closed_form_result(profile, Plan(Mode.AR, hop_ms=hop_ms, temperature=spec.temperature), 0.0)]
    for e, a in sorted(alpha_by_exit.items()):
        if 1 <= e < n:
            results += [closed_form_result(profile, plan, a) for plan in spec.plans_at(e, n)]
    results.sort(key=lambda r: -(r.speedup_vs_ar or 0.0))
    return results


def is_closed_form(result: Result) -> bool:
    return isinstance(result.details, SimulatedDetails) and result.details.engine == CLOSED_FORM
