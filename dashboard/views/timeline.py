"""Timeline: a Gantt chart of a simulated run (one row per stage or device), the measured one
beside it when `ppsd validate` recorded it, and the Chrome trace to download."""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from dashboard import cached, charts, data, tables, theme, ui
from ppsd import validation_folder as vf
from sim.planner.heads import available_heads, head_label
from ppsd.modes import Mode
from sim.plan import Plan
from sim.schemes import scheme
from sim.timeline import Event, to_chrome_trace

profile = ui.require_profile()
path = ui.selected_path()
ui.page_header("Timeline", profile, "Who works when: drafts, verifications, hops and flushes for a short simulated "
               "run. Drag to zoom, double-click to reset.")
N = profile.num_layers
stamp = cached.mtime(path)
HEADS = available_heads(profile)
# open on the verdict's recommendation (sim/planner/verdict.py, as the Overview and `ppsd plan`); when AR stays
# ahead, the other controls start on the closest speculative plan it names, one mode switch away
verdict = cached.verdict(path, HEADS)
rec, closest = verdict.recommended, verdict.best_speculative
near = rec if rec.plan.mode.speculative else closest

c = st.columns(6 if len(HEADS) > 1 else 5)
modes = [Mode.PPSD, Mode.EESD, Mode.AR]
mode = c[0].selectbox("mode", modes, index=modes.index(rec.plan.mode), format_func=str.upper, key="tl_mode",
                      help=theme.GLOSSARY["ppsd"])
sch = scheme(mode)
exit_layer = c[1].number_input("exit layer E", 1, N - 1, int(near.plan.exit_layer) if near is not None else N // 2,
                               key="tl_exit", help=theme.GLOSSARY["exit_layer"], disabled=not sch.speculative)


def _near(field_name: str, default: int) -> int:
    """The verdict's plan's second number when it is held in `field_name`, else `default`."""
    return int(near.plan.size) if near is not None and near.plan.scheme.has_size(field_name) else default


gamma = c[2].number_input("draft length γ", 1, 16, _near("draft_len", 4), key="tl_gamma",
                          help=theme.GLOSSARY["draft_len"], disabled=not sch.has_size("draft_len"))
stages = c[3].number_input("stages k", 2, max(2, N - int(exit_layer) + 1), _near("stages", 2), key="tl_k",
                           help=theme.GLOSSARY["stages"], disabled=not sch.has_size("stages"))
tokens = c[4].number_input("tokens", 4, 200, 24, key="tl_tokens", help="Tokens to decode in the simulated run.")
head = near.plan.exit_head if near is not None and near.plan.exit_head in HEADS else HEADS[0]
if len(HEADS) > 1:
    head = c[5].selectbox("exit head", HEADS, HEADS.index(head), key="tl_head", format_func=head_label,
                          help=theme.GLOSSARY["exit_head"], disabled=not sch.speculative)
if rec.plan.mode.speculative:
    st.caption(f"Opens on the verdict's recommendation, {tables.short_label(rec.plan.label())}.")
else:
    unit = "GPU" if "GPU" in (verdict.budget or "") else "thread"
    st.caption(f"Opens on the verdict's recommendation, plain AR (drawn on one {unit}); "
               + (f"the closest speculative plan is {tables.short_label(closest.plan.label())}: pick "
                  f"{closest.plan.mode.name} above to see it." if closest is not None else
                  "no speculative plan drafts usefully here."))

plan = Plan(mode, exit_layer=int(exit_layer) if sch.speculative else None, draft_len=int(gamma), stages=int(stages),
            exit_head=head)
res = cached.simulate_one(path, stamp, plan.to_dict(), tokens=int(tokens), timeline=True, engine="event")
events = [Event(**e) for e in res.get("timeline") or []]
sim_col, meas_col = st.columns(2)

with sim_col:
    st.plotly_chart(charts.gantt(events, f"Simulated: {plan.label()}"), key="chart_gantt_sim")
    st.caption(f"{res['tokens']} tokens in {res['time_s'] * 1e3:.1f} ms → {theme.fmt_tps(res['tokens_per_s'])} "
               f"({theme.fmt_x(res['speedup_vs_ar'])} AR on one thread); {res['mean_accepted']:.2f} tokens per round.")
    st.download_button("Download Chrome trace (open in ui.perfetto.dev)",
                       json.dumps(to_chrome_trace(events, f"ppsd simulated {plan.label()}")),
                       file_name=f"{plan.label().replace(' ', '_').replace('=', '')}.simulated.json",
                       mime="application/json", key="dl_trace")

with meas_col:
    recorded: dict[str, Path] = {}
    for vdir in data.find_validations():
        with ui.guard("validation folder"):
            for slug, files in data.load_validation(vdir).timeline_files().items():
                if vf.MEASURED in files:
                    recorded[f"{data.display_name(vdir)}: {slug}"] = files[vf.MEASURED]
    if not recorded:
        st.info("No measured timeline yet. `ppsd validate` records one per plan (in "
                "`timelines/<plan>.measured.json`); it then appears here beside the simulation.")
    else:
        # default: the recording of the plan simulated on the left, else the first pipeline run
        names = list(recorded)
        choice = st.selectbox("measured run", names, index=data.default_recording(names, plan), key="tl_measured",
                              help="Timelines the runtime recorded while decoding for real.")
        measured = data.read_chrome_trace(recorded[choice])
        st.download_button("Download this measured trace", recorded[choice].read_bytes(),
                           file_name=recorded[choice].name, mime="application/json", key="dl_measured")
        sim_file = recorded[choice].with_name(recorded[choice].name.replace(f".{vf.MEASURED}.", f".{vf.SIMULATED}."))
        st.caption("Below: this recording and the simulator's prediction of the same plan (recorded by `ppsd "
                   "validate` from the same prompts) on one time axis, each from its own start.")

if recorded:
    slug = choice.split(": ", 1)[-1]
    simulated = data.read_chrome_trace(sim_file) if sim_file.exists() else []
    st.subheader(f"Measured and simulated: {slug}")
    window = charts.first_passes_window_ms(measured)  # a dozen measured passes, from the run's start
    st.plotly_chart(charts.gantt_pair(measured, simulated, f"{slug}: measured (top) and simulated (bottom), one "
                                      "time axis", window_ms=window), key="chart_gantt_pair")
    st.caption(f"Zoomed to the first {window:.1f} ms (a dozen passes); drag to pan or zoom, double-click for the "
               "whole run." + ("" if simulated else " This folder recorded no simulated timeline for the plan."))
