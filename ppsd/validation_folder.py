"""The validation folder, defined once (torch-free): written by `ppsd validate`, read by the dashboard.

    <folder>/validation.json     {schema_version, created, profile, model, device_name,
                                  mape_speedup_pct, mape_tokens_per_s_pct, forced_trace, exit_head,
                                  ar_reference, ar_tokens_per_s_runs, [emulated: true,]
                                  [budget, mape_speedup_vs_ar_tp_pct,]
                                  [predicted_from, measured_prompts, split, prediction_prompt_ids,
                                   measured_prompt_ids, overlapping_prompt_ids, out_of_sample,]
                                  [interval, coverage, coverage_plans, interval_half_width_median_pct,]
                                  [rounds, measurement_noise: {plans, median_round_spread_pct,
                                   noise_floor_mape_pct, note},]
                                  [retime: {method, repeats, ar_drift_pct, timings,
                                   mape_speedup_profile_pct, worst_error_profile_pct},]
                                  rows: [ValidationRow, ...]}
    <folder>/validation.csv      the same rows, columns CSV_COLUMNS (stage bounds space-separated)
    <folder>/timelines/<name>    Chrome traces of each plan, measured and simulated: `timeline_name`

A row's keys are the fields of `ValidationRow`, in order; the CSV leaves out the last two (the
acceptance rates). Older folders may lack keys that came later (`forced_trace`, `exit_head`,
`ar_reference`, a row's `ar_reference_tokens_per_s`): readers treat them as absent. `ar_reference`:
"bracketed" (AR before and after every plan), "turns" (`--turns N`: AR and the plans every N prompts
in turns, `--turn-plans` of them on either side of each AR turn), "once" (`--ar-once`).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import math
import statistics
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from ppsd.errors import UserError
from ppsd.paths import atomic_write_json, atomic_write_text
from ppsd.modes import Mode
from ppsd.statistics import mape as statistics_mape
from ppsd.statistics import percent_error, widened

SCHEMA_VERSION = 1
JSON_FILE = "validation.json"
BATCH_JSON_FILE = "batch_validation.json"  # `ppsd validate --batch-sizes` (validation/batch.py; docs/contracts.md)
SERVE_JSON_FILE = "serve_validation.json"  # `ppsd validate --serve` (validation/serve.py; docs/contracts.md)
CSV_FILE = "validation.csv"
TIMELINES_DIR = "timelines"
MEASURED, SIMULATED = "measured", "simulated"
TIMELINE_KINDS = (MEASURED, SIMULATED)


# --- timelines --------------------------------------------------------------------------------
def timeline_slug(plan, forced_alpha: float | None = None) -> str:
    """The stem shared by a plan's timeline files: "ar", "eesd-e<E>-g<γ>[-<head>][-forced<α>]",
    "ppsd-e<E>-k<k>[-<head>][-forced<α>]" (the shared exit head goes unnamed; a forced-acceptance
    run of `ppsd validate --plans ...:alpha=A` is named apart from the real-acceptance one)."""
    if not plan.scheme.speculative:
        return plan.slug()
    return plan.slug() + ("" if forced_alpha is None else f"-forced{forced_alpha:g}")


def timeline_name(plan, kind: str, forced_alpha: float | None = None) -> str:
    """`<slug>.<kind>.json`, kind "measured" or "simulated"."""
    if kind not in TIMELINE_KINDS:
        raise ValueError(f"timeline kind {kind!r} is not one of {TIMELINE_KINDS}")
    return f"{timeline_slug(plan, forced_alpha)}.{kind}.json"


def timeline_path(folder: str | Path, plan, kind: str, forced_alpha: float | None = None) -> Path:
    return Path(folder) / TIMELINES_DIR / timeline_name(plan, kind, forced_alpha)


def write_plan_timelines(folder: str | Path, plan, predicted, measured, write, forced_alpha: float | None = None) -> None:
    """Write a plan's measured and simulated timelines (`write(path, events, title)`, e.g.
    `sim.timeline.write_chrome_trace`) under their `timeline_path` names."""
    title = plan.label() + ("" if forced_alpha is None else f" forced α={forced_alpha:g}")
    write(timeline_path(folder, plan, MEASURED, forced_alpha), measured.timeline, f"{title} measured")
    write(timeline_path(folder, plan, SIMULATED, forced_alpha), clip_to_span(predicted.timeline, measured.timeline),
          f"{title} simulated")


def clip_to_span(events, reference):
    """`events` that start within `reference`'s span. An out-of-sample prediction replays every
    predicting prompt's trace (several times the measured tokens: sim/intervals/: pooled_stream);
    its timeline is laid beside the measured one on one time axis, so only that stretch is kept."""
    if not events or not reference:
        return events
    end = max(e.start_s + e.dur_s for e in reference)
    return [e for e in events if e.start_s < end]


def timeline_files(folder: str | Path) -> dict[str, dict[str, Path]]:
    """{slug: {"measured": path, "simulated": path}} of the traces a validation folder holds."""
    out: dict[str, dict[str, Path]] = {}
    sub = Path(folder) / TIMELINES_DIR
    if not sub.is_dir():
        return out
    for f in sorted(sub.glob("*.json")):
        stem = f.name[: -len(".json")]
        if "." not in stem:
            continue
        slug, kind = stem.rsplit(".", 1)
        out.setdefault(slug, {})[kind] = f
    return out


def plan_timelines(folder: str | Path, plan) -> dict[str, Path]:
    """{kind: path} of the traces recorded for this plan (its exit head included), {} when none."""
    return timeline_files(folder).get(timeline_slug(plan), {})


# --- rows ---------------------------------------------------------------------------------------
def _err(predicted: float | None, measured: float | None) -> float | None:
    """The percent error (`ppsd.statistics.percent_error`) as a row keeps it: 3 decimals."""
    e = percent_error(predicted, measured)
    return None if e is None else round(e, 3)


@dataclass
class ValidationRow:
    """One plan measured for real beside the simulator's prediction of it."""

    plan: str                          # Plan.label()
    mode: Mode                         # written as its name: "ar", "eesd", "ppsd"
    exit_layer: int | None
    draft_len: int | None              # EESD only
    stages: int
    stage_bounds: list[int] | None     # PPSD layer cut points (CSV: space-separated)
    predicted_tokens_per_s: float
    measured_tokens_per_s: float
    measured_tokens_per_s_p10: float
    measured_tokens_per_s_p90: float
    predicted_speedup: float
    measured_speedup: float            # against the AR runs around this plan (ar_reference_tokens_per_s)
    speedup_error_pct: float           # 100 (predicted − measured) / measured
    tokens_per_s_error_pct: float
    outputs_match_ar: bool | None      # greedy speculative output identical to AR's; None for AR
    ar_reference_tokens_per_s: float | None = None
    measured_acceptance_rate: float | None = None
    predicted_acceptance_rate: float | None = None
    # same budget (sim/model/budget.py): the plan on every core it uses against AR on all of them
    predicted_speedup_vs_ar_tp: float | None = None
    measured_speedup_vs_ar_tp: float | None = None
    speedup_vs_ar_tp_error_pct: float | None = None
    # the 90% interval of the predicted speedup (sim/intervals/), and its same-budget twin
    predicted_speedup_lo: float | None = None
    predicted_speedup_hi: float | None = None
    predicted_speedup_vs_ar_tp_lo: float | None = None
    predicted_speedup_vs_ar_tp_hi: float | None = None
    # sampled validation (`ppsd validate --temperature T`, validation/sampled.py): the measured
    # speedup and acceptance rate of each seed (the row's figures are their median / mean), and the
    # range of the predicted speedup over the simulator's seeds (its own sampling noise)
    measured_speedup_seeds: list[float] | None = None
    measured_acceptance_rate_seeds: list[float] | None = None
    predicted_speedup_seed_range: list[float] | None = None
    # `--plans ...:alpha=A`: acceptance forced to seeded Bernoulli(A) bits in the run and the
    # prediction alike (a timing check; the label says "forced α=A")
    forced_alpha: float | None = None
    # EESD's confidence stop τ (`Plan.draft_stop`; the label says "τ=…"); None: always γ drafts
    draft_stop: float | None = None
    # out-of-sample validation: what the in-sample prediction (the measured prompts' own traces)
    # said for the same run, and its error (`with_in_sample`)
    predicted_speedup_in_sample: float | None = None
    speedup_error_in_sample_pct: float | None = None
    predicted_acceptance_rate_in_sample: float | None = None
    # `ppsd validate --rounds R`: the measured speedup of each round (each against its own AR
    # bracket); the row's figures are those of the median round
    measured_speedup_rounds: list[float] | None = None
    # `ppsd validate --retime`: the row's prediction is priced with the pieces timed right before the
    # plan ran; beside it the prediction priced from the profile alone, its error, and each piece's
    # drift then (% against the profile: layers, head, embedding, exit_head:<name>)
    predicted_speedup_profile: float | None = None
    speedup_error_profile_pct: float | None = None
    piece_drift_pct: dict | None = None
    # the same-budget twins of the two above (with --retime and a budget of several cores)
    predicted_speedup_vs_ar_tp_profile: float | None = None
    speedup_vs_ar_tp_error_profile_pct: float | None = None
    # a host stall in the measured run (`host_stall`): the seconds its passes took beyond STALL_FACTOR
    # times their kind's median, and the longest pass; absent when none stalled
    host_stall_s: float | None = None
    longest_pass_s: float | None = None

    @classmethod
    def from_results(cls, plan, predicted, measured, ar_tokens_per_s: float,
                     outputs_match_ar: bool | None, forced_alpha: float | None = None) -> ValidationRow:
        """The row of a plan from its simulated and measured Results (MeasuredDetails for the
        percentiles) and the AR speed its measured speedup is taken against (`forced_alpha`: the run
        and the prediction had their acceptance forced to Bernoulli(α))."""
        mode = Mode.parse(plan.mode)
        ms = measured.tokens_per_s / ar_tokens_per_s if ar_tokens_per_s else float("nan")
        ps = predicted.speedup_vs_ar if predicted.speedup_vs_ar is not None else 1.0
        det = measured.details
        label = plan.label() + ("" if forced_alpha is None else f" forced α={forced_alpha:g}")
        return cls(
            plan=label, mode=mode, exit_layer=plan.exit_layer, forced_alpha=forced_alpha,
            draft_stop=getattr(plan, "draft_stop", None),
            draft_len=plan.size_as("draft_len"), stages=plan.num_stages,
            stage_bounds=list(plan.stage_bounds) if plan.stage_bounds else None,
            predicted_tokens_per_s=round(predicted.tokens_per_s, 4),
            measured_tokens_per_s=round(measured.tokens_per_s, 4),
            measured_tokens_per_s_p10=round(det.tokens_per_s_p10, 4),
            measured_tokens_per_s_p90=round(det.tokens_per_s_p90, 4),
            predicted_speedup=round(ps, 4), measured_speedup=round(ms, 4),
            speedup_error_pct=_err(ps, ms),
            tokens_per_s_error_pct=_err(predicted.tokens_per_s, measured.tokens_per_s),
            outputs_match_ar=outputs_match_ar, ar_reference_tokens_per_s=round(ar_tokens_per_s, 4),
            measured_acceptance_rate=measured.acceptance_rate, predicted_acceptance_rate=predicted.acceptance_rate)

    @property
    def speculative(self) -> bool:
        return Mode.parse(self.mode).speculative

    def to_dict(self) -> dict:
        """The row as validation.json holds it (the same-budget fields only when measured)."""
        d = {**asdict(self), "mode": self.mode.value}
        return {k: v for k, v in d.items()
                if not (k in OPTIONAL_FIELDS and v is None)}

    def with_interval(self, lo: float | None, hi: float | None, tp_cv: float = 0.0) -> ValidationRow:
        """This row with the predicted speedup's interval, and the same-budget one scaled alike and
        widened by `tp_cv` (how unsteady AR's thread speedup was: `sim.intervals.budget_cv`)."""
        if lo is None or hi is None:
            return self
        tp_lo = tp_hi = None
        if self.predicted_speedup_vs_ar_tp is not None and self.predicted_speedup:
            tp_lo, tp_hi = widened(lo / self.predicted_speedup, hi / self.predicted_speedup,
                                   self.predicted_speedup_vs_ar_tp, tp_cv)
            tp_lo, tp_hi = round(tp_lo, 4), round(tp_hi, 4)
        return replace(self, predicted_speedup_lo=round(lo, 4), predicted_speedup_hi=round(hi, 4),
                       predicted_speedup_vs_ar_tp_lo=tp_lo, predicted_speedup_vs_ar_tp_hi=tp_hi)

    def with_in_sample(self, predicted_speedup: float | None,
                       acceptance_rate: float | None = None) -> ValidationRow:
        """This row with the in-sample prediction of the same run (and the acceptance rate it predicts)
        beside its own (out-of-sample) one."""
        if predicted_speedup is None:
            return self
        pred = round(predicted_speedup, 4)
        return replace(self, predicted_speedup_in_sample=pred,
                       speedup_error_in_sample_pct=_err(pred, self.measured_speedup),
                       predicted_acceptance_rate_in_sample=(self.predicted_acceptance_rate_in_sample
                                                            if acceptance_rate is None else acceptance_rate))

    @property
    def paying(self) -> bool:
        """A speculative plan measured at least PAYING_SPEEDUP× AR."""
        return self.speculative and self.measured_speedup is not None and self.measured_speedup >= PAYING_SPEEDUP

    def covered(self) -> bool | None:
        """Whether the measured speedup lies in the predicted interval (None without one)."""
        if self.predicted_speedup_lo is None or self.predicted_speedup_hi is None or self.measured_speedup is None:
            return None
        return self.predicted_speedup_lo <= self.measured_speedup <= self.predicted_speedup_hi

    def half_width(self) -> float | None:
        """The interval's half-width relative to the predicted speedup (None without one)."""
        lo, hi, point = self.predicted_speedup_lo, self.predicted_speedup_hi, self.predicted_speedup
        if lo is None or hi is None or not point:
            return None
        return (hi - lo) / (2.0 * point)

    def with_profile_priced(self, predicted_speedup: float | None, drift_pct: dict | None) -> ValidationRow:
        """This (re-timed) row with the prediction priced from the profile alone beside it."""
        if predicted_speedup is None:
            return self
        pred = round(predicted_speedup, 4)
        return replace(self, predicted_speedup_profile=pred, piece_drift_pct=drift_pct,
                       speedup_error_profile_pct=_err(pred, self.measured_speedup))

    def with_same_budget_profile_priced(self, predicted: float | None) -> ValidationRow:
        """This (re-timed) row with its same-budget prediction priced from the profile alone beside it."""
        if predicted is None or not self.measured_speedup_vs_ar_tp:
            return self
        pred = round(predicted, 4)
        return replace(self, predicted_speedup_vs_ar_tp_profile=pred,
                       speedup_vs_ar_tp_error_profile_pct=_err(pred, self.measured_speedup_vs_ar_tp))

    def with_same_budget(self, predicted: float | None, measured: float | None) -> ValidationRow:
        """This row with the same-budget speedups (predicted, measured) and their error."""
        err = _err(predicted, measured)
        return replace(self, predicted_speedup_vs_ar_tp=None if predicted is None else round(predicted, 4),
                       measured_speedup_vs_ar_tp=None if measured is None else round(measured, 4),
                       speedup_vs_ar_tp_error_pct=err)

    def to_csv_dict(self, columns: list[str] | None = None) -> dict:
        d = {c: getattr(self, c) for c in (columns or CSV_COLUMNS)}
        d["mode"] = self.mode.value
        d["stage_bounds"] = " ".join(map(str, self.stage_bounds or []))
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ValidationRow:
        """A row of validation.json (keys it lacks are None)."""
        return cls(**{**{f.name: d.get(f.name) for f in fields(cls)}, "mode": Mode.parse(d["mode"])})

    @classmethod
    def from_csv_dict(cls, d: dict) -> ValidationRow:
        """A row of validation.csv (all text) with its types back."""
        def num(v, kind):
            return None if v in (None, "") else kind(v)

        out = {}
        for f in fields(cls):
            v = d.get(f.name)
            if f.name == "plan":
                out[f.name] = v
            elif f.name == "mode":
                out[f.name] = Mode.parse(v)
            elif f.name in ("exit_layer", "draft_len", "stages"):
                out[f.name] = num(v, lambda x: int(float(x)))
            elif f.name == "stage_bounds":
                parts = str(v or "").replace(",", " ").split()
                out[f.name] = [int(p) for p in parts] or None
            elif f.name == "outputs_match_ar":
                out[f.name] = None if v in (None, "") else str(v).strip().lower() == "true"
            else:
                out[f.name] = num(v, float)
        return cls(**out)


ROW_FIELDS: list[str] = [f.name for f in fields(ValidationRow)]
CSV_COLUMNS: list[str] = ROW_FIELDS[: ROW_FIELDS.index("ar_reference_tokens_per_s") + 1]
SAME_BUDGET_COLUMNS: list[str] = ["predicted_speedup_vs_ar_tp", "measured_speedup_vs_ar_tp",
                                  "speedup_vs_ar_tp_error_pct"]  # in the CSV when a row has them
INTERVAL_COLUMNS: list[str] = ["predicted_speedup_lo", "predicted_speedup_hi", "predicted_speedup_vs_ar_tp_lo",
                               "predicted_speedup_vs_ar_tp_hi"]  # in the CSV when a row has an interval
SAMPLED_FIELDS: list[str] = ["measured_speedup_seeds", "measured_acceptance_rate_seeds",
                             "predicted_speedup_seed_range"]  # lists: validation.json only, when sampled
ROUND_FIELDS: list[str] = ["measured_speedup_rounds",  # a list: validation.json only, with --rounds > 1
                            "piece_drift_pct"]  # a dict: validation.json only, with --retime
EXTRA_COLUMNS: list[str] = ["forced_alpha", "draft_stop", "predicted_speedup_in_sample", "speedup_error_in_sample_pct",
                             "predicted_acceptance_rate_in_sample", "predicted_speedup_profile",
                             "speedup_error_profile_pct", "predicted_speedup_vs_ar_tp_profile",
                             "speedup_vs_ar_tp_error_profile_pct"]  # in the CSV when a row has them
STALL_FIELDS: list[str] = ["host_stall_s", "longest_pass_s"]  # validation.json only, when a pass stalled
OPTIONAL_FIELDS: list[str] = [*SAME_BUDGET_COLUMNS, *INTERVAL_COLUMNS, *SAMPLED_FIELDS,
                              *EXTRA_COLUMNS, *ROUND_FIELDS, *STALL_FIELDS]  # written only when set
STALL_FACTOR = 10.0  # a pass this many times its kind's median is a host stall, not the plan's work
STALL_MIN_S = 0.2  # ... and at least this long


def host_stall(events) -> tuple[float, float] | None:
    """(seconds beyond STALL_FACTOR × median, the longest stalled pass) over a measured timeline's passes,
    each kind on each row against its own median (prefills excluded: a long prompt is no stall); None
    when no pass stalled. A stall is the host's (a PPSD stage, an AR step held seconds), which the AR
    turns beside the plan need not share."""
    groups: dict = {}
    for e in events:
        if e.name != "prefill":
            groups.setdefault((e.row, e.name), []).append(float(e.dur_s))
    excess, longest = 0.0, 0.0
    for durations in groups.values():
        if len(durations) < 5:
            continue
        median = statistics.median(durations)
        limit = max(STALL_FACTOR * median, STALL_MIN_S)
        for d in durations:
            if d > limit:
                excess += d - median
                longest = max(longest, d)
    return (round(excess, 3), round(longest, 3)) if longest else None
PAYING_SPEEDUP = 1.05  # a plan "pays" when measured at least this much faster than AR


def coverage(rows: list[ValidationRow]) -> tuple[float | None, int]:
    """(share of the speculative rows with an interval whose measured speedup lies inside, rows counted)."""
    judged = [r.covered() for r in rows if r.speculative and r.covered() is not None]
    return (sum(judged) / len(judged) if judged else None), len(judged)


def median_half_width(rows: list[ValidationRow]) -> float | None:
    """The median interval half-width (relative to the predicted speedup) of the speculative rows with
    an interval: how wide the intervals were that held `coverage` of the measurements."""
    widths = [r.half_width() for r in rows if r.speculative and r.half_width() is not None]
    return statistics.median(widths) if widths else None


def mape(rows: list[ValidationRow]) -> tuple[float, float]:
    """(MAPE of the speedup over the speculative rows, MAPE of tokens/s over all rows), in %."""
    mape_s = statistics_mape(r.speedup_error_pct for r in rows if r.speculative)
    return mape_s or 0.0, statistics_mape(r.tokens_per_s_error_pct for r in rows) or 0.0


# --- the folder ---------------------------------------------------------------------------------
def make_doc(rows: list[ValidationRow], *, profile: str, model: str, device_name: str, forced_trace: bool,
             exit_head: str, ar_reference: str, ar_tokens_per_s_runs: list[float],
             created: str | None = None, budget: str | None = None, emulated: bool = False,
             sources: dict | None = None, interval: dict | None = None, rounds: int = 1,
             corun: dict | None = None, retime: dict | None = None,
             budget_reference: dict | None = None, chunks_measured_again: list[dict] | None = None) -> dict:
    """validation.json's content, keys in their written order (rows as dicts). `emulated`: the
    devices were emulated from the profile (`ppsd validate --emulate`): adds "emulated": true.
    `sources` (`prompt_sources`): which profile predicted and which prompts each side used, and
    whether the two prompt sets are disjoint ("out_of_sample"); `interval`: how the rows' intervals
    were made ({level, prompts_n, draws, seed, method}); with either, the coverage of the intervals.
    `rounds` > 1 (`ppsd validate --rounds`): "rounds" and the "measurement_noise" the rounds show.
    `corun` ({profile_slowdown, runs}: the co-run check, `corun_summary`): "corun_drift".
    `retime` (`ppsd validate --retime`: {method, repeats, ar_drift_pct, timings}): "retime", with the
    MAPE of the predictions priced from the profile alone (`mape_speedup_profile_pct`).
    `budget_reference` (in turns, within a budget: {method, ar_thread_gain, ar_thread_gain_priced,
    ar_thread_ratios, plans: [{plan, thread_gain, measured_speedup_vs_ar_tp_beside}]}): how the measured
    same-budget speedups were priced, with the MAPE the pairing beside them would have given.
    `chunks_measured_again` (in turns: [{chunk, prompts, stalled}]): the chunks whose runs showed a host
    stall and were measured once more; written when there were any."""
    mape_s, mape_t = mape(rows)
    created = created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return {"schema_version": SCHEMA_VERSION, "created": created, "profile": profile, "model": model,
            "device_name": device_name, "mape_speedup_pct": round(mape_s, 3), "mape_tokens_per_s_pct": round(mape_t, 3),
            "forced_trace": bool(forced_trace), "exit_head": exit_head, "ar_reference": ar_reference,
            "ar_tokens_per_s_runs": [round(x, 4) for x in ar_tokens_per_s_runs],
            **({"emulated": True} if emulated else {}),
            **_same_budget_summary(rows, budget),
            **_budget_reference_summary(rows, budget_reference),
            **_drift_summary(rows, ar_tokens_per_s_runs, emulated),
            **corun_summary(**(corun or {})),
            **(sources or {}),
            **_interval_summary(rows, interval),
            **_rounds_summary(rows, rounds),
            **_breakdown(rows),
            **_retime_summary(rows, retime),
            **({"chunks_measured_again": chunks_measured_again} if chunks_measured_again else {}),
            "rows": [r.to_dict() for r in rows]}


def _retime_summary(rows: list[ValidationRow], retime: dict | None) -> dict:
    if not retime:
        return {}
    priced = _mape_of([r for r in rows if r.speculative], "speedup_error_profile_pct")
    budget = _mape_of([r for r in rows if r.speculative], "speedup_vs_ar_tp_error_profile_pct")
    return {"retime": {**retime, "mape_speedup_profile_pct": priced["mape_speedup_pct"],
                       "worst_error_profile_pct": priced["worst_error_pct"],
                       **({"mape_speedup_vs_ar_tp_profile_pct": budget["mape_speedup_pct"]} if budget["plans"] else {})}}


DRIFT_FLAG_PCT = 5.0  # AR measured this much off the profile's price: the machine is not as profiled


def _drift_summary(rows: list[ValidationRow], ar_runs: list[float], emulated: bool = False) -> dict:
    """`machine_drift`: AR's measured speed (median of every AR run) against the profile's price of it.
    Speedups are ratios, so a machine uniformly faster or slower than when profiled changes nothing;
    but when it drifts, its parts rarely drift alike (a quieter host gives one process more memory
    bandwidth, and two co-running stages then slow each other more than the profile saw), so a
    flagged drift says the latency part of the profile is stale: re-profile in the same sitting."""
    ar = next((r for r in rows if not r.speculative), None)
    if ar is None or not ar_runs or not ar.predicted_tokens_per_s:
        return {}
    measured = float(statistics.median(ar_runs))
    drift = 100.0 * (measured - ar.predicted_tokens_per_s) / ar.predicted_tokens_per_s
    flagged = abs(drift) > DRIFT_FLAG_PCT and not emulated
    return {"machine_drift": {
        "ar_predicted_tokens_per_s": round(ar.predicted_tokens_per_s, 4), "ar_measured_tokens_per_s": round(measured, 4),
        "ar_spread_pct": round(100.0 * (max(ar_runs) - min(ar_runs)) / measured, 2) if measured else None,
        "drift_pct": round(drift, 2), "flagged": bool(flagged),
        "note": (f"AR ran {abs(drift):.1f}% {'faster' if drift > 0 else 'slower'} than the profile prices it: the "
                 "machine is not in the state it was profiled in, and plans whose stages co-run are priced with a "
                 "stale slowdown; re-profile in the same sitting (`python -m bench.piece_drift --profile DIR` shows "
                 "which pieces of a step moved)") if flagged else
                f"AR within {DRIFT_FLAG_PCT:g}% of the profile's price"}}


CORUN_FLAG_PCT = 5.0  # two co-running processes this much slower than the profile saw: PPSD priced stale


def corun_summary(profile_slowdown: float | None = None, runs: list[float] | None = None) -> dict:
    """`corun_drift`: the 2-process co-run slowdown measured during the validation (before the first
    plan and after the last, `profiler.latency.measure_corun_now`) against the profile's own co-run
    figure (the same measurement). AR runs one process, so the AR bracket cannot see this part of a
    machine's drift: a neighbour that takes memory bandwidth slows two co-running stages more than
    one process alone. `drift_pct` is how much longer a co-running pass takes now than the profile's
    co-run figure says (measured / profile - 1); `spread_pct` how far the runs themselves are apart.
    The figure PPSD is priced with comes from the runtime probe, a different measurement, so a
    flagged drift says PPSD figures are uncertain by about that much, not which way they err
    (docs/design-notes.md)."""
    if not runs or not profile_slowdown:
        return {}
    measured = float(statistics.median(runs))
    drift = 100.0 * (measured / float(profile_slowdown) - 1.0)
    spread = 100.0 * (max(runs) - min(runs)) / measured if measured else 0.0
    flagged = abs(drift) > CORUN_FLAG_PCT
    return {"corun_drift": {
        "profile_slowdown": round(float(profile_slowdown), 4), "measured_slowdown": round(measured, 4),
        "runs": [round(float(x), 4) for x in runs], "drift_pct": round(drift, 2), "spread_pct": round(spread, 2),
        "flagged": bool(flagged),
        "note": (f"two co-running processes slowed each other {measured:.3f}x during this validation against "
                 f"{float(profile_slowdown):.3f}x when profiled (runs {', '.join(f'{x:.2f}x' for x in runs)}): a "
                 f"co-running pass took {abs(drift):.1f}% {'longer' if drift > 0 else 'less'} than then, so PPSD's "
                 "co-run pricing is stale and its errors here are uncertain by about that much; re-profile in the "
                 "same sitting")
        if flagged else f"co-run slowdown within {CORUN_FLAG_PCT:g}% of the profile's"}}


# SE of the median of R normal draws in units of one draw's SD (R = 2: their mean; large R: √(π/2R))
_MEDIAN_SE = {1: 1.0, 2: 0.7071, 3: 0.6698}


def _rounds_summary(rows: list[ValidationRow], rounds: int) -> dict:
    """With R > 1 rounds, what the repeated measurements say about the measured speedups' own noise:
    each plan's round-to-round spread, and `noise_floor_mape_pct`, the speedup MAPE that a perfect
    prediction would still show against the median round (normal round-to-round noise assumed:
    E|e| = √(2/π) · SE of the median). A MAPE near the floor is all the run can resolve."""
    if rounds <= 1:
        return {}
    spreads, floors = [], []
    for r in rows:
        xs = r.measured_speedup_rounds or []
        if not r.speculative or len(xs) < 2:
            continue
        mid = statistics.median(xs)
        sd = statistics.stdev(xs) / statistics.mean(xs)
        spreads.append(100.0 * (max(xs) - min(xs)) / mid)
        se = _MEDIAN_SE.get(len(xs), (math.pi / (2 * len(xs))) ** 0.5)
        floors.append(100.0 * (2 / math.pi) ** 0.5 * se * sd)
    return {"rounds": int(rounds), "measurement_noise": {
        "plans": len(spreads),
        "median_round_spread_pct": round(statistics.median(spreads), 2) if spreads else None,
        "noise_floor_mape_pct": round(sum(floors) / len(floors), 2) if floors else None,
        "note": "each plan measured once a round, plans in alternating order, every run against the AR runs just "
                "before and after it; a row keeps its median round"}}


def _mape_of(rows: list[ValidationRow], key: str = "speedup_error_pct") -> dict:
    errs = [abs(getattr(r, key)) for r in rows if getattr(r, key) is not None]
    return {"plans": len(errs), "mape_speedup_pct": round(sum(errs) / len(errs), 3) if errs else None,
            "worst_error_pct": round(max(errs), 3) if errs else None}


# the parts `breakdown` may hold, with the words the CLI and the dashboard show them under
BREAKDOWN_TITLES = {"real_acceptance": "real acceptance", "forced": "forced acceptance (timing only)",
                    "paying": f"paying plans (measured ≥ {PAYING_SPEEDUP:g}× AR)",
                    "paying_real_acceptance": "paying, real acceptance",
                    "in_sample": "the same runs predicted in sample",
                    "out_of_sample_same_plans": "  ... and out of sample"}


def breakdown_titles(doc: dict) -> dict[str, str]:
    """BREAKDOWN_TITLES for one document: with `measured_traces` the twins are the predicting profile's
    prices at the measured prompts' own acceptance, which is the timing model alone."""
    if not doc.get("measured_traces"):
        return dict(BREAKDOWN_TITLES)
    return {**BREAKDOWN_TITLES, "in_sample": "at the measured prompts' own acceptance (the timing model alone)"}


def _breakdown(rows: list[ValidationRow]) -> dict:
    """The speedup MAPE over parts of the speculative rows, when the parts differ from the whole:
    real acceptance vs forced, the paying plans (measured ≥ PAYING_SPEEDUP× AR), and the in-sample
    twins of an out-of-sample run."""
    spec = [r for r in rows if r.speculative]
    real = [r for r in spec if r.forced_alpha is None]
    forced = [r for r in spec if r.forced_alpha is not None]
    twins = [r for r in real if r.speedup_error_in_sample_pct is not None]
    if not forced and not twins and not any(r.paying for r in spec):
        return {}
    out = {"real_acceptance": _mape_of(real), "forced": _mape_of(forced),
           "paying": {"threshold": PAYING_SPEEDUP, **_mape_of([r for r in spec if r.paying])},
           "paying_real_acceptance": {"threshold": PAYING_SPEEDUP, **_mape_of([r for r in real if r.paying])}}
    if twins:
        out["in_sample"] = _mape_of(twins, "speedup_error_in_sample_pct")
        out["out_of_sample_same_plans"] = _mape_of(twins)
    return {"breakdown": out}


def prompt_sources(*, predicted_from: str, prediction_prompt_ids: list[str], measured_prompt_ids: list[str],
                   measured_prompts: str, split: float | None = None, overlap: list[str] | None = None) -> dict:
    """The document's record of both sides: the profile that predicted, the prompt ids whose
    acceptance it used, the prompt ids measured (and where they came from), and "out_of_sample":
    true only when no measured prompt is among the prediction prompts (`overlap`: the ids that are,
    matched by id or by text; default by id)."""
    if overlap is None:
        overlap = sorted(set(map(str, prediction_prompt_ids)) & set(map(str, measured_prompt_ids)))
    return {"predicted_from": predicted_from, "measured_prompts": measured_prompts, "split": split,
            "prediction_prompt_ids": [str(p) for p in prediction_prompt_ids],
            "measured_prompt_ids": [str(p) for p in measured_prompt_ids],
            "overlapping_prompt_ids": list(overlap), "out_of_sample": not overlap}


def _interval_summary(rows: list[ValidationRow], interval: dict | None) -> dict:
    share, counted = coverage(rows)
    if interval is None and counted == 0:
        return {}
    width = median_half_width(rows)
    return {"interval": interval or {}, "coverage": None if share is None else round(share, 4),
            "coverage_plans": counted,
            "interval_half_width_median_pct": None if width is None else round(100.0 * width, 2)}


def _budget_reference_summary(rows: list[ValidationRow], reference: dict | None) -> dict:
    """`budget_reference` with `mape_speedup_vs_ar_tp_beside_pct`: the same-budget MAPE had each plan been
    measured against the AR turns of its own group on every core (the pairing before thread gains)."""
    if not reference:
        return {}
    predicted = {r.plan: r.predicted_speedup_vs_ar_tp for r in rows if r.speculative}
    beside_mape = statistics_mape(percent_error(predicted.get(p["plan"]), p.get("measured_speedup_vs_ar_tp_beside"))
                                  for p in reference.get("plans", []))
    beside = {"mape_speedup_vs_ar_tp_beside_pct": round(beside_mape, 3)} if beside_mape is not None else {}
    return {"budget_reference": {**reference, **beside}}


def _same_budget_summary(rows: list[ValidationRow], budget: str | None) -> dict:
    """The budget and the same-budget speedup's MAPE over the speculative rows that have it."""
    spec = [r for r in rows if r.speculative and r.speedup_vs_ar_tp_error_pct is not None]
    if not budget or not spec:
        return {}
    return {"budget": budget,
            "mape_speedup_vs_ar_tp_pct": round(sum(abs(r.speedup_vs_ar_tp_error_pct) for r in spec) / len(spec), 3)}


def csv_text(rows: list[ValidationRow]) -> str:
    same_budget = any(r.measured_speedup_vs_ar_tp is not None for r in rows)
    intervals = [c for c in INTERVAL_COLUMNS + EXTRA_COLUMNS if any(getattr(r, c) is not None for r in rows)]
    columns = CSV_COLUMNS + (SAME_BUDGET_COLUMNS if same_budget else []) + intervals
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns)
    w.writeheader()
    for r in rows:
        w.writerow(r.to_csv_dict(columns))
    return buf.getvalue()


def write_validation(folder: str | Path, doc: dict) -> None:
    """Write validation.json and validation.csv (each atomically) from a `make_doc` document."""
    folder = Path(folder)
    atomic_write_json(folder / JSON_FILE, doc)
    atomic_write_text(folder / CSV_FILE, csv_text([ValidationRow.from_dict(r) for r in doc["rows"]]))


def read_doc(folder: str | Path) -> dict:
    """validation.json of a folder, its schema version checked (UserError naming the fix)."""
    file = Path(folder) / JSON_FILE
    try:
        doc = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {file} ({exc.__class__.__name__})", "re-run `ppsd validate`") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        raise UserError(f"{file} has schema_version {version!r}, this ppsd reads {SCHEMA_VERSION}",
                        "re-run `ppsd validate` with this ppsd")
    return doc


def read_rows(folder: str | Path, doc: dict | None = None) -> list[dict]:
    """The rows as validation.json holds them (keys as written), or when it lists none, the rows of
    validation.csv with their types back. Every row has predicted and measured speedups (UserError)."""
    folder = Path(folder)
    doc = read_doc(folder) if doc is None else doc
    rows = list(doc.get("rows") or [])
    csv_file = folder / CSV_FILE
    if not rows and csv_file.exists():
        with open(csv_file, newline="") as fh:
            rows = [{k: v for k, v in ValidationRow.from_csv_dict(r).to_dict().items() if k in r}
                    for r in csv.DictReader(fh)]
    if not rows:
        raise UserError(f"{folder / JSON_FILE} lists no plans", "re-run `ppsd validate`")
    for key in ("predicted_speedup", "measured_speedup"):
        if any(key not in r for r in rows):
            raise UserError(f"{folder / JSON_FILE} rows lack {key}", "re-run `ppsd validate` with this ppsd")
    return rows
