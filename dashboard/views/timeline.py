"""Timeline: a Gantt chart of a simulated run (one row per stage or device), the measured one
beside it when `ppsd validate` recorded it, and the Chrome trace to download."""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from dashboard import charts, data, predict, theme, ui
from sim.plan import Event, Plan
from sim.timeline import to_chrome_trace

profile = ui.require_profile()
path = ui.selected_path()
ui.page_header("Timeline", profile, "Who works when: drafts, verifications, hops and flushes for a short simulated "
               "run. Drag to zoom, double-click to reset.")
N = profile.num_layers
stamp = predict.mtime(path)
_, best, _, _ = predict.sweep(path)

c = st.columns(5)
modes = ["ppsd", "eesd", "ar"]
# the recommended scheme first; when that is plain AR, show PPSD (more to see)
mode = c[0].selectbox("scheme", modes, index=modes.index(best["scheme"]) if best["scheme"] in ("ppsd", "eesd") else 0,
                      format_func=str.upper, key="tl_mode", help=theme.GLOSSARY["ppsd"])
e_default = int(best["exit_layer"]) if best["scheme"] != "ar" else N // 2
exit_layer = c[1].number_input("exit layer E", 1, N - 1, e_default, key="tl_exit", help=theme.GLOSSARY["exit_layer"],
                               disabled=mode == "ar")
gamma = c[2].number_input("draft length γ", 1, 16, int(best["draft_len"]) if best["scheme"] == "eesd" else 4,
                          key="tl_gamma", help=theme.GLOSSARY["draft_len"], disabled=mode != "eesd")
stages = c[3].number_input("stages k", 2, max(2, N - int(exit_layer) + 1),
                           int(best["stages"]) if best["scheme"] == "ppsd" else 2, key="tl_k",
                           help=theme.GLOSSARY["stages"], disabled=mode != "ppsd")
tokens = c[4].number_input("tokens", 4, 200, 24, key="tl_tokens", help="Tokens to decode in the simulated run.")

plan = Plan(mode, exit_layer=None if mode == "ar" else int(exit_layer), draft_len=int(gamma), stages=int(stages))
res = predict.simulate_one(path, stamp, plan.to_dict(), tokens=int(tokens), timeline=True, engine="event")
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
                if "measured" in files:
                    recorded[f"{data.display_name(vdir)}: {slug}"] = files["measured"]
    if not recorded:
        st.info("No measured timeline yet. `ppsd validate` records one per plan (in "
                "`timelines/<plan>.measured.json`); it then appears here beside the simulation.")
    else:
        # default: the recording of the plan simulated on the left (`ppsd validate` names them so),
        # else the first pipeline run
        slug = {"ar": "ar", "eesd": f"eesd-e{plan.exit_layer}-g{plan.draft_len}",
                "ppsd": f"ppsd-e{plan.exit_layer}-k{plan.num_stages}"}[plan.mode]
        names = list(recorded)
        same = [i for i, n in enumerate(names) if n.endswith(f": {slug}")]
        pipes = [i for i, n in enumerate(names) if ": ppsd-" in n]
        choice = st.selectbox("measured run", names, index=(same or pipes or [0])[0], key="tl_measured",
                              help="Timelines the runtime recorded while decoding for real.")
        measured = data.read_chrome_trace(recorded[choice])
        st.plotly_chart(charts.gantt(measured, f"Measured: {choice.split(': ', 1)[-1]}"), key="chart_gantt_meas")
        sim_file = recorded[choice].with_name(recorded[choice].name.replace(".measured.", ".simulated."))
        st.download_button("Download this measured trace", recorded[choice].read_bytes(),
                           file_name=recorded[choice].name, mime="application/json", key="dl_measured")
        if sim_file.exists():
            st.caption("The simulator's prediction of the same plan, recorded by `ppsd validate`:")
            st.plotly_chart(charts.gantt(data.read_chrome_trace(sim_file), "Simulated (same plan, at validation)"),
                            key="chart_gantt_meas_sim")
