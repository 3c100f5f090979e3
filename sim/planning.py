"""Planning with the simulator (torch-free): what a planner asks besides `sim.api.sweep`.

Works on Plans and Results only (no tables, no UI), through the simulator's public API:
  acceptance_by_exit   acceptance per exit layer as the closed forms take it (what-if scale, T)
  closed_form_sweep    every plan of a sweep priced by the closed forms, as Results: milliseconds
                       for a whole sweep, the planner's instant preview of a setting not swept yet
  stage_breakdown      where one token's time goes in each stage of a PPSD plan
  best_over_heads      the recommendation over several exit heads' sweeps (`ppsd plan`'s, sim/verdict.py)
  round_robin          placement of more stages than devices
Recommendations come from `sim.verdict` (`sim.api.recommend`), head comparisons from `sim.heads.comparison`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from sim import api
from sim.modes import Mode
from sim.plan import Plan, Result, SimulatedDetails
from sim.schemes.eesd import expected_tokens_per_round

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


def closed_form_result(profile, plan: Plan, alpha: float) -> Result:
    """A plan priced by its scheme's closed form (`sim.api.closed_form`: i.i.d. acceptance α, costs
    at the smallest profiled context) as a Result: tokens_per_s and speedup_vs_ar as the formula
    gives them, time_s the expected time of one token, mean_accepted the expected tokens per
    round; details.engine "closed form", acceptance_source "iid"."""
    plan = api.resolve_plan(plan, profile)
    mode = plan.mode
    a = 0.0 if mode is Mode.AR else float(alpha)
    cf = api.closed_form(profile, plan, a)
    if mode is Mode.AR:
        mean_accepted = 1.0
    elif mode is Mode.EESD:  # (1 − α^(γ+1)) / (1 − α) tokens per draft-and-verify round
        mean_accepted = expected_tokens_per_round(a, plan.draft_len)
    else:  # a PPSD cycle runs until the first rejection
        mean_accepted = 1 / (1 - a)
    return Result(
        plan=plan, source="simulated", tokens=1, time_s=cf["time_per_token_ms"] / 1e3,
        tokens_per_s=cf["tokens_per_s"], speedup_vs_ar=cf["speedup_vs_ar"], mean_accepted=mean_accepted,
        acceptance_rate=None if mode is Mode.AR else a,
        details=SimulatedDetails(engine=CLOSED_FORM, acceptance_source=IID, stream_alpha=None if mode is Mode.AR else a,
                                 ar_tokens_per_s=1000.0 / cf["ar_time_per_token_ms"], label=plan.label()))


def closed_form_sweep(profile, alpha_by_exit: Mapping[int, float], gammas: Iterable[int],
                      stage_counts: Iterable[int], hop_ms: float | None = None,
                      exit_head: str = SHARED, temperature: float = 0.0) -> list[Result]:
    """AR, EESD at every exit of `alpha_by_exit` × γ and PPSD at every exit × k (balanced stages,
    k up to what fits after the exit), each priced by `closed_form_result` at that exit's
    acceptance; at `temperature` > 0 priced as sampled decoding (`Plan.temperature`). Sorted by
    speedup, best first (ties keep that order), like `sim.api.sweep`."""
    n = profile.num_layers
    t = float(temperature or 0.0)
    gammas, stage_counts = [int(g) for g in gammas], [int(k) for k in stage_counts]
    results = [closed_form_result(profile, Plan(Mode.AR, hop_ms=hop_ms, temperature=t), 0.0)]
    for e, a in sorted(alpha_by_exit.items()):
        if not 1 <= e < n:
            continue
        for g in gammas:
            results.append(closed_form_result(
                profile, Plan(Mode.EESD, exit_layer=e, draft_len=g, hop_ms=hop_ms, exit_head=exit_head, temperature=t), a))
        for k in stage_counts:
            if k > n - e + 1:
                continue
            results.append(closed_form_result(
                profile, Plan(Mode.PPSD, exit_layer=e, stages=k, hop_ms=hop_ms, exit_head=exit_head, temperature=t), a))
    results.sort(key=lambda r: -(r.speedup_vs_ar or 0.0))
    return results


def is_closed_form(result: Result) -> bool:
    return isinstance(result.details, SimulatedDetails) and result.details.engine == CLOSED_FORM


@dataclass(frozen=True)
class StagePart:
    """One part of one PPSD stage's time for one token."""

    stage: str  # "stage 1 (L0–L9)"
    part: str   # "layers", "exit head" (stage 1), "head" (last stage), "hop" (to the next stage)
    ms: float


def stage_breakdown(profile, plan: Plan) -> list[StagePart]:
    """Per-stage time for one token of a PPSD plan (resolved here if it is not yet): its layers,
    the exit head (stage 1), the full head (last stage) and the outgoing hop. The slowest stage
    bounds the pipeline's rate while drafts are accepted."""
    if plan.mode is not Mode.PPSD:
        raise UserError(f"{plan.label()} has no pipeline stages", "choose a PPSD plan")
    plan = api.resolve_plan(plan, profile)
    bounds = plan.stage_bounds
    layers = np.array([profile.layer_ms(l, 1) for l in range(profile.num_layers)])
    hop = plan.hop_ms if plan.hop_ms is not None else profile.hop_ms()
    k = len(bounds) - 1
    parts = []
    for i in range(k):
        name = f"stage {i + 1} (L{bounds[i]}–L{bounds[i + 1] - 1})"
        parts.append(StagePart(name, "layers", float(layers[bounds[i]:bounds[i + 1]].sum())))
        if i == 0:
            parts.append(StagePart(name, "exit head", float(profile.exit_head_ms(plan.exit_head, 1))))
        if i == k - 1:
            parts.append(StagePart(name, "head", float(profile.head_ms(1))))
        else:
            parts.append(StagePart(name, "hop", float(hop)))
    return parts


def best_over_heads(by_head: Mapping[str, Sequence[Result]], profile=None) -> tuple[str, Result, str]:
    """(exit head, recommended Result, one-line verdict) over every head's sweep, as `ppsd plan`
    chooses: `sim.heads.decide_over_heads`, i.e. `sim.verdict.decide` (AR, with the first head, when no
    plan beats it beyond the profile's noise band)."""
    from sim.heads import decide_over_heads

    v = decide_over_heads(by_head, profile)
    return v.head, v.recommended, v.text


def round_robin(stages: int, devices: int) -> tuple[int, ...] | None:
    """Placement of k stages on d devices: one each when they fit (None), else stage i on device i mod d."""
    if stages <= devices:
        return None
    return tuple(i % devices for i in range(stages))
