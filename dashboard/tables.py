"""Simulator Results turned into the tables the pages show and plot (no Streamlit, no simulation).

Every number here comes from a Result (`sim.api.sweep`, `sim.planner.closed_forms.closed_form_sweep`,
`sim.api.simulate`) or from `sim.planner.closed_forms` / `sim.planner.heads`; this module only lays them out as
DataFrames in the units the pages show. Column `mode` holds `ppsd.modes.Mode` values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from dashboard.answer import Basis, short_label
from sim.planner.heads import head_label
from ppsd.modes import Mode
from sim.plan import Result
from sim.planner.verdict import degenerate_reason, plan_alpha
from sim.schemes import SCHEMES, scheme

TABLE_COLUMNS = ["plan", "mode", "exit_layer", "draft_len", "stages", "stage_bounds", "tokens_per_s",
                 "speedup", "mean_accepted", "acceptance_rate", "placement", "speedup_tp", "budget",
                 "speedup_lo", "speedup_hi", "break_even_alpha", "break_even_alpha_tp", "speedup_tp_lo",
                 "speedup_tp_hi", "budget_tokens_per_s", "alpha", "exit_head"]
CURVE_COLUMNS = ["mode", "k", "exit_layer", "speedup"]
ONE_THREAD = Basis(False, None)  # the one-thread figure, for tables no verdict judged


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
        "speedup_tp_lo": _num(getattr(r.details, "speedup_vs_ar_tp_lo", None)),
        "speedup_tp_hi": _num(getattr(r.details, "speedup_vs_ar_tp_hi", None)),
        "budget_tokens_per_s": _num(getattr(r.details, "budget_tokens_per_s", None)),
        # the acceptance the verdict quotes for the plan (one α per plan on every page)
        "alpha": _num(plan_alpha(r)) if p.mode.speculative else float("nan"),
        "exit_head": p.exit_head,
    }


def _num(v) -> float:
    return float(v) if v is not None else float("nan")


def results_table(results: Iterable[Result]) -> pd.DataFrame:
    """One row per plan, in the order given."""
    return pd.DataFrame([result_row(r) for r in results], columns=TABLE_COLUMNS)


def speculative(table: pd.DataFrame) -> pd.Series:
    """Which rows of a plan table draft (every scheme but AR, `Scheme.speculative`)."""
    return table["mode"].map(lambda m: scheme(m).speculative).astype(bool)


def curves(table: pd.DataFrame, basis: Basis = ONE_THREAD) -> pd.DataFrame:
    """Speedup per exit layer, per speculative scheme, in `basis`'s figure (column `speedup`; the
    one-thread figure beside it in `one_thread`): one curve per value of its second number when the
    scheme says so (PPSD: per stage count), else one curve at the best of it (EESD: best γ)."""
    out = []
    col = basis.column if basis.column in table.columns else "speedup"
    for mode, sch in SCHEMES.items():
        rows = table[(table["mode"] == mode) & table[col].notna()]
        if not sch.speculative or rows.empty:
            continue
        field = sch.size.field
        for k, sub in (rows.groupby(field) if sch.curve_per_size else [(0, rows)]):
            # several placements/bounds/γ of one (E, k) may be swept: keep the fastest by the figure shown
            best = sub.loc[sub.groupby("exit_layer")[col].idxmax()]
            out.append(pd.DataFrame({"mode": mode, "k": int(k), "exit_layer": best["exit_layer"].astype(int),
                                     "speedup": best[col], "one_thread": best["speedup"], **_band(best, basis),
                                     "detail": [sch.curve_detail(x, b) for x, b in zip(best[field], best["stage_bounds"])]}))
    if not out:
        return pd.DataFrame(columns=[*CURVE_COLUMNS, "one_thread", "detail"])
    return pd.concat(out, ignore_index=True)


def _band(rows: pd.DataFrame, basis: Basis = ONE_THREAD) -> dict:
    """The interval columns of the rows a curve keeps, in the basis' figure (NaN when the table has none)."""
    return {name: rows[c] if c in rows.columns else float("nan")
            for name, c in zip(("speedup_lo", "speedup_hi"), basis.interval_columns)}


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
             stages: int | None = None, basis: Basis = ONE_THREAD) -> pd.Series | None:
    """The table's row for the plan the controls select (the fastest by `basis` if several match), or None."""
    sub = table[(table["mode"] == mode) & (table["exit_layer"] == exit_layer)]
    size = scheme(mode).size
    if size is not None:  # the scheme's second number picks the row
        sub = sub[sub[size.field] == {"draft_len": draft_len, "stages": stages}[size.field]]
    if sub.empty:
        return None
    col = basis.column if sub[basis.column].notna().any() else "speedup"
    return sub.loc[sub[col].idxmax()]


def top_plans(table: pd.DataFrame, basis: Basis, n: int = 12) -> pd.DataFrame:
    """The `n` fastest plans by `basis`'s figure, in plain headers: the figure first, the one-thread
    figure beside it, its 90% interval, tokens/s as the plan runs against that baseline, α."""
    top = table.sort_values(basis.column, ascending=False, kind="stable").head(n)
    lo, hi = basis.interval_columns
    out = pd.DataFrame({
        "plan": top["plan"].map(short_label),
        basis.header: top[basis.column],
        **({basis.other_header: top[basis.other_column]} if basis.other_column else {}),
        "90% interval": [interval_words(a, b, scheme(m).speculative) for a, b, m in zip(top[lo], top[hi], top["mode"])],
        "tokens/s": top[basis.tokens_column],
        "acceptance α": top["alpha"],
        "tokens a round": top["mean_accepted"],
        "exit layer": top["exit_layer"],
        "stages (layers)": [stages_words(m, b) for m, b in zip(top["mode"], top["stage_bounds"])],
    })
    return out.reset_index(drop=True)


def interval_words(lo, hi, speculative: bool = True) -> str:
    """"1.05–1.20×", or words where the plan has none (AR is the reference itself)."""
    if not speculative:
        return "the reference"
    if lo is None or hi is None or lo != lo or hi != hi:
        return "not computed"
    return f"{lo:.2f}–{hi:.2f}×"


def stages_words(mode, bounds) -> str:
    """"layers 0–23 | 24–29" for a pipeline, "one process" otherwise."""
    if not bounds or not scheme(mode).pipelined:
        return "one process"
    cuts = [int(x) for x in str(bounds).split(",")]
    return " | ".join(f"{a}–{b - 1}" for a, b in zip(cuts, cuts[1:]))


def heads_by_verdict(by_head: dict, verdict, basis: Basis, profile=None) -> pd.DataFrame:
    """One row per exit head: its best EESD and best PPSD plan by the verdict's figure (never a plan the
    verdict would pass over as hardly drafting), each with the verdict's figure and the one-thread one
    beside it, the plan's α, and (with the profile) what a draft with the head costs."""
    rows = []
    for h, results in by_head.items():
        best = {}
        for m in (Mode.EESD, Mode.PPSD):
            mine = [r for r in results if r.plan.mode is m and degenerate_reason(r) is None]
            best[m.name] = max(mine, key=verdict.score, default=None)
        row = {"exit head": head_label(h)}
        for name, r in best.items():  # the plans and the verdict's figure first: what fits the screen
            row[f"best {name}"] = short_label(r.plan.label()) if r else "no usable plan"
            row[f"{name} {basis.header}"] = verdict.score(r) if r else float("nan")
        for name, r in best.items():
            if basis.other_column:
                row[f"{name} {basis.other_header}"] = r.speedup_vs_ar if r else float("nan")
            row[f"{name} α"] = _num(plan_alpha(r)) if r else float("nan")
        if profile is not None:
            row["draft head (ms)"] = float(profile.exit_head_ms(h, 1))
        row["head"] = h
        rows.append(row)
    return pd.DataFrame(rows)


def stage_table(parts) -> pd.DataFrame:
    """`sim.planner.breakdown.stage_breakdown` parts as rows: stage, part, ms."""
    return pd.DataFrame([(p.stage, p.part, p.ms) for p in parts], columns=["stage", "part", "ms"])


# --- the Validation page's per-plan table -----------------------------------------------------
# (header, the validation row's field, number format, the word shown where a row has no value)
VALIDATION_COLUMNS = [
    ("predicted ×", "predicted_speedup", "{:.2f}×", "not predicted"),
    ("measured ×", "measured_speedup", "{:.2f}×", "not measured"),
    ("error", "speedup_error_pct", "{:+.1f}%", "not measured"),
    ("90% interval", None, None, None),
    ("inside it", None, None, None),
    ("predicted × all cores", "predicted_speedup_vs_ar_tp", "{:.2f}×", "not priced"),
    ("measured × all cores", "measured_speedup_vs_ar_tp", "{:.2f}×", "not measured"),
    ("error, all cores", "speedup_vs_ar_tp_error_pct", "{:+.1f}%", "not measured"),
    ("predicted tokens/s", "predicted_tokens_per_s", "{:.1f}", "not predicted"),
    ("measured tokens/s", "measured_tokens_per_s", "{:.1f}", "not measured"),
    ("tokens/s error", "tokens_per_s_error_pct", "{:+.1f}%", "not measured"),
    ("acceptance predicted", "predicted_acceptance_rate", "{:.2f}", "AR drafts nothing"),
    ("acceptance measured", "measured_acceptance_rate", "{:.2f}", "AR drafts nothing"),
    ("same output as AR", None, None, None),
    ("forced α", "forced_alpha", "{:.2f}", "its own drafts"),
    ("predicted in sample ×", "predicted_speedup_in_sample", "{:.2f}×", "no twin"),
    ("error in sample", "speedup_error_in_sample_pct", "{:+.1f}%", "no twin"),
    ("predicted at the profile's prices ×", "predicted_speedup_profile", "{:.2f}×", "not re-timed"),
    ("error at the profile's prices", "speedup_error_profile_pct", "{:+.1f}%", "not re-timed"),
    ("measured × per round", "measured_speedup_rounds", None, "one round"),
    ("measured × per seed", "measured_speedup_seeds", None, "one seed"),
    ("AR tokens/s around it", "ar_reference_tokens_per_s", "{:.1f}", "not measured"),
]
# columns shown even when empty: the key ones
_KEY_VALIDATION = {"predicted ×", "measured ×", "error", "90% interval", "inside it", "measured tokens/s",
                   "predicted tokens/s", "same output as AR"}


def _same_output(row: dict) -> str:
    if not scheme(row.get("mode") or Mode.EESD).speculative:
        return "the reference"
    v = row.get("outputs_match_ar")
    if v is None or v != v:
        return "not judged (" + ("forced drafts" if _has(row.get("forced_alpha")) else "sampled") + ")"
    return "yes" if bool(v) else "NO: differs"


def _has(v) -> bool:
    return v is not None and not (isinstance(v, float) and v != v)


def _interval(row: dict) -> tuple[str, str]:
    """("1.05–1.20×", "yes") for a row with a 90% interval; words where it has none."""
    if not scheme(row.get("mode") or Mode.EESD).speculative:
        return "the reference", "the reference"
    lo, hi, x = row.get("predicted_speedup_lo"), row.get("predicted_speedup_hi"), row.get("measured_speedup")
    if not (_has(lo) and _has(hi)):
        return "not computed", "no interval"
    inside = "not measured" if not _has(x) else ("yes" if lo <= x <= hi else "no")
    return f"{lo:.2f}–{hi:.2f}×", inside


def _listed(v) -> str | None:
    return " / ".join(f"{x:.2f}" for x in v) if isinstance(v, (list, tuple)) and v else None


def validation_view(rows: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The Validation page's per-plan table in plain headers, the key columns first (plan, predicted,
    measured, error, interval), then same budget, tokens/s, acceptance, losslessness and the extras a run
    has; and {header: (format, word for a missing value)} for `worded`. Numbers stay numbers."""
    records = rows.to_dict("records")
    out = {"plan": [short_label(r.get("plan", "?")) for r in records]}
    formats = {}
    for header, field, fmt, missing in VALIDATION_COLUMNS:
        if header == "90% interval":
            out[header] = [_interval(r)[0] for r in records]
        elif header == "inside it":
            out[header] = [_interval(r)[1] for r in records]
        elif header == "same output as AR":
            out[header] = [_same_output(r) for r in records]
        elif field in rows.columns and (header in _KEY_VALIDATION or rows[field].notna().any()):
            values = rows[field]
            if fmt is None:  # lists: per round / per seed
                values = [_listed(v) for v in values]
            out[header] = pd.to_numeric(values, errors="coerce") if fmt else values
            formats[header] = (fmt, missing)
        elif header in _KEY_VALIDATION:
            out[header] = [float("nan")] * len(records)
            formats[header] = (fmt, missing)
    return pd.DataFrame(out), formats


def worded(table: pd.DataFrame, formats: dict):
    """A Styler of `table` showing each column's numbers in its format and a word where a value is missing
    ({header: (format or None, word)}), so no cell reads None or nan; the numbers stay sortable."""
    styler = table.style
    for col, (fmt, word) in formats.items():
        if col in table.columns:
            styler = styler.format(fmt, subset=[col], na_rep=word)
    return styler.hide(axis="index")


def drift_words(meta: dict) -> list[tuple[str, bool]]:
    """The machine's state during a validation against the profile's, in plain words: [(line, flagged)]."""
    out = []
    ar = meta.get("machine_drift") or {}
    if ar.get("drift_pct") is not None:
        d = float(ar["drift_pct"])
        out.append((f"Machine drift: AR ran {abs(d):.1f}% {'slower' if d < 0 else 'faster'} than the profile priced "
                    "it" + (": the machine is not in the state it was profiled in; profile and validate in one sitting."
                            if ar.get("flagged") else " (within 5%)."), bool(ar.get("flagged"))))
    both = meta.get("corun_drift") or {}
    if both.get("measured_slowdown") is not None and both.get("profile_slowdown") is not None:
        out.append((f"Machine drift: two processes running at once slowed each other {both['measured_slowdown']:.2f}× "
                    f"during this run against {both['profile_slowdown']:.2f}× when profiled ({both.get('drift_pct', 0):+.1f}%),"
                    " so the pipelined (PPSD) plans' errors here are uncertain by about that much"
                    + ("; re-profile in the same sitting." if both.get("flagged") else "."),
                    bool(both.get("flagged"))))
    return out


def breakdown_view(meta: dict) -> pd.DataFrame:
    """The error over parts of a validation's plans (real or forced acceptance, the paying ones, in sample)."""
    from ppsd import validation_folder as vf

    parts = meta.get("breakdown") or {}
    titles = vf.breakdown_titles(meta)
    rows = [{"plans": titles.get(k, k).strip().lstrip(". "), "how many": int(p.get("plans") or 0),
             "speedup error (MAPE)": p.get("mape_speedup_pct"), "worst error": p.get("worst_error_pct")}
            for k, p in parts.items() if isinstance(p, dict) and p.get("plans")]
    return pd.DataFrame(rows, columns=["plans", "how many", "speedup error (MAPE)", "worst error"])


def same_budget_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Validation rows with their same-budget figures (against AR on every core) in the one-thread columns'
    places, for the predicted-against-measured chart."""
    pairs = {"predicted_speedup": "predicted_speedup_vs_ar_tp", "measured_speedup": "measured_speedup_vs_ar_tp",
             "predicted_speedup_lo": "predicted_speedup_vs_ar_tp_lo",
             "predicted_speedup_hi": "predicted_speedup_vs_ar_tp_hi"}
    out = rows.drop(columns=[c for c in pairs if c in rows.columns])
    for one, tp in pairs.items():
        if tp in rows.columns:
            out[one] = rows[tp]
    return out[rows["measured_speedup_vs_ar_tp"].notna()] if "measured_speedup_vs_ar_tp" in rows.columns else out
