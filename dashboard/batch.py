"""Speculation under load on the pages: the best EESD plan's speedup at each batch size the profile
measured and up to which one it pays (Overview), and the plans ranked at a chosen batch size (What-if).
The figures are `ppsd plan --batch`'s (sim/batch/sweep.py)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import sweep_cache
from sim.batch.sweep import paying_batch


@st.cache_data(show_spinner=False, max_entries=32)
def curve(path: str, stamp: float) -> list[dict]:
    from sim.batch.sweep import curve as best_by_batch

    return [p.to_json_dict() for p in best_by_batch(sweep_cache.profile(path, stamp))]


@st.cache_data(show_spinner=False, max_entries=64)
def ranked(path: str, stamp: float, batch: int, top: int = 10) -> pd.DataFrame:
    from sim.batch.sweep import rank

    rows = rank(sweep_cache.profile(path, stamp), batch)[:top]
    return pd.DataFrame([{"plan": p.plan, "speedup vs AR at this batch": round(p.speedup_vs_ar, 3),
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


def overview_section(profile, path: str, stamp: float) -> None:
    """The best EESD plan at every measured batch size, and the batch size up to which it pays."""
    if not_measured(profile):
        return
    points = curve(path, stamp)
    upto = paying_batch({p["batch"]: p["speedup_vs_ar"] for p in points})
    table = pd.DataFrame([{"batch size": p["batch"], "best EESD plan": p["plan"],
                           "speedup vs AR at that batch": round(p["speedup_vs_ar"], 3)} for p in points])
    st.write("EESD does not pay even for one sequence here." if upto is None else
             f"EESD pays up to batch **{upto}** of the sizes measured ({', '.join(str(p['batch']) for p in points)}); "
             "beyond that, decode plainly. PPSD is priced for one sequence at a time only.")
    st.line_chart(table, x="batch size", y="speedup vs AR at that batch", height=220)
    st.dataframe(table, hide_index=True, width="stretch", key="table_batch_overview")


def whatif_section(profile, path: str, stamp: float, key: str) -> None:
    """A batch-size control and the EESD plans ranked at it against AR at the same batch size."""
    if not_measured(profile):
        return
    sizes = list(profile.batch.sizes)
    b = st.select_slider("batch size (sequences decoded at once)", sizes, sizes[0], key=key,
                         help="Throughput over the whole batch against AR decoding the same batch; measured "
                              "sizes only (between them is not offered: `ppsd profile add-batch` adds sizes).")
    st.dataframe(ranked(path, stamp, int(b)), hide_index=True, width="stretch", key=f"{key}_table")
    st.caption("Reduced-vocabulary exit heads and PPSD are priced for one sequence at a time only.")
