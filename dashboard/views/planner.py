"""What-if planner: predicted speedup versus exit layer for AR, EESD (best γ) and PPSD (each stage
count), the closed forms beside them, the best plan, and the plans the controls pick.

Speed: the sweep depends only on devices, hop, acceptance scale and temperature and is cached per
setting; exit layer, draft length and stage count pick rows out of it (see dashboard/cached.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pandas as pd
import streamlit as st

from dashboard import answer, batch, cached, charts, tables, theme, ui
from sim.planner.closed_forms import acceptance_by_exit
from sim.planner.heads import available_heads, head_label
from ppsd.modes import Mode
from sim.planner.gpus import round_robin
from sim.planner.sweep_spec import MAX_DEVICES
from sim.schemes import scheme
from sim.plan import Plan

profile = ui.require_profile()
path = ui.selected_path()
ui.page_header("What-if planner", profile, "Move a control; the prediction follows. Solid lines are the simulator; "
               "dashed, where shown, the textbook formulas.")
N = profile.num_layers
stamp = cached.mtime(path)
# widget keys carry the profile, so switching profiles starts from that profile's defaults
pk = hashlib.sha1(path.encode()).hexdigest()[:8]

HEADS = available_heads(profile)
# start on `ppsd plan`'s verdict over every head: its recommendation, or when AR stays ahead the best
# speculative plan it names (sim/planner/verdict.py), the plan a user would look at next
verdict0 = cached.verdict(path, HEADS)
start = verdict0.recommended if verdict0.recommended.plan.mode.speculative else verdict0.best_speculative
head0 = start.plan.exit_head if start is not None else verdict0.head or HEADS[0]
measured_hop = round(profile.hop_ms(), 3)
# Discrete steps for the controls that need a new sweep: each value one step away is swept in
# the background (dashboard/sweep_cache.py), so moving one of them answers from the cache.
HOP_OPTIONS = sorted({0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, measured_hop})
SCALE_OPTIONS = [0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0]
STOP_OPTIONS = ["off", 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
# the temperatures the profile holds β at (0 = greedy; no other is offered: the prediction at a T
# comes from β recorded at exactly that T, never from another one)
TEMP_OPTIONS = profile.temperatures() or [0.0]
T_SAMPLED = profile.beta_temperatures()
T_HELP = (f" This profile holds β along {'sampled' if profile.beta_trajectory == 'sampled' else 'greedy'} "
          f"trajectories at T = {', '.join(f'{t:g}' for t in T_SAMPLED)}"
          + ("." if profile.beta_trajectory == "sampled" else
             " (legacy: the greedy path over-predicts acceptance under sampling; re-profile with "
             "`ppsd profile --temperatures 0.7,1.0`).")
          if T_SAMPLED else " This profile recorded no β: re-profile with `ppsd profile --temperatures 0.7,1.0`.")

left, right = st.columns([1, 3], gap="medium")
with left:
    st.markdown("**Hardware and acceptance**")
    devices = st.slider("devices", 1, 8, cached.default_devices(path), key=f"pl_dev_{pk}",
                        help=theme.GLOSSARY["devices"])
    hop = st.select_slider("hop latency (ms)", HOP_OPTIONS, measured_hop, key=f"pl_hop_{pk}",
                           format_func=lambda h: f"{h:g} ms" + (" (measured)" if h == measured_hop else ""),
                           help=theme.GLOSSARY["hop"] + f" Measured: {theme.fmt_ms(profile.hop_ms())}.")
    scale = st.select_slider("acceptance scale", SCALE_OPTIONS, 1.0, key=f"pl_scale_{pk}",
                             format_func=lambda x: f"{x:g}×", help=theme.GLOSSARY["alpha_scale"])
    temp = st.select_slider("temperature", TEMP_OPTIONS, 0.0, key=f"pl_temp_{pk}",
                            format_func=lambda t: "0 (greedy)" if t == 0 else f"{t:g} (sampling)",
                            help=theme.GLOSSARY["temperature"] + T_HELP)
    head = HEADS[0]
    if len(HEADS) > 1:
        head = st.selectbox("exit head", HEADS, HEADS.index(head0), key=f"pl_head_{pk}", format_func=head_label,
                            help=theme.GLOSSARY["exit_head"])
    st.markdown("**Plan**")
    e0 = int(start.plan.exit_layer) if start is not None else N // 2
    traced = sorted(acceptance_by_exit(profile, head=head)) if profile.has_acceptance else []
    if traced and len(traced) < N - 1:  # a head traced at a few exits: offer those, never an untraced one
        e0 = e0 if e0 in traced else min(traced, key=lambda e: abs(e - e0))
        exit_layer = st.select_slider("exit layer E", traced, e0, key=f"pl_exit_{pk}_{head}",
                                      help=theme.GLOSSARY["exit_layer"] + f" The {head_label(head)} head is traced at "
                                      f"exits {', '.join(map(str, traced))}.")
    else:
        exit_layer = st.slider("exit layer E", 1, N - 1, e0, key=f"pl_exit_{pk}", help=theme.GLOSSARY["exit_layer"])
    g0 = (start.plan.size_as("draft_len") if start is not None else None) or 4  # the verdict's γ
    gamma = st.slider("draft length γ (EESD)", 1, max(cached.DEFAULT_GAMMAS), g0, key=f"pl_gamma_{pk}",
                      help=theme.GLOSSARY["draft_len"])
    tau = None  # a confidence stop: priced from the traces' confidences, greedy, at the profiled acceptance
    STOPS = profile.has_acceptance and profile.has_confidence(head, temp) and scale == 1.0
    if STOPS:
        pick_tau = st.select_slider("confidence stop τ", STOP_OPTIONS, "off", key=f"pl_tau_{pk}_{head}",
                                    format_func=lambda t: t if t == "off" else f"{t:g}",
                                    help=theme.GLOSSARY["draft_stop"])
        tau = None if pick_tau == "off" else float(pick_tau)
    k_max = max(2, min(MAX_DEVICES, N - exit_layer + 1))
    k0 = (start.plan.size_as("stages") if start is not None else None) or 2  # the verdict's k
    stages = st.slider("stages k (PPSD)", 2, k_max, min(k0, k_max), key=f"pl_k_{pk}", help=theme.GLOSSARY["stages"])

hop_key = None if hop == measured_hop else hop  # the measured hop is the profile's (as `ppsd plan`)
table, best, reason, closed, preview = cached.plans(path, devices=devices, hop_ms=hop_key, alpha_scale=scale,
                                                     temperature=temp, exit_head=head)
# this setting's verdict, by the function `ppsd plan` uses (sim/planner/verdict.py); a preview has none yet
verdict = None if preview else cached.verdict(path, [head], devices, hop_key, scale, temp)
basis = answer.basis(verdict) if verdict is not None else answer.table_basis(table)


SHARED_TOKENS = 500


def stop_for(mode: Mode, tau: float | None) -> float | None:
    """The confidence stop a selected plan runs with: PPSD's only with one device per stage."""
    return None if mode is Mode.PPSD and stages > devices else tau


def _figures(speedup, one_thread, tokens_per_s, alpha) -> dict:
    return {"speedup": float(speedup), "one_thread": float(one_thread),
            "tokens_per_s": None if tokens_per_s is None else float(tokens_per_s),
            "alpha": None if alpha is None or alpha != alpha else float(alpha)}


def pick(mode: Mode, tau: float | None = tau) -> dict:
    """The selected EESD or PPSD plan in the page's figure (`basis`): a row of the cached sweep when it holds
    one, else one cached simulation (more stages than devices, which the sweep leaves out; a plan with a
    confidence stop)."""
    stop = stop_for(mode, tau)
    row = tables.find_row(table, mode, exit_layer, draft_len=gamma, stages=stages, basis=basis) if stop is None else None
    if row is not None:
        r = row.to_dict()
        return {**r, **_figures(r[basis.column], r["speedup"], r[basis.tokens_column], r.get("alpha"))}
    plan = Plan(mode, exit_layer=exit_layer, draft_len=gamma, stages=stages, hop_ms=hop, exit_head=head,
                draft_stop=stop)
    shared = plan.num_stages > devices
    if shared:
        plan = replace(plan, placement=round_robin(plan.num_stages, devices))  # more stages than devices share them
    # shared devices need the event engine, and 500 tokens keep it interactive (the speedup moves by well under
    # 1% against 2000 on the profiles tried); otherwise the sweep's own token count, so tokens/s and speedup
    # stand on the same AR as the rest of the page
    res = cached.simulate_one(path, stamp, plan.to_dict(), scale, temp,
                              tokens=SHARED_TOKENS if shared else cached.DEFAULT_TOKENS)
    same = basis.same_budget and res.get("speedup_vs_ar_tp") is not None
    return {"plan": plan.label() + (" (shared devices)" if shared else ""), "mode": mode, "exit_layer": exit_layer,
            "mean_accepted": res["mean_accepted"], "stage_bounds": ",".join(map(str, res["stage_bounds"] or [])),
            **_figures(res["speedup_vs_ar_tp"] if same else res["speedup_vs_ar"], res["speedup_vs_ar"],
                       res.get("budget_tokens_per_s") if same else res["tokens_per_s"],
                       res.get("stream_alpha") if res.get("stream_alpha") is not None else res.get("acceptance_rate"))}


def _break_even_txt(row: dict) -> str:
    """"PPSD E=24 k=2 at α ≥ 0.41 (profiled 0.54)" from a sweep row, against the page's baseline
    (sim/planner/break_even.py)."""
    a = row.get("break_even_alpha_tp" if basis.same_budget else "break_even_alpha")
    name = tables.short_label(row["plan"])
    if "break_even_alpha" not in row:
        return f"{name}: not swept (see `ppsd simulate`)"
    got = row.get("alpha")
    value = " never pays" if a is None or a != a else f" at α ≥ {a:.2f}"
    return f"{name}{value}" + (f" (profiled {got:.2f})" if got is not None and got == got else "")


def _star() -> dict:
    """The verdict's plan on the chart (`answer.marker`); in a preview, its best plan by the textbook formulas."""
    if verdict is not None:
        return answer.marker(verdict)
    spec = scheme(best["mode"]).speculative
    return {"exit_layer": best["exit_layer"] if spec else None, "label": tables.short_label(best["plan"]),
            **_figures(best["speedup"], best["speedup"], best["tokens_per_s"], best.get("alpha"))}


sel_e, sel_p = pick(Mode.EESD), pick(Mode.PPSD)
star = _star()
with right:
    fig = charts.speedup_vs_exit(
        tables.curves(table, basis), closed, star,
        [{"exit_layer": exit_layer, "speedup": sel_p["speedup"], "label": sel_p["plan"]},
         {"exit_layer": exit_layer, "speedup": sel_e["speedup"], "label": sel_e["plan"]}], N, basis)
    st.plotly_chart(fig, key="chart_speedup")
    lo_col = basis.interval_columns[0]
    if not preview and lo_col in table.columns and table[lo_col].notna().any():
        st.caption("Shaded bands: 90% intervals for a run over 8 prompts like the profile's (how acceptance varies "
                   "from prompt to prompt, and the profile's latency spread; `ppsd plan --prompts-n`).")
    ar_rows = table.loc[~tables.speculative(table), basis.tokens_column]
    ar_tps = float(ar_rows.iloc[0]) if len(ar_rows) and ar_rows.iloc[0] == ar_rows.iloc[0] else None
    short = tables.short_label

    def tps_words(x: dict) -> str:
        one = f"; {x['one_thread']:.2f}× {basis.one_unit}" if basis.same_budget else ""
        return (theme.fmt_tps(x["tokens_per_s"]) if x["tokens_per_s"] else "") + one

    rows = st.columns(2), st.columns(2)
    top_left, top_right, low_left, low_right = (*rows[0], *rows[1])
    if star.get("exit_layer") is not None:
        top_left.metric(f"recommended: {star['label']}", theme.fmt_x(star["speedup"]), tps_words(star),
                        delta_color="off", delta_arrow="off",
                        help=f"The verdict of this setting: {verdict.text if verdict else reason}")
        top_right.metric(f"{basis.baseline} (the baseline)", theme.fmt_x(1.0), theme.fmt_tps(ar_tps),
                         delta_color="off", delta_arrow="off", help=theme.GLOSSARY["ar"])
    else:
        top_left.metric(f"recommended: plain {basis.baseline}", theme.fmt_x(1.0), theme.fmt_tps(ar_tps),
                        delta_color="off", delta_arrow="off",
                        help=f"The verdict of this setting: {verdict.text if verdict else reason}")
        close = star.get("closest")
        if close is not None:
            top_right.metric(f"closest: {close['label']}", theme.fmt_x(close["speedup"]), "slower than the baseline"
                             if close["speedup"] < 1.0 else "within the noise band", delta_color="off",
                             delta_arrow="off", help="The best speculative plan the verdict names; it does not beat "
                                                     f"{basis.baseline} by more than the noise band.")
    low_left.metric(f"selected: {short(sel_p['plan'])}", theme.fmt_x(sel_p["speedup"]), tps_words(sel_p),
                    delta_color="off", delta_arrow="off", help=theme.GLOSSARY["ppsd"])
    low_right.metric(f"selected: {short(sel_e['plan'])}", theme.fmt_x(sel_e["speedup"]), tps_words(sel_e),
                     delta_color="off", delta_arrow="off", help=theme.GLOSSARY["eesd"])
    spec_rows = [r for r in (sel_p, sel_e) if scheme(r["mode"]).speculative and "break_even_alpha" in r]
    if spec_rows:
        st.caption(f"Break-even acceptance against {basis.baseline}: " + "; ".join(_break_even_txt(r) for r in spec_rows)
                   + ".", help="Break-even: " + answer.GLOSSARY["break-even"] + " `ppsd plan` prints it for every plan.")
    if preview:
        st.caption(f":material/hourglass_top: Preview: {reason}.")
    else:
        st.caption(f"Simulator: the sweep of this setting ({head_label(head)} head, up to {devices} devices) says:")
        ui.show_verdict(verdict)

if STOPS:
    st.subheader("Confidence stop", help=theme.GLOSSARY["draft_stop"])
    with ui.guard("confidence stop"):
        points = [{"mode": m.name, "tau": t, **{k: v for k, v in pick(m, t).items() if k in ("plan", "speedup")}}
                  for m in (Mode.EESD, Mode.PPSD) for t in [None, *STOP_OPTIONS[1:]]
                  if t is None or stop_for(m, t) is not None]
        st.plotly_chart(charts.stop_curve(pd.DataFrame(points), basis), key="chart_stop")
        st.caption("The selected EESD and PPSD plans at every τ, priced from the confidences the profile traced "
                   "(dashed: the same plan without a stop). EESD stops a round's drafting after an unsure draft; "
                   "PPSD's stage 1 waits for the verdict on it instead of running it. `ppsd plan --draft-stops` "
                   "sweeps τ beside every plan.")

st.subheader("Where the selected PPSD plan spends a token", help=theme.GLOSSARY["stages"])
with ui.guard("stage breakdown"):
    label, parts = cached.stage_breakdown(path, stamp, Plan(Mode.PPSD, exit_layer=exit_layer, stages=stages, hop_ms=hop,
                                                            exit_head=head).to_dict())
    st.plotly_chart(charts.stage_times(parts, f"Per-stage time for one token, {label}"), key="chart_stages")
    st.caption("The slowest stage bounds the pipeline's rate while drafts are accepted; a rejection costs the "
               "whole pass plus the hops.")

st.subheader("Top plans")
st.dataframe(tables.top_plans(table, basis), hide_index=True, width="stretch", key="table_top",
             column_config=ui.plan_table_columns(basis))
st.caption(f"Ranked by the figure the verdict decides by: against {basis.baseline}"
           + (f", with the figure against {basis.one_unit} beside it" if basis.same_budget else "") + ".")

waiting = [head] if preview else []
# at T > 0 only the heads whose β the profile holds at T compare (`ppsd profile --temperatures` traces the shared one)
SAMPLED_HEADS = profile.sampled_meta.get("heads") if temp else None
COMPARED = [h for h in HEADS if SAMPLED_HEADS is None or h in SAMPLED_HEADS]
if len(COMPARED) > 1:
    st.subheader("Exit heads side by side", help="The best plan drafting with each exit head at these settings "
                 "(`ppsd plan` prints the same comparison).")
    comp, comp_basis = cached.heads_table(path, COMPARED, devices, hop_key, scale, temp, exact=False)
    waiting += [h for h, src in zip(comp["head"], comp["figures"]) if src != "simulated" and h != head]
    st.plotly_chart(charts.heads_bars(comp, comp_basis), key="chart_heads")
    st.dataframe(comp.drop(columns=["head"]), hide_index=True, width="stretch", key="table_heads",
                 column_config=ui.heads_table_columns(comp))

st.subheader("Under load: plans at a batch size")
with ui.guard("batch sizes"):
    batch.whatif_section(profile, path, stamp, f"pl_batch_{pk}")

# after the page is drawn: sweep this setting (when only previewed) and the settings one control
# step away in the background
cached.warm(path, HOP_OPTIONS, SCALE_OPTIONS, TEMP_OPTIONS, hop, scale, temp, devices, measured_hop, head, COMPARED)
if waiting:
    def _refresh():
        # rerun the page once the exact sweeps it previewed have landed in the cache
        if all(cached.ready(path, devices, hop_key, scale, temp, h) for h in waiting):
            st.rerun()

    st.fragment(_refresh, run_every=0.25)()
