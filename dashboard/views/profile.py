"""Profile page: what the profiler measured. Per-layer latency with p10–p90 whiskers at a chosen
n and context, head / embedding / hop costs beside a layer's, and acceptance versus exit layer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import streamlit as st

from dashboard import charts, data, estimates, heldout, theme, ui
from sim.planner.heads import head_label

profile = ui.require_profile()
ui.page_header("Profile", profile, "What one decoder layer, the head, the embedding and a hop cost on this "
               "device, and how often an early exit agrees with the full model.")

st.subheader("Latency")
c1, c2 = st.columns(2)
n_labels = [int(n) for n in profile.n_values]
ctx_labels = [int(c) for c in profile.context_values]
n = c1.select_slider("new tokens per step (n)", options=n_labels, value=n_labels[0], key="prof_n",
                     help="1 = one decode step; larger n = verifying several drafted tokens in one pass.")
ctx = c2.select_slider("context length (tokens in the KV cache)", options=ctx_labels, value=ctx_labels[0],
                       key="prof_ctx", help="Attention cost grows with the context already cached.")
ni, ci = n_labels.index(n), ctx_labels.index(ctx)
st.plotly_chart(charts.layer_latency(profile, ni, ci), key="chart_latency")

layer_med = float(np.median(profile.layers.median_ms[:, ni, ci]))
head = float(profile.head.median_ms[ni])
emb = float(profile.embedding.median_ms[ni])
full = float(profile.layers.median_ms[:, ni, ci].sum()) + head + emb
m = st.columns(5)
m[0].metric("median layer", theme.fmt_ms(layer_med), help="Median over layers of each layer's median time.")
m[1].metric("LM head", theme.fmt_ms(head), f"{head / layer_med:.1f} layers" if layer_med else None,
            delta_color="off", delta_arrow="off", help="The final norm + LM head. The exit head is the same norm + LM head, so "
            "every draft pays this too.")
m[2].metric("embedding", theme.fmt_ms(emb), delta_color="off", delta_arrow="off")
pipe = profile.pipeline
m[3].metric("hop", theme.fmt_ms(profile.hop_ms()),
            help=theme.GLOSSARY["hop"] + " One way." + f" Backend: {(profile.latency.get('hop') or {}).get('backend', '?')}."
            + (f" Measured into a waiting stage of a running 2-stage pipeline; an idle ping-pong gives "
               f"{theme.fmt_ms(profile.idle_hop_ms())}." if pipe.get("hop") else ""))
m[4].metric("full pass", theme.fmt_ms(full), f"{1000 / full:.1f} tokens/s" if full else None,
            delta_color="off", delta_arrow="off", help="The sum of all layers, head and embedding at this n and context: the AR "
            "step.")

corun = profile.latency.get("corun") or {}
if len(corun.get("processes") or []) > 1:
    st.caption("Slowdown when processes run at once (each stage's layer time with p processes working at the same "
               "time ÷ alone): "
               + ", ".join(f"p = {p}: {s:.2f}×" for p, s in zip(corun["processes"], corun["slowdown"])))
if pipe.get("slowdown"):
    st.caption(f"Pipeline probe (2 stages at {pipe.get('stage_bounds')}): a stage pass runs "
               f"{pipe['slowdown']:.3f}× its table price while the other stage works, the hop into a waiting "
               f"stage is {theme.fmt_ms(profile.hop_ms())} and a pass varies by ±{100 * profile.pass_jitter_cv():.1f}% "
               "(the simulator's restart rule averages over that jitter).")
whole = profile.latency.get("whole_step") or {}
if whole and whole.get("median_ms"):
    st.caption(f"Whole decode step measured at context {whole.get('context')}: {theme.fmt_ms(whole['median_ms'])}; "
               f"sum of parts {theme.fmt_ms(whole.get('sum_of_parts_ms'))} (ratio {whole.get('ratio', float('nan')):.2f}).")

st.subheader("Acceptance versus exit layer", help=theme.GLOSSARY["acceptance"])
if not profile.has_acceptance:
    st.info("This profile has no acceptance data (profiled with --skip-acceptance). Re-run `ppsd profile` "
            "without it to see α and β per exit layer.")
else:
    acc = profile.acceptance
    heads = sorted(acc["head"].unique())
    c1, c2 = st.columns(2)
    metric = c1.radio("measure", ["α (greedy match)", "β (sampling acceptance)"], horizontal=True, key="prof_metric",
                      help=theme.GLOSSARY["acceptance"])
    head_name = c2.selectbox("exit head", heads, key="prof_head", format_func=head_label,
                             help="'shared' = the model's own final norm + LM head; others are trained adapters.")
    acc = acc[acc["head"] == head_name]
    col = "match" if metric.startswith("α") else "beta"
    st.plotly_chart(charts.acceptance_curves(acc, col), key="chart_acceptance")
    table = acc.groupby(["category", "exit_layer"])[col].mean().unstack("exit_layer")
    with st.expander("per-category table"):
        st.dataframe(table.style.format("{:.2f}"), width="stretch")
    st.caption(f"{acc['prompt_id'].nunique()} prompts, {acc['category'].nunique()} categories, "
               f"{len(acc) // max(acc['exit_layer'].nunique(), 1)} positions per exit layer.")

# --- trained exit heads: the held-out table `ppsd heads eval` wrote for this model --------------
heldout_files = heldout.find_heldout((profile.meta.get("model") or {}).get("id"))
if heldout_files:
    st.subheader("Exit heads on held-out prompts", help=theme.GLOSSARY["exit_head"])
    with ui.guard("held-out head table"):
        f = heldout_files[0]
        df = heldout.load_heldout(f)
        c1, c2 = st.columns(2)
        hm = c1.radio("measure", ["α (greedy match)", "β (sampling acceptance)"], horizontal=True, key="ho_metric")
        cats = ["all", *sorted(c for c in df["category"].unique() if c != "all")]
        cat = c2.selectbox("category", cats, key="ho_cat", help="'all' = every held-out token; or one category.")
        col = "alpha" if hm.startswith("α") else "beta"
        table = heldout.pivot(df, col, cat)
        st.plotly_chart(charts.heldout_curves(table, hm.split(" ")[0]), key="chart_heldout")
        shown = table.rename(columns=head_label)
        st.dataframe(shown.style.format("{:.3f}"), width="stretch", key="table_heldout")
        with st.expander("per category, one head"):
            h = st.selectbox("exit head", list(table.columns), key="ho_head", format_func=head_label)
            st.dataframe(heldout.per_category(df, h, col).style.format("{:.3f}"), width="stretch")
        st.caption(f"From `{data.display_name(f.parent)}/{f.name}` (`ppsd heads eval`): prompts disjoint from the "
                   f"heads' training split; {int(df[df['category'] == 'all']['tokens'].max())} tokens per exit. "
                   "naive = the shared final norm + LM head; vocab<V> drafts only among the V most frequent tokens.")

# --- estimate next to measurement for the same model and device ---------------------------------
others = estimates.counterparts(profile.meta, ui.profile_metas())
if others:
    st.subheader("Estimate vs measurement", help="A roofline estimate (`ppsd profile --analytic`) and a profile "
                 "measured on the same device, side by side: how far the estimate is off.")
    with ui.guard("estimate vs measurement"):
        pick = st.selectbox("compare with", others, key="est_other", format_func=lambda p: data.display_name(Path(p)))
        other = ui.load(pick)
        meas, est = (profile, other) if estimates.kind(profile.meta) != "estimated" else (other, profile)
        table, s = estimates.compare(meas, est)
        m = st.columns(4)
        m[0].metric("AR measured, tokens/s", f"{s['ar_tokens_per_s'][0]:.1f}", help=theme.GLOSSARY["ar"])
        m[1].metric("AR estimated, tokens/s", f"{s['ar_tokens_per_s'][1]:.1f}", f"{s['ar_tokens_per_s'][2]:+.1f}%",
                    delta_color="off", delta_arrow="off", help="Relative error of the estimate against the measurement.")
        m[2].metric("per-layer error (MAPE)", theme.fmt_pct(s["layer_mape_pct"]))
        m[3].metric("head, estimated", theme.fmt_ms(s["head"][1]),
                    f"{s['head'][2]:+.1f}% vs {theme.fmt_ms(s['head'][0])} measured", delta_color="off",
                    delta_arrow="off")
        st.plotly_chart(charts.estimate_vs_measured(
            table, f"Per-layer latency, measured vs estimated (n = {s['n']}, context = {int(s['context'])})"),
            key="chart_estimate")
        with st.expander("per-layer table"):
            st.dataframe(table, hide_index=True, width="stretch", key="table_estimate",
                         column_config={"measured_ms": st.column_config.NumberColumn("measured (ms)", format="%.4f"),
                                        "estimated_ms": st.column_config.NumberColumn("estimated (ms)", format="%.4f"),
                                        "rel_err_pct": st.column_config.NumberColumn("error", format="%+.1f%%")})
        st.caption(f"Measured: {data.source_summary(meas.meta)['device']}, {data.display_name(Path(meas.path))}. "
                   f"Estimated: {data.display_name(Path(est.path))}. AR step = sum of the parts at n = 1; "
                   f"{theme.fmt_ms(s['step_ms'][0])} measured, {theme.fmt_ms(s['step_ms'][1])} estimated.")
