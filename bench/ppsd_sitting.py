"""One sitting of the forced-acceptance PPSD timing check, taken apart pass by pass.

    .venv/bin/python -m bench.ppsd_sitting --profile P --out runs/sitting-1.json [--rounds 3] [--limit 4]

A forced-acceptance PPSD plan (E = 15, k = 2, α = 0.9 by default) takes turns with AR on one thread,
`--rounds` times. Before each turn the pieces of a decode step are timed alone (what the profile's
tables price, now) and the co-run check runs (two processes' layers at once). From each PPSD run's
timeline it reads what the pipeline really did: stage 1's layers and exit head and stage 2's pass per
token, each over its price alone right before, and the time stage 2 waited for work. The prediction
beside each run is the simulator's for the same forced bits, priced from the profile.

Where a PPSD plan's error between sittings comes from is then one of: the pieces alone drifted (the
`alone` ratios move with AR), the stages slowed each other more or less than the probe said (`in
pipeline / alone`), or time went to neither stage's compute (waits, hops, the host).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(msg: str) -> None:
    print(f"[sitting {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def stage_ratios(events, alone: dict) -> dict:
    """Per stage, the median time of its passes in the pipeline over its price alone, and stage 2's
    waits (gaps between its passes) per token."""
    s1 = [e for e in events if e.row == "stage 1" and e.name == "draft"]
    s2 = [e for e in events if e.row == "stage 2" and e.name == "verify"]
    layers1 = [e.args["layers_ms"] for e in s1 if "layers_ms" in e.args]
    head1 = [e.dur_s * 1e3 - e.args["layers_ms"] for e in s1 if "layers_ms" in e.args]
    pass2 = [e.dur_s * 1e3 for e in s2]
    s2_sorted = sorted(s2, key=lambda e: e.start_s)
    gaps = [(b.start_s - (a.start_s + a.dur_s)) * 1e3 for a, b in zip(s2_sorted, s2_sorted[1:])]
    med = statistics.median
    q = np.percentile(gaps, [50, 90, 99, 100]) if gaps else [None] * 4
    return {"stage2_gap_ms_q": [round(float(x), 3) for x in q] if gaps else None,
            "stage2_gaps_over_40ms": [round(g, 1) for g in gaps if g > 40.0],
            "events": [(e.row, e.name, round(e.start_s * 1e3, 3), round(e.dur_s * 1e3, 3)) for e in events
                       if e.row in ("stage 1", "stage 2")],
            "stage1_layers_ms": med(layers1), "stage1_head_ms": med(head1), "stage2_pass_ms": med(pass2),
            "stage1_layers_over_alone": med(layers1) / alone["stage1_layers_ms"],
            "stage1_head_over_alone": med(head1) / alone["stage1_head_ms"],
            "stage2_pass_over_alone": med(pass2) / alone["stage2_pass_ms"],
            "stage2_gap_ms_median": med(gaps) if gaps else None,
            "stage2_gap_ms_mean": statistics.fmean(gaps) if gaps else None, "passes": [len(s1), len(s2)]}


def alone_prices(profile, scale, exit_layer: int, context: float) -> dict:
    """What the profile's tables, scaled to the pieces timed now, price each stage's pass at alone."""
    p = profile.retimed(scale)
    n = p.num_layers
    return {"stage1_layers_ms": p.embed_ms(1) + sum(p.layer_ms(i, 1, context) for i in range(exit_layer)),
            "stage1_head_ms": p.exit_head_ms("shared", 1),
            "stage2_pass_ms": sum(p.layer_ms(i, 1, context) for i in range(exit_layer, n)) + p.head_ms(1)}


def steal_ticks() -> tuple[int, int]:
    """(steal, total) jiffies over every CPU so far (/proc/stat's first line)."""
    vals = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return vals[7], sum(vals)


def one_round(model, profile, plan, ar_plan, prompts, max_new, forced, corun_args) -> dict:
    from profiler.latency import measure_corun_now
    from profiler.piece_times import time_pieces
    from runtime.measure import Job, measure

    def job(p, f=None, timeline=False):
        return Job(plan=p, prompts=prompts, max_new=max_new, forced=f, stop_at_eos=False, warmup=1, repeats=1,
                   timeline=timeline, warmup_tokens=16)

    from profiler.latency import measure_pipeline_now

    pieces = time_pieces(profile, model, None, repeats=30)
    corun = measure_corun_now(*corun_args)["slowdown"][1]
    probe = measure_pipeline_now(corun_args[0], model, corun_args[2], corun_args[3])
    ar = measure(model, job(ar_plan)).result
    st0 = steal_ticks()
    m = measure(model, job(plan, forced, timeline=True))
    st1 = steal_ticks()
    pp = m.result
    ar2 = measure(model, job(ar_plan)).result
    recs = [r for rep in m.records for r in rep]
    cpu_over_busy = [sum(r.cpu_s[i] for r in recs) / max(sum(r.busy_s[i] for r in recs), 1e-9) for i in range(2)]
    ar_tps = 2.0 / (1.0 / ar.tokens_per_s + 1.0 / ar2.tokens_per_s)
    context = statistics.fmean(len(x) for x in prompts) + statistics.fmean(max_new) / 2
    alone = alone_prices(profile, pieces.scale, plan.exit_layer, context)
    return {"at": time.strftime("%H:%M:%S"), "probe_now": probe["slowdown"],
            "probe_now_per_stage": probe["slowdown_per_stage"], "pieces_scale": pieces.scale, "steal_pct": 100.0 * (st1[0] - st0[0]) / max(st1[1] - st0[1], 1),
            "cpu_over_busy": cpu_over_busy, "pieces_drift_pct": pieces.scale.drift_pct(), "corun_now": corun,
            "ar_tokens_per_s": [ar.tokens_per_s, ar2.tokens_per_s], "ppsd_tokens_per_s": pp.tokens_per_s,
            "measured_speedup": pp.tokens_per_s / ar_tps, "acceptance": pp.acceptance_rate, "alone": alone,
            **stage_ratios(pp.timeline, alone)}


def predicted(profile, plan, bits, targets) -> float:
    from sim import intervals as iv
    from sim.run import simulate_stream

    stream = iv.overlay_stream(bits, list(range(len(bits))), targets)
    return simulate_stream(profile, plan, stream, engine="event").speedup_vs_ar


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--exit", type=int, default=15)
    ap.add_argument("--alpha", type=float, default=0.9)
    args = ap.parse_args(argv)

    import torch

    from ppsd.profile import load_profile
    from profiler.model import load_model
    from profiler.prompts import load_prompts
    from runtime.acceptance import ForcedTrace
    from runtime.plans import make_plan
    from runtime.validation.forcing import forced_bits
    from sim import intervals as iv
    from sim.modes import Mode

    torch.set_num_threads(1)
    profile = load_profile(args.profile)
    model = load_model(profile.model_id, "cpu", "float32")
    n = model.num_layers
    plan = make_plan(Mode.PPSD, n, args.exit, 4, 2, None, profile)
    ar_plan = make_plan(Mode.AR, n)
    texts = load_prompts("spec-bench", per_category=1)[: args.limit]
    prompts = [model.encode_prompt(p.text) for p in texts]
    max_new = [args.max_new_tokens] * len(prompts)
    targets = iv.Targets(tuple(float(len(x)) for x in prompts), tuple(max_new))
    bits = forced_bits(plan, args.alpha, 0, targets, [p.prompt_id for p in texts], max_new)
    forced = [ForcedTrace(tuple(int(b) for b in row), f"forced α={args.alpha:g}") for row in bits.prob]
    pred = predicted(profile, plan, bits, targets)
    table = profile.corun_table() or {}
    corun_args = (profile.model_id, model, int(table.get("threads_per_process", 1)), int(table.get("context", 64)),
                  float(table.get("seconds_per_round", 1.5)))
    rounds = []
    profile_probe = float(profile.pipeline.get("slowdown") or 1.0)
    profile_corun = max(float((profile.corun_table() or {}).get("slowdown") or 1.0), 1.0)
    for r in range(args.rounds):
        got = one_round(model, profile, plan, ar_plan, prompts, max_new, forced, corun_args)
        got["error_pct"] = 100.0 * (pred / got["measured_speedup"] - 1.0)
        scale = got.pop("pieces_scale")
        by = {"corun_check": max(got["corun_now"], 1.0) / profile_corun, "probe": got["probe_now"] / profile_probe}
        got["retimed"] = {}
        for name, corun in by.items():
            view = profile.retimed(replace(scale, corun=corun))
            p_now = predicted(view, plan, bits, targets)
            got["retimed"][name] = {"predicted": p_now, "error_pct": 100.0 * (p_now / got["measured_speedup"] - 1.0)}
        log("  re-timed: " + ", ".join(f"{k} {v['predicted']:.3f}x ({v['error_pct']:+.1f}%)" for k, v in got["retimed"].items())
            + f"; probe now {got['probe_now']:.3f} (profile {profile_probe:.3f}), per stage {got['probe_now_per_stage']}")
        rounds.append(got)
        log(f"round {r + 1}: steal {got['steal_pct']:.1f}%, cpu/busy {got['cpu_over_busy'][0]:.2f} "
            f"{got['cpu_over_busy'][1]:.2f}; measured {got['measured_speedup']:.3f}x, predicted {pred:.3f}x ({got['error_pct']:+.1f}%); "
            f"pieces {got['pieces_drift_pct']}, co-run {got['corun_now']:.3f}; in pipeline / alone: stage 1 layers "
            f"{got['stage1_layers_over_alone']:.3f}, head {got['stage1_head_over_alone']:.3f}, stage 2 "
            f"{got['stage2_pass_over_alone']:.3f}; stage 2 gaps p50/p90/p99/max {got['stage2_gap_ms_q']} ms, over 40 ms: "
            f"{got['stage2_gaps_over_40ms']}")
    doc = {"profile": str(args.profile), "plan": plan.label(), "alpha": args.alpha, "predicted_speedup": pred,
           "profile_corun": profile.corun_slowdown(2), "rounds": rounds}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
