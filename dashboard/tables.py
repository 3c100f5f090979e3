"""Simulator Results turned into the tables the pages show and plot (no Streamlit, no simulation).

Every number here comes from a Result (`sim.api.sweep`, `sim.planner.closed_forms.closed_form_sweep`,
`sim.api.simulate`) or from `sim.planner.closed_forms` / `sim.planner.heads`; this module only lays them out as
DataFrames in the units the pages show. Column `mode` holds `ppsd.modes.Mode` values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from sim.planner.heads import head_label
from ppsd.modes import Mode
from sim.plan import Result
from sim.schemes import SCHEMES, scheme

TABLE_COLUMNS = ["plan", "mode", "exit_layer", "draft_len", "stages", "stage_bounds", "tokens_per_s",
                 "speedup", "mean_accepted", "acceptance_rate", "placement", "speedup_tp", "budget",
                 "speedup_lo", "speedup_hi", "break_even_alpha", "break_even_alpha_tp"]
CURVE_COLUMNS = ["mode", "k", "exit_layer", "speedup"]


def short_label(label: str) -> str:
    """A plan label without its stage bounds ("PPSD E=15 k=2 [0,15,30]" -> "PPSD E=15 k=2")."""
    return str(label).split(" [")[0]


def result_row(r: Result) -> dict:
    """One Result as a table row (see TABLE_COLUMNS)."""
    p = r.plan
    return {
        "plan": p.label(),
        "mode": p.mode,
        "exit_layer": p.exit_layer,
        "draft_len": p.size_as("draft_len"),  # each scheme's second number in its own column
        "stages": p.size_as("stages"),
        "stage_bounds": ",".join(map(str, p.stage_bounds)) if p.stage_bounds else None,
        "tokens_per_s": float(r.tokens_per_s),
        "speedup": float(r.speedup_vs_ar) if r.speedup_vs_ar is not None else float("nan"),
        "mean_accepted": float(r.mean_accepted),
        "acceptance_rate": r.acceptance_rate,
        "placement": ",".join(map(str, p.devices())),
        # same budget (sim/model/budget.py): against AR on every core / GPU the plan uses; NaN without tables
        "speedup_tp": float(r.speedup_vs_ar_tp) if r.speedup_vs_ar_tp is not None else float("nan"),
        "budget": getattr(r.details, "budget", None),
        # the 90% interval of the speedup (sim/intervals/); NaN when the result has none
        "speedup_lo": _num(getattr(r.details, "predicted_speedup_lo", None)),
        "speedup_hi": _num(getattr(r.details, "predicted_speedup_hi", None)),
        # the acceptance at which the plan ties AR (sim/planner/break_even.py); NaN: never, or not priced
        "break_even_alpha": _num(getattr(r.details, "break_even_alpha", None)),
        "break_even_alpha_tp": _num(getattr(r.details, "break_even_alpha_tp", None)),
    }


def _num(v) -> float:
    return float(v) if v is not None else float("nan")


def results_table(results: Iterable[Result]) -> pd.DataFrame:
    """One row per plan, in the order given."""
    return pd.DataFrame([result_row(r) for r in results], columns=TABLE_COLUMNS)


def speculative(table: pd.DataFrame) -> pd.Series:
    """Which rows of a plan table draft (every scheme but AR, `Scheme.speculative`)."""
    return table["mode"].map(lambda m: scheme(m).speculative).astype(bool)


def curves(table: pd.DataFrame) -> pd.DataFrame:
    """Speedup per exit layer, per speculative scheme: one curve per value of its second number when
    the scheme says so (PPSD: per stage count), else one curve at the best of it (EESD: best γ)."""
    out = []
    for mode, sch in SCHEMES.items():
        rows = table[table["mode"] == mode]
        if not sch.speculative or rows.empty:
            continue
        field = sch.size.field
        for k, sub in (rows.groupby(field) if sch.curve_per_size else [(0, rows)]):
            # several placements/bounds of one (E, k) may be swept: keep the fastest
            best = sub.loc[sub.groupby("exit_layer")["speedup"].idxmax()]
            out.append(pd.DataFrame({"mode": mode, "k": int(k), "exit_layer": best["exit_layer"].astype(int),
                                     "speedup": best["speedup"], **_band(best),
                                     "detail": [sch.curve_detail(x, b) for x, b in zip(best[field], best["stage_bounds"])]}))
    if not out:
        return pd.DataFrame(columns=[*CURVE_COLUMNS, "detail"])
    return pd.concat(out, ignore_index=True)


def _band(rows: pd.DataFrame) -> dict:
    """The interval columns of the rows a curve keeps (NaN when the table has none)."""
    return {c: rows[c] if c in rows.columns else float("nan") for c in ("speedup_lo", "speedup_hi")}


def closed_curves(results: Sequence[Result]) -> pd.DataFrame:
    """The closed-form curves of a `closed_form_sweep`: EESD at its best γ per exit, PPSD per stage
    count (balanced stages). They are the simulator's oracle, so a gap between a dashed and a solid
    curve is what the recorded trace (bursty acceptance, growing context) adds over the textbook
    assumption."""
    best: dict[tuple, Result] = {}  # (mode, k, exit layer) -> the fastest plan on that curve
    for r in sorted(results, key=_build_order):  # ties between γ go to the smallest
        sch = r.plan.scheme
        if not sch.speculative:
            continue
        key = (r.plan.mode, int(r.plan.size) if sch.curve_per_size else 0, int(r.plan.exit_layer))
        if key not in best or r.speedup_vs_ar > best[key].speedup_vs_ar:
            best[key] = r
    rows = [(*key, float(r.speedup_vs_ar)) for key, r in best.items()]
    df = pd.DataFrame(rows, columns=CURVE_COLUMNS)
    return df.sort_values(["exit_layer", "mode", "k"], kind="stable").reset_index(drop=True)


def _build_order(r: Result) -> tuple:
    p = r.plan
    return (p.exit_layer or 0, list(SCHEMES).index(p.mode), p.size or 0)


def find_row(table: pd.DataFrame, mode: Mode, exit_layer: int, draft_len: int | None = None,
             stages: int | None = None) -> pd.Series | None:
    """The table's row for the plan the controls select (the fastest if several match), or None."""
    sub = table[(table["mode"] == mode) & (table["exit_layer"] == exit_layer)]
    size = scheme(mode).size
    if size is not None:  # the scheme's second number picks the row
        sub = sub[sub[size.field] == {"draft_len": draft_len, "stages": stages}[size.field]]
    if sub.empty:
        return None
    return sub.loc[sub["speedup"].idxmax()]


def head_comparison(rows: list[dict], sources: dict[str, str] | None = None) -> pd.DataFrame:
    """`sim.planner.heads.comparison` rows (one per exit head) in the columns the pages show; `sources`
    says per head whether its figures are "simulated" or a closed-form preview."""
    out = []
    for r in rows:
        h = r["head"]
        out.append({
            "exit head": head_label(h), "draft head (ms)": r["draft_head_ms"], "best α": r["best_alpha"],
            "at exit": r["best_alpha_exit"],
            "best EESD": short_label(r["best_eesd"]) if r["best_eesd"] else None, "EESD ×": r["best_eesd_speedup"],
            "best PPSD": short_label(r["best_ppsd"]) if r["best_ppsd"] else None, "PPSD ×": r["best_ppsd_speedup"],
            "best plan": short_label(r["best_plan"]), "speedup": r["best_speedup"], "tokens/s": r["best_tokens_per_s"],
            "source": (sources or {}).get(h, "simulated"), "head": h})
    return pd.DataFrame(out)


def stage_table(parts) -> pd.DataFrame:
    """`sim.planner.breakdown.stage_breakdown` parts as rows: stage, part, ms."""
    return pd.DataFrame([(p.stage, p.part, p.ms) for p in parts], columns=["stage", "part", "ms"])
