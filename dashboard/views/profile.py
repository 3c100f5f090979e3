"""Profile page: what the profiler measured. Per-layer latency with p10–p90 whiskers at a chosen
n and context, head / embedding / hop costs beside a layer's, and acceptance versus exit layer."""

from __future__ import annotations

import numpy as np
import streamlit as st

from dashboard import charts, theme, ui

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
m[1].metric("head (norm + LM head)", theme.fmt_ms(head), f"{head / layer_med:.1f} layers" if layer_med else None,
            delta_color="off", delta_arrow="off", help="The exit head is the same norm + LM head, so every draft pays this too.")
m[2].metric("embedding", theme.fmt_ms(emb), delta_color="off", delta_arrow="off")
m[3].metric("hop (one way)", theme.fmt_ms(profile.hop_ms()),
            help=theme.GLOSSARY["hop"] + f" Backend: {(profile.latency.get('hop') or {}).get('backend', '?')}.")
m[4].metric("full pass (sum of parts)", theme.fmt_ms(full), f"{1000 / full:.1f} tokens/s" if full else None,
            delta_color="off", delta_arrow="off", help="Sum of all layers, head and embedding at this n and context: the AR step.")

corun = profile.latency.get("corun") or {}
if len(corun.get("processes") or []) > 1:
    st.caption("Co-run slowdown (each stage's layer time when p processes work at once ÷ alone): "
               + ", ".join(f"p = {p}: {s:.2f}×" for p, s in zip(corun["processes"], corun["slowdown"])))
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
    head_name = c2.selectbox("exit head", heads, key="prof_head",
                             help="'shared' = the model's own final norm + LM head; others are trained adapters.")
    acc = acc[acc["head"] == head_name]
    col = "match" if metric.startswith("α") else "beta"
    st.plotly_chart(charts.acceptance_curves(acc, col), key="chart_acceptance")
    table = acc.groupby(["category", "exit_layer"])[col].mean().unstack("exit_layer")
    with st.expander("per-category table"):
        st.dataframe(table.style.format("{:.2f}"), width="stretch")
    st.caption(f"{acc['prompt_id'].nunique()} prompts, {acc['category'].nunique()} categories, "
               f"{len(acc) // max(acc['exit_layer'].nunique(), 1)} positions per exit layer.")
