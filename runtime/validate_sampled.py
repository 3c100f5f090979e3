"""`ppsd validate --temperature T` (T > 0): sampled runs beside the simulator's prediction at T.

A sampled run is one draw of a random process: its text, its acceptances and so its speed change
with the seed. So each plan is measured once per seed (`--seeds`, default 3; every repeat of a seed
samples afresh too), AR right before and after it with the same seed (the machine drifts over
minutes), and the row reports the median speedup over the seeds with their spread
(`measured_speedup_seeds`, `measured_acceptance_rate_seeds`). The prediction is the mean over
`PREDICT_SEEDS` simulations of the profile's β at exactly T (`sim.streams.trace_stream`: along the
trajectories the profiler sampled at T; another T is refused before anything runs), each prompt's
trace replayed once at its own length, the length the runs generate (`stop_at_eos` off).

Losslessness under sampling is not checked here (outputs differ from AR's by construction): the
distribution test (tests/test_runtime_lossless.py) checks that EESD and PPSD sample AR's distribution.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from ppsd import validation_folder as vf
from ppsd.errors import UserError
from ppsd.paths import display_path
from sim.modes import Mode
from sim.plan import Plan

DEFAULT_SEEDS = 3
PREDICT_SEEDS = 16  # simulations averaged per predicted figure (Bernoulli(β) draws differ per seed)


def check_temperature(args, *profiles, emulated: bool = False) -> float:
    """--temperature and --seeds checked against the predicting profile(s) before any model loads
    (UserError); returns T (0 = greedy validation)."""
    t = float(getattr(args, "temperature", 0.0) or 0.0)
    seeds = getattr(args, "seeds", None)
    if t < 0 or t != t:
        raise UserError(f"--temperature {t} is negative", "give --temperature 0 (greedy) or more")
    if t == 0:
        if seeds not in (None, 1):
            raise UserError("--seeds applies to sampled validation only", "add --temperature T, or drop --seeds")
        return 0.0
    if emulated:
        raise UserError("--temperature does not apply with --emulate (emulated drafts have no distribution)",
                        "validate sampled decoding on the real model: --profile DIR --temperature T")
    if getattr(args, "force_trace", False):
        raise UserError("--force-trace replays greedy match traces; it does not combine with --temperature",
                        "drop one of them")
    if seeds is not None and int(seeds) < 1:
        raise UserError(f"--seeds {seeds} must be at least 1", "give --seeds 3")
    for p in profiles:
        p.match_temperature(t)
    return t


def sampled_lengths(profile, temperature: float, head: str, gens: list[dict]) -> list[int]:
    """Tokens each prompt generates in a sampled run: the length of the profile's trajectory sampled at
    T for it (what the prediction replays), else its greedy generation's length."""
    rows = profile.beta_rows(temperature, head)
    first = rows[rows["exit_layer"] == rows["exit_layer"].min()]
    lengths = first.groupby("prompt_id")["position"].max().add(1).to_dict()
    return [int(lengths.get(str(g["prompt_id"]), len(g["token_ids"]))) for g in gens]


def predicted_run(profile, plan: Plan, ids: list[str], temperature: float, seed: int, *, sides=None,
                  targets=None, head: str = "shared", timeline: bool = False):
    """One seeded simulation at T of the measured prompts: in sample, each prompt's own β trace
    (sampled at T by the profiler); out of sample (`sides.in_sample` false), the prediction prompts'
    β traces laid over the measured prompts' lengths (`sim.intervals.pooled_stream`)."""
    from sim import intervals as iv
    from sim.api import simulate
    from sim.run import simulate_stream

    engine = "event" if timeline else "fast"
    plan = plan.at_temperature(temperature)  # priced as sampled: every draw, the verifier's q
    if sides is None or sides.in_sample:
        return simulate(profile, plan, acceptance="trace", prompt_ids=ids, temperature=temperature, seed=seed,
                        engine=engine, timeline=timeline)
    if plan.exit_layer is None:
        stream = iv.lengths_stream(targets)
    else:
        traces = iv.prompt_traces(profile, plan.exit_layer, head=head, prompt_ids=sides.prediction_ids,
                                  temperature=temperature)
        stream = iv.pooled_stream(traces, targets, seed)
    return simulate_stream(profile, plan, stream, engine=engine, timeline=timeline, seed=seed)


def predict(profile, plan: Plan, ids: list[str], temperature: float, seeds: int = PREDICT_SEEDS, **where) -> dict:
    """The simulator's expected figures at T: mean (and spread) over `seeds` seeded simulations."""
    res = [predicted_run(profile, plan, ids, temperature, s, **where) for s in range(seeds)]
    sp = [r.speedup_vs_ar or 1.0 for r in res]
    acc = [r.acceptance_rate for r in res if r.acceptance_rate is not None]
    return {"speedup": float(np.mean(sp)), "speedup_min": float(min(sp)), "speedup_max": float(max(sp)),
            "tokens_per_s": float(np.mean([r.tokens_per_s for r in res])),
            "acceptance_rate": float(np.mean(acc)) if acc else None, "results": res}


def measure_and_predict(args, profile, model, plans: list[Plan], head: str, out: Path, *,
                        predict_profile, temperature: float, sides) -> dict:
    """Measure AR and every plan at `temperature` over the seeds on the measured prompts
    (`sides.measured`, runtime/validate.py: Sides), predict each, and return the validation
    document (rows with the seeds' spread; `temperature`, `seeds`, acceptance errors; in or out of
    sample as `sides` says)."""
    from runtime.measure import Job, measure
    from sim import intervals as iv
    from sim.api import resolve_plan
    from sim.timeline import write_chrome_trace

    predict_profile.beta_rows(temperature, head)  # a head without sampled β fails before anything runs
    gens = sides.measured
    seeds = list(range(int(getattr(args, "seeds", None) or DEFAULT_SEEDS)))
    ids = [str(g["prompt_id"]) for g in gens]
    prompts = [list(map(int, g["prompt_tokens"])) for g in gens]
    # each prompt generates as many tokens as its trajectory sampled at T by the measured profile (what
    # an in-sample prediction replays); prompts it never sampled, its greedy generation's length
    twins = False
    if sides.in_sample:
        max_new = sampled_lengths(predict_profile, temperature, head, gens)
    else:
        max_new = [max(1, len(g["token_ids"])) for g in gens]
        try:
            have = set(profile.beta_rows(temperature, head)["prompt_id"].astype(str))
        except UserError:
            have = set()
        if set(ids) <= have:  # the measured profile sampled these prompts: in-sample twins
            max_new, twins = sampled_lengths(profile, temperature, head, gens), True
    # the measured prompts' contexts and categories, each generating max_new[i] tokens
    targets = replace(iv.Targets.from_generations(gens), lengths=tuple(max_new))
    where = {"sides": sides, "targets": targets, "head": head}

    def job(p: Plan, seed: int, warmup: int, repeats: int, timeline: bool) -> Job:
        return Job(plan=p, prompts=prompts, max_new=max_new, temperature=temperature, seed=seed, stop_at_eos=False,
                   warmup=warmup, repeats=repeats, timeout_s=args.stage_timeout, timeline=timeline,
                   heads_dir=getattr(args, "heads", None))

    ar_plan = Plan(Mode.AR)
    everything = [ar_plan, *plans]
    tps: dict[int, list[float]] = {i: [] for i in range(len(everything))}
    speedups: dict[int, list[float]] = {i: [] for i in range(1, len(everything))}
    accept: dict[int, list[float]] = {i: [] for i in range(1, len(everything))}
    first_meas: dict[int, object] = {}
    ar_runs: list[float] = []
    for si, seed in enumerate(seeds):
        ar = measure(model, job(ar_plan, seed, args.warmup if si == 0 else 0, args.repeats, si == 0))
        ar_runs.append(ar.result.tokens_per_s)
        tps[0].append(ar.result.tokens_per_s)
        first_meas.setdefault(0, ar.result)
        for i, plan in enumerate(plans, start=1):
            print(f"[seed {seed}, {i}/{len(plans)}] {plan.label()} at T={temperature:g} ... (then AR again)",
                  flush=True, file=sys.stderr)
            m = measure(model, job(plan, seed, args.warmup if si == 0 else 0, args.repeats, si == 0))
            again = measure(model, job(ar_plan, seed, 0, 1, False))
            ref = (ar_runs[-1] + again.result.tokens_per_s) / 2
            ar_runs.append(again.result.tokens_per_s)
            tps[i].append(m.result.tokens_per_s)
            speedups[i].append(m.result.tokens_per_s / ref if ref else float("nan"))
            if m.result.acceptance_rate is not None:
                accept[i].append(float(m.result.acceptance_rate))
            first_meas.setdefault(i, m.result)

    rows = []
    for i, plan in enumerate(everything):
        plan = resolve_plan(plan, predict_profile)
        pred = predict(predict_profile, plan, ids, temperature, **where) if plan.mode.speculative else None
        shown = predicted_run(predict_profile, plan, ids, temperature, 0, timeline=True, **where)  # one seed's timeline
        meas = first_meas[i]
        med_tps = float(statistics.median(tps[i]))
        det = replace(meas.details, tokens_per_s_p10=float(np.percentile(tps[i], 10)),
                      tokens_per_s_p90=float(np.percentile(tps[i], 90)))
        meas_all = replace(meas, tokens_per_s=med_tps, details=det)
        if pred is not None:
            shown_pred = replace(shown, speedup_vs_ar=pred["speedup"], tokens_per_s=pred["tokens_per_s"],
                                 acceptance_rate=pred["acceptance_rate"])
        else:
            shown_pred = shown
        ar_ref = float(np.mean(ar_runs))
        row = vf.ValidationRow.from_results(plan, shown_pred, meas_all, ar_ref, None)
        if i > 0:
            ms = float(statistics.median(speedups[i]))
            macc = float(np.mean(accept[i])) if accept[i] else None
            row = replace(row, measured_speedup=round(ms, 4),
                          speedup_error_pct=round(100.0 * (pred["speedup"] - ms) / ms, 3) if ms else None,
                          ar_reference_tokens_per_s=round(med_tps / ms, 4) if ms else None,
                          measured_acceptance_rate=None if macc is None else round(macc, 4),
                          predicted_acceptance_rate=None if pred["acceptance_rate"] is None
                          else round(pred["acceptance_rate"], 4),
                          measured_speedup_seeds=[round(x, 4) for x in speedups[i]],
                          measured_acceptance_rate_seeds=[round(x, 4) for x in accept[i]] or None,
                          predicted_speedup_seed_range=[round(pred["speedup_min"], 4), round(pred["speedup_max"], 4)])
        if twins and i > 0:  # what the in-sample prediction (the measured prompts' own β) says, beside it
            inside = predict(profile, resolve_plan(plan, profile), ids, temperature)
            row = row.with_in_sample(inside["speedup"])
            if inside["acceptance_rate"] is not None:
                row = replace(row, predicted_acceptance_rate_in_sample=round(inside["acceptance_rate"], 4))
        rows.append(row)
        vf.write_plan_timelines(out, plan, shown, meas, write_chrome_trace)
    sources = vf.prompt_sources(predicted_from=display_path(predict_profile.path),
                                prediction_prompt_ids=sides.prediction_ids, measured_prompt_ids=ids,
                                measured_prompts=sides.measured_prompts, split=sides.split, overlap=sides.overlap)
    doc = vf.make_doc(rows, profile=display_path(profile.path), model=profile.model_id,
                      device_name=profile.device_name, forced_trace=False, exit_head=head,
                      ar_reference="bracketed", ar_tokens_per_s_runs=ar_runs, sources=sources)
    doc = with_sampling(doc, rows, temperature, seeds, predict_profile)
    vf.write_validation(out, doc)
    return doc


def with_sampling(doc: dict, rows: list, temperature: float, seeds: list[int], profile) -> dict:
    """The document with the sampled run's summary before its rows: temperature, seeds, where the
    profile's β was measured, and the acceptance-rate errors (predicted − measured) of the plans."""
    def errors(key: str) -> list[float]:
        return [getattr(r, key) - r.measured_acceptance_rate for r in rows
                if r.speculative and getattr(r, key) is not None and r.measured_acceptance_rate is not None]

    errs = errors("predicted_acceptance_rate")
    summary = {"temperature": float(temperature), "seeds": list(seeds), "beta_trajectory": profile.beta_trajectory,
               "acceptance_error_mean_abs": round(float(np.mean(np.abs(errs))), 4) if errs else None,
               "acceptance_error_max_abs": round(float(np.max(np.abs(errs))), 4) if errs else None}
    twin = errors("predicted_acceptance_rate_in_sample")
    if twin:  # the same runs, predicted from the measured prompts' own β
        summary["acceptance_error_in_sample_mean_abs"] = round(float(np.mean(np.abs(twin))), 4)
        summary["acceptance_error_in_sample_max_abs"] = round(float(np.max(np.abs(twin))), 4)
    body = {k: v for k, v in doc.items() if k != "rows"}
    return {**body, **summary, "rows": doc["rows"]}


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
