"""`ppsd validate`: measure plans for real and lay them beside the simulator's prediction.

Same profile, same model, same prompts (the profile's own generations: prompt tokens and lengths),
same traces. Writes the validation folder described in docs/contracts.md and prints the table.
"""

from __future__ import annotations

import datetime as _dt
import sys
from dataclasses import replace
from pathlib import Path

from ppsd import validation_folder as vf
from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from ppsd.output import print_json
from ppsd.paths import RUNS_DIR, atomic_dir
from sim.modes import MODES, Mode
from sim.plan import Plan


def parse_plans(spec: str | None, num_layers: int, exits: list[int]) -> list[Plan]:
    """'eesd:10:3;ppsd:15:2' (mode:exit:γ for EESD, mode:exit:k for PPSD) or the default set."""
    if not spec:
        cands = sorted(exits) or list(range(1, num_layers))
        picks = sorted({min(cands, key=lambda e: abs(e - round(num_layers * f))) for f in (1 / 3, 1 / 2, 2 / 3)})
        return [Plan(Mode.EESD, e, draft_len=3) for e in picks] + [Plan(Mode.PPSD, e, stages=2) for e in picks]
    plans = []
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        parts = item.split(":")
        try:
            name, e = parts[0], int(parts[1])
            mode = Mode(name) if name in MODES else None
            x = int(parts[2]) if len(parts) > 2 else (3 if mode is Mode.EESD else 2)
        except (IndexError, ValueError):
            raise UserError(f"--plans item {item!r} is not mode:exit[:γ or k]", "write e.g. 'eesd:10:3;ppsd:15:2'") \
                from None
        if mode is None or not mode.speculative:
            raise UserError(f"--plans mode {name!r} is not eesd or ppsd", "write e.g. 'eesd:10:3;ppsd:15:2'")
        plans.append(Plan(mode, e, draft_len=x) if mode is Mode.EESD else Plan(mode, e, stages=x))
    return plans


def validate_command(args) -> int:
    import torch

    from profiler.model import load_model
    from profiler.schema import load_profile
    from runtime.heads import resolve_head_name
    from runtime.plans import check_resources, with_exit_head
    from sim.api import resolve_plan
    from sim.heads import check_head

    torch.set_num_threads(1)
    emulate = getattr(args, "emulate", None)
    predict_from = getattr(args, "predict_from", None)
    _check_sources(args.profile, emulate, predict_from)
    profile = load_profile(emulate or args.profile)
    predict = load_profile(predict_from) if predict_from else profile  # what the simulator prices
    if not profile.has_acceptance:
        raise UserError(f"profile {profile.path} has no acceptance traces",
                        "make it with --alpha-curve FILE or --acceptance-from DIR (`ppsd profile --analytic`)"
                        if emulate else "profile with acceptance enabled")
    heads_dir = getattr(args, "heads", None)
    if emulate:
        from runtime import emulate as em

        if heads_dir:
            raise UserError("--heads does not apply with --emulate (an emulated exit head is its profiled time)",
                            "drop --heads; --exit-head NAME picks a head the profile has")
        head = check_head(predict, check_head(profile, getattr(args, "exit_head", None) or SHARED))
        # synthetic prompts of the profile's prompt and generated lengths (runtime/emulate.py)
        gens = pick_round_robin([{"prompt_id": p.prompt_id, "category": p.category, "prompt_tokens": p.tokens,
                                  "token_ids": [0] * p.recorded_new} for p in em.emulated_prompts(profile, head)],
                                args.limit)
        model = em.load_emulated(emulate)
    else:
        head = check_head(profile, resolve_head_name(heads_dir, getattr(args, "exit_head", None)))
        gens = pick_round_robin(profile.generations(), args.limit)
        if not gens:
            raise UserError(f"profile {args.profile} lists no generations", "re-create it with ppsd profile")
        model = load_model(profile.model_id, profile.meta["hardware"].get("device", "cpu")
                           if profile.meta["hardware"].get("device") in ("cpu", "cuda") else "cpu",
                           profile.meta["model"].get("dtype", "float32"))
    n = model.num_layers
    for p in (profile, predict):
        if n != p.num_layers:
            raise UserError(f"the profile {p.path} is for a {p.num_layers}-layer model but {model.model_id} has {n}",
                            "validate on the model that was profiled")
    acc = profile.acceptance
    shared = acc[acc["head"] == head]  # the drafting head's traces ("shared" unless --exit-head)
    plans = parse_plans(args.plans, n, sorted(int(e) for e in shared["exit_layer"].unique()))
    if emulate:
        plans = [em.with_emulated_head(model, p, None, head) for p in plans]
    else:
        plans = [with_exit_head(model, p, heads_dir, head) for p in plans]  # refuses a folder without that exit
    # every plan is checked before anything is measured: bad input fails in seconds, not after AR ran
    plans = [resolve_plan(p.validate(n), predict) for p in plans]
    for p in plans:
        check_resources(p, str(model.device.type), oversubscribe=bool(emulate), command="validate")
    final = Path(args.out) if args.out else RUNS_DIR / f"validation-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    with atomic_dir(final) as out:  # an interrupted validation leaves no half-written folder
        (out / vf.TIMELINES_DIR).mkdir(parents=True, exist_ok=True)
        doc = _measure_and_predict(args, profile, model, plans, gens, shared, heads_dir, head, out,
                                   predict=predict, emulated=bool(emulate))
    if args.json:
        print_json(doc)
    else:
        print(format_table(doc["rows"]))
        if doc.get("mape_speedup_vs_ar_tp_pct") is not None:
            print(f"same budget ({doc['budget']}): MAPE of the speedup against AR on all of them "
                  f"{doc['mape_speedup_vs_ar_tp_pct']:.1f}%")
        if doc.get("emulated"):
            print(f"emulated devices: waits of {doc['profile']}'s times; predicted from "
                  f"{getattr(args, 'predict_from', None) or 'the same profile'}")
        print(f"MAPE speedup {doc['mape_speedup_pct']:.1f}% over {len(doc['rows']) - 1} speculative plans; "
              f"tokens/s {doc['mape_tokens_per_s_pct']:.1f}%  -> {final}")
    return 0


def _check_sources(profile: str | None, emulate: str | None, predict_from: str | None) -> None:
    if not profile and not emulate:
        raise UserError("ppsd validate needs a profile", "give --profile DIR (or --emulate PROFILE)")
    if predict_from and not emulate:
        raise UserError("--predict-from applies only with --emulate", "add --emulate PROFILE, or drop --predict-from")
    if emulate and profile and Path(profile).resolve() != Path(emulate).resolve():
        raise UserError("--profile and --emulate name different profiles",
                        "give --emulate PROFILE alone, and --predict-from DIR to predict from another profile")


def pick_round_robin(gens: list[dict], limit: int | None) -> list[dict]:
    """The first `limit` generations taken one category at a time, so a few prompts still span the
    categories (their acceptance differs a lot); `limit` 0/None keeps all."""
    if not limit:
        return gens
    by_cat: dict[str, list[dict]] = {}
    for g in gens:
        by_cat.setdefault(str(g.get("category")), []).append(g)
    picked, i = [], 0
    while len(picked) < min(limit, len(gens)):
        for cat in by_cat.values():
            if i < len(cat) and len(picked) < limit:
                picked.append(cat[i])
        i += 1
    return picked


def _measure_and_predict(args, profile, model, plans, gens, shared, heads_dir, head, out: Path, *,
                         predict=None, emulated: bool = False) -> dict:
    """Measure AR and every plan on `model` (emulated: waits of `profile`'s times, acceptance always
    its traces) and predict each from `predict` (default: `profile`); the validation document."""
    from runtime.acceptance import ForcedTrace
    from runtime.measure import Job, measure
    from sim.api import resolve_plan, simulate
    from sim.timeline import write_chrome_trace

    ids = [g["prompt_id"] for g in gens]
    prompts = [list(map(int, g["prompt_tokens"])) for g in gens]
    max_new = [len(g["token_ids"]) for g in gens]

    predict = profile if predict is None else predict

    def traces(e: int):
        if not args.force_trace and not emulated:  # emulated drafts have no acceptance of their own
            return None
        out = []
        for pid, t in zip(ids, max_new):
            rows = shared[(shared["prompt_id"] == pid) & (shared["exit_layer"] == e)].sort_values("position")
            out.append(ForcedTrace(tuple(int(m) for m in rows["match"]) or (0,), f"profile {pid}"))
        return out

    def job(p: Plan, forced=None) -> Job:
        return Job(plan=p, prompts=prompts, max_new=max_new, stop_at_eos=False, warmup=args.warmup,
                   repeats=args.repeats, timeout_s=args.stage_timeout, forced=forced, heads_dir=heads_dir)

    from runtime.same_budget import budget_cores
    from runtime.same_budget import measure_ar_in_budget, measure_plan_in_budget

    # same budget: AR with every core, measured at the start and again after every plan (each plan is
    # compared with the mean of the runs around it)
    cores = 1 if emulated else budget_cores(args, model.device.type == "cuda")  # threads do not speed up a wait
    if cores > 1 and cores not in profile.parallel_units():
        print(f"the profile has no {cores}-thread tables: same-budget speedups are measured, not predicted "
              "(re-profile with `ppsd profile --thread-counts`)", file=sys.stderr)
    ar_plan = Plan(Mode.AR)
    ar_tp_runs = [measure_ar_in_budget(model, job(ar_plan), cores, measure)] if cores > 1 else []
    ar_meas = measure(model, job(ar_plan))
    ar_pred = simulate(predict, resolve_plan(ar_plan, predict), acceptance="trace", prompt_ids=ids, timeline=True)
    rows = [vf.ValidationRow.from_results(ar_plan, ar_pred, ar_meas.result, ar_meas.result.tokens_per_s, None)]
    plan_tp: list[float | None] = [None]  # each plan's tokens/s within the budget (AR's is the reference)
    ar_tp_ref: list[float | None] = [None]  # the AR-on-every-core speed each plan is compared with
    _timelines(out, ar_plan, ar_pred, ar_meas.result, write_chrome_trace)
    ar_runs = [ar_meas.result.tokens_per_s]  # every AR measurement, in time order
    bracket = not getattr(args, "ar_once", False)
    for i, plan in enumerate(plans):
        print(f"[{i + 1}/{len(plans)}] {plan.label()} ..." + (" (then AR again)" if bracket else ""), flush=True,
              file=sys.stderr)  # progress: stdout stays the table, or JSON alone with --json
        pred = simulate(predict, plan, acceptance="trace", prompt_ids=ids, timeline=True)
        meas = measure(model, job(plan, traces(plan.exit_layer)))
        ar_ref = ar_runs[-1]
        if bracket:
            # A shared machine's speed drifts by a few % over minutes: each speedup is taken against
            # the AR measured right before and right after its plan.
            again = measure(model, replace(job(ar_plan), warmup=0, repeats=1, timeline=False))
            ar_runs.append(again.result.tokens_per_s)
            ar_ref = (ar_ref + ar_runs[-1]) / 2
        rows.append(vf.ValidationRow.from_results(plan, pred, meas.result, ar_ref, meas.outputs == ar_meas.outputs))
        _timelines(out, plan, pred, meas.result, write_chrome_trace)
        if cores > 1:
            plan_tp.append(measure_plan_in_budget(model, job(plan), cores, meas.result.tokens_per_s, measure))
            # AR on every core, bracketing the plan like AR on one (the machine drifts over minutes)
            ar_tp_runs.append(measure_ar_in_budget(model, replace(job(ar_plan), warmup=0, repeats=1), cores, measure))
            ar_tp_ref.append((ar_tp_runs[-2] + ar_tp_runs[-1]) / 2)
    if cores > 1:
        predicted = [_predicted_same_budget(profile, p, ids, cores) for p in [ar_plan, *plans]]
        rows = [r.with_same_budget(pr, 1.0 if i == 0 else plan_tp[i] / ar_tp_ref[i])
                for i, (r, pr) in enumerate(zip(rows, predicted))]
    doc = vf.make_doc(rows, profile=str(Path(profile.path).resolve()), model=model.model_id if emulated
                      else profile.model_id, device_name=profile.device_name,
                      forced_trace=bool(args.force_trace or emulated), exit_head=head,
                      ar_reference="bracketed" if bracket else "once", ar_tokens_per_s_runs=ar_runs,
                      budget=f"{cores} cores" if cores > 1 else None, emulated=emulated)
    vf.write_validation(out, doc)
    return doc


def _predicted_same_budget(profile, plan: Plan, prompt_ids, cores: int) -> float | None:
    """The simulator's same-budget speedup of a plan (None when the profile lacks the thread tables)."""
    from sim.api import resolve_plan, simulate

    if cores not in profile.parallel_units():
        return None
    return simulate(profile, resolve_plan(plan, profile), acceptance="trace", prompt_ids=prompt_ids, engine="fast",
                    budget=cores).speedup_vs_ar_tp


def _timelines(out: Path, plan: Plan, pred, meas, write) -> None:
    write(vf.timeline_path(out, plan, vf.MEASURED), meas.timeline, f"{plan.label()} measured")
    write(vf.timeline_path(out, plan, vf.SIMULATED), pred.timeline, f"{plan.label()} simulated")


def format_table(rows: list[dict]) -> str:
    same = any(r.get("measured_speedup_vs_ar_tp") is not None for r in rows)
    extra = f" {'pred ×TP':>8} {'meas ×TP':>8}" if same else ""
    head = f"{'plan':28} {'pred tok/s':>10} {'meas tok/s':>10} {'pred ×':>7} {'meas ×':>7} {'err %':>7}{extra}  match"
    lines = [head, "-" * len(head)]
    fmt = lambda v: f"{v:8.3f}" if v is not None else f"{'-':>8}"  # noqa: E731
    for r in rows:
        tp = f" {fmt(r.get('predicted_speedup_vs_ar_tp'))} {fmt(r.get('measured_speedup_vs_ar_tp'))}" if same else ""
        lines.append(f"{r['plan']:28} {r['predicted_tokens_per_s']:10.2f} {r['measured_tokens_per_s']:10.2f} "
                     f"{r['predicted_speedup']:7.3f} {r['measured_speedup']:7.3f} {r['speedup_error_pct']:7.1f}{tp}  "
                     f"{'' if r['outputs_match_ar'] is None else r['outputs_match_ar']}")
    return "\n".join(lines)
