"""`ppsd validate`: measure plans for real and lay them beside the simulator's prediction.

In sample (default): same profile, same model, same prompts (the profile's own generations: prompt
tokens and lengths), same traces: only the timing model is tested. Out of sample: the profile that
predicts (`--predict-from DIR`, or the part of one prompt set that `--split F` keeps for prediction)
supplies acceptance and latency; the measured prompts (`--profile`'s generations, `--prompts FILE`,
or the other part of the split) supply only their lengths: the predicting prompts' traces are laid
over them (`sim.intervals.pooled_stream`), never the measured prompts' own traces. Every prediction
carries a 90% interval for the number of prompts measured (`sim/intervals.py`). Writes the
validation folder described in docs/contracts.md and prints the table (`--json`: the document alone
on stdout, progress on stderr).
"""

from __future__ import annotations

import datetime as _dt
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ppsd import validation_folder as vf
from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from ppsd.output import print_json
from ppsd.paths import RUNS_DIR, atomic_dir, display_path
from sim.modes import MODES, Mode
from sim.plan import Plan


@dataclass(frozen=True)
class PlanItem:
    """One plan of `--plans`: the plan, the exit head it drafts with (None: `--exit-head`'s) and a
    forced acceptance α (None: the drafts' real acceptance). A forced plan is a timing check only:
    seeded Bernoulli(α) bits decide every draft, the same bits in the measured run and in its
    prediction, so its output is not AR's and its acceptance says nothing about the head."""

    plan: Plan
    head: str | None = None
    forced_alpha: float | None = None


PLAN_SYNTAX = "mode:exit[:γ or k][:head=NAME][:alpha=A], e.g. 'eesd:10:3;ppsd:24:2:head=vocab4096;ppsd:15:2:alpha=0.9'"


def parse_plan_items(spec: str | None, num_layers: int, exits: list[int]) -> list[PlanItem]:
    """`--plans` (see PLAN_SYNTAX; γ for EESD, k for PPSD) or the default set: 3 exit layers × EESD γ=3
    and PPSD k=2."""
    if not spec:
        cands = sorted(exits) or list(range(1, num_layers))
        picks = sorted({min(cands, key=lambda e: abs(e - round(num_layers * f))) for f in (1 / 3, 1 / 2, 2 / 3)})
        return [PlanItem(Plan(Mode.EESD, e, draft_len=3)) for e in picks] + \
            [PlanItem(Plan(Mode.PPSD, e, stages=2)) for e in picks]
    items = []
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        parts = [x.strip() for x in item.split(":")]
        options = [x for x in parts[2:] if "=" in x]
        positional = parts[:2] + [x for x in parts[2:] if "=" not in x]
        try:
            name, e = positional[0], int(positional[1])
            mode = Mode(name) if name in MODES else None
            if len(positional) > 3:
                raise ValueError
            x = int(positional[2]) if len(positional) > 2 else (3 if mode is Mode.EESD else 2)
        except (IndexError, ValueError):
            raise UserError(f"--plans item {item!r} is not {PLAN_SYNTAX.split(', e.g.')[0]}",
                            f"write e.g. {PLAN_SYNTAX.split('e.g. ')[1]}") from None
        if mode is None or not mode.speculative:
            raise UserError(f"--plans mode {name!r} is not eesd or ppsd", "write e.g. 'eesd:10:3;ppsd:15:2'")
        head, alpha = None, None
        for opt in options:
            key, _, value = opt.partition("=")
            if key == "head" and value:
                head = value
            elif key == "alpha":
                try:
                    alpha = float(value)
                except ValueError:
                    alpha = float("nan")
                if not 0.0 <= alpha <= 1.0:
                    raise UserError(f"--plans item {item!r}: alpha={value} is not a probability",
                                    "give a forced acceptance between 0 and 1, e.g. alpha=0.9")
            else:
                raise UserError(f"--plans item {item!r}: unknown option {opt!r}",
                                "the options are head=NAME (the exit head that drafts) and alpha=A "
                                "(forced acceptance, timing only)")
        plan = Plan(mode, e, draft_len=x) if mode is Mode.EESD else Plan(mode, e, stages=x)
        items.append(PlanItem(plan, head, alpha))
    return items


def parse_plans(spec: str | None, num_layers: int, exits: list[int]) -> list[Plan]:
    """The plans of `--plans` (their options dropped: see `parse_plan_items`)."""
    return [i.plan for i in parse_plan_items(spec, num_layers, exits)]


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
    prompts_file = getattr(args, "prompts", None)
    split = getattr(args, "split", None)
    _check_sources(args.profile, emulate, predict_from, prompts_file, split)
    if getattr(args, "unseen", False) and not prompts_file:
        raise UserError("--unseen picks among the prompts of --prompts FILE", "give --prompts FILE (or spec-bench)")
    if int(getattr(args, "draws", 200)) < 20:
        raise UserError(f"--draws {args.draws} is too few for a 90% interval", "give --draws 20 or more (default 200)")
    rounds = getattr(args, "rounds", None)
    rounds = 1 if rounds is None else int(rounds)
    if rounds < 1:
        raise UserError(f"--rounds {rounds} measures nothing", "give --rounds 1 or more (e.g. 3)")
    if rounds > 1 and float(getattr(args, "temperature", 0.0) or 0.0) > 0:
        raise UserError("--rounds repeats greedy plans; a sampled validation repeats over its seeds",
                        "drop --rounds, or give --seeds S")
    profile = load_profile(emulate or args.profile or predict_from)  # the model, and the measured prompts
    predict = load_profile(predict_from) if predict_from else profile  # what the simulator prices
    from runtime import validate_sampled

    # sampled validation (--temperature T > 0): T must be one the predicting profile holds β at
    temperature = validate_sampled.check_temperature(args, predict, emulated=bool(emulate))
    for p in [predict, *([profile] if (emulate or args.force_trace) and profile is not predict else [])]:
        if not p.has_acceptance:
            raise UserError(f"profile {p.path} has no acceptance traces",
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
                                0)  # the measured ones are picked below (split_sides: --split, --limit)
        model = em.load_emulated(emulate)
    else:
        head = resolve_head_name(heads_dir, getattr(args, "exit_head", None))
        head = check_head(predict, head if prompts_file or predict is not profile else check_head(profile, head))
        if not prompts_file and not profile.generations():
            raise UserError(f"profile {profile.path} lists no generations", "re-create it with ppsd profile")
        model = load_model(profile.model_id, profile.meta["hardware"].get("device", "cpu")
                           if profile.meta["hardware"].get("device") in ("cpu", "cuda") else "cpu",
                           profile.meta["model"].get("dtype", "float32"))
        if prompts_file:
            gens = prompt_generations(model, prompts_file, args.limit, profile,
                                      unseen_exclusions(predict, heads_dir) if getattr(args, "unseen", False) else ())
        else:
            gens = pick_round_robin(profile.generations(), 0)
    sides = split_sides(predict, head, gens, split, args.limit, prompts_file=prompts_file, emulated=bool(emulate))
    gens = sides.measured
    n = model.num_layers
    for p in (profile, predict):
        if n != p.num_layers:
            raise UserError(f"the profile {p.path} is for a {p.num_layers}-layer model but {model.model_id} has {n}",
                            "validate on the model that was profiled")
    # the measured prompts' own traces, per head (--force-trace and emulated runs replay them)
    acc = profile.acceptance if profile.has_acceptance else None
    pacc = predict.acceptance
    items = parse_plan_items(args.plans, n, sorted(int(e) for e in pacc[pacc["head"] == head]["exit_layer"].unique()))
    plans, forced = [], []
    for it in items:
        h = head
        if it.head is not None:  # `head=NAME` in --plans: this plan drafts with its own head
            h = it.head if emulate else resolve_head_name(heads_dir, it.head)
            h = check_head(predict, check_head(profile, h) if emulate else h)
        if it.forced_alpha is not None and temperature > 0:
            raise UserError(f"--plans alpha={it.forced_alpha:g} forces greedy accept/reject decisions; sampled "
                            "validation measures real acceptance", "drop alpha= from --plans, or --temperature")
        if h != head and temperature > 0:
            raise UserError(f"sampled validation uses one exit head ({head}); --plans asks for {h}",
                            "validate one head at a time with --exit-head NAME")
        if emulate:
            p = em.with_emulated_head(model, it.plan, None, h)
        else:
            p = with_exit_head(model, it.plan, heads_dir, h)  # refuses a folder without that exit
        plans.append(p)
        forced.append(it.forced_alpha)
    # every plan is checked before anything is measured: bad input fails in seconds, not after AR ran
    plans = [resolve_plan(p.validate(n), predict) for p in plans]
    for p in plans:
        check_resources(p, str(model.device.type), oversubscribe=bool(emulate), command="validate")
    final = Path(args.out) if args.out else RUNS_DIR / f"validation-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    with atomic_dir(final) as out:  # an interrupted validation leaves no half-written folder
        (out / vf.TIMELINES_DIR).mkdir(parents=True, exist_ok=True)
        if temperature > 0:
            doc = validate_sampled.measure_and_predict(args, profile, model, plans, head, out, predict_profile=predict,
                                                       temperature=temperature, sides=sides)
        else:
            doc = _measure_and_predict(args, profile, model, plans, gens, acc, heads_dir, head, out,
                                       predict=predict, emulated=bool(emulate), sides=sides, forced=forced)
    for key in ("machine_drift", "corun_drift"):
        drift = doc.get(key) or {}
        if drift.get("flagged"):
            print(f"warning: {drift['note']}", file=sys.stderr)
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
        if doc.get("predicted_from"):
            print(f"predicted from {doc['predicted_from']} on {len(doc['prediction_prompt_ids'])} prompts, measured "
                  f"{len(doc['measured_prompt_ids'])} prompts ({doc['measured_prompts']}): "
                  + ("out of sample (disjoint prompt sets)" if doc["out_of_sample"] else
                     f"in sample ({len(doc['overlapping_prompt_ids'])} measured prompts among the predicting ones)"))
        for line in breakdown_lines(doc):
            print(line)
        if doc.get("coverage") is not None:
            print(f"90% intervals (for {doc['interval']['prompts_n']} prompts) cover "
                  f"{doc['coverage']:.0%} of {doc['coverage_plans']} measured speedups")
        if doc.get("temperature"):
            print(validate_sampled.format_sampled(doc))
        retimed = doc.get("retime") or {}
        if retimed.get("mape_speedup_profile_pct") is not None:
            print(f"priced with the pieces timed before each plan (--retime); priced from the profile alone the "
                  f"speedup MAPE is {retimed['mape_speedup_profile_pct']:.1f}% (worst "
                  f"{retimed['worst_error_profile_pct']:.1f}%)")
        noise = doc.get("measurement_noise") or {}
        if noise.get("plans"):
            print(f"measured in {doc['rounds']} rounds: speedups {noise['median_round_spread_pct']:.1f}% apart from round "
                  f"to round (median); their noise alone would give a MAPE of {noise['noise_floor_mape_pct']:.1f}%")
        print(f"MAPE speedup {doc['mape_speedup_pct']:.1f}% over {len(doc['rows']) - 1} speculative plans; "
              f"tokens/s {doc['mape_tokens_per_s_pct']:.1f}%  -> {final}")
    return 0


def breakdown_lines(doc: dict) -> list[str]:
    """The MAPE of parts of the plans (validation_folder._breakdown), one line each, when recorded."""
    b = doc.get("breakdown") or {}
    out = []
    for key, title in vf.BREAKDOWN_TITLES.items():
        part = b.get(key) or {}
        if part.get("plans"):
            out.append(f"{title}: speedup MAPE {part['mape_speedup_pct']:.1f}% "
                       f"over {part['plans']} plans (worst {part['worst_error_pct']:.1f}%)")
    return out


def unseen_exclusions(predict, heads_dir: str | None) -> list[set[str]]:
    """What `--unseen` leaves out of the measured prompts: the predicting profile's prompts (ids and
    texts) and, with --heads, the prompts those exit heads were trained on."""
    seen = {str(i) for i in predict.acceptance["prompt_id"].unique()} if predict.has_acceptance else set()
    seen |= {str(g["prompt_id"]) for g in predict.generations()} | \
        {g["prompt"] for g in predict.generations() if g.get("prompt")}
    out = [seen]
    if heads_dir:
        from profiler.heads.store import read_meta

        out.append({str(i) for i in (read_meta(heads_dir).training or {}).get("train_prompt_ids") or []})
    return out


def _check_sources(profile: str | None, emulate: str | None, predict_from: str | None,
                   prompts_file: str | None = None, split: float | None = None) -> None:
    if not profile and not emulate and not predict_from:
        raise UserError("ppsd validate needs a profile", "give --profile DIR (or --emulate PROFILE)")
    if emulate and profile and Path(profile).resolve() != Path(emulate).resolve():
        raise UserError("--profile and --emulate name different profiles",
                        "give --emulate PROFILE alone, and --predict-from DIR to predict from another profile")
    if prompts_file and emulate:
        raise UserError("--prompts does not apply with --emulate (emulated prompts are the profile's lengths)",
                        "drop --prompts, or --split F to measure part of the emulated profile's prompts")
    if split is not None:
        if not 0.0 < float(split) < 1.0:
            raise UserError(f"--split {split} is not a fraction between 0 and 1",
                            "give e.g. --split 0.5: half of each category's prompts predict, the rest are measured")
        if predict_from or prompts_file:
            raise UserError("--split divides one profile's prompts; --predict-from / --prompts bring another set",
                            "give --split F alone, or --predict-from DIR / --prompts FILE without it")


# --- the two sides: prompts that predict, prompts that are measured -------------------------------
@dataclass
class Sides:
    """Which prompts predict (ids whose acceptance the predicting profile supplies) and which are
    measured (generations: prompt tokens and lengths), and how they relate."""

    prediction_ids: list[str]
    measured: list[dict]
    overlap: list[str]           # measured ids that are prediction prompts (by id, or the same text)
    in_sample: bool              # every measured prompt is one of the prediction prompts: replay its trace
    measured_prompts: str        # where the measured prompts came from
    split: float | None = None


def prompt_generations(model, prompts_file: str, limit: int | None, profile,
                       exclude: Sequence[set[str]] = ()) -> list[dict]:
    """Measured prompts from a prompt file (Spec-Bench JSONL, spec-bench, or the built-in set),
    taken round-robin over categories, encoded as the profiler encodes them, each generating the
    profile's recorded number of new tokens. `exclude`: sets of prompt ids and texts to leave out
    (`--unseen`: the predicting profile's prompts, the exit heads' training prompts)."""
    from profiler.prompts import load_prompts

    prompts = load_prompts(None if prompts_file == "builtin" else prompts_file)
    if exclude:
        drop = set().union(*exclude)
        prompts = [p for p in prompts if str(p.prompt_id) not in drop and p.text not in drop]
        if not prompts:
            raise UserError(f"--unseen leaves no prompt of {prompts_file} to measure",
                            "give a prompt file with prompts the profile and the heads never saw")
    rows = [{"prompt_id": p.prompt_id, "category": p.category, "prompt": p.text} for p in prompts]
    max_new = int((profile.meta.get("acceptance") or {}).get("max_new_tokens") or 64)
    return [{**g, "prompt_tokens": model.encode_prompt(g["prompt"]), "token_ids": [0] * max_new}
            for g in pick_round_robin(rows, limit)]


def split_prompts(gens: list[dict], fraction: float) -> tuple[list[dict], list[dict]]:
    """(prediction part, measured part) of one prompt set: in each category, in order, the first
    round(F · n) prompts predict (at least one, and at least one is left to measure); the prompts
    of categories with a single prompt are split the same way among themselves."""
    by_cat: dict[str, list[dict]] = {}
    for g in gens:
        by_cat.setdefault(str(g.get("category")), []).append(g)
    groups = [items for items in by_cat.values() if len(items) > 1]
    groups.append([items[0] for items in by_cat.values() if len(items) == 1])
    pred_ids = set()
    for items in groups:
        if len(items) < 2:
            pred_ids |= {str(g["prompt_id"]) for g in items}
            continue
        k = min(max(int(round(fraction * len(items))), 1), len(items) - 1)
        pred_ids |= {str(g["prompt_id"]) for g in items[:k]}
    return ([g for g in gens if str(g["prompt_id"]) in pred_ids],
            [g for g in gens if str(g["prompt_id"]) not in pred_ids])


def split_sides(predict, head: str, gens: list[dict], split: float | None, limit: int | None, *,
                prompts_file: str | None = None, emulated: bool = False) -> Sides:
    """The prediction prompt ids (those `predict` traced for `head`; with a split, only its
    prediction part) and the measured generations (`gens`, or the split's other part; `limit` of
    them round-robin over categories)."""
    acc = predict.acceptance
    traced = list(dict.fromkeys(acc[acc["head"] == head]["prompt_id"].astype(str)))
    source = f"file {prompts_file}" if prompts_file else ("emulated from the profile" if emulated else "profile")
    if split is not None:
        pred_part, meas_part = split_prompts(gens, float(split))
        keep = {str(g["prompt_id"]) for g in pred_part}
        traced = [p for p in traced if p in keep]
        gens = meas_part
        source = f"split {float(split):g}: the profile's other prompts"
        if not traced or not gens:
            raise UserError(f"--split {split} leaves {len(traced)} prediction and {len(gens)} measured prompts",
                            "profile more prompts per category, or choose another fraction")
    measured = pick_round_robin(gens, limit)
    if not measured:
        raise UserError("no prompts to measure", "give --prompts FILE or a profile with generations")
    texts = {str(g["prompt_id"]): g.get("prompt") for g in predict.generations()}
    pred = set(traced)
    pred_texts = {t for p, t in texts.items() if p in pred and t}
    overlap, same = [], []
    for g in measured:
        pid, text = str(g["prompt_id"]), g.get("prompt")
        by_id = pid in pred and (text is None or texts.get(pid) in (None, text))
        if by_id or (text and text in pred_texts):
            overlap.append(pid)
        same.append(by_id)
    return Sides(traced, measured, overlap, all(same) and split is None, source, split)


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


def _measure_and_predict(args, profile, model, plans, gens, acc, heads_dir, head, out: Path, *,
                         predict=None, emulated: bool = False, sides: Sides | None = None,
                         forced: list[float | None] | None = None) -> dict:
    """Measure AR and every plan on `model` (emulated: waits of `profile`'s times, acceptance always
    its traces) and predict each from `predict` (default: `profile`): in sample, each measured
    prompt's own trace in `predict`; otherwise `predict`'s prediction prompts laid over the measured
    prompts' lengths, and beside it (when `profile` traced the measured prompts) the in-sample
    prediction from their own traces. `forced[i]` (α or None) forces plan i's acceptance to seeded
    Bernoulli(α) bits, the same in the run and the prediction. `acc`: `profile`'s acceptance table.
    Each prediction gets its 90% interval for len(gens) prompts; the validation document."""
    from runtime.acceptance import ForcedTrace
    from runtime.measure import Job, measure
    from sim import intervals as iv
    from sim.api import resolve_plan, simulate
    from sim.run import simulate_stream
    from sim.timeline import write_chrome_trace

    ids = [g["prompt_id"] for g in gens]
    prompts = [list(map(int, g["prompt_tokens"])) for g in gens]
    max_new = [len(g["token_ids"]) for g in gens]
    forced = list(forced) if forced is not None else [None] * len(plans)

    predict = profile if predict is None else predict
    if sides is None:  # the in-sample default: the measured prompts are the prediction prompts
        sides = Sides([str(i) for i in ids], gens, [str(i) for i in ids], True, "profile")
    targets = iv.Targets.from_generations(gens)
    temperature = float(getattr(args, "temperature", 0.0) or 0.0)
    draws, seed = int(getattr(args, "draws", iv.REPLAY_DRAWS)), int(getattr(args, "seed", 0) or 0)
    pred_traces: dict[tuple[int, str], iv.PromptTraces] = {}

    def traces_of(e: int, h: str) -> iv.PromptTraces:
        """The prediction prompts' traces at exit e for head h (what predicts out of sample)."""
        if (e, h) not in pred_traces:
            pred_traces[(e, h)] = iv.prompt_traces(predict, e, head=h, prompt_ids=sides.prediction_ids,
                                                   temperature=temperature)
        return pred_traces[(e, h)]

    def forced_traces(i: int) -> iv.PromptTraces:
        """Plan i's forced acceptance: seeded Bernoulli(α) bits per measured prompt and position."""
        p, alpha = plans[i], forced[i]
        rng = np.random.default_rng([seed, int(p.exit_layer), int(round(alpha * 1e6)), 17])
        bits = [(rng.random(n) < alpha).astype(float) for n in max_new]
        return iv.PromptTraces(int(p.exit_layer), [str(x) for x in ids], bits, list(targets.start_context))

    views: dict[tuple[int, int], object] = {}  # (profile, scale) -> its retimed view, made once per plan

    def priced(src, scale):
        """`src` priced with `scale` (`--retime`; None: its own tables), one view per pair: a view
        keeps its own caches (thread tables, beta rows), so the prediction, its twin, its interval
        and its same-budget figure share it."""
        if scale is None:
            return src
        key = (id(src), id(scale))
        if key not in views:
            views[key] = src.retimed(scale)
        return views[key]

    def predicted(p: Plan, i: int | None = None, *, timeline: bool = False, budget: int | None = None,
                  engine: str = "event", in_sample: bool | None = None, scale=None):
        """The prediction of a plan (plan index i; None for AR) for the measured prompts (see above),
        priced from the profile, or with `scale` (`--retime`) from the pieces as timed before it ran."""
        in_sample = sides.in_sample if in_sample is None else in_sample
        price = priced(predict, scale)
        if i is not None and forced[i] is not None:
            tr = forced_traces(i)
            stream = iv.overlay_stream(tr, list(range(len(tr))), targets)
        elif in_sample:
            src = predict if sides.in_sample else profile  # the measured prompts' own traces
            src = priced(src, scale)
            return simulate(src, resolve_plan(p, src), acceptance="trace", prompt_ids=ids,
                            timeline=timeline, budget=budget, engine=engine)
        elif p.exit_layer is None:
            stream = iv.lengths_stream(targets)
        else:
            stream = iv.pooled_stream(traces_of(p.exit_layer, p.exit_head), targets, seed)
        return simulate_stream(price, p, stream, engine=engine, timeline=timeline, budget=budget, seed=seed)

    def interval(p: Plan, i: int | None, point: float, scale=None, noise_cv: float = 0.0) -> tuple[float, float]:
        price = priced(predict, scale)
        plan = resolve_plan(p, price)
        if i is not None and forced[i] is not None:  # acceptance is fixed: the latency and measurement spreads
            lat = iv.replay_interval(price, plan, None, targets=targets, draws=draws, seed=seed,
                                     measurement_cv=noise_cv)
            return point * lat.lo, point * lat.hi
        tr = traces_of(plan.exit_layer, plan.exit_head) if plan.exit_layer is not None else None
        return _around(point, iv.replay_interval(price, plan, tr, targets=targets, draws=draws, seed=seed,
                                                 measurement_cv=noise_cv))

    def traces(i: int):
        """What forces plan i's acceptance in the run: its forced bits, or (--force-trace, emulated
        runs) the measured prompts' own traces; None: the drafts' real acceptance."""
        p = plans[i]
        if forced[i] is not None:
            return [ForcedTrace(tuple(int(b) for b in bits) or (0,), f"forced α={forced[i]:g}")
                    for bits in forced_traces(i).prob]
        if not args.force_trace and not emulated:  # emulated drafts have no acceptance of their own
            return None
        mine = acc[acc["head"] == p.exit_head]
        out = []
        for pid, t in zip(ids, max_new):
            rows = mine[(mine["prompt_id"] == pid) & (mine["exit_layer"] == p.exit_layer)].sort_values("position")
            out.append(ForcedTrace(tuple(int(m) for m in rows["match"]) or (0,), f"profile {pid}"))
        return out

    def job(p: Plan, forced_traces=None) -> Job:
        return Job(plan=p, prompts=prompts, max_new=max_new, stop_at_eos=False, warmup=args.warmup,
                   repeats=args.repeats, timeout_s=args.stage_timeout, forced=forced_traces, heads_dir=heads_dir)

    from runtime.same_budget import budget_cores
    from runtime.same_budget import measure_ar_in_budget, measure_plan_in_budget

    # same budget: AR with every core, measured at the start and again after every plan (each plan is
    # compared with the mean of the runs around it)
    cores = 1 if emulated else budget_cores(args, model.device.type == "cuda")  # threads do not speed up a wait
    if cores > 1 and cores not in profile.parallel_units():
        print(f"the profile has no {cores}-thread tables: same-budget speedups are measured, not predicted "
              "(re-profile with `ppsd profile --thread-counts`)", file=sys.stderr)
    # co-run check: AR is one process, so its bracket cannot see how much two co-running stages slow
    # each other now; measured before the first plan and after the last, like the profiler does
    corun_check = None if emulated else CorunCheck.for_run(profile, model, plans)
    if corun_check is not None:
        corun_check.measure("before the plans")
    # --retime: the pieces timed right before AR and before every plan price it (profiler/piece_times.py)
    retimer = Retimer.for_run(args, predict, model, heads_dir, emulated)
    ar_plan = Plan(Mode.AR)
    ar_tp_runs = [measure_ar_in_budget(model, job(ar_plan), cores, measure)] if cores > 1 else []
    ar_scale = retimer.now("AR") if retimer else None
    ar_meas = measure(model, job(ar_plan))
    ar_pred = predicted(ar_plan, timeline=True, scale=ar_scale)
    rows = [vf.ValidationRow.from_results(ar_plan, ar_pred, ar_meas.result, ar_meas.result.tokens_per_s, None)]
    budget_speedup: list[float | None] = [1.0]  # each plan within the budget against AR on every core
    vf.write_plan_timelines(out, ar_plan, ar_pred, ar_meas.result, write_chrome_trace)
    ar_runs = [ar_meas.result.tokens_per_s]  # every AR measurement, in time order
    bracket = not getattr(args, "ar_once", False)
    # in-sample twins (out-of-sample runs whose measured profile traced the measured prompts): what the
    # default, in-sample validation predicts for the same runs, reported beside the real prediction
    twins = not sides.in_sample and not emulated and acc is not None and \
        set(map(str, ids)) <= set(acc["prompt_id"].astype(str))
    rounds = max(int(getattr(args, "rounds", None) or 1), 1)  # checked >= 1 by validate_command
    runs: list[list[RoundRun]] = [[] for _ in plans]  # each plan's measurement in every round
    for r in range(rounds):
        # plans in alternating order: a machine that drifts steadily favours no plan over the rounds
        order = list(range(len(plans))) if r % 2 == 0 else list(reversed(range(len(plans))))
        for step, i in enumerate(order):
            plan = plans[i]
            tag = f" forced α={forced[i]:g}" if forced[i] is not None else ""
            where = f"round {r + 1}/{rounds} " if rounds > 1 else ""
            print(f"[{where}{step + 1}/{len(plans)}] {plan.label()}{tag} ..." + (" (then AR again)" if bracket else ""),
                  flush=True, file=sys.stderr)  # progress: stdout stays the table, or JSON alone with --json
            scale = retimer.now(plan.label()) if retimer else None
            meas = measure(model, job(plan, traces(i)))
            ar_ref = ar_runs[-1]
            if bracket:
                # A shared machine's speed drifts by a few % over minutes: each speedup is taken against
                # the AR measured right before and right after its plan.
                again = measure(model, replace(job(ar_plan), warmup=0, repeats=1, timeline=False))
                ar_runs.append(again.result.tokens_per_s)
                ar_ref = (ar_ref + ar_runs[-1]) / 2
            tp = tp_ref = None
            if cores > 1:
                tp = measure_plan_in_budget(model, job(plan, traces(i)), cores, meas.result.tokens_per_s, measure)
                # AR on every core, bracketing the plan like AR on one (the machine drifts over minutes)
                ar_tp_runs.append(measure_ar_in_budget(model, replace(job(ar_plan), warmup=0, repeats=1), cores,
                                                       measure))
                tp_ref = (ar_tp_runs[-2] + ar_tp_runs[-1]) / 2
            runs[i].append(RoundRun(meas, ar_ref, tp, tp_ref, scale))
    if corun_check is not None:
        corun_check.measure("after the plans")
    for i, plan in enumerate(plans):
        kept = median_round(runs[i])
        meas = kept.measurement
        pred = predicted(plan, i, timeline=True, scale=kept.scale)
        # a forced run commits the drafts it was told to accept: its output is not AR's by design
        match = None if forced[i] is not None else all(x.measurement.outputs == ar_meas.outputs for x in runs[i])
        row = vf.ValidationRow.from_results(plan, pred, meas.result, kept.ar_reference, match, forced_alpha=forced[i])
        if rounds > 1:
            row = replace(row, measured_speedup_rounds=[round(x.speedup, 4) for x in runs[i]])
        if twins and forced[i] is None:
            row = row.with_in_sample(predicted(plan, i, engine="fast", in_sample=True,
                                               scale=kept.scale).speedup_vs_ar)
        if kept.scale is not None:  # beside it, what the profile's own prices said
            row = row.with_profile_priced(predicted(plan, i, engine="fast").speedup_vs_ar, kept.scale.drift_pct())
        rows.append(row)
        vf.write_plan_timelines(out, plan, pred, meas.result, write_chrome_trace, forced_alpha=forced[i])
        if cores > 1:  # against AR on every core: the median of the rounds' own ratios
            budget_speedup.append(statistics.median(x.budget_speedup for x in runs[i]))
    if cores > 1:
        scales = [ar_scale, *(median_round(r).scale for r in runs)]
        same = [predicted(p, i - 1 if i else None, budget=cores, engine="fast", scale=scales[i]).speedup_vs_ar_tp
                if cores in predict.parallel_units() else None for i, p in enumerate([ar_plan, *plans])]
        rows = [r.with_same_budget(pr, budget_speedup[i])
                for i, (r, pr) in enumerate(zip(rows, same))]
    # each interval is carried to the row's own point (the in-sample point replays each prompt's trace);
    # it is meant to hold a measured speedup, so it also carries the measurement's own noise, which the
    # AR runs around the plans show (0 when AR ran once)
    noise_cv = iv.measurement_cv(ar_runs)
    tp_cv = iv.budget_cv(predict, cores) if cores > 1 and cores in predict.parallel_units() else 0.0
    rows = [rows[0].with_interval(1.0, 1.0)] + \
        [r.with_interval(*interval(p, i, r.predicted_speedup, median_round(runs[i]).scale, noise_cv), tp_cv=tp_cv)
         for i, (r, p) in enumerate(zip(rows[1:], plans))]
    strata_from = next(((p.exit_layer, p.exit_head) for p, a in zip(plans, forced)
                        if a is None and p.exit_layer is not None), None)
    sources = vf.prompt_sources(predicted_from=display_path(predict.path),
                                prediction_prompt_ids=sides.prediction_ids, measured_prompt_ids=[str(i) for i in ids],
                                measured_prompts=sides.measured_prompts, split=sides.split, overlap=sides.overlap)
    doc = vf.make_doc(rows, profile=display_path(profile.path), model=model.model_id if emulated
                      else profile.model_id, device_name=profile.device_name,
                      forced_trace=bool(args.force_trace or emulated), exit_head=head,
                      ar_reference="bracketed" if bracket else "once", ar_tokens_per_s_runs=ar_runs,
                      budget=f"{cores} cores" if cores > 1 else None, emulated=emulated, sources=sources,
                      interval={"level": iv.LEVEL, "prompts_n": len(gens), "draws": draws, "seed": seed,
                                "method": "bootstrap over the prediction prompts (replayed; each measured "
                                          "prompt draws from its own category's where the profile traced "
                                          f"at least {iv.MIN_STRATUM}) x the profile's latency spread "
                                          "(sim/intervals.py) x the measurement's noise (measurement_cv); "
                                          "forced plans: the two spreads alone",
                                "measurement_cv": round(noise_cv, 5),
                                "strata": None if sides.in_sample or strata_from is None
                                else strata_summary(gens, traces_of(*strata_from))},
                      rounds=rounds, corun=corun_check.summary_args() if corun_check is not None else None,
                      retime=retimer.summary(ar_scale) if retimer else None)
    vf.write_validation(out, doc)
    return doc


@dataclass
class CorunCheck:
    """The profiler's 2-process co-run measurement, repeated during a validation whose plans co-run
    stage processes (PPSD), to compare with the profile's figure (`corun_drift` in validation.json)."""

    profile_slowdown: float
    model_spec: str
    adapter: object
    threads: int
    context: int
    seconds: float
    runs: list[float] = field(default_factory=list)

    @classmethod
    def for_run(cls, profile, model, plans) -> CorunCheck | None:
        """A check for these plans, or None: no plan co-runs processes, the device is not a CPU (a
        GPU stage has its own device), or the profile has no 2-process co-run figure to compare with."""
        table = profile.corun_table()
        if table is None or model.device.type != "cpu" or not any(p.mode == Mode.PPSD for p in plans):
            return None
        return cls(profile_slowdown=table["slowdown"], model_spec=profile.model_id,
                   adapter=model, threads=table["threads_per_process"], context=table["context"],
                   seconds=table["seconds_per_round"])

    def measure(self, when: str) -> None:
        from profiler.latency import measure_corun_now

        print(f"co-run check ({when}): two processes' layers at once against one alone ...", flush=True,
              file=sys.stderr)
        try:
            got = measure_corun_now(self.model_spec, self.adapter, self.threads, self.context, self.seconds)
        except RuntimeError as exc:  # a diagnostic: the validation's own figures stand without it
            print(f"warning: co-run check {when} failed ({str(exc).splitlines()[0]}); validation.json will "
                  "carry the checks that ran", file=sys.stderr)
            return
        self.runs.append(float(got["slowdown"][1]))

    def summary_args(self) -> dict | None:
        return {"profile_slowdown": self.profile_slowdown, "runs": list(self.runs)} if self.runs else None


@dataclass
class Retimer:
    """`ppsd validate --retime`: the pieces of a decode step timed again right before AR and before
    every plan (`profiler.piece_times.time_pieces`), so each is priced on the machine it ran on."""

    profile: object
    adapter: object
    heads: object = None
    taken: list = field(default_factory=list)  # (what ran next, PieceTimes), in time order

    @classmethod
    def for_run(cls, args, profile, model, heads_dir: str | None, emulated: bool) -> Retimer | None:
        if not getattr(args, "retime", False):
            return None
        if emulated or profile.kind != "measured":
            raise UserError("--retime times this machine's pieces against a measured profile",
                            "drop --retime with --emulate or an estimated profile")
        heads = None
        if heads_dir and profile.latency.get("exit_heads"):
            from profiler.heads.profiling import load_for_profile

            heads = load_for_profile(heads_dir, model)
        return cls(profile, model, heads)

    def now(self, what: str):
        """The PieceScale of the pieces timed now (before `what` runs)."""
        from profiler.piece_times import time_pieces

        got = time_pieces(self.profile, self.adapter, self.heads, repeats=RETIME_REPEATS)
        self.taken.append((what, got))
        s = got.summary()["pieces"]
        print(f"  pieces now: layers {s['layers']['drift_pct']:+.1f}%, LM head {s['head']['drift_pct']:+.1f}% "
              "against the profile", file=sys.stderr)
        return got.scale

    def summary(self, ar_scale) -> dict:
        """validation.json's `retime`: how, every timing's drift, and the AR run's."""
        return {"method": f"before AR and before every plan run: the pieces of one decode step timed "
                          f"{RETIME_REPEATS} times (profiler/piece_times.py), each scaled by now / profiled; "
                          "acceptance from the predicting profile alone",
                "repeats": RETIME_REPEATS,
                "ar_drift_pct": ar_scale.drift_pct() if ar_scale is not None else None,
                "timings": [{"before": what, "drift_pct": got.scale.drift_pct()} for what, got in self.taken]}


RETIME_REPEATS = 30  # steps timed per retiming (~2 s for SmolLM2-135M on a CPU)


@dataclass(frozen=True)
class RoundRun:
    """One plan measured once (`ppsd validate --rounds`): its measurement, the AR speed around it,
    (with a budget of several cores) the plan's and AR's speed on all of them, and (`--retime`) the
    pieces' scale timed right before it."""

    measurement: object
    ar_reference: float
    budget_tokens_per_s: float | None = None
    budget_ar_reference: float | None = None
    scale: object = None

    @property
    def speedup(self) -> float:
        return self.measurement.result.tokens_per_s / self.ar_reference if self.ar_reference else float("nan")

    @property
    def budget_speedup(self) -> float | None:
        if self.budget_tokens_per_s is None or not self.budget_ar_reference:
            return None
        return self.budget_tokens_per_s / self.budget_ar_reference


def strata_summary(gens: list[dict], traces) -> dict[str, int]:
    """Per measured category, how many prediction prompts of that category predict it out of
    sample (sim/intervals.py: strata); 0: too few, every prediction prompt does."""
    return {c: len(traces.stratum(c)) for c in dict.fromkeys(str(g.get("category")) for g in gens)}


def median_round(runs: list[RoundRun]) -> RoundRun:
    """The round whose speedup is the median (the lower middle one of an even count): its
    measurement stands for the plan, whole, so its tokens/s, timeline and AR reference agree."""
    ranked = sorted(runs, key=lambda x: x.speedup)
    return ranked[(len(ranked) - 1) // 2]


def _around(point: float, interval) -> tuple[float, float]:
    """The interval's draws describe the spread around their own centre; the row's point may sit a
    little off it (it replays another stream): the interval always contains the point."""
    return min(interval.lo, point), max(interval.hi, point)


def format_table(rows: list[dict]) -> str:
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
