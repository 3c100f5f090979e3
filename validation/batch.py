"""`ppsd validate --batch-sizes 1,2,4,8`: AR and EESD plans decoded B sequences at once, beside the
simulator's batched prediction (sim/batch/), at every batch size.

At each batch size AR and every plan take turns over the measured prompts (the order reversed every
repetition), so their speeds compare the same minutes of the machine. Each plan's measured speedup is its
median throughput over AR's at the same batch size; the prediction replays the predicting profile's traces
B at a time (as many generations as prompts are measured) and its 90% interval resamples those
generations (`draws` times) and carries the latency spread of the same plan's batch-1 interval. Greedy
outputs are checked against AR at the same batch size and at batch 1. The folder gets
`batch_validation.json` and `.csv`.
"""

from __future__ import annotations

import csv
import io
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from ppsd.modes import Mode
from ppsd.statistics import mape, percent_error

FILE = "batch_validation.json"
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


def default_plans(profile, head: str = SHARED, count: int = DEFAULT_PLANS) -> list[tuple[int, int]]:
    """(exit layer, γ) of the best EESD plans at batch 1, one per exit layer."""
    from sim.batch.sweep import rank

    picked, seen = [], set()
    for p in rank(profile, 1, (head,), range(1, 7), replay_top=48):
        if p.exit_layer not in seen:
            picked.append((p.exit_layer, p.draft_len))
            seen.add(p.exit_layer)
        if len(picked) == count:
            break
    return picked


def parse_eesd_plans(spec: str | None, profile) -> list[tuple[int, int]]:
    """--plans 'eesd:E:γ;...' -> [(E, γ)]; PPSD is refused (not batched yet)."""
    if not spec:
        return default_plans(profile)
    plans = []
    for item in (s.strip() for s in spec.split(";") if s.strip()):
        parts = item.split(":")
        if parts[0].lower() != "eesd" or len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()):
            raise UserError(f"--plans {item!r}: with --batch-sizes each plan is eesd:E:γ (AR is always measured; "
                            "PPSD does not run batched yet)", "give e.g. --plans 'eesd:24:2;eesd:20:3'")
        plans.append((int(parts[1]), int(parts[2])))
    return plans


def interval(profile, exit_layer: int, gamma: int, batch: int, prompts: int, draws: int, seed: int) -> tuple:
    """The 90% interval of the predicted speedup: `draws` resamples of `prompts` generations, each also moved
    by the latency spread batch-1 intervals carry for the same plan (a decode step's spread and the
    calibration's doubt, `sim.intervals.spread.latency_cv`)."""
    from sim.batch.costs import batch_costs
    from sim.batch.replay import replay_batches
    from sim.intervals.spread import latency_cv
    from sim.model.streams import trace_stream
    from sim.plan import Plan

    ids = sorted({str(g["prompt_id"]) for g in profile.generations()})
    rng = np.random.default_rng([seed, exit_layer, gamma, batch])
    costs = batch_costs(profile)
    cv = latency_cv(profile, Plan(Mode.EESD, exit_layer=exit_layer, draft_len=gamma))
    got = []
    for _ in range(draws):
        pick = list(rng.choice(ids, size=prompts, replace=True))
        stream = trace_stream(profile, exit_layer, prompt_ids=pick)
        ar = replay_batches(costs, stream, batch, None)
        speedup = replay_batches(costs, stream, batch, exit_layer, gamma).tokens_per_s / ar.tokens_per_s
        got.append(speedup * float(np.exp(cv * rng.standard_normal())))
    return float(np.quantile(got, 0.05)), float(np.quantile(got, 0.95))


def summary(rows: list[BatchRow]) -> dict:
    widths = [100 * (r.high - r.low) / 2 / r.predicted for r in rows if r.predicted > 0]
    return {"pairs": len(rows), "mape_pct": mape(r.error_pct for r in rows),
            "coverage": sum(r.covered for r in rows) / len(rows) if rows else None,
            "interval_half_width_median_pct": float(np.median(widths)) if widths else None,
            "lossless_same_batch": all(r.lossless_same_batch is not False for r in rows),
            "lossless_batch1": all(r.lossless_batch1 is not False for r in rows)}


def write_folder(out: Path, doc: dict, rows: list[BatchRow]) -> None:
    from ppsd.paths import atomic_write_json, atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
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
        print(f"{b}: EESD pays up to batch {meas} measured, {pred} predicted")


def _row(name, batch, exit_layer, gamma, predict, speeds, firsts, single, draws, seed, prompts) -> BatchRow:
    from runtime.batch_run import differences, outputs
    from sim.batch.sweep import predict as sim_predict

    point = sim_predict(predict, exit_layer, gamma, batch)
    low, high = interval(predict, exit_layer, gamma, batch, len(prompts), draws, seed)
    measured = statistics.median(speeds[name]) / statistics.median(speeds["AR"])
    rounds = [a for r in firsts[name] for seq in r.rounds for a in seq]
    mine = outputs(firsts[name])
    return BatchRow(name, batch, point.speedup_vs_ar, measured, percent_error(point.speedup_vs_ar, measured),
                    low, high, low <= measured <= high, statistics.median(speeds[name]),
                    statistics.median(speeds["AR"]),
                    point.acceptance_rate, sum(rounds) / (len(rounds) * gamma) if rounds else None,
                    mine == outputs(firsts["AR"]), not differences(mine, single))


def run_batch_validation(config, sizes: list[int]) -> int:
    """The whole run (see the module doc); `config` is the validate command's parsed arguments."""
    from ppsd.profile import load_profile
    from ppsd.prompts import load_prompts
    from runtime.batch_run import ar_one_at_a_time, measure_in_turns
    from runtime.heads import make_drafter
    from runtime.llm import load_model
    from sim.batch.costs import check_batch
    from validation.prompts import pick_round_robin

    import torch

    if not config.profile:
        raise UserError("--batch-sizes needs --profile", "give the profile folder the batches are priced from")
    profile = load_profile(config.profile)
    predict = load_profile(config.predict_from) if config.predict_from else profile
    for b in sizes:
        check_batch(predict, b)
    plans = parse_eesd_plans(config.plans, predict)
    max_new = int((predict.meta.get("acceptance") or {}).get("max_new_tokens") or 64)
    seen = {str(g["prompt_id"]) for g in predict.generations()}
    texts = [p for p in load_prompts(config.prompts or "spec-bench") if str(p.prompt_id) not in seen]
    picked = pick_round_robin([{"category": p.category, "p": p} for p in texts], config.limit or None)
    if not picked:
        raise UserError("no prompt is left that the predicting profile did not trace", "give other --prompts")
    torch.set_num_threads(1)
    model = load_model(str(profile.meta["model"]["id"]), device=str(profile.meta["hardware"].get("device") or "cpu"),
                       dtype=str(profile.meta["model"].get("dtype") or "float32"))
    prompts = [model.encode_prompt(g["p"].text) for g in picked]
    named = {f"EESD E={e} γ={g}": (e, g) for e, g in plans}
    runs = {name: _plan(model, e, g) for name, (e, g) in named.items()}
    drafters = {name: make_drafter(model, e) for name, (e, _) in named.items()}
    eos = model.eos_token_ids
    single = ar_one_at_a_time(model, prompts, max_new, eos)
    rows = []
    for b in sizes:
        print(f"batch {b}: AR and {len(runs)} plans in turns over {len(prompts)} prompts", file=sys.stderr)
        speeds, firsts = measure_in_turns(model, runs, prompts, max_new, b, warmup=config.warmup,
                                          repeats=config.repeats, eos=eos, drafters=drafters)
        rows += [_row(name, b, e, g, predict, speeds, firsts, single, config.draws, config.seed, prompts)
                 for name, (e, g) in named.items()]
    doc = {"profile": str(config.profile), "predicted_from": str(config.predict_from or config.profile),
           "prompts": [str(g["p"].prompt_id) for g in picked], "max_new_tokens": max_new, "batch_sizes": sizes,
           "rows": [asdict(r) for r in rows], "summary": summary(rows), "pays_up_to": _pays(rows)}
    out = Path(config.out or "runs/batch-validation")
    write_folder(out, doc, rows)
    if getattr(config, "json", False):
        from ppsd.output import print_json

        print_json(doc)
    else:
        print_table(doc, rows)
    print(f"written to {out}", file=sys.stderr)
    return 0


def _plan(model, exit_layer: int, gamma: int):
    from runtime.request import make_plan

    return make_plan(Mode.EESD, model.num_layers, exit_layer, gamma)


def _pays(rows: list[BatchRow]) -> dict:
    """The largest batch size up to which the best plan pays, measured and predicted."""
    from sim.batch.sweep import paying_batch

    def best(key) -> dict[int, float]:
        return {b: max(getattr(r, key) for r in rows if r.batch == b) for b in {r.batch for r in rows}}

    return {"best EESD plan": (paying_batch(best("measured")), paying_batch(best("predicted")))}
