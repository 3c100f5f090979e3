"""ppsd's EESD beside transformers' own early-exit assisted generation, at the same exit and γ.

    .venv/bin/python -m bench.hf_check [--profile DIR] [--prompts FILE|spec-bench] [--limit 4]
        [--max-new-tokens 32] [--pairs 15:4,20:4,24:4,27:6] [--schedules constant,heuristic]
        [--rounds 2] [--out runs/hf-check-<time>]

One sitting, one model, the same prompts and lengths for every run (EOS ignored, so every run commits
the same tokens). Each round measures, for every pair (E, γ), interleaved so a drifting machine weighs
on all alike: ppsd's AR, transformers' greedy `generate` (its AR), ppsd's EESD at (E, γ) and
`generate(assistant_early_exit=E)` with γ0 = γ under each schedule. Both drafters are the shared exit
(the model's final norm + LM head after layer E: transformers cuts the model at E layers and runs its
own norm and head). Per run: tokens/s (the median of the rounds), acceptance rate (accepted drafts over
drafts judged), tokens per round, and whether the output equals its AR's.

With `--profile DIR` carrying `latency.hf` (`ppsd profile add-hf`), each transformers run also gets the
simulator's prediction for the measured prompts (in sample: the profile's own prompts' traces when the
measured prompts are the profile's; otherwise its traces laid over the measured lengths).

Writes `hf_check.json` and `NOTE.md` under `--out` (commit a copy under examples/); the dashboard's
Validation page shows a folder's hf_check.json beside its validation when both are there.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_PAIRS = "15:4,20:4,24:4,27:6"
JSON_FILE = "hf_check.json"


def log(msg: str) -> None:
    print(f"[hf-check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_pairs(text: str) -> list[tuple[int, int]]:
    from ppsd.errors import UserError

    try:
        pairs = [tuple(int(x) for x in item.split(":")) for item in text.split(",") if item.strip()]
    except ValueError:
        pairs = []
    if not pairs or any(len(p) != 2 or p[0] < 1 or p[1] < 1 for p in pairs):
        raise UserError(f"--pairs {text!r} is not E:γ[,E:γ...]", f"give e.g. --pairs {DEFAULT_PAIRS}")
    return pairs


def _summary(ms: list) -> dict:
    """One kind of run over the rounds: median tokens/s, the rounds' figures, acceptance."""
    tps = [m.result.tokens_per_s for m in ms]
    r = ms[len(ms) // 2].result
    return {"tokens_per_s": round(statistics.median(tps), 4), "tokens_per_s_rounds": [round(x, 4) for x in tps],
            "acceptance_rate": None if r.acceptance_rate is None else round(r.acceptance_rate, 4),
            "mean_accepted": round(r.mean_accepted, 4), "accepted_hist": {str(k): v for k, v in r.accepted_hist.items()}}


def load_inputs(args):
    """The model, the (E, γ) pairs and schedules, and the prompts: (profile or None, model, pairs,
    schedules, prompt ids, prompt tokens). The prompts are --prompts, else the profile's own (in sample
    for the prediction), else the built-in ones."""
    from ppsd.errors import UserError
    from ppsd.prompts import load_prompts
    from runtime.llm import load_model

    pairs = parse_pairs(args.pairs)
    schedules = [s.strip() for s in args.schedules.split(",") if s.strip()]
    profile = None
    if args.profile:
        from ppsd.profile import load_profile

        profile = load_profile(args.profile)
    model = load_model(args.model or (profile.model_id if profile else "smollm2-135m"))
    bad = [e for e, _ in pairs if not 1 <= e < model.num_layers]
    if bad:
        raise UserError(f"exit layers {bad} are out of range", f"use exits between 1 and {model.num_layers - 1}")
    if args.prompts or profile is None:
        prompt_set = load_prompts(args.prompts or None, limit=args.limit)
        ids = [p.prompt_id for p in prompt_set]
        prompts = [model.encode_prompt(p.text) for p in prompt_set]
    else:  # the profile's own prompts (in sample for the prediction)
        gens = [g for g in profile.generations() if g.get("prompt")][: args.limit]
        ids = [str(g["prompt_id"]) for g in gens]
        prompts = [model.encode_prompt(g["prompt"]) for g in gens]
    return profile, model, pairs, schedules, ids, prompts


def run_kinds(pairs: list[tuple[int, int]], schedules: list[str]) -> list[tuple]:
    """Every kind of run, (name, plan, measuring function): both ARs, then per pair ppsd's EESD and
    transformers' under each schedule."""
    from ppsd.modes import Mode
    from runtime.hf_assisted import measure_job as hf_measure
    from runtime.measure import measure as ppsd_measure
    from sim.plan import Plan

    kinds = [("ppsd AR", Plan(Mode.AR), ppsd_measure), ("hf AR", Plan(Mode.AR, runtime="hf"), hf_measure)]
    for e, g in pairs:
        kinds.append((f"ppsd EESD E={e} γ={g}", Plan(Mode.EESD, exit_layer=e, draft_len=g), ppsd_measure))
        for s in schedules:
            kinds.append((f"hf E={e} γ={g} {s}", Plan(Mode.EESD, exit_layer=e, draft_len=g, runtime="hf", schedule=s),
                          hf_measure))
    return kinds


def measure_rounds(model, kinds: list[tuple], job, rounds: int) -> tuple[dict, dict, float]:
    """Every kind measured once a round, the order reversed every other round: (its measurements by
    name, its first outputs by name, the wall time in seconds)."""
    runs: dict[str, list] = {name: [] for name, _, _ in kinds}
    outputs: dict[str, list] = {}
    t0 = time.time()
    for r in range(rounds):
        order = kinds if r % 2 == 0 else kinds[::-1]
        for i, (name, plan, fn) in enumerate(order):
            log(f"round {r + 1}/{rounds} [{i + 1}/{len(order)}] {name}")
            m = fn(model, job(plan))
            runs[name].append(m)
            outputs.setdefault(name, m.outputs)
    return runs, outputs, time.time() - t0


def pair_row(e: int, g: int, schedules: list[str], runs: dict, outputs: dict, ar_ppsd: dict, ar_hf: dict,
             predict) -> dict:
    """One (E, γ) pair's row: ppsd's EESD and transformers' under each schedule, each against its own
    AR, and (`predict(plan)`, None without latency.hf) the simulator's speedup for transformers'."""
    from ppsd.modes import Mode
    from ppsd.statistics import percent_error
    from sim.plan import Plan

    ppsd = _summary(runs[f"ppsd EESD E={e} γ={g}"])
    row = {"exit_layer": e, "draft_len": g,
           "ppsd_eesd": {**ppsd, "speedup_vs_own_ar": round(ppsd["tokens_per_s"] / ar_ppsd["tokens_per_s"], 4),
                         "outputs_match_ar": outputs[f"ppsd EESD E={e} γ={g}"] == outputs["ppsd AR"]},
           "hf": {}}
    for s in schedules:
        name = f"hf E={e} γ={g} {s}"
        h = _summary(runs[name])
        h["speedup_vs_own_ar"] = round(h["tokens_per_s"] / ar_hf["tokens_per_s"], 4)
        h["outputs_match_ar"] = outputs[name] == outputs["hf AR"]
        h["ppsd_over_hf"] = round(ppsd["tokens_per_s"] / h["tokens_per_s"], 4)
        if predict is not None:
            h["predicted_speedup"] = predict(Plan(Mode.EESD, exit_layer=e, draft_len=g, runtime="hf", schedule=s))
            h["speedup_error_pct"] = round(percent_error(h["predicted_speedup"], h["speedup_vs_own_ar"]), 2)
        row["hf"][s] = h
    return row


def run(args) -> dict:
    """The whole comparison, as hf_check.json holds it."""
    import torch

    from runtime.measure import Job

    torch.set_num_threads(1)
    profile, model, pairs, schedules, ids, prompts = load_inputs(args)
    max_new = [args.max_new_tokens] * len(prompts)

    def job(plan):
        return Job(plan, prompts, max_new, stop_at_eos=False, warmup=args.warmup, repeats=args.repeats,
                   timeline=False)

    runs, outputs, wall = measure_rounds(model, run_kinds(pairs, schedules), job, args.rounds)
    ar_ppsd, ar_hf = _summary(runs["ppsd AR"]), _summary(runs["hf AR"])
    priced = profile is not None and (profile.latency or {}).get("hf")
    predict = (lambda plan: _predict(profile, plan, ids, prompts, max_new)) if priced else None
    rows = [pair_row(e, g, schedules, runs, outputs, ar_ppsd, ar_hf, predict) for e, g in pairs]
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(), "cpu": _cpu_name(),
        "model": model.model_id, "profile": args.profile, "prompts": ids, "prompt_source": args.prompts or
        ("profile" if profile is not None else "builtin"), "max_new_tokens": args.max_new_tokens,
        "rounds": args.rounds, "repeats": args.repeats, "warmup": args.warmup, "threads": 1,
        "transformers": __import__("transformers").__version__, "torch": torch.__version__,
        "wall_s": round(wall, 1),
        "ar": {"ppsd": ar_ppsd, "hf": ar_hf, "hf_over_ppsd": round(ar_hf["tokens_per_s"] / ar_ppsd["tokens_per_s"], 4),
               "outputs_match": outputs["hf AR"] == outputs["ppsd AR"]},
        "pairs": rows,
    }


def _predict(profile, plan, ids, prompts, max_new) -> float:
    """The simulator's speedup (against transformers' AR) for these prompts: their own traces when the
    profile traced them, else the profile's traces laid over their lengths."""
    from sim import intervals as iv
    from sim.api import simulate
    from sim.run import simulate_stream

    traced = set(map(str, profile.acceptance["prompt_id"].astype(str).unique()))
    if set(ids) <= traced:
        return round(float(simulate(profile, plan, prompt_ids=ids, engine="fast").speedup_vs_ar), 4)
    targets = iv.Targets(tuple(float(len(p)) for p in prompts), tuple(max_new))
    stream = iv.pooled_stream(iv.prompt_traces(profile, plan.exit_layer, head="shared"), targets, 0)
    return round(float(simulate_stream(profile, plan, stream, engine="fast").speedup_vs_ar), 4)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def note(doc: dict) -> str:
    ar = doc["ar"]
    lines = [
        "# ppsd's EESD beside transformers' early-exit assisted generation",
        "",
        f"{doc['created']}, {doc['cpu']}, {doc['model']}, transformers {doc['transformers']}, torch {doc['torch']}, "
        f"one thread. {len(doc['prompts'])} prompts ({doc['prompt_source']}), {doc['max_new_tokens']} tokens each "
        f"(EOS ignored: every run commits the same tokens), {doc['rounds']} interleaved rounds × {doc['repeats']} "
        f"repeats, medians over rounds; {doc['wall_s']:.0f} s.",
        "",
        "Both drafters are the shared exit: the model's final norm + LM head on the hidden state after layer E "
        "(transformers runs the model cut at E layers, norm and head included). transformers' draft settings: "
        "`num_assistant_tokens` = γ (γ0 for heuristic), `assistant_confidence_threshold` = 0 (its default 0.4 "
        "stops drafting on low confidence; off here so the draft length follows the schedule).",
        "",
        f"AR: ppsd {ar['ppsd']['tokens_per_s']:.2f} tokens/s, transformers' greedy generate "
        f"{ar['hf']['tokens_per_s']:.2f} tokens/s ({ar['hf_over_ppsd']:.3f}× ppsd's); outputs identical: "
        f"{ar['outputs_match']}.",
        "",
        "| E | γ | ppsd EESD tok/s | acc. rate | × own AR | transformers | tok/s | acc. rate | × own AR | "
        "ppsd / transformers | predicted × AR | error | lossless |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in doc["pairs"]:
        p = row["ppsd_eesd"]
        for s, h in row["hf"].items():
            pred = f"{h['predicted_speedup']:.3f}" if "predicted_speedup" in h else "-"
            err = f"{h['speedup_error_pct']:+.1f}%" if "speedup_error_pct" in h else "-"
            lines.append(
                f"| {row['exit_layer']} | {row['draft_len']} | {p['tokens_per_s']:.2f} | {_f(p['acceptance_rate'])} | "
                f"{p['speedup_vs_own_ar']:.3f} | {s} | {h['tokens_per_s']:.2f} | {_f(h['acceptance_rate'])} | "
                f"{h['speedup_vs_own_ar']:.3f} | {h['ppsd_over_hf']:.3f} | {pred} | {err} | "
                f"{p['outputs_match_ar'] and h['outputs_match_ar']} |")
    worst = min((h["ppsd_over_hf"] for row in doc["pairs"] for h in row["hf"].values()), default=None)
    if worst is not None:
        lines += ["", f"ppsd's EESD over transformers' at equal exit and γ: at least {worst:.3f}× "
                      f"({'ppsd at least as fast everywhere' if worst >= 1.0 else 'transformers faster somewhere'})."]
    lines += ["", "Why they differ (same drafts, same acceptance, same verifier): transformers verifies with the "
                  "whole model on γ + 1 positions (ppsd reuses the drafts' layer-E states and runs layers [E, N) "
                  "only, plus layers [0, E) for the last draft), keeps a second KV cache for the drafter (cropped "
                  "and re-fed two tokens every round), and pays `generate`'s host overhead once per round for the "
                  "drafter's nested `generate` call and once per draft token; a heuristic schedule also changes γ "
                  "round by round."]
    return "\n".join(lines) + "\n"


def _f(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", help="profile folder: its model and prompts; with latency.hf, predictions too")
    ap.add_argument("--model", help="model (default: the profile's, else smollm2-135m)")
    ap.add_argument("--prompts", help="Spec-Bench JSONL, spec-bench or builtin (default: the profile's prompts)")
    ap.add_argument("--limit", type=int, default=4, help="prompts (default 4)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--pairs", default=DEFAULT_PAIRS, help=f"E:γ pairs (default {DEFAULT_PAIRS})")
    ap.add_argument("--schedules", default="constant,heuristic", help="transformers' schedules (default both)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    ap.add_argument("--repeats", type=int, default=1, help="timed passes over the prompts per run (default 1)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", help="folder (default runs/hf-check-<time>)")
    args = ap.parse_args(argv)
    from ppsd.errors import UserError
    from ppsd.paths import RUNS_DIR, atomic_write_json, atomic_write_text

    try:
        if args.rounds < 1 or args.repeats < 1 or args.limit < 1 or args.max_new_tokens < 2:
            raise UserError("--rounds, --repeats, --limit must be >= 1 and --max-new-tokens >= 2", "e.g. --rounds 2")
        doc = run(args)
    except UserError as exc:
        print(f"hf_check: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else RUNS_DIR / f"hf-check-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / JSON_FILE, doc)
    atomic_write_text(out / "NOTE.md", note(doc))
    print(note(doc))
    log(f"wrote {out / JSON_FILE} and {out / 'NOTE.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
