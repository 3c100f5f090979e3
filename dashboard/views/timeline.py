"""Timeline: a Gantt chart of a simulated run (one row per stage or device), the measured one
beside it when `ppsd validate` recorded it, and the Chrome trace to download."""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from dashboard import cached, charts, data, theme, ui
from ppsd import validation_folder as vf
from sim.heads import available_heads, head_label
from sim.modes import Mode
from sim.plan import Event, Plan
from sim.timeline import to_chrome_trace

profile = ui.require_profile()
path = ui.selected_path()
ui.page_header("Timeline", profile, "Who works when: drafts, verifications, hops and flushes for a short simulated "
               "run. Drag to zoom, double-click to reset.")
N = profile.num_layers
stamp = cached.mtime(path)
_, best, _, _ = cached.sweep(path)
HEADS = available_heads(profile)

c = st.columns(6 if len(HEADS) > 1 else 5)
modes = [Mode.PPSD, Mode.EESD, Mode.AR]
# the recommended mode first; when that is plain AR, show PPSD (more to see)
mode = c[0].selectbox("mode", modes, index=modes.index(best["mode"]) if best["mode"] != Mode.AR else 0,
                      format_func=str.upper, key="tl_mode", help=theme.GLOSSARY["ppsd"])
e_default = int(best["exit_layer"]) if best["mode"] != Mode.AR else N // 2
exit_layer = c[1].number_input("exit layer E", 1, N - 1, e_default, key="tl_exit", help=theme.GLOSSARY["exit_layer"],
                               disabled=mode == Mode.AR)
gamma = c[2].number_input("draft length γ", 1, 16, int(best["draft_len"]) if best["mode"] == Mode.EESD else 4,
                          key="tl_gamma", help=theme.GLOSSARY["draft_len"], disabled=mode != Mode.EESD)
stages = c[3].number_input("stages k", 2, max(2, N - int(exit_layer) + 1),
                           int(best["stages"]) if best["mode"] == Mode.PPSD else 2, key="tl_k",
                           help=theme.GLOSSARY["stages"], disabled=mode != Mode.PPSD)
tokens = c[4].number_input("tokens", 4, 200, 24, key="tl_tokens", help="Tokens to decode in the simulated run.")
head = HEADS[0]
if len(HEADS) > 1:
    head = c[5].selectbox("exit head", HEADS, key="tl_head", format_func=head_label, help=theme.GLOSSARY["exit_head"],
                          disabled=mode == Mode.AR)

plan = Plan(mode, exit_layer=None if mode == Mode.AR else int(exit_layer), draft_len=int(gamma), stages=int(stages),
            exit_head=head)
res = cached.simulate_one(path, stamp, plan.to_dict(), tokens=int(tokens), timeline=True, engine="event")
events = [Event(**e) for e in res.get("timeline") or []]
sim_col, meas_col = st.columns(2)

with sim_col:
    st.plotly_chart(charts.gantt(events, f"Simulated: {plan.label()}"), key="chart_gantt_sim")
    st.caption(f"{res['tokens']} tokens in {res['time_s'] * 1e3:.1f} ms → {theme.fmt_tps(res['tokens_per_s'])} "
               f"({theme.fmt_x(res['speedup_vs_ar'])} AR); {res['mean_accepted']:.2f} tokens per round.")
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
