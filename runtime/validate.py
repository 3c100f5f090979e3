"""`ppsd validate`: measure plans for real and lay them beside the simulator's prediction.

Same profile, same model, same prompts (the profile's own generations: prompt tokens and lengths),
same traces. Writes the validation folder described in docs/contracts.md and prints the table.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
from dataclasses import replace
from pathlib import Path

from ppsd.errors import UserError
from ppsd.paths import RUNS_DIR, atomic_dir, atomic_write_json, atomic_write_text
from sim.plan import Plan

COLUMNS = ["plan", "mode", "exit_layer", "draft_len", "stages", "stage_bounds", "predicted_tokens_per_s",
           "measured_tokens_per_s", "measured_tokens_per_s_p10", "measured_tokens_per_s_p90", "predicted_speedup",
           "measured_speedup", "speedup_error_pct", "tokens_per_s_error_pct", "outputs_match_ar",
           "ar_reference_tokens_per_s"]


def parse_plans(spec: str | None, num_layers: int, exits: list[int]) -> list[Plan]:
    """'eesd:10:3;ppsd:15:2' (mode:exit:γ for EESD, mode:exit:k for PPSD) or the default set."""
    if not spec:
        cands = sorted(exits) or list(range(1, num_layers))
        picks = sorted({min(cands, key=lambda e: abs(e - round(num_layers * f))) for f in (1 / 3, 1 / 2, 2 / 3)})
        return [Plan("eesd", e, draft_len=3) for e in picks] + [Plan("ppsd", e, stages=2) for e in picks]
    plans = []
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        parts = item.split(":")
        try:
            mode, e = parts[0], int(parts[1])
            x = int(parts[2]) if len(parts) > 2 else (3 if mode == "eesd" else 2)
        except (IndexError, ValueError):
            raise UserError(f"--plans item {item!r} is not mode:exit[:γ or k]", "write e.g. 'eesd:10:3;ppsd:15:2'") \
                from None
        if mode not in ("eesd", "ppsd"):
            raise UserError(f"--plans mode {mode!r} is not eesd or ppsd", "write e.g. 'eesd:10:3;ppsd:15:2'")
        plans.append(Plan(mode, e, draft_len=x) if mode == "eesd" else Plan(mode, e, stages=x))
    return plans


def _slug(plan: Plan) -> str:
    if plan.mode == "ar":
        return "ar"
    head = "" if plan.exit_head == "shared" else f"-{plan.exit_head}"
    if plan.mode == "eesd":
        return f"eesd-e{plan.exit_layer}-g{plan.draft_len}{head}"
    return f"ppsd-e{plan.exit_layer}-k{plan.num_stages}{head}"


def _pct(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas if meas else float("nan")


def validate_command(args) -> int:
    import torch

    from profiler.model import load_model
    from profiler.schema import load_profile
    from runtime.heads import resolve_head_name
    from runtime.runner import check_resources, with_exit_head
    from sim.api import resolve_plan
    from sim.heads import check_head

    torch.set_num_threads(1)
    profile = load_profile(args.profile)
    if not profile.has_acceptance:
        raise UserError(f"profile {args.profile} has no acceptance traces", "profile with acceptance enabled")
    heads_dir = getattr(args, "heads", None)
    head = check_head(profile, resolve_head_name(heads_dir, getattr(args, "exit_head", None)))
    gens = pick_round_robin(profile.generations(), args.limit)
    if not gens:
        raise UserError(f"profile {args.profile} lists no generations", "re-create it with ppsd profile")
    model = load_model(profile.model_id, profile.meta["hardware"].get("device", "cpu")
                       if profile.meta["hardware"].get("device") in ("cpu", "cuda") else "cpu",
                       profile.meta["model"].get("dtype", "float32"))
    n = model.num_layers
    if n != profile.num_layers:
        raise UserError(f"the profile is for a {profile.num_layers}-layer model but {profile.model_id} has {n}",
                        "validate on the model that was profiled")
    acc = profile.acceptance
    shared = acc[acc["head"] == head]  # the drafting head's traces ("shared" unless --exit-head)
    plans = parse_plans(args.plans, n, sorted(int(e) for e in shared["exit_layer"].unique()))
    plans = [with_exit_head(model, p, heads_dir, head) for p in plans]  # refuses a folder without that exit
    # every plan is checked before anything is measured: bad input fails in seconds, not after AR ran
    plans = [resolve_plan(p.validate(n), profile) for p in plans]
    for p in plans:
        check_resources(p, str(model.device.type))
    final = Path(args.out) if args.out else RUNS_DIR / f"validation-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    with atomic_dir(final) as out:  # an interrupted validation leaves no half-written folder
        (out / "timelines").mkdir(parents=True, exist_ok=True)
        doc = _measure_and_predict(args, profile, model, plans, gens, shared, heads_dir, head, out)
    if args.json:
        from runtime.cli import print_json

        print_json(doc)
    else:
        print(format_table(doc["rows"]))
        print(f"MAPE speedup {doc['mape_speedup_pct']:.1f}% over {len(doc['rows']) - 1} speculative plans; "
              f"tokens/s {doc['mape_tokens_per_s_pct']:.1f}%  -> {final}")
    return 0


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


def _measure_and_predict(args, profile, model, plans, gens, shared, heads_dir, head, out: Path) -> dict:
    from runtime.acceptance import ForcedTrace
    from runtime.measure import Job, measure
    from sim.api import resolve_plan, simulate
    from sim.timeline import write_chrome_trace

    ids = [g["prompt_id"] for g in gens]
    prompts = [list(map(int, g["prompt_tokens"])) for g in gens]
    max_new = [len(g["token_ids"]) for g in gens]

    def traces(e: int):
        if not args.force_trace:
            return None
        out = []
        for pid, t in zip(ids, max_new):
            rows = shared[(shared["prompt_id"] == pid) & (shared["exit_layer"] == e)].sort_values("position")
            out.append(ForcedTrace(tuple(int(m) for m in rows["match"]) or (0,), f"profile {pid}"))
        return out

    def job(p: Plan, forced=None) -> Job:
        return Job(plan=p, prompts=prompts, max_new=max_new, stop_at_eos=False, warmup=args.warmup,
                   repeats=args.repeats, timeout_s=args.stage_timeout, forced=forced, heads_dir=heads_dir)

    ar_plan = Plan("ar")
    ar_meas = measure(model, job(ar_plan))
    ar_pred = simulate(profile, resolve_plan(ar_plan, profile), acceptance="trace", prompt_ids=ids, timeline=True)
    rows = [_row(ar_plan, ar_pred, ar_meas.result, ar_meas.result.tokens_per_s, None)]
    _timelines(out, ar_plan, ar_pred, ar_meas.result, write_chrome_trace)
    ar_runs = [ar_meas.result.tokens_per_s]  # every AR measurement, in time order
    bracket = not getattr(args, "ar_once", False)
    for i, plan in enumerate(plans):
        print(f"[{i + 1}/{len(plans)}] {plan.label()} ..." + (" (then AR again)" if bracket else ""), flush=True)
        pred = simulate(profile, plan, acceptance="trace", prompt_ids=ids, timeline=True)
        meas = measure(model, job(plan, traces(plan.exit_layer)))
        ar_ref = ar_runs[-1]
        if bracket:
            # A shared machine's speed drifts by a few % over minutes: each speedup is taken against
            # the AR measured right before and right after its plan.
            again = measure(model, replace(job(ar_plan), warmup=0, repeats=1, timeline=False))
            ar_runs.append(again.result.tokens_per_s)
            ar_ref = (ar_ref + ar_runs[-1]) / 2
        rows.append(_row(plan, pred, meas.result, ar_ref, meas.outputs == ar_meas.outputs))
        _timelines(out, plan, pred, meas.result, write_chrome_trace)
    spec_rows = [r for r in rows if r["mode"] != "ar"]
    mape_s = sum(abs(r["speedup_error_pct"]) for r in spec_rows) / max(len(spec_rows), 1)
    mape_t = sum(abs(r["tokens_per_s_error_pct"]) for r in rows) / len(rows)
    doc = {"schema_version": 1, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "profile": str(Path(args.profile).resolve()), "model": profile.model_id,
           "device_name": profile.device_name, "mape_speedup_pct": round(mape_s, 3),
           "mape_tokens_per_s_pct": round(mape_t, 3), "forced_trace": bool(args.force_trace), "exit_head": head,
           "ar_reference": "bracketed" if bracket else "once", "ar_tokens_per_s_runs": [round(x, 4) for x in ar_runs],
           "rows": rows}
    atomic_write_json(out / "validation.json", doc)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({**r, "stage_bounds": " ".join(map(str, r["stage_bounds"] or []))})
    atomic_write_text(out / "validation.csv", buf.getvalue())
    return doc


def _row(plan: Plan, pred, meas, ar_tps: float, match) -> dict:
    ms = meas.tokens_per_s / ar_tps if ar_tps else float("nan")
    ps = pred.speedup_vs_ar if pred.speedup_vs_ar is not None else 1.0
    return {"plan": plan.label(), "mode": plan.mode, "exit_layer": plan.exit_layer,
            "draft_len": plan.draft_len if plan.mode == "eesd" else None, "stages": plan.num_stages,
            "stage_bounds": list(plan.stage_bounds) if plan.stage_bounds else None,
            "predicted_tokens_per_s": round(pred.tokens_per_s, 4), "measured_tokens_per_s": round(meas.tokens_per_s, 4),
            "measured_tokens_per_s_p10": round(meas.extra["tokens_per_s_p10"], 4),
            "measured_tokens_per_s_p90": round(meas.extra["tokens_per_s_p90"], 4),
            "predicted_speedup": round(ps, 4), "measured_speedup": round(ms, 4),
            "speedup_error_pct": round(_pct(ps, ms), 3),
            "tokens_per_s_error_pct": round(_pct(pred.tokens_per_s, meas.tokens_per_s), 3),
            "outputs_match_ar": match, "ar_reference_tokens_per_s": round(ar_tps, 4),
            "measured_acceptance_rate": meas.acceptance_rate, "predicted_acceptance_rate": pred.acceptance_rate}


def _timelines(out: Path, plan: Plan, pred, meas, write) -> None:
    write(out / "timelines" / f"{_slug(plan)}.measured.json", meas.timeline, f"{plan.label()} measured")
    write(out / "timelines" / f"{_slug(plan)}.simulated.json", pred.timeline, f"{plan.label()} simulated")


def format_table(rows: list[dict]) -> str:
    head = f"{'plan':28} {'pred tok/s':>10} {'meas tok/s':>10} {'pred ×':>7} {'meas ×':>7} {'err %':>7}  match"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['plan']:28} {r['predicted_tokens_per_s']:10.2f} {r['measured_tokens_per_s']:10.2f} "
                     f"{r['predicted_speedup']:7.3f} {r['measured_speedup']:7.3f} {r['speedup_error_pct']:7.1f}  "
                     f"{'' if r['outputs_match_ar'] is None else r['outputs_match_ar']}")
    return "\n".join(lines)
