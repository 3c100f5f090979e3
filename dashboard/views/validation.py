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

folders = data.find_validations()
if not folders:
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

m = st.columns(4)
m[0].metric("MAPE, speedup", theme.fmt_pct(meta.get("mape_speedup_pct")), help=theme.GLOSSARY["mape"])
m[1].metric("MAPE, tokens/s", theme.fmt_pct(meta.get("mape_tokens_per_s_pct")),
            help="Mean absolute percentage error of predicted against measured tokens/s.")
m[2].metric("plans", len(rows))
if "outputs_match_ar" in rows.columns:
    spec = rows[tables.speculative(rows)] if "mode" in rows.columns else rows  # AR is the reference itself
    judged = spec[spec["outputs_match_ar"].notna()]  # forced-acceptance and sampled runs are not judged
    ok = int(judged["outputs_match_ar"].astype(bool).sum())
    m[3].metric("outputs identical to AR", f"{ok} / {len(judged)}",
                help="Greedy EESD and PPSD must produce exactly the AR tokens (lossless). Plans with forced "
                     "acceptance commit the drafts they are told to, and sampled runs differ by construction: "
                     "neither is counted.")
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

for key, what in (("machine_drift", "AR against the profile's price"),
                  ("corun_drift", "two co-running processes against the profile's co-run slowdown")):
    drift = meta.get(key) or {}
    if drift.get("note"):  # the machine's state then and now: a flagged drift makes PPSD figures stale
        (st.warning if drift.get("flagged") else st.caption)(f"Machine drift ({what}): {drift['note']}.")

retime = meta.get("retime") or {}
if retime.get("mape_speedup_profile_pct") is not None:  # `ppsd validate --retime`
    st.markdown("Each plan is priced with the pieces of a decode step **timed right before it ran** (layers, LM "
                "head, embedding, exit heads; acceptance still from the predicting profile alone). Priced from the "
                f"profile's own latency instead, the speedup MAPE is **{theme.fmt_pct(retime['mape_speedup_profile_pct'])}**"
                f" (worst {theme.fmt_pct(retime.get('worst_error_profile_pct'))}): the difference is the machine "
                "drifting since the profile.")

noise = meta.get("measurement_noise") or {}
if noise.get("plans"):
    st.markdown(f"Measured in **{meta.get('rounds')} rounds** (every plan once a round, in alternating order, each "
                f"against the AR runs around it; a plan shows its median round): speedups moved "
                f"{theme.fmt_pct(noise.get('median_round_spread_pct'))} from round to round (median), and that noise "
                f"alone would give a MAPE of **{theme.fmt_pct(noise.get('noise_floor_mape_pct'))}**: errors near it "
                "are all this run can resolve.")
    if "measured_speedup_rounds" in rows.columns:
        rows = rows.assign(measured_speedup_rounds=[
            " / ".join(f"{x:.2f}" for x in v) if isinstance(v, list) else None for v in rows["measured_speedup_rounds"]])

breakdown = meta.get("breakdown") or {}
if breakdown:
    titles = vf.breakdown_titles(meta)
    parts = {k: titles[k] for k in ("real_acceptance", "forced", "paying", "in_sample")}
    cols = st.columns(len(parts))
    for col, (key, title) in zip(cols, parts.items()):
        part = breakdown.get(key) or {}
        col.metric(f"MAPE, {title}", theme.fmt_pct(part.get("mape_speedup_pct")) if part.get("plans") else "–",
                   help=f"{part.get('plans', 0)} plans; worst {theme.fmt_pct(part.get('worst_error_pct'))}.")

st.plotly_chart(charts.predicted_vs_measured(rows), key="chart_validation")

st.subheader("Per-plan error")
show = [c for c in vf.CSV_COLUMNS + ["predicted_speedup_lo", "predicted_speedup_hi", "forced_alpha",
                                     "predicted_speedup_in_sample", "speedup_error_in_sample_pct",
                                     "predicted_speedup_profile", "speedup_error_profile_pct",
                                     "measured_speedup_rounds"]
        if c in rows.columns and (c in vf.CSV_COLUMNS or rows[c].notna().any())]
st.dataframe(
    rows[show], hide_index=True, width="stretch",
    column_config={
        "predicted_tokens_per_s": st.column_config.NumberColumn("predicted tokens/s", format="%.1f"),
        "measured_tokens_per_s": st.column_config.NumberColumn("measured tokens/s", format="%.1f"),
        "measured_tokens_per_s_p10": st.column_config.NumberColumn("measured p10 tokens/s", format="%.1f"),
        "measured_tokens_per_s_p90": st.column_config.NumberColumn("measured p90 tokens/s", format="%.1f"),
        "predicted_speedup": st.column_config.NumberColumn("predicted ×", format="%.2f×"),
        "predicted_speedup_lo": st.column_config.NumberColumn("predicted 5%", format="%.2f×",
                                                              help="Lower end of the prediction's 90% interval."),
        "predicted_speedup_hi": st.column_config.NumberColumn("predicted 95%", format="%.2f×",
                                                              help="Upper end of the prediction's 90% interval."),
        "measured_speedup": st.column_config.NumberColumn("measured ×", format="%.2f×"),
        "forced_alpha": st.column_config.NumberColumn("forced α", format="%.2f",
                                                      help="Acceptance forced to seeded Bernoulli(α) in the run and "
                                                           "the prediction alike: a timing check."),
        "predicted_speedup_in_sample": st.column_config.NumberColumn(
            "predicted in sample ×", format="%.2f×", help="What the in-sample prediction (the measured prompts' own "
            "acceptance traces) said for the same run, beside the out-of-sample prediction."),
        "speedup_error_in_sample_pct": st.column_config.NumberColumn("in-sample error", format="%.1f%%"),
        "predicted_speedup_profile": st.column_config.NumberColumn(
            "predicted, profile's prices ×", format="%.2f×", help="`ppsd validate --retime`: the prediction priced "
            "from the profile's latency, beside the row's, priced with the pieces timed right before the plan ran."),
        "speedup_error_profile_pct": st.column_config.NumberColumn("error, profile's prices", format="%.1f%%"),
        "measured_speedup_rounds": st.column_config.TextColumn(
            "measured × per round", help="`ppsd validate --rounds`: the speedup of each round, each against "
            "its own AR runs; the row shows the median round."),
        "speedup_error_pct": st.column_config.NumberColumn("speedup error", format="%.1f%%"),
        "tokens_per_s_error_pct": st.column_config.NumberColumn("tokens/s error", format="%.1f%%"),
        "ar_reference_tokens_per_s": st.column_config.NumberColumn(
            "AR reference tokens/s", format="%.1f", help="The AR tokens/s this plan's measured speedup is "
            "taken against (bracketed: the mean of the AR runs right before and after the plan)."),
    },
)

st.subheader("Under load: batched validations")
with ui.guard("batched validation"):
    batch_view.validation_section()
