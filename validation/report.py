"""What `ppsd validate` prints after the run: the table of rows and the summary lines under it
(`--json` prints the document instead). Reads only the validation document."""

from __future__ import annotations

from ppsd import validation_folder as vf


def report_lines(doc: dict, folder, predict_from: str | None) -> list[str]:
    """The table and every summary line the document has, in order; `folder` is where it was written."""
    lines = [format_table(doc["rows"])]
    if doc.get("mape_speedup_vs_ar_tp_pct") is not None:
        lines.append(f"same budget ({doc['budget']}): MAPE of the speedup against AR on all of them "
                     f"{doc['mape_speedup_vs_ar_tp_pct']:.1f}%")
        ref = doc.get("budget_reference")
        if ref and ref.get("ar_thread_gain") is not None:
            priced = ref.get("ar_thread_gain_priced")
            lines.append(f"  on every core = on one thread x the run's thread gain; AR's {ref['ar_thread_gain']:.2f}x "
                         f"(median of {len(ref['ar_thread_ratios'])} chunks"
                         + (f"; the profile prices {priced:.2f}x" if priced else "") + ")"
                         + (f"; against each group's own AR turns instead: "
                            f"{ref['mape_speedup_vs_ar_tp_beside_pct']:.1f}%"
                            if ref.get("mape_speedup_vs_ar_tp_beside_pct") is not None else ""))
    if doc.get("emulated"):
        lines.append(f"emulated devices: waits of {doc['profile']}'s times; predicted from "
                     f"{predict_from or 'the same profile'}")
    if doc.get("predicted_from"):
        lines.append(_sources_line(doc))
    lines += breakdown_lines(doc)
    if doc.get("coverage") is not None:
        width = doc.get("interval_half_width_median_pct")
        lines.append(f"90% intervals (for {doc['interval']['prompts_n']} prompts) cover "
                     f"{doc['coverage']:.0%} of {doc['coverage_plans']} measured speedups"
                     + (f", median half-width ±{width:.1f}%" if width is not None else "")
                     + (f"; {doc['interval']['shift']}" if doc['interval'].get('shift') else ""))
    if doc.get("temperature"):
        lines.append(format_sampled(doc))
    lines += _retime_and_noise_lines(doc)
    lines.append(f"MAPE speedup {doc['mape_speedup_pct']:.1f}% over {len(doc['rows']) - 1} speculative plans; "
                 f"tokens/s {doc['mape_tokens_per_s_pct']:.1f}%  -> {folder}")
    return lines


def _sources_line(doc: dict) -> str:
    return (f"predicted from {doc['predicted_from']} on {len(doc['prediction_prompt_ids'])} prompts, measured "
            f"{len(doc['measured_prompt_ids'])} prompts ({doc['measured_prompts']}): "
            + ("out of sample (disjoint prompt sets)" if doc["out_of_sample"] else
               f"in sample ({len(doc['overlapping_prompt_ids'])} measured prompts among the predicting ones)"))


def _retime_and_noise_lines(doc: dict) -> list[str]:
    out = []
    retimed = doc.get("retime") or {}
    if retimed.get("mape_speedup_profile_pct") is not None:
        out.append(f"priced with the pieces timed before each plan (--retime); priced from the profile alone the "
                   f"speedup MAPE is {retimed['mape_speedup_profile_pct']:.1f}% (worst "
                   f"{retimed['worst_error_profile_pct']:.1f}%)")
    noise = doc.get("measurement_noise") or {}
    if noise.get("plans"):
        out.append(f"measured in {doc['rounds']} rounds: speedups {noise['median_round_spread_pct']:.1f}% apart from "
                   f"round to round (median); their noise alone would give a MAPE of {noise['noise_floor_mape_pct']:.1f}%")
    return out


def drift_warnings(doc: dict) -> list[str]:
    """The machine's and the co-run's drift from the profile, when flagged, and each plan whose measured
    run caught a host stall (printed on stderr)."""
    out = [f"warning: {doc[key]['note']}" for key in ("machine_drift", "corun_drift")
           if (doc.get(key) or {}).get("flagged")]
    for r in doc.get("rows", []):
        if r.get("host_stall_s"):
            out.append(f"warning: {r['plan']} caught a host stall: one pass took {r['longest_pass_s']:.2f} s, "
                       f"{r['host_stall_s']:.2f} s beyond {vf.STALL_FACTOR:g}× its kind's median in all; its "
                       "measured speedup is low by it (measure it again, or read it with --rounds 3)")
    return out


def breakdown_lines(doc: dict) -> list[str]:
    """The MAPE of parts of the plans (validation_folder._breakdown), one line each, when recorded."""
    b = doc.get("breakdown") or {}
    out = []
    for key, title in vf.breakdown_titles(doc).items():
        part = b.get(key) or {}
        if part.get("plans"):
            out.append(f"{title}: speedup MAPE {part['mape_speedup_pct']:.1f}% "
                       f"over {part['plans']} plans (worst {part['worst_error_pct']:.1f}%)")
    return out


def format_table(rows: list[dict]) -> str:
    """The rows as a fixed-width table: predicted and measured tokens/s and speedup, the interval,
    the error, the same-budget speedups when any row has them, and whether outputs matched AR's."""
    same = any(r.get("measured_speedup_vs_ar_tp") is not None for r in rows)
    extra = f" {'pred ×TP':>8} {'meas ×TP':>8}" if same else ""
    head = (f"{'plan':28} {'pred tok/s':>10} {'meas tok/s':>10} {'pred ×':>7} {'pred 90%':>13} {'meas ×':>7} "
            f"{'err %':>7}{extra}  match")
    lines = [head, "-" * len(head)]
    fmt = lambda v: f"{v:8.3f}" if v is not None else f"{'-':>8}"  # noqa: E731
    for r in rows:
        tp = f" {fmt(r.get('predicted_speedup_vs_ar_tp'))} {fmt(r.get('measured_speedup_vs_ar_tp'))}" if same else ""
        lo, hi = r.get("predicted_speedup_lo"), r.get("predicted_speedup_hi")
        band = f"{lo:.3f}–{hi:.3f}" if lo is not None and hi is not None else "-"
        lines.append(f"{r['plan']:28} {r['predicted_tokens_per_s']:10.2f} {r['measured_tokens_per_s']:10.2f} "
                     f"{r['predicted_speedup']:7.3f} {band:>13} {r['measured_speedup']:7.3f} "
                     f"{r['speedup_error_pct']:7.1f}{tp}  "
                     f"{'' if r['outputs_match_ar'] is None else r['outputs_match_ar']}")
    return "\n".join(lines)


def format_sampled(doc: dict) -> str:
    """The acceptance and spread lines printed under the table."""
    lines = [f"sampled at T={doc['temperature']:g} over seeds {doc['seeds']} (beta along "
             f"{doc.get('beta_trajectory', '?')} trajectories)"]
    for r in doc["rows"]:
        if r.get("measured_speedup_seeds"):
            lines.append(f"  {r['plan']:26} speedup over seeds {min(r['measured_speedup_seeds']):.3f}.."
                         f"{max(r['measured_speedup_seeds']):.3f}; acceptance predicted "
                         f"{_f(r.get('predicted_acceptance_rate'))} measured {_f(r.get('measured_acceptance_rate'))}")
    if doc.get("acceptance_error_max_abs") is not None:
        lines.append(f"acceptance-rate error: mean {doc['acceptance_error_mean_abs']:.3f}, "
                     f"max {doc['acceptance_error_max_abs']:.3f}")
    if doc.get("acceptance_error_in_sample_max_abs") is not None:
        lines.append(f"  the same runs predicted in sample: mean {doc['acceptance_error_in_sample_mean_abs']:.3f}, "
                     f"max {doc['acceptance_error_in_sample_max_abs']:.3f}")
    return "\n".join(lines)


def _f(v) -> str:
    return "-" if v is None else f"{v:.3f}"
