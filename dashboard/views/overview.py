"""Overview: the answer first. The recommended plan for the selected profile (same sweep and
defaults as `ppsd plan`), its predicted speedup, AR tokens/s, and why."""

from __future__ import annotations

import math

import streamlit as st

from dashboard import cached, charts, data, tables, theme, ui
from sim.heads import available_heads, head_label
from sim.modes import Mode
from sim.planning import acceptance_by_exit

profile = ui.require_profile()
path = ui.selected_path()
ui.page_header("Will self-speculative decoding pay off here?", profile,
               "Early-exit self-speculative decoding drafts tokens with the first E layers and checks them with the "
               "rest. This page says which exit layer and scheme decode fastest on the selected profile.")
facts = data.source_summary(profile.meta)
st.caption(f"Versions: {facts['versions'] or '–'}")

HEADS = available_heads(profile)
if len(HEADS) > 1:  # like `ppsd plan`: every exit head the profile has, the best plan over all of them
    best_head, best, reason = cached.best_over_heads(path, HEADS)
    table, _, _, closed = cached.sweep(path, exit_head=best_head)
else:
    best_head, (table, best, reason, closed) = HEADS[0], cached.sweep(path)
ar = table[table["mode"] == Mode.AR]
ar_tps = float(ar["tokens_per_s"].iloc[0]) if not ar.empty else None

m = st.columns(4)
m[0].metric("recommended plan", tables.short_label(best["plan"]),
            help="The fastest plan in the sweep (same as `ppsd plan`). " + theme.GLOSSARY["eesd"] + " "
            + theme.GLOSSARY["ppsd"])
m[1].metric("predicted speedup", theme.fmt_x(best["speedup"]), help=theme.GLOSSARY["speedup"])
m[2].metric("AR decoding", theme.fmt_tps(ar_tps), help=theme.GLOSSARY["ar"])
m[3].metric("with the recommended plan", theme.fmt_tps(best["tokens_per_s"]))
same = tables.same_budget_sentence(table)
if same is not None:  # the speedup that counts: against AR on every core / GPU the plan uses
    (st.warning if same[1] else st.info)(same[0], icon=":material/balance:")


def explain() -> str:
    """One paragraph: acceptance at the chosen exit against what a draft costs there."""
    n = profile.num_layers
    layers = [profile.layer_ms(l, 1) for l in range(n)]
    head, embed = profile.head_ms(1), profile.embed_ms(1)
    full = sum(layers) + head + embed
    draft_head = profile.exit_head_ms(best_head, 1)  # what a draft pays for its head
    if best["mode"] == Mode.AR or best.get("exit_layer") is None or (isinstance(best["exit_layer"], float)
                                                                    and math.isnan(best["exit_layer"])):
        spec = table[table["mode"] != Mode.AR].sort_values("speedup", ascending=False)
        if spec.empty:
            return f"Only plain decoding was simulated. {reason}"
        alt = spec.iloc[0]
        e = int(alt["exit_layer"])
        alpha = acceptance_by_exit(profile, head=best_head).get(e)
        draft = sum(layers[:e]) + draft_head + embed
        return (f"No speculative plan beats plain decoding on this profile; the closest is {alt['plan']} at "
                f"{theme.fmt_x(alt['speedup'])}. At exit layer {e} of {n} the draft matches the full model only "
                f"{'α = ' + format(alpha, '.2f') if alpha is not None else 'rarely'} of the time, while a draft costs "
                f"{theme.fmt_ms(draft)} ({draft / full:.0%} of a {theme.fmt_ms(full)} full pass; the exit head alone is "
                f"{theme.fmt_ms(head)}, as much as {head / (sum(layers) / n):.1f} layers). Every rejected draft is "
                f"paid for and thrown away, so speculation loses. Earlier exits are cheaper but agree even less. "
                f"A better exit head (try the acceptance scale on the What-if planner) is what would change this.")
    e = int(best["exit_layer"])
    alpha = acceptance_by_exit(profile, head=best_head).get(e)
    draft = sum(layers[:e]) + draft_head + embed
    a_txt = f"α = {alpha:.2f}" if alpha is not None else "the measured acceptance"
    text = (f"At exit layer {e} of {n}, the draft matches the full model's token at {a_txt} of positions. "
            f"A draft costs {theme.fmt_ms(draft)} ({draft / full:.0%} of a {theme.fmt_ms(full)} full pass, "
            f"of which the exit head ({head_label(best_head)}) is {theme.fmt_ms(draft_head)}). ")
    if best["mode"] == Mode.PPSD:
        text += (f"In a {int(best['stages'])}-stage pipeline (stages {best['stage_bounds']}) an accepted draft lets "
                 f"stage 1 start the next token while the later stages verify, so accepted tokens cost about one "
                 f"stage's time and a rejection costs a full pass plus the flush. ")
    elif best["mode"] == Mode.EESD:
        g = int(best["draft_len"])
        if alpha is not None and alpha < 1:
            per_round = (1 - alpha ** (g + 1)) / (1 - alpha)
            text += f"Drafting γ = {g} tokens per round commits about {per_round:.2f} tokens per verification. "
    return text + f"Simulator: {reason}"


st.subheader("Why")
with ui.guard("explanation"):
    st.write(explain())

if len(HEADS) > 1:
    st.subheader("Exit heads side by side", help=theme.GLOSSARY["exit_head"])
    comp = cached.head_comparison(path, HEADS)
    st.plotly_chart(charts.heads_bars(comp), key="chart_heads_overview")
    st.dataframe(comp.drop(columns=["head", "source"]), hide_index=True, width="stretch", key="table_heads_overview",
                 column_config=ui.heads_table_columns())
    st.caption(f"The recommendation drafts with the {head_label(best_head)} head; the chart below is that head's. "
               "Pick another head on the What-if planner.")

st.subheader("Speedup at every exit layer" + (f" ({head_label(best_head)} head)" if len(HEADS) > 1 else ""),
             help=theme.GLOSSARY["speedup"])
fig = charts.speedup_vs_exit(tables.curves(table), closed,
                             {"exit_layer": best["exit_layer"] if best["mode"] != Mode.AR else None,
                              "speedup": best["speedup"], "label": best["plan"]}, [], profile.num_layers)
st.plotly_chart(fig, key="chart_overview")
st.caption(f"Defaults: up to {cached.default_devices(path)} devices"
           + (" (this CPU's cores: a stage is a process that wants a core)" if profile.cpu_cores else "") + ", "
           f"measured hop {theme.fmt_ms(profile.hop_ms())}, "
           f"greedy decoding, {cached.DEFAULT_TOKENS} tokens. Change them on the What-if planner.")
c = st.columns(3)
c[0].page_link("views/planner.py", label="What-if planner", icon=":material/tune:")
c[1].page_link("views/profile.py", label="Evidence: the profile", icon=":material/timer:")
c[2].page_link("views/validation.py", label="Prediction vs measurement", icon=":material/fact_check:")
