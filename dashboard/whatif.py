"""Turning simulator results into what the planner and overview pages plot (no Streamlit here).

The sweep itself is `sim.api.sweep` (the exact fast path); this module only reshapes its results,
adds the closed-form curves for comparison and breaks a PPSD plan's per-token cost down by stage.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from sim.plan import Plan, Result

TABLE_COLUMNS = ["plan", "scheme", "exit_layer", "draft_len", "stages", "stage_bounds", "tokens_per_s",
                 "speedup", "mean_accepted", "acceptance_rate"]


def results_table(results: list[Result]) -> pd.DataFrame:
    """One row per simulated plan, in the units the pages show."""
    rows = []
    for r in results:
        p = r.plan
        rows.append({
            "plan": p.label(),
            "scheme": p.mode,
            "exit_layer": p.exit_layer,
            "draft_len": p.draft_len if p.mode == "eesd" else None,
            "stages": p.num_stages if p.mode == "ppsd" else None,
            "stage_bounds": ",".join(map(str, p.stage_bounds)) if (p.mode == "ppsd" and p.stage_bounds) else None,
            "tokens_per_s": float(r.tokens_per_s),
            "speedup": float(r.speedup_vs_ar) if r.speedup_vs_ar is not None else float("nan"),
            "mean_accepted": float(r.mean_accepted),
            "acceptance_rate": r.acceptance_rate,
            "placement": ",".join(map(str, p.devices())),
        })
    df = pd.DataFrame(rows, columns=[*TABLE_COLUMNS, "placement"])
    return df


def curves(table: pd.DataFrame) -> pd.DataFrame:
    """Speedup per exit layer: EESD at its best γ (one curve), PPSD one curve per stage count."""
    out = []
    eesd = table[table["scheme"] == "eesd"]
    if not eesd.empty:
        best = eesd.loc[eesd.groupby("exit_layer")["speedup"].idxmax()]
        out.append(pd.DataFrame({"scheme": "eesd", "k": 0, "exit_layer": best["exit_layer"].astype(int),
                                 "speedup": best["speedup"],
                                 "detail": [f"γ = {int(g)}" for g in best["draft_len"]]}))
    ppsd = table[table["scheme"] == "ppsd"]
    for k, sub in ppsd.groupby("stages"):
        # several placements/bounds of one (E, k) may be swept: keep the fastest
        best = sub.loc[sub.groupby("exit_layer")["speedup"].idxmax()]
        out.append(pd.DataFrame({"scheme": "ppsd", "k": int(k), "exit_layer": best["exit_layer"].astype(int),
                                 "speedup": best["speedup"],
                                 "detail": [f"stages [{b}]" if b else f"k = {int(k)}" for b in best["stage_bounds"]]}))
    if not out:
        return pd.DataFrame(columns=["scheme", "k", "exit_layer", "speedup", "detail"])
    return pd.concat(out, ignore_index=True)


def alphas(profile, scale: float = 1.0, temperature: float = 0.0, category: str | None = None,
           head: str = "shared") -> dict[int, float]:
    """Acceptance per exit layer as the closed forms use it: greedy match rate at T = 0, mean β
    when sampling; times the what-if scale, kept below 1 so the formulas stay finite."""
    acc = profile.acceptance
    acc = acc[acc["head"] == head]
    if category is not None:
        acc = acc[acc["category"] == category]
    col = "match" if temperature <= 0 else "beta"
    return {int(e): float(min(v * scale, 0.999)) for e, v in acc.groupby("exit_layer")[col].mean().items()}


def _layer_costs(profile) -> np.ndarray:
    return np.array([profile.layer_ms(l, 1) for l in range(profile.num_layers)])


def closed_form_plans(profile, alpha: dict[int, float], gammas, stage_counts, hop_ms: float | None = None,
                      exit_head: str = "shared") -> pd.DataFrame:
    """Every plan of a sweep priced by the closed forms of sim/analytic.py (i.i.d. acceptance α,
    the profile's real costs at the smallest context), in the shape of `results_table`. A few
    milliseconds for a whole sweep: the planner's instant answer while the trace-driven sweep of
    a new setting runs in the background."""
    from sim.analytic import plan_time_per_token
    from sim.api import resolve_plan

    n = profile.num_layers
    ar = plan_time_per_token(profile, Plan("ar"), 0.0)
    rows = [{"plan": "AR", "scheme": "ar", "exit_layer": None, "draft_len": None, "stages": None,
             "stage_bounds": None, "tokens_per_s": ar["tokens_per_s"], "speedup": 1.0, "mean_accepted": 1.0,
             "acceptance_rate": None, "placement": "0"}]
    for e, a in sorted(alpha.items()):
        if not 1 <= e < n:
            continue
        for g in gammas:
            plan = Plan("eesd", exit_layer=e, draft_len=int(g), exit_head=exit_head)
            r = plan_time_per_token(profile, plan, a)
            rows.append({"plan": plan.label(), "scheme": "eesd", "exit_layer": e, "draft_len": int(g), "stages": None,
                         "stage_bounds": None, "tokens_per_s": r["tokens_per_s"], "speedup": r["speedup_vs_ar"],
                         "mean_accepted": (1 - a ** (g + 1)) / (1 - a), "acceptance_rate": a, "placement": "0"})
        for k in stage_counts:
            if k > n - e + 1:
                continue
            plan = resolve_plan(Plan("ppsd", exit_layer=e, stages=int(k), hop_ms=hop_ms, exit_head=exit_head), profile)
            r = plan_time_per_token(profile, plan, a)
            rows.append({"plan": plan.label(), "scheme": "ppsd", "exit_layer": e, "draft_len": None, "stages": int(k),
                         "stage_bounds": ",".join(map(str, plan.stage_bounds)), "tokens_per_s": r["tokens_per_s"],
                         "speedup": r["speedup_vs_ar"], "mean_accepted": 1 / (1 - a), "acceptance_rate": a,
                         "placement": ",".join(map(str, plan.devices()))})
    return pd.DataFrame(rows, columns=[*TABLE_COLUMNS, "placement"])


def closed_forms(profile, alpha: dict[int, float], gammas, stage_counts, hop_ms: float | None = None,
                 exit_head: str = "shared") -> pd.DataFrame:
    """The closed-form curves: EESD at its best γ per exit, PPSD per stage count with balanced
    stages. They are the simulator's oracle, so a gap between a dashed and a solid curve is what
    the recorded trace (bursty acceptance, growing context) adds over the textbook assumption."""
    return closed_curves(closed_form_plans(profile, alpha, gammas, stage_counts, hop_ms, exit_head))


def closed_curves(plans: pd.DataFrame) -> pd.DataFrame:
    eesd = plans[plans["scheme"] == "eesd"]
    eesd = eesd.loc[eesd.groupby("exit_layer")["speedup"].idxmax()] if not eesd.empty else eesd
    rows = [("eesd", 0, int(r.exit_layer), float(r.speedup)) for r in eesd.itertuples()]
    rows += [("ppsd", int(r.stages), int(r.exit_layer), float(r.speedup))
             for r in plans[plans["scheme"] == "ppsd"].itertuples()]
    df = pd.DataFrame(rows, columns=["scheme", "k", "exit_layer", "speedup"])
    return df.sort_values(["exit_layer", "scheme", "k"], kind="stable").reset_index(drop=True)


def best_row(table: pd.DataFrame) -> dict:
    """The recommended plan of a results table as `sim.api.recommend` picks it: the fastest plan,
    or AR when nothing beats it."""
    spec = table[table["scheme"] != "ar"]
    ar = table[table["scheme"] == "ar"]
    if spec.empty or spec["speedup"].max() <= 1.0:
        return (ar.iloc[0] if not ar.empty else table.iloc[0]).to_dict()
    return spec.loc[spec["speedup"].idxmax()].to_dict()


def head_comparison(profile, tables: dict[str, pd.DataFrame], preview: dict[str, bool] | None = None) -> pd.DataFrame:
    """One row per exit head: what a draft costs with it, its best α, the best EESD and PPSD plan
    and the best plan overall (AR when none beats it), as `ppsd plan` prints it."""
    from sim.heads import head_label

    rows = []
    for h, t in tables.items():
        al = alphas(profile, head=h) if profile.has_acceptance else {}
        row = {"exit head": head_label(h), "draft head (ms)": float(profile.exit_head_ms(h, 1)),
               "best α": max(al.values()) if al else None, "at exit": max(al, key=al.get) if al else None}
        for m in ("eesd", "ppsd"):
            sub = t[t["scheme"] == m]
            top = sub.loc[sub["speedup"].idxmax()] if not sub.empty else None
            row[f"best {m.upper()}"] = top["plan"].split(" [")[0] if top is not None else None
            row[f"{m.upper()} ×"] = float(top["speedup"]) if top is not None else None
        best = best_row(t)
        row["best plan"] = best["plan"].split(" [")[0]
        row["speedup"] = float(best["speedup"])
        row["tokens/s"] = float(best["tokens_per_s"])
        row["source"] = "closed form (simulating…)" if (preview or {}).get(h) else "simulated"
        row["head"] = h
        rows.append(row)
    return pd.DataFrame(rows)


def stage_breakdown(profile, plan: Plan) -> pd.DataFrame:
    """Per-stage time for one token of a resolved PPSD plan: its layers, the exit head (stage 1),
    the full head (last stage) and the outgoing hop. Shows which stage bounds throughput."""
    bounds = plan.stage_bounds
    layers = _layer_costs(profile)
    k = len(bounds) - 1
    hop = plan.hop_ms if plan.hop_ms is not None else profile.hop_ms()
    rows = []
    for i in range(k):
        name = f"stage {i + 1} (L{bounds[i]}–L{bounds[i + 1] - 1})"
        rows.append((name, "layers", float(layers[bounds[i]:bounds[i + 1]].sum())))
        if i == 0:
            rows.append((name, "exit head", profile.exit_head_ms(plan.exit_head, 1)))
        if i == k - 1:
            rows.append((name, "head", profile.head_ms(1)))
        else:
            rows.append((name, "hop", hop))
    return pd.DataFrame(rows, columns=["stage", "part", "ms"])


def round_robin(stages: int, devices: int) -> tuple[int, ...] | None:
    """Placement of k stages on d devices: one each when they fit, else stage i on device i mod d."""
    if stages <= devices:
        return None
    return tuple(i % devices for i in range(stages))


def find_plan(table: pd.DataFrame, scheme: str, exit_layer: int, draft_len: int | None = None,
              stages: int | None = None) -> pd.Series | None:
    sub = table[(table["scheme"] == scheme) & (table["exit_layer"] == exit_layer)]
    if scheme == "eesd":
        sub = sub[sub["draft_len"] == draft_len]
    elif scheme == "ppsd":
        sub = sub[sub["stages"] == stages]
    if sub.empty:
        return None
    return sub.loc[sub["speedup"].idxmax()]


def with_hop(plan: Plan, hop_ms: float | None) -> Plan:
    return replace(plan, hop_ms=hop_ms)
