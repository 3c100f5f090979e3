"""Overview: the answer first. The verdict on the selected profile (the same sweeps, defaults and
function as `ppsd plan`: sim/planner/verdict.py), its figures against AR on one thread and on the whole
budget, AR tokens/s, and why."""

from __future__ import annotations

import streamlit as st

from dashboard import batch, cached, charts, data, tables, theme, ui
from sim.planner.heads import available_heads, head_label
from sim.planner.closed_forms import acceptance_by_exit
from sim.planner.draft_cost import draft_cost

profile = ui.require_profile()
path = ui.selected_path()
ui.page_header("Will self-speculative decoding pay off here?", profile,
               "Early-exit self-speculative decoding drafts tokens with the first E layers and checks them with the "
               "rest. This page says which exit layer and scheme decode fastest on the selected profile.")
facts = data.source_summary(profile.meta)
st.caption(f"Versions: {facts['versions'] or '–'}")

HEADS = available_heads(profile)
# like `ppsd plan`: every exit head the profile has, one verdict over all of them (sim/planner/verdict.py)
verdict = cached.verdict(path, HEADS)
rec, spec = verdict.recommended, verdict.best_speculative
# the head whose curves the page draws: the recommendation's, else the best speculative plan's
chart_head = (spec.plan.exit_head if spec is not None and not rec.plan.mode.speculative else verdict.head) or HEADS[0]
table, _, _, closed = cached.sweep(path, exit_head=chart_head)
ar_tps = verdict.ar.tokens_per_s if verdict.ar is not None else None

m = st.columns(6 if verdict.same_budget else 5)
m[0].metric("recommended plan", tables.short_label(rec.plan.label()),
            help="The verdict of `ppsd plan` on this profile (the same function, sim/planner/verdict.py). "
            + theme.GLOSSARY["eesd"] + " " + theme.GLOSSARY["ppsd"])
m[1].metric("predicted speedup (vs AR, one thread)", theme.fmt_x(rec.speedup_vs_ar), help=theme.GLOSSARY["speedup"])
if verdict.same_budget:
    m[2].metric(f"vs AR on all {verdict.budget}", theme.fmt_x(rec.speedup_vs_ar_tp),
                help="Same budget: the plan using every core / GPU against AR using all of them (sim/model/budget.py).")
m[-3].metric("AR decoding", theme.fmt_tps(ar_tps), help=theme.GLOSSARY["ar"])
rec_tps = rec.details.budget_tokens_per_s if verdict.same_budget else rec.tokens_per_s
m[-1].metric("with the recommended plan" + (f" (all {verdict.budget})" if verdict.same_budget else ""),
             theme.fmt_tps(rec_tps))
ui.break_even_metric(m[-2], verdict)
ui.show_verdict(verdict)


def explain() -> str:
    """One paragraph: acceptance at the plan's exit against what a draft costs there (the schemes' own
    prices: sim/planner/draft_cost.py), and how the plan's scheme turns acceptance into speed."""
    if spec is None:
        return f"No usable speculative plan was simulated. {verdict.text}"
    e, h = spec.plan.exit_layer, spec.plan.exit_head
    alpha = acceptance_by_exit(profile, head=h).get(e)
    cost = draft_cost(profile, e, h)
    a_txt = f"α = {alpha:.2f}" if alpha is not None else "the measured acceptance"
    text = (f"At exit layer {e} of {profile.num_layers} the draft ({head_label(h)} head) matches the full model's "
            f"token at {a_txt} of positions, and a draft costs {theme.fmt_ms(cost.draft_ms)} ({cost.share:.0%} of a "
            f"{theme.fmt_ms(cost.full_ms)} full pass, of which the exit head is {theme.fmt_ms(cost.head_ms)}). ")
    if alpha is not None:
        text += spec.plan.scheme.how_it_pays(spec.plan, alpha)
    if rec.plan.mode.speculative:
        return text + f"That makes {tables.short_label(spec.plan.label())} the plan to run here."
    return (text + f"Even so, {tables.short_label(spec.plan.label())} does not beat {verdict.baseline} by more than the "
            f"noise band: every rejected draft is paid for and thrown away"
            + (", and a second core speeds plain decoding up as well" if verdict.same_budget else "")
            + ". A better exit head (try the acceptance scale on the What-if planner) is what would change this.")


st.subheader("Why")
with ui.guard("explanation"):
    st.write(explain())

if len(HEADS) > 1:
    st.subheader("Exit heads side by side", help=theme.GLOSSARY["exit_head"])
    comp = cached.head_comparison(path, HEADS)
    st.plotly_chart(charts.heads_bars(comp), key="chart_heads_overview")
    st.dataframe(comp.drop(columns=["head", "source"]), hide_index=True, width="stretch", key="table_heads_overview",
                 column_config=ui.heads_table_columns())
    st.caption(f"The chart below is the {head_label(chart_head)} head's (the verdict's best speculative plan "
               "drafts with it). Pick another head on the What-if planner.")

st.subheader("Under load: up to which batch size?")
with ui.guard("batch sizes"):
    batch.overview_section(profile, path, cached.mtime(path))

st.subheader("Speedup at every exit layer" + (f" ({head_label(chart_head)} head)" if len(HEADS) > 1 else ""),
             help=theme.GLOSSARY["speedup"])
def _point(r) -> dict | None:
    # a plan on this chart (its head's curves), at its one-thread speedup like the curves
    if r is None or not r.plan.mode.speculative or r.plan.exit_head != chart_head:
        return None
    return {"exit_layer": r.plan.exit_layer, "speedup": r.speedup_vs_ar, "label": tables.short_label(r.plan.label())}


star = _point(rec) or {"exit_layer": None, "speedup": 1.0, "label": "AR", "closest": _point(spec),
                       "note": f"recommended: plain {verdict.baseline} ({verdict.outcome.value})"}
fig = charts.speedup_vs_exit(tables.curves(table), closed, star, [], profile.num_layers)
st.plotly_chart(fig, key="chart_overview")
st.caption(f"Defaults: up to {cached.default_devices(path)} devices"
           + (" (this CPU's cores: a stage is a process that wants a core)" if profile.cpu_cores else "") + ", "
           f"measured hop {theme.fmt_ms(profile.hop_ms())}, "
           f"greedy decoding, {cached.DEFAULT_TOKENS} tokens. Change them on the What-if planner.")
c = st.columns(3)
c[0].page_link("views/planner.py", label="What-if planner", icon=":material/tune:")
c[1].page_link("views/profile.py", label="Evidence: the profile", icon=":material/timer:")
c[2].page_link("views/validation.py", label="Prediction vs measurement", icon=":material/fact_check:")
