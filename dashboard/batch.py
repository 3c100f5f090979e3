"""Speculation under load on the pages: the best EESD and two-stage PPSD plans' speedups at each batch size
the profile measured and up to which one each pays (Overview), and the plans ranked at a chosen batch size
(What-if). The figures are `ppsd plan --batch`'s (sim/batch/sweep.py), against AR on one thread."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import sweep_cache
from sim.batch.sweep import paying_batch


@st.cache_data(show_spinner=False, max_entries=32)
def curve(path: str, stamp: float, scheme: str = "eesd") -> list[dict]:
    from ppsd.modes import Mode
    from sim.batch.sweep import curve as best_by_batch

    return [p.to_json_dict() for p in best_by_batch(sweep_cache.profile(path, stamp), scheme=Mode.parse(scheme))]


@st.cache_data(show_spinner=False, max_entries=64)
def ranked(path: str, stamp: float, batch: int, top: int = 10) -> pd.DataFrame:
    from sim.batch.sweep import rank

    rows = rank(sweep_cache.profile(path, stamp), batch)[:top]
    return pd.DataFrame([{"plan": p.plan, "scheme": p.scheme.upper(),
                          "speedup vs AR at this batch": round(p.speedup_vs_ar, 3),
                          "same budget (two cores)":
                              None if p.speedup_vs_ar_tp is None else round(p.speedup_vs_ar_tp, 3),
                          "tokens/s (batch)": round(p.tokens_per_s, 1),
                          "AR tokens/s (batch)": round(p.ar_tokens_per_s, 1),
                          "ms a token (each sequence)": round(p.ms_per_token, 1)} for p in rows])


def not_measured(profile) -> bool:
    """A caption naming the command, when the profile answers for one sequence at a time."""
    if profile.batch.measured:
        return False
    st.caption(f"This profile answers for one sequence at a time. `ppsd profile add-batch {profile.path}` measures "
               "passes of several sequences, and this section then says up to which batch size speculation pays.")
    return True


def _reach(scheme: str, upto: int | None, sizes: str) -> str:
    name = scheme.upper()
    if upto is None:
        return f"{name} does not pay even for one sequence here"
    return f"{name} pays up to batch **{upto}** of the sizes measured ({sizes})"


def overview_section(profile, path: str, stamp: float) -> None:
    """Each scheme's best plan at every measured batch size, and the batch size up to which each pays."""
    if not_measured(profile):
        return
    curves = {s: curve(path, stamp, s) for s in ("eesd", "ppsd")}
    sizes = ", ".join(str(p["batch"]) for p in curves["eesd"])
    st.write("; ".join(_reach(s, paying_batch({p["batch"]: p["speedup_vs_ar"] for p in points}), sizes)
                       for s, points in curves.items()) + ". Beyond that, decode plainly.")
    table = pd.DataFrame([{"batch size": e["batch"], "best EESD plan": e["plan"],
                           "EESD speedup": round(e["speedup_vs_ar"], 3), "best PPSD plan": p["plan"],
                           "PPSD speedup": round(p["speedup_vs_ar"], 3)}
                          for e, p in zip(curves["eesd"], curves["ppsd"])])
    st.line_chart(table, x="batch size", y=["EESD speedup", "PPSD speedup"], height=220)
    st.dataframe(table, hide_index=True, width="stretch", key="table_batch_overview")
    st.caption("Speedups against AR at the same batch size on one thread. PPSD's two stages use two cores: "
               "`ppsd run --batch B --mode ppsd` also measures it against AR on both cores.")


def whatif_section(profile, path: str, stamp: float, key: str) -> None:
    """A batch-size control and the EESD plans ranked at it against AR at the same batch size."""
    if not_measured(profile):
        return
    sizes = list(profile.batch.sizes)
    b = st.select_slider("batch size (sequences decoded at once)", sizes, sizes[0], key=key,
                         help="Throughput over the whole batch against AR decoding the same batch; measured "
                              "sizes only (between them is not offered: `ppsd profile add-batch` adds sizes).")
    st.dataframe(ranked(path, stamp, int(b)), hide_index=True, width="stretch", key=f"{key}_table")
    st.caption("Reduced-vocabulary exit heads and PPSD with more than two stages are priced for one sequence at a "
               "time only.")


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
    m[0].metric("MAPE, speedup", f"{s['mape_pct']:.1f}%")
    m[1].metric("(plan, batch) pairs", s["pairs"])
    m[2].metric("90% intervals cover", f"{100 * s['coverage']:.0f}%",
                help=f"median half-width ±{s['interval_half_width_median_pct']:.1f}%")
    m[3].metric("greedy identical to AR", "yes" if s["lossless_same_batch"] else "no",
                help="at the same batch size; at batch 1: " + ("yes" if s["lossless_batch1"] else "no"))
    rows = pd.DataFrame(doc["rows"])
    st.line_chart(rows.pivot_table(index="batch", columns="plan", values="measured"), height=240,
                  x_label="batch size", y_label="measured speedup vs AR at that batch")
    shown = ["plan", "batch", "predicted", "measured", "error_pct", "low", "high", "covered",
             "predicted_acceptance", "measured_acceptance", "lossless_same_batch", "measured_speedup_vs_ar_tp"]
    st.dataframe(rows[[c for c in shown if c in rows.columns]], hide_index=True, width="stretch",
                 key="table_batch_validation")
    for scheme, (measured, predicted) in doc.get("pays_up_to", {}).items():
        st.caption(f"{scheme}: pays up to batch {measured if measured else '(none)'} measured, "
                   f"{predicted if predicted else '(none)'} predicted.")
