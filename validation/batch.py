"""`ppsd validate --batch-sizes 1,2,4,8`: AR, EESD and two-stage PPSD plans decoded B sequences at once,
beside the simulator's batched prediction (sim/batch/), at every batch size.

At each batch size AR and every plan take turns over the measured prompts (the order reversed every
repetition), so their speeds compare the same minutes of the machine; with a PPSD plan, AR on both cores
takes its turns too, and PPSD rows also carry their measured same-budget speedup. Each plan's measured speedup is its
median throughput over AR's at the same batch size; the prediction replays the predicting profile's traces
B at a time (as many generations as prompts are measured) and its 90% interval resamples those
generations (`draws` times) and carries the latency spread of the same plan's batch-1 interval. Greedy
outputs are checked against AR at the same batch size and at batch 1. The folder gets
`batch_validation.json` and `.csv`.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ppsd import validation_folder as vf
from ppsd.errors import UserError
from ppsd.paths import RUNS_DIR
from ppsd.exit_heads import SHARED
from ppsd.modes import Mode
from ppsd.statistics import mape, percent_error

FILE = vf.BATCH_JSON_FILE
DEFAULT_PLANS = 4


@dataclass
class BatchRow:
    """One plan at one batch size: predicted beside measured (speedups against AR at that batch size)."""

    plan: str
    batch: int
    predicted: float
    measured: float
    error_pct: float
    low: float
    high: float
    covered: bool
    tokens_per_s: float
    ar_tokens_per_s: float
    predicted_acceptance: float | None
    measured_acceptance: float | None
    lossless_same_batch: bool | None
    lossless_batch1: bool | None
    scheme: str = Mode.EESD.value
    measured_speedup_vs_ar_tp: float | None = None  # PPSD: against the faster AR on both cores
    predicted_speedup_vs_ar_tp: float | None = None  # PPSD, where the profile timed AR on two threads
    speedup_vs_ar_tp_error_pct: float | None = None


@dataclass(frozen=True)
class BatchPlan:
    """A plan the batched validation measures: EESD E, γ or two-stage PPSD at E (γ None)."""

    scheme: Mode
    exit_layer: int
    draft_len: int | None = None

    @property
    def name(self) -> str:
        from sim.batch.sweep import label

        return label(self.scheme, self.exit_layer, self.draft_len, SHARED)

    @property
    def pipelined(self) -> bool:
        from sim.schemes import scheme

        return scheme(self.scheme).pipelined

    def as_plan(self, num_layers: int):
        """The batch-1 plan doing the same work (its latency spread; what the runtime decodes)."""
        from sim.plan import Plan
        from sim.schemes import scheme

        fields = scheme(self.scheme).batch_fields(self.exit_layer, self.draft_len, num_layers)
        return Plan(self.scheme, **fields).validate(num_layers)


def default_plans(profile, head: str = SHARED, count: int = DEFAULT_PLANS) -> list[BatchPlan]:
    """The best EESD plans at batch 1, one per exit layer; PPSD at the best PPSD exit at batch 1 and at exits
    spread evenly from it to the deepest traced one (balanced stages to high acceptance)."""
    from sim.batch.sweep import rank

    eesd, seen = [], set()
    for p in rank(profile, 1, (head,), range(1, 7), replay_top=48, schemes=(Mode.EESD,)):
        if p.exit_layer not in seen:
            eesd.append(BatchPlan(Mode.EESD, p.exit_layer, p.draft_len))
            seen.add(p.exit_layer)
        if len(eesd) == count:
            break
    best_ppsd = rank(profile, 1, (head,), replay_top=1, schemes=(Mode.PPSD,))[0].exit_layer
    deeper = sorted(e for e in profile.alpha_by_exit(head=head) if e >= best_ppsd)
    picks = np.unique(np.round(np.linspace(0, len(deeper) - 1, min(count, len(deeper)))).astype(int))
    return eesd + [BatchPlan(Mode.PPSD, deeper[i]) for i in picks]


def parse_plans(spec: str | None, profile) -> list[BatchPlan]:
    """--plans 'eesd:E:γ;ppsd:E;...' -> the plans (PPSD: two stages, so no k), each checked against the
    profile's layer count; without --plans, the default set."""
    if spec is None:
        return default_plans(profile)
    items = [s.strip() for s in spec.split(";") if s.strip()]
    if not items:
        raise UserError(f"--plans {spec!r} names no plan", "give e.g. --plans 'eesd:24:2;ppsd:20', or leave it out")
    n = profile.num_layers
    plans = []
    for item in items:
        parts = item.split(":")
        kind = parts[0].lower()
        if kind == "eesd" and len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            plan = BatchPlan(Mode.EESD, int(parts[1]), int(parts[2]))
        elif kind == "ppsd" and len(parts) in (2, 3) and parts[1].isdigit() and parts[2:] in ([], ["2"]):
            plan = BatchPlan(Mode.PPSD, int(parts[1]))
        else:
            raise UserError(f"--plans item {item!r}: with --batch-sizes each plan is eesd:E:γ or ppsd:E (two stages; "
                            "AR is always measured)", "give e.g. --plans 'eesd:24:2;ppsd:20'")
        if not 1 <= plan.exit_layer < n or (plan.draft_len is not None and not 1 <= plan.draft_len <= 64):
            raise UserError(f"--plans item {item!r} is out of range for this {n}-layer model",
                            f"give exits between 1 and {n - 1} and γ between 1 and 64, e.g. 'eesd:{n // 2}:2;ppsd:{n // 2}'")
        plans.append(plan)
    return plans


def interval(profile, plan: BatchPlan, batch: int, prompts: int, draws: int, seed: int) -> tuple:
    """The 90% interval of the predicted speedup: `draws` resamples of `prompts` generations, each also moved
    by the latency spread batch-1 intervals carry for the same plan (a decode step's spread and the
    calibration's doubt, `sim.intervals.spread.latency_cv`; PPSD: at least the pipeline probe's)."""
    from sim.batch.costs import batch_costs
    from sim.batch.replay import replay_batches
    from sim.intervals.spread import latency_cv
    from sim.model.streams import trace_stream

    ids = sorted({str(g["prompt_id"]) for g in profile.generations()})
    pipelined = plan.pipelined
    rng = np.random.default_rng([seed, plan.exit_layer, plan.draft_len or 0, batch, int(pipelined)])
    costs = batch_costs(profile)
    cv = latency_cv(profile, plan.as_plan(profile.num_layers))
    got = []
    for _ in range(draws):
        pick = list(rng.choice(ids, size=prompts, replace=True))
        stream = trace_stream(profile, plan.exit_layer, prompt_ids=pick)
        ar = replay_batches(costs, stream, batch, None)
        run = replay_batches(costs, stream, batch, plan.exit_layer, plan.draft_len or 1, pipelined=pipelined)
        got.append(run.tokens_per_s / ar.tokens_per_s * float(np.exp(cv * rng.standard_normal())))
    return float(np.quantile(got, 0.05)), float(np.quantile(got, 0.95))


def summary(rows: list[BatchRow]) -> dict:
    widths = [100 * (r.high - r.low) / 2 / r.predicted for r in rows if r.predicted > 0]
    budget = [r.speedup_vs_ar_tp_error_pct for r in rows if r.speedup_vs_ar_tp_error_pct is not None]
    by_scheme = {f"mape_{s}_pct": mape(r.error_pct for r in rows if r.scheme == s)
                 for s in dict.fromkeys(r.scheme for r in rows)}
    return {"pairs": len(rows), "mape_pct": mape(r.error_pct for r in rows), **by_scheme,
            "mape_same_budget_ppsd_pct": mape(budget) if budget else None,
            "coverage": sum(r.covered for r in rows) / len(rows) if rows else None,
            "interval_half_width_median_pct": float(np.median(widths)) if widths else None,
            "lossless_same_batch": all(r.lossless_same_batch is not False for r in rows),
            "lossless_batch1": all(r.lossless_batch1 is not False for r in rows)}


def write_folder(out: Path, doc: dict, rows: list[BatchRow]) -> None:
    """The folder, all at once (temp folder + swap): an earlier one at `out` stays intact until then."""
    from ppsd.paths import atomic_dir

    with atomic_dir(out) as tmp:
        _write_files(tmp, doc, rows)


def _write_files(out: Path, doc: dict, rows: list[BatchRow]) -> None:
    from ppsd.paths import atomic_write_json, atomic_write_text

    atomic_write_json(out / FILE, doc)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(asdict(rows[0])))
    writer.writeheader()
    writer.writerows(asdict(r) for r in rows)
    atomic_write_text(out / "batch_validation.csv", buf.getvalue())


def print_table(doc: dict, rows: list[BatchRow]) -> None:
    print(f"{'plan':<22}{'batch':>6}{'predicted':>11}{'measured':>10}{'error':>8}{'90% interval':>16}"
          f"{'α pred/meas':>14}{'lossless':>10}")
    for r in rows:
        acc = (f"{r.predicted_acceptance:.2f}/{r.measured_acceptance:.2f}"
               if r.predicted_acceptance is not None and r.measured_acceptance is not None else "")
        print(f"{r.plan:<22}{r.batch:>6}{r.predicted:>10.3f}×{r.measured:>9.3f}×{r.error_pct:>+7.1f}%"
              f"{r.low:>8.3f}-{r.high:<7.3f}{acc:>14}{str(r.lossless_same_batch):>10}")
    s = doc["summary"]
    print(f"speedup MAPE {s['mape_pct']:.1f}% over {s['pairs']} (plan, batch) pairs; 90% intervals cover "
          f"{s['coverage']:.0%} at a median ±{s['interval_half_width_median_pct']:.1f}%; greedy identical to AR "
          f"at the same batch: {s['lossless_same_batch']}, to AR at batch 1: {s['lossless_batch1']}")
    for b, (meas, pred) in doc["pays_up_to"].items():
        print(f"{b}: pays up to batch {meas} measured, {pred} predicted (None: not even at the first size)")
    for r in rows:
        if r.measured_speedup_vs_ar_tp is not None:
            said = "" if r.predicted_speedup_vs_ar_tp is None else f", {r.predicted_speedup_vs_ar_tp:.3f}× predicted"
            print(f"{r.plan} at batch {r.batch}: {r.measured_speedup_vs_ar_tp:.3f}× the faster AR on both cores "
                  f"(same budget, measured{said})")


def _row(plan: BatchPlan, batch, predict, speeds, firsts, single, draws, seed, prompts) -> BatchRow:
    from runtime.batch_run import AR_BOTH_CORES, acceptance_of, differences, outputs
    from sim.batch.sweep import predict as sim_predict

    name = plan.name
    point = sim_predict(predict, plan.exit_layer, plan.draft_len, batch, scheme=plan.scheme)
    low, high = interval(predict, plan, batch, len(prompts), draws, seed)
    mine_speed, ar_speed = statistics.median(speeds[name]), statistics.median(speeds["AR"])
    measured = mine_speed / ar_speed
    same_budget = None
    if plan.pipelined and AR_BOTH_CORES in speeds:
        same_budget = mine_speed / max(ar_speed, statistics.median(speeds[AR_BOTH_CORES]))
    rate, _ = acceptance_of(plan.as_plan(predict.num_layers), firsts[name])
    mine = outputs(firsts[name])
    budget_error = None if same_budget is None or point.speedup_vs_ar_tp is None else \
        percent_error(point.speedup_vs_ar_tp, same_budget)
    return BatchRow(name, batch, point.speedup_vs_ar, measured, percent_error(point.speedup_vs_ar, measured),
                    low, high, low <= measured <= high, mine_speed, ar_speed, point.acceptance_rate, rate,
                    mine == outputs(firsts["AR"]), not differences(mine, single), plan.scheme.value, same_budget,
                    point.speedup_vs_ar_tp, budget_error)


def run_batch_validation(config, sizes: list[int]) -> int:
    """The whole run (see the module doc); `config` is the validate command's parsed arguments."""
    from ppsd.profile import load_profile
    from ppsd.prompts import load_prompts
    from sim.batch.costs import check_batch
    from validation.prompts import pick_round_robin

    config.check_batched()
    profile = load_profile(config.profile)
    predict = load_profile(config.predict_from) if config.predict_from else profile
    for b in sizes:
        check_batch(predict, b)
    plans = parse_plans(config.plans, predict)
    max_new = int((predict.meta.get("acceptance") or {}).get("max_new_tokens") or 64)
    seen = {str(g["prompt_id"]) for g in predict.generations()}
    texts = [p for p in load_prompts(None if config.prompts == "builtin" else config.prompts or "spec-bench") if str(p.prompt_id) not in seen]
    picked = pick_round_robin([{"category": p.category, "p": p} for p in texts], config.limit or None)
    if not picked:
        raise UserError("no prompt is left that the predicting profile did not trace", "give other --prompts")
    import torch

    from runtime.batch_run import ar_one_at_a_time, measure_in_turns
    from runtime.heads import make_drafter
    from runtime.llm import load_model

    torch.set_num_threads(1)
    model = load_model(str(profile.meta["model"]["id"]), device=str(profile.meta["hardware"].get("device") or "cpu"),
                       dtype=str(profile.meta["model"].get("dtype") or "float32"))
    prompts = [model.encode_prompt(g["p"].text) for g in picked]
    runs = {p.name: p.as_plan(model.num_layers) for p in plans}
    drafters = {p.name: make_drafter(model, p.exit_layer) for p in plans}
    eos = model.eos_token_ids
    single = ar_one_at_a_time(model, prompts, max_new, eos)
    rows = []
    for b in sizes:
        print(f"batch {b}: AR and {len(runs)} plans in turns over {len(prompts)} prompts", file=sys.stderr)
        speeds, firsts = measure_in_turns(model, runs, prompts, max_new, b, warmup=config.warmup,
                                          repeats=config.repeats, eos=eos, drafters=drafters)
        rows += [_row(p, b, predict, speeds, firsts, single, config.draws, config.seed, prompts) for p in plans]
    doc = {"profile": str(config.profile), "predicted_from": str(config.predict_from or config.profile),
           "prompts": [str(g["p"].prompt_id) for g in picked], "max_new_tokens": max_new, "batch_sizes": sizes,
           "rows": [asdict(r) for r in rows], "summary": summary(rows), "pays_up_to": _pays(rows)}
    out = Path(config.out) if config.out else RUNS_DIR / f"batch-validation-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    write_folder(out, doc, rows)
    if getattr(config, "json", False):
        from ppsd.output import print_json

        print_json(doc)
    else:
        print_table(doc, rows)
    print(f"written to {out}", file=sys.stderr)
    return 0


def _pays(rows: list[BatchRow]) -> dict:
    """The largest batch size up to which the best plan pays, measured and predicted."""
    from sim.batch.sweep import paying_batch

    def best(key, scheme) -> dict[int, float]:
        mine = [r for r in rows if r.scheme == scheme]
        return {b: max(getattr(r, key) for r in mine if r.batch == b) for b in {r.batch for r in mine}}

    return {f"best {s.upper()} plan": (paying_batch(best("measured", s)), paying_batch(best("predicted", s)))
            for s in dict.fromkeys(r.scheme for r in rows)}
