"""Overview: the answer first. What to run, how much faster, against what: the verdict on the selected
profile (the same sweeps, defaults and function as `ppsd plan`: sim/planner/verdict.py), its figure against
the verdict's baseline with the one-thread figure beside it, the pictures in that figure, and why."""

from __future__ import annotations

import streamlit as st

from dashboard import answer, batch, cached, charts, tables, theme, ui
from sim.planner.draft_cost import draft_cost
from sim.planner.heads import available_heads, head_label
from sim.planner.verdict import plan_alpha

profile = ui.require_profile()
path = ui.selected_path()
ui.page_header("Will self-speculative decoding pay off here?", profile,
               "Self-speculative decoding drafts tokens with the model's first E layers and checks them with the "
               "rest; this page says what to run on the selected profile.")

HEADS = available_heads(profile)
# like `ppsd plan`: every exit head the profile has, one verdict over all of them (sim/planner/verdict.py)
verdict = cached.verdict(path, HEADS)
basis = answer.basis(verdict)
rec, spec = verdict.recommended, verdict.best_speculative
# the head whose curves the page draws: the recommendation's, else the best speculative plan's
chart_head = (spec.plan.exit_head if spec is not None and not rec.plan.mode.speculative else verdict.head) or HEADS[0]
table, _, _, closed = cached.sweep(path, exit_head=chart_head)

# --- the first screen: what to run, how much faster, against what -----------------------------
st.markdown("#### " + answer.headline(verdict))
ui.verdict_metrics(verdict)
ui.show_verdict(verdict)


def explain() -> str:
    """One paragraph: acceptance at the plan's exit against what a draft costs there (the schemes' own
    prices: sim/planner/draft_cost.py), and how the plan's scheme turns acceptance into speed."""
    if spec is None:
        return f"No usable speculative plan was simulated. {verdict.text}"
    e, h = spec.plan.exit_layer, spec.plan.exit_head
    alpha = plan_alpha(spec)  # the α the verdict quotes for this plan: one α per plan
    cost = draft_cost(profile, e, h)
    a_txt = f"{alpha:.0%} of positions (acceptance α = {alpha:.2f})" if alpha is not None else "the measured rate"
    text = (f"At exit layer {e} of {profile.num_layers} the draft ({head_label(h)} head) matches the full model's "
            f"token at {a_txt}, and a draft costs {theme.fmt_ms(cost.draft_ms)} ({cost.share:.0%} of a "
            f"{theme.fmt_ms(cost.full_ms)} full pass, of which the exit head is {theme.fmt_ms(cost.head_ms)}). ")
    if alpha is not None:
        text += spec.plan.scheme.how_it_pays(spec.plan, alpha)
    if rec.plan.mode.speculative:
        return text + f"That makes {tables.short_label(spec.plan.label())} the plan to run here."
    return (text + f"Even so, {tables.short_label(spec.plan.label())} does not beat {verdict.baseline} by more than the "
            f"noise band: every draft that does not match is paid for and thrown away"
            + (", and a second core speeds plain decoding up as well" if verdict.same_budget else "")
            + ". A better exit head (try the acceptance scale on the What-if planner) is what would change this.")


st.subheader("Speedup at every exit layer" + (f" ({head_label(chart_head)} head)" if len(HEADS) > 1 else ""),
             help=theme.GLOSSARY["speedup"])
fig = charts.speedup_vs_exit(tables.curves(table, basis), closed, answer.marker(verdict, chart_head), [],
                             profile.num_layers, basis)
st.plotly_chart(fig, key="chart_overview")
st.caption(f"Every plan against {basis.baseline}, the figure the verdict decides by"
           + (f" (hover for the figure against {basis.one_unit})" if basis.same_budget else "") + ". "
           f"Defaults: up to {cached.default_devices(path)} devices"
           + (" (this CPU's cores: a stage is a process that wants a core)" if profile.cpu_cores else "") + ", "
           f"measured hop {theme.fmt_ms(profile.hop_ms())}, "
           f"greedy decoding, {cached.DEFAULT_TOKENS} tokens. Change them on the What-if planner.")

st.subheader("Why")
with ui.guard("explanation"):
    st.write(explain())

if len(HEADS) > 1:
    st.subheader("Exit heads side by side", help=theme.GLOSSARY["exit_head"])
    comp, comp_basis = cached.heads_table(path, HEADS)
    st.plotly_chart(charts.heads_bars(comp, comp_basis), key="chart_heads_overview")
    st.dataframe(comp.drop(columns=["head", "figures"]), hide_index=True, width="stretch", key="table_heads_overview",
                 column_config=ui.heads_table_columns(comp))
    st.caption(f"The exit-layer chart above is the {head_label(chart_head)} head's (the verdict's "
               + ("recommended" if rec.plan.mode.speculative else "closest speculative") + " plan drafts with it). "
               "Pick another head on the What-if planner.")

st.subheader("Under load: up to which batch size?")
with ui.guard("batch sizes"):
    batch.overview_section(profile, path, cached.mtime(path), verdict)

c = st.columns(3)
c[0].page_link("views/planner.py", label="What-if planner", icon=":material/tune:")
c[1].page_link("views/profile.py", label="Evidence: the profile", icon=":material/timer:")
c[2].page_link("views/validation.py", label="Prediction vs measurement", icon=":material/fact_check:")
