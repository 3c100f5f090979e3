"""Speculation under load on the pages: the best EESD and two-stage PPSD plans' speedups at each batch size
the profile measured and up to which one each pays (Overview), and the plans ranked at a chosen batch size
(What-if). The figures are `ppsd plan --batch B`'s (sim/batch/sweep.py over the same exit heads,
`sim.batch.cli.batch_heads`, and the same draft lengths), against AR at the same batch size on one thread."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import charts, sweep_cache
from ppsd.exit_heads import label as head_label
from sim.batch.sweep import paying_batch
from sim.planner.sweep_spec import MAX_DRAFT_LEN

GAMMAS = range(1, MAX_DRAFT_LEN + 1)  # `ppsd plan --batch`'s default --max-draft-len
TOP = 15  # `ppsd plan --batch`'s default --top
BASELINE = "AR at the same batch size on one thread"


def heads(profile) -> list[str]:
    """The exit heads `ppsd plan --batch B` prices a batched plan with (those timed at batch > 1)."""
    from sim.batch.cli import batch_heads

    return batch_heads(profile, None)


@st.cache_data(show_spinner=False, max_entries=32)
def curve(path: str, stamp: float, scheme: str = "eesd") -> list[dict]:
    from ppsd.modes import Mode
    from sim.batch.sweep import curve as best_by_batch

    profile = sweep_cache.profile(path, stamp)
    return [p.to_json_dict() for p in best_by_batch(profile, heads(profile), GAMMAS, scheme=Mode.parse(scheme))]


@st.cache_data(show_spinner=False, max_entries=64)
def ranked_points(path: str, stamp: float, batch: int) -> list[dict]:
    """`ppsd plan --batch B --json`'s "plans": every scheme's best plans at B, best first."""
    from sim.batch.sweep import rank

    profile = sweep_cache.profile(path, stamp)
    return [p.to_json_dict() for p in rank(profile, batch, heads(profile), GAMMAS)]


def ranked_table(points: list[dict], top: int = TOP) -> pd.DataFrame:
    """The ranked plans in plain headers (the first `top`, as `ppsd plan --batch B` prints them)."""
    return pd.DataFrame([{"plan": p["plan"], "scheme": p["scheme"].upper(), "exit head": head_label(p["exit_head"]),
                          "× AR at this batch size": p["speedup_vs_ar"],
                          "× AR on both cores": p["speedup_vs_ar_tp"],
                          "tokens/s (whole batch)": p["tokens_per_s"], "AR tokens/s (whole batch)": p["ar_tokens_per_s"],
                          "ms a token, each sequence": p["ms_per_token"], "acceptance α": p["acceptance_rate"]}
                         for p in points[:top]])


def not_measured(profile) -> bool:
    """A caption naming the command, when the profile answers for one sequence at a time."""
    if profile.batch.measured:
        return False
    from pathlib import Path

    from dashboard.data import display_name

    st.caption(f"This profile answers for one sequence at a time. `ppsd profile add-batch "
               f"{display_name(Path(profile.path))}` measures "
               "passes of several sequences, and this section then says up to which batch size speculation pays.")
    return True


def head_note(profile, verdict) -> str:
    """One line when the verdict's plan drafts with a head this section cannot price ("" otherwise)."""
    spec = verdict.recommended if verdict.recommended.plan.mode.speculative else verdict.best_speculative
    priced = heads(profile)
    if spec is None or spec.plan.exit_head in priced:
        return ""
    which = " and ".join(head_label(h) for h in priced)
    return (f"The verdict's plan drafts with the {head_label(spec.plan.exit_head)} head, which is timed one sequence "
            f"at a time only; under load this section prices the {which} head{'s' if len(priced) > 1 else ''}, as "
            "`ppsd plan --batch B` does.")


def reach_words(scheme: str, upto: int | None, sizes: str) -> str:
    name = scheme.upper()
    if upto is None:
        return f"{name} is slower than AR at every batch size measured ({sizes})"
    return f"{name} pays up to batch **{upto}** of the sizes measured ({sizes})"


def overview_section(profile, path: str, stamp: float, verdict=None) -> None:
    """Each scheme's best plan at every measured batch size, and the batch size up to which each pays."""
    if not_measured(profile):
        return
    curves = {s: curve(path, stamp, s) for s in ("eesd", "ppsd")}
    sizes = ", ".join(str(p["batch"]) for p in curves["eesd"])
    which = " and ".join(head_label(h) for h in heads(profile))
    st.write(f"With the {which} head{'s' if len(heads(profile)) > 1 else ''}, against {BASELINE}: "
             + "; ".join(reach_words(s, paying_batch({p["batch"]: p["speedup_vs_ar"] for p in points}), sizes)
                         for s, points in curves.items()) + ". Beyond that, decode plainly.")
    if verdict is not None and head_note(profile, verdict):
        st.caption(head_note(profile, verdict))
    table = pd.DataFrame([{"batch size": e["batch"], "best EESD plan": e["plan"], "EESD ×": e["speedup_vs_ar"],
                           "best PPSD plan": p["plan"], "PPSD ×": p["speedup_vs_ar"],
                           "PPSD × AR on both cores": p["speedup_vs_ar_tp"]}
                          for e, p in zip(curves["eesd"], curves["ppsd"])])
    if table["PPSD × AR on both cores"].isna().all():  # the profile did not time AR on two threads
        table = table.drop(columns=["PPSD × AR on both cores"])
    st.plotly_chart(charts.batch_curves(table, BASELINE), key="chart_batch_overview")
    st.dataframe(table, hide_index=True, width="stretch", key="table_batch_overview",
                 column_config={c: st.column_config.NumberColumn(format="%.2f×") for c in table.columns
                                if c.endswith("×") or c.endswith("cores")})
    st.caption(f"Throughput over the whole batch against {BASELINE}. PPSD's two stages use two cores: "
               "`ppsd run --batch B --mode ppsd` also measures it against AR on both cores.")


def whatif_section(profile, path: str, stamp: float, key: str) -> None:
    """A batch-size control and the plans ranked at it against AR at the same batch size (`ppsd plan --batch B`)."""
    if not_measured(profile):
        return
    sizes = list(profile.batch.sizes)
    b = st.select_slider("batch size (sequences decoded at once)", sizes, sizes[0], key=key,
                         help="Throughput over the whole batch against AR decoding the same batch; measured "
                              "sizes only (between them is not offered: `ppsd profile add-batch` adds sizes).")
    table = ranked_table(ranked_points(path, stamp, int(b)))
    if table["× AR on both cores"].isna().all():
        table = table.drop(columns=["× AR on both cores"])
    fmt = st.column_config.NumberColumn
    st.dataframe(table, hide_index=True, width="stretch", key=f"{key}_table",
                 column_config={"× AR at this batch size": fmt(format="%.3f×"), "× AR on both cores": fmt(format="%.3f×"),
                                "tokens/s (whole batch)": fmt(format="%.1f"), "AR tokens/s (whole batch)": fmt(format="%.1f"),
                                "ms a token, each sequence": fmt(format="%.1f"), "acceptance α": fmt(format="%.3f")})
    which = " and ".join(head_label(h) for h in heads(profile))
    st.caption(f"The same plans as `ppsd plan --batch {b}`: the {which} exit heads (reduced-vocabulary heads and PPSD "
               "with more than two stages are priced one sequence at a time only).")


def validation_section() -> None:
    """Batched validations (`ppsd validate --batch-sizes`): predicted beside measured speedup for every plan and
    batch size, their summary, and whether each scheme's measured and predicted reach agree."""
    import json
    from pathlib import Path

    from dashboard import data

    folders = data.find_batch_validations()
    if not folders:
        st.caption("No batched validation yet: `ppsd validate --profile DIR --batch-sizes 1,2,4,8 --out runs/NAME` "
                   "measures plans decoding several sequences at once against AR at the same batch size.")
        return
    names = {data.display_name(f): f for f in folders}
    pick = st.selectbox("batched validation run", list(names), key="val_batch_choice")
    from ppsd.validation_folder import BATCH_JSON_FILE

    doc = json.loads((Path(names[pick]) / BATCH_JSON_FILE).read_text())
    s = doc["summary"]
    m = st.columns(4)
    m[0].metric("speedup error (MAPE)", f"{s['mape_pct']:.1f}%")
    m[1].metric("plans × batch sizes", s["pairs"])
    m[2].metric("90% intervals hold", f"{100 * s['coverage']:.0f}%",
                help=f"median half-width ±{s['interval_half_width_median_pct']:.1f}%")
    m[3].metric("same output as AR", "yes" if s["lossless_same_batch"] else "no",
                help="at the same batch size; at batch 1: " + ("yes" if s["lossless_batch1"] else "no"))
    rows = pd.DataFrame(doc["rows"])
    st.plotly_chart(charts.batch_measured(rows, BASELINE.replace(" on one thread", "")), key="chart_batch_validation")
    st.dataframe(batch_validation_view(rows), hide_index=True, width="stretch", key="table_batch_validation")
    for scheme, (measured, predicted) in doc.get("pays_up_to", {}).items():
        def reach(b):
            return f"up to batch {b}" if b else "at no batch size"

        st.caption(f"The {scheme} pays {reach(measured)} measured, {reach(predicted)} predicted.")


BATCH_VALIDATION_HEADERS = {
    "plan": "plan", "batch": "batch size", "predicted": "predicted ×", "measured": "measured ×", "error_pct": "error %",
    "low": "interval low ×", "high": "interval high ×", "covered": "inside it",
    "predicted_acceptance": "acceptance predicted", "measured_acceptance": "acceptance measured",
    "lossless_same_batch": "same output as AR", "measured_speedup_vs_ar_tp": "measured × AR on both cores"}


def batch_validation_view(rows: pd.DataFrame) -> pd.DataFrame:
    """A batched validation's rows in plain headers; yes / no for the checks, words where a figure is missing."""
    shown = rows[[c for c in BATCH_VALIDATION_HEADERS if c in rows.columns]].rename(columns=BATCH_VALIDATION_HEADERS)
    for col in ("inside it", "same output as AR"):
        if col in shown.columns:
            shown[col] = shown[col].map(lambda v: "not judged" if v is None or v != v else ("yes" if v else "no"))
    both = "measured × AR on both cores"
    if both in shown.columns:
        shown[both] = [f"{v:.2f}×" if v is not None and v == v else "not measured" for v in shown[both]]
    return shown
