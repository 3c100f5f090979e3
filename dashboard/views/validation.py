"""Validation page: how far the simulator's predictions were from real decoding, per plan.
Reads validation folders written by `ppsd validate`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import streamlit as st

from dashboard import charts, data, tables, theme, ui
from dashboard import batch as batch_view
from dashboard import hf as hf_view
from ppsd import validation_folder as vf

ui.page_header("Validation", None, "Predicted versus measured speedup for the same plans on the same machine.")

SERVING = dict(page="views/traffic.py", icon=":material/traffic:",
               label="Serving validations (ppsd validate --serve) are on the Under traffic page")
folders = data.find_validations()
if not folders:
    st.page_link(**SERVING)
    st.info("No validation results yet. Produce one with\n\n"
            "```\nppsd validate --profile examples/smollm2-135m-cpu --out runs/validate-smollm2\n```\n\n"
            "It decodes a few plans for real (AR, EESD, PPSD), compares with the simulator and writes "
            "`validation.json` into the folder; it then appears here. Folders are looked for under "
            + ", ".join(f"`{r}`" for r in data.data_roots()) + ".")
    st.stop()

# open on a real validation of the selected profile when there is one (data.validation_order)
profile_path = ui.selected_base_path()  # its validations, whatever acceptance prices it
profile_created = None
if profile_path is not None:
    with ui.guard("profile"):
        profile_created = ui.load(profile_path).meta.get("created")
ordered = data.validation_order(folders, profile_path, profile_created)
labels = {data.validation_label(i): i.path for i in ordered}
mine = [i for i in ordered if data.belongs_to(i, profile_path)]
# the picker's key carries the profile, so choosing another profile opens on that profile's runs
pk = hashlib.sha1(str(profile_path).encode()).hexdigest()[:8]
choice = st.selectbox("validation run", list(labels), index=0, key=f"val_choice_{pk}",
                      help="Folders holding validation.json under the data roots: the selected profile's real "
                           "validations first (newest first), then its emulated runs, then the others. Emulated "
                           "runs (`ppsd validate --emulate`) wait out the profile's times instead of decoding.")
if profile_path is not None and not any(not i.emulated for i in mine):
    st.caption(f"No real validation of `{data.display_name(Path(profile_path))}` was found; make one with "
               f"`ppsd validate --profile {data.display_name(Path(profile_path))} --out runs/NAME`.")
val = data.load_validation(Path(labels[choice]))
meta = val.meta
rows = val.rows
if meta.get("emulated"):
    st.warning("Emulated run (`ppsd validate --emulate`): the devices waited out the profile's times and only the "
               "control plane was real, so it checks the simulator's bookkeeping, not real decoding speed.",
               icon=":material/science:")

same_budget = bool(meta.get("mape_speedup_vs_ar_tp_pct") is not None and "measured_speedup_vs_ar_tp" in rows.columns
                   and rows["measured_speedup_vs_ar_tp"].notna().any())
budget = f"all {meta['budget']}" if meta.get("budget") else "every core"
m = st.columns(4)
m[0].metric("speedup error (MAPE)", theme.fmt_pct(meta.get("mape_speedup_pct")),
            f"tokens/s: {theme.fmt_pct(meta.get('mape_tokens_per_s_pct'))}", delta_color="off", delta_arrow="off",
            help=theme.GLOSSARY["mape"] + " Against AR on one thread; beneath it, the same for tokens/s.")
if same_budget:
    m[1].metric(f"error vs AR on {budget}", theme.fmt_pct(meta.get("mape_speedup_vs_ar_tp_pct")),
                help="The same error for the figure the verdict decides by: each plan against AR on every core "
                     "(same budget).")
else:
    m[1].metric("plans", len(rows))
cov = meta.get("coverage")
m[2].metric("90% intervals hold", "not computed" if cov is None else f"{cov:.0%}",
            None if cov is None else f"of {meta.get('coverage_plans')} plans", delta_color="off", delta_arrow="off",
            help="How many measured speedups fell inside their prediction's 90% interval.")
spec_rows = rows[tables.speculative(rows)] if "mode" in rows.columns else rows  # AR is the reference itself
judged = spec_rows[spec_rows["outputs_match_ar"].notna()] if "outputs_match_ar" in rows.columns else spec_rows[:0]
if len(judged):
    ok = int(judged["outputs_match_ar"].astype(bool).sum())
    m[3].metric("same output as AR", f"{ok} / {len(judged)}",
                help="Greedy EESD and PPSD must write exactly the AR tokens (lossless). Plans with forced acceptance "
                     "commit the drafts they are told to and are not counted.")
else:
    sampled = meta.get("temperature") not in (None, 0, 0.0)
    m[3].metric("same output as AR", "not judged",
                "sampled: a distribution test" if sampled else "forced drafts only", delta_color="off",
                delta_arrow="off",
                help="Sampled decoding differs from AR token by token by design; its losslessness is checked as a "
                     "distribution (tests/test_runtime_lossless.py). Plans with forced acceptance commit the drafts "
                     "they are told to.")
st.caption(f"Model {meta.get('model', '?')} · device {meta.get('device_name', '?')} · "
           f"created {str(meta.get('created', '?'))[:19]} · profile `{meta.get('profile', '?')}`")
hf_view.render(st, Path(labels[choice]), meta)  # transformers' assisted generation
if meta.get("predicted_from") is not None:
    sample = ("**out of sample**: the predicting prompts and the measured ones are disjoint"
              if meta.get("out_of_sample") else
              f"**in sample**: {len(meta.get('overlapping_prompt_ids') or [])} measured prompts are among the "
              "predicting ones")
    st.markdown(f"Predicted from `{meta['predicted_from']}` ({len(meta.get('prediction_prompt_ids') or [])} prompts' "
                f"acceptance) for {len(meta.get('measured_prompt_ids') or [])} measured prompts "
                f"({meta.get('measured_prompts', '?')}): {sample}.")
figure = "one thread"
if same_budget:
    figure = st.radio("speedups against", [f"AR on {budget}", "AR on one thread"], horizontal=True,
                      key="val_figure", help="AR on every core is the baseline the verdict decides by (same budget); "
                                             "AR on one thread is the timing model's own figure.")
st.plotly_chart(charts.predicted_vs_measured(tables.same_budget_rows(rows) if figure.endswith(budget) else rows,
                                             "AR on " + (budget if figure.endswith(budget) else "one thread")),
                key="chart_validation")

st.subheader("Per-plan error")
view, formats = tables.validation_view(rows)
st.dataframe(tables.worded(view, formats), hide_index=True, width="stretch", key="table_validation")
st.caption("Each plan's speedup is its measured tokens/s over AR's, measured right around it on the same prompts; "
           "the error is predicted against measured. " + theme.GLOSSARY["mape"])


st.subheader("How the predictions were made and checked")
if meta.get("coverage") is not None:
    iv_meta = meta.get("interval") or {}
    n_iv, noise = iv_meta.get("prompts_n"), iv_meta.get("measurement_cv")
    noise_txt = f", and the measurement's own noise ({noise:.1%}, from the AR runs around the plans)" if noise else ""
    width = meta.get("interval_half_width_median_pct")
    shift_txt = f", a shift of the whole set's acceptance ({iv_meta['shift']})" if iv_meta.get("shift") else ""
    st.markdown(f"90% intervals (sized for {n_iv} prompts: prompt-to-prompt acceptance{shift_txt}, the profile's "
                f"latency spread{noise_txt}) hold **{meta['coverage']:.0%}** of {meta.get('coverage_plans')} measured "
                "speedups" + (f" with a median half-width of **±{width:.1f}%**" if width is not None else "")
                + "; the bands in the chart are those intervals.")

for line, flagged in tables.drift_words(meta):  # the machine's state then and now
    (st.warning if flagged else st.caption)(line)

retime = meta.get("retime") or {}
if retime.get("mape_speedup_profile_pct") is not None:  # `ppsd validate --retime`
    st.markdown("Each plan is priced with the pieces of a decode step **timed right before it ran** (layers, LM "
                "head, embedding, exit heads; acceptance still from the predicting profile alone). Priced from the "
                f"profile's own latency instead, the speedup error (MAPE) is **{theme.fmt_pct(retime['mape_speedup_profile_pct'])}**"
                f" (worst {theme.fmt_pct(retime.get('worst_error_profile_pct'))}): the difference is the machine "
                "drifting since the profile.")

noise = meta.get("measurement_noise") or {}
if noise.get("plans"):
    st.markdown(f"Measured in **{meta.get('rounds')} rounds** (every plan once a round, in alternating order, each "
                f"against the AR runs around it; a plan shows its median round): speedups moved "
                f"{theme.fmt_pct(noise.get('median_round_spread_pct'))} from round to round (median), and that noise "
                f"alone would give an error (MAPE) of **{theme.fmt_pct(noise.get('noise_floor_mape_pct'))}**: errors near it "
                "are all this run can resolve.")

breakdown = tables.breakdown_view(meta)
if len(breakdown):
    st.dataframe(breakdown, hide_index=True, width="stretch", key="table_breakdown",
                 column_config={"speedup error (MAPE)": st.column_config.NumberColumn(format="%.1f%%"),
                                "worst error": st.column_config.NumberColumn(format="%.1f%%")})

st.subheader("Under load: batched validations")
with ui.guard("batched validation"):
    batch_view.validation_section()
st.page_link(**SERVING)
