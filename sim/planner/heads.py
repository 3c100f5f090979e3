"""Exit heads side by side (torch-free): which heads a profile has, and the best plan with each.

A profile made with `ppsd profile --heads DIR` carries, besides the shared head (final norm + LM
head), a trained head and reduced-vocabulary heads: their drafting cost in `latency.exit_heads`
and their acceptance traces in the acceptance table (column `head`). A head is usable by the
simulator when it has both (the shared head's cost is the profile's `head`).
"""

from __future__ import annotations

from ppsd import exit_heads
from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from ppsd.modes import Mode

_order = exit_heads.order_key


def available_heads(profile) -> list[str]:
    """Heads the simulator can use on this profile, shared first, then trained, then vocab<V> by V."""
    costed = {SHARED, *(profile.latency.get("exit_heads") or {})}
    traced = set(profile.heads()) if profile.has_acceptance else costed
    return sorted(costed & traced, key=_order)


def check_head(profile, name: str) -> str:
    """`name` if the profile can simulate it, else a UserError listing the heads it has."""
    heads = available_heads(profile)
    if name not in heads:
        hint = "" if len(heads) > 1 else " (profile with `ppsd profile --heads DIR` to add trained heads)"
        raise UserError(f"profile {profile.path} has no exit head {name!r}; it has: {', '.join(heads)}",
                        f"pass --exit-head one of {', '.join(heads)}{hint}")
    return name


head_label = exit_heads.label


def sampled_heads(profile, temperature: float) -> tuple[list[str], str]:
    """The heads that hold β at `temperature` (what prices sampled decoding; a temperature the profile
    lacks is a UserError naming those it holds), and a line naming the heads left out ("" when none)."""
    profile.match_temperature(temperature)
    have, left = [], []
    for h in available_heads(profile):
        try:
            profile.beta_rows(temperature, h)
        except UserError:
            left.append(h)
            continue
        have.append(h)
    if not have:
        profile.beta_rows(temperature, SHARED)  # the profile's own refusal, naming what it holds
    many = len(have) > 1
    line = (f"at T = {temperature:g} only exit head{'s' if many else ''} {', '.join(have)} hold{'' if many else 's'} "
            f"β along sampled trajectories; {', '.join(left)} {'are' if len(left) > 1 else 'is'} priced for greedy "
            "decoding only") if left else ""
    return have, line


def sweep_heads(profile, heads: list[str] | None = None, **sweep_kwargs) -> dict:
    """{head: sweep results (best first)} for each head (default: every available head).
    `sweep_kwargs` go to `sim.run.sweep` as they are (alpha_by_exit included: the same given α for each head)."""
    from sim.run import sweep

    heads = available_heads(profile) if heads is None else [check_head(profile, h) for h in heads]
    return {h: sweep(profile, exit_head=h, **sweep_kwargs) for h in heads}


def merge(by_head: dict) -> list:
    """All heads' plans in one ranking (AR once: it drafts nothing), best first; each speculative
    result's details get `head_rank` (1 = the best EESD / PPSD plan drafting with its head; None for AR)."""
    merged, ar_seen = [], False
    for h, results in by_head.items():
        rank = 0
        for r in results:
            if not r.plan.mode.speculative:
                r.details.head_rank = None
                if ar_seen:
                    continue
                ar_seen = True
            else:
                rank += 1
                r.details.head_rank = rank
            merged.append(r)
    merged.sort(key=lambda r: -(r.speedup_vs_ar or 0.0))
    return merged


def decide_over_heads(by_head: dict, profile=None):
    """`sim.planner.verdict.decide` over several exit heads' sweeps ({head: Results}, ranked together by
    `merge`: AR once), with `Verdict.head` set: the recommendation's head, the first head for AR."""
    from dataclasses import replace

    from sim.planner.verdict import decide

    if not by_head:
        raise UserError("no exit head was swept", "sweep at least the shared head")
    v = decide(merge(dict(by_head)), profile)
    head = v.recommended.plan.exit_head if v.recommended.plan.mode.speculative else next(iter(by_head))
    return replace(v, head=head)


def comparison(profile, by_head: dict) -> list[dict]:
    """One row per head: its drafting cost, best α over exits, best EESD, best PPSD and the best plan
    (one-thread speedups; degenerate plans, `sim.planner.verdict.degenerate_reason`, are never a head's best)."""
    from sim.planner.verdict import degenerate_reason

    rows = []
    for h, results in by_head.items():
        entry = (profile.latency.get("exit_heads") or {}).get(h, {})
        ranked = sorted(results, key=lambda r: -(r.speedup_vs_ar or 0.0))
        best = {m: next((r for r in ranked if r.plan.mode is m and degenerate_reason(r) is None), None)
                for m in Mode if m.speculative}
        spec = [r for r in best.values() if r is not None]
        top = max(spec, key=lambda r: r.speedup_vs_ar or 0.0) if spec else None
        alphas = profile.alpha_by_exit(head=h) if profile.has_acceptance else {}
        row = {"head": h, "kind": entry.get("kind", SHARED if h == SHARED else "?"),
               "params": entry.get("params", 0 if h == SHARED else None),
               "draft_head_ms": round(float(profile.exit_head_ms(h, 1)), 4),
               "best_alpha": round(max(alphas.values()), 4) if alphas else None,
               "best_alpha_exit": max(alphas, key=alphas.get) if alphas else None}
        for m, r in best.items():
            row[f"best_{m.value}"] = r.plan.label() if r else None
            row[f"best_{m.value}_speedup"] = round(r.speedup_vs_ar, 4) if r else None
        beats_ar = top is not None and (top.speedup_vs_ar or 0) > 1.0
        row["best_plan"] = top.plan.label() if beats_ar else "AR"
        row["best_speedup"] = round(top.speedup_vs_ar, 4) if beats_ar else 1.0
        row["best_tokens_per_s"] = round(top.tokens_per_s if beats_ar else top.ar_tokens_per_s or 0.0,
                                         3) if top else None
        rows.append(row)
    return rows


def format_comparison(rows: list[dict]) -> str:
    head = (f"{'exit head':<15} {'draft ms':>8} {'best α (E)':>11}  {'best EESD':<30} {'×':>6}  "
            f"{'best PPSD':<34} {'×':>6}  best plan")
    lines = [head]
    fmt = lambda v: "   -" if v is None else f"{v:6.3f}"  # noqa: E731
    for r in rows:
        alpha = "-" if r["best_alpha"] is None else f"{r['best_alpha']:.3f} ({r['best_alpha_exit']})"
        lines.append(f"{head_label(r['head']):<15} {r['draft_head_ms']:>8.3f} {alpha:>11}  "
                     f"{r['best_eesd'] or '-':<30} {fmt(r['best_eesd_speedup'])}  "
                     f"{r['best_ppsd'] or '-':<34} {fmt(r['best_ppsd_speedup'])}  "
                     f"{r['best_plan']} {r['best_speedup']:.3f}×")
    return "\n".join(lines)


def best_over_heads(by_head: dict, profile=None) -> tuple:
    """(exit head, recommended Result, one-line verdict) over every head's sweep, as `ppsd plan`
    chooses: `decide_over_heads` (AR, with the first head, when no plan beats it beyond the
    profile's noise band)."""
    v = decide_over_heads(by_head, profile)
    return v.head, v.recommended, v.text
