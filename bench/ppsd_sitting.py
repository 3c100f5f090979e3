"""One sitting of the forced-acceptance PPSD timing check, taken apart pass by pass.

    python -m bench.ppsd_sitting --profile P --out runs/sitting-1.json [--rounds 3] [--limit 4]

A forced-acceptance PPSD plan (E = 15, k = 2, α = 0.9 by default) takes turns with AR on one thread,
`--rounds` times. Before each turn the pieces of a decode step are timed alone (what the profile's tables
price, now), the layers-only co-run check runs and one round of the runtime probe (`profiler/
runtime_probe.py`). From each PPSD run's timeline it reads what the pipeline did: stage 1's layers and exit
head and stage 2's pass per token, each over its price alone right before, the time stage 2 waited for
work, the host's steal time and each stage's CPU time over its busy time. Beside each run: the simulator's
prediction for the same forced bits priced from the profile, and priced again with the pieces timed now
and the co-run slowdown each check read now.

Where a PPSD plan's error between sittings comes from is then one of: the pieces alone drifted, the
stages slowed each other more or less than the profile says (`in pipeline / alone`), or time went to
neither stage's compute (waits, hops, the host).
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

from ppsd.statistics import percent_error

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(msg: str) -> None:
    print(f"[sitting {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def stage_ratios(events, alone: dict) -> dict:
    """Per stage, the median time of its passes in the pipeline over its price alone, and stage 2's
    waits between its passes (the long ones are the prompts' prefills)."""
    s1 = [e for e in events if e.row == "stage 1" and e.name == "draft" and "layers_ms" in e.args]
    s2 = sorted((e for e in events if e.row == "stage 2" and e.name == "verify"), key=lambda e: e.start_s)
    layers1 = [e.args["layers_ms"] for e in s1]
    head1 = [e.dur_s * 1e3 - e.args["layers_ms"] for e in s1]
    pass2 = [e.dur_s * 1e3 for e in s2]
    gaps = [(b.start_s - (a.start_s + a.dur_s)) * 1e3 for a, b in zip(s2, s2[1:])]
    med = statistics.median
    return {"stage1_layers_over_alone": med(layers1) / alone["stage1_layers_ms"],
            "stage1_head_over_alone": med(head1) / alone["stage1_head_ms"],
            "stage2_pass_over_alone": med(pass2) / alone["stage2_pass_ms"],
            "stage2_gap_ms_q": [round(float(x), 3) for x in np.percentile(gaps, [50, 90, 99, 100])] if gaps else None,
            "stage2_gap_ms_mean": statistics.fmean(gaps) if gaps else None, "passes": [len(s1), len(s2)]}


def alone_prices(profile, scale, exit_layer: int, context: float) -> dict:
    """What the profile's tables, scaled to the pieces timed now, price each stage's pass at alone."""
    p = profile.retimed(scale)
    return {"stage1_layers_ms": p.embed_ms(1) + sum(p.layer_ms(i, 1, context) for i in range(exit_layer)),
            "stage1_head_ms": p.exit_head_ms("shared", 1),
            "stage2_pass_ms": sum(p.layer_ms(i, 1, context) for i in range(exit_layer, p.num_layers)) + p.head_ms(1)}


def steal_ticks() -> tuple[int, int]:
    """(steal, total) jiffies over every CPU so far (/proc/stat's first line)."""
    vals = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return vals[7], sum(vals)


def checks_now(profile, model, probe, corun_args) -> dict:
    """The pieces timed now, the layers-only co-run check and one round of the runtime probe."""
    from profiler.latency import measure_corun_now
    from profiler.piece_times import time_pieces

    pieces = time_pieces(profile, model, None, repeats=30)
    corun = measure_corun_now(*corun_args)["slowdown"][1]
    probe.round()
    return {"scale": pieces.scale, "corun_check": corun,
            "runtime_probe": float(np.mean(probe.rounds[-1]["slowdown_per_stage"]))}


def one_round(model, profile, probe, setup: dict, corun_args) -> dict:
    """Checks, AR, the forced PPSD plan, AR again; the plan's stages against their prices alone."""
    from runtime.measure import Job, measure

    def job(p, f=None, timeline=False):
        return Job(plan=p, prompts=setup["prompts"], max_new=setup["max_new"], forced=f, stop_at_eos=False,
                   warmup=1, repeats=1, timeline=timeline, warmup_tokens=16)

    now = checks_now(profile, model, probe, corun_args)
    ar = measure(model, job(setup["ar_plan"])).result
    st0 = steal_ticks()
    m = measure(model, job(setup["plan"], setup["forced"], timeline=True))
    st1 = steal_ticks()
    ar2 = measure(model, job(setup["ar_plan"])).result
    recs = [r for rep in m.records for r in rep]
    context = statistics.fmean(len(x) for x in setup["prompts"]) + statistics.fmean(setup["max_new"]) / 2
    alone = alone_prices(profile, now["scale"], setup["plan"].exit_layer, context)
    return {"at": time.strftime("%H:%M:%S"), **{k: v for k, v in now.items() if k != "scale"}, "scale": now["scale"],
            "steal_pct": 100.0 * (st1[0] - st0[0]) / max(st1[1] - st0[1], 1),
            "cpu_over_busy": [sum(r.cpu_s[i] for r in recs) / max(sum(r.busy_s[i] for r in recs), 1e-9) for i in (0, 1)],
            "ar_tokens_per_s": [ar.tokens_per_s, ar2.tokens_per_s], "ppsd_tokens_per_s": m.result.tokens_per_s,
            "measured_speedup": m.result.tokens_per_s * (1 / ar.tokens_per_s + 1 / ar2.tokens_per_s) / 2,
            **stage_ratios(m.result.timeline, alone)}


def predicted(profile, setup: dict) -> float:
    from sim import intervals as iv
    from sim.run import simulate_stream

    bits, targets = setup["bits"], setup["targets"]
    stream = iv.overlay_stream(bits, list(range(len(bits))), targets)
    return simulate_stream(profile, setup["plan"], stream, engine="event").speedup_vs_ar


def make_setup(profile, model, args) -> dict:
    """The plan, AR, the prompts and the forced bits every round runs."""
    from ppsd.modes import Mode
    from ppsd.prompts import load_prompts
    from runtime.acceptance import ForcedTrace
    from runtime.request import make_plan
    from sim import intervals as iv
    from validation.forcing import forced_bits

    n = model.num_layers
    plan = make_plan(Mode.PPSD, n, args.exit, 4, 2, None, profile)
    texts = load_prompts("spec-bench", per_category=1)[: args.limit]
    prompts = [model.encode_prompt(p.text) for p in texts]
    max_new = [args.max_new_tokens] * len(prompts)
    targets = iv.Targets(tuple(float(len(x)) for x in prompts), tuple(max_new))
    bits = forced_bits(plan, args.alpha, 0, targets, [p.prompt_id for p in texts], max_new)
    forced = [ForcedTrace(tuple(int(b) for b in row), f"forced α={args.alpha:g}") for row in bits.prob]
    return {"plan": plan, "ar_plan": make_plan(Mode.AR, n), "prompts": prompts, "max_new": max_new,
            "targets": targets, "bits": bits, "forced": forced}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, default=4, help="Spec-Bench prompts, one a category (default 4)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--exit", type=int, default=15)
    ap.add_argument("--alpha", type=float, default=0.9)
    args = ap.parse_args(argv)

    import torch

    from ppsd.profile import load_profile
    from profiler.runtime_probe import RuntimeProbe
    from runtime.llm import load_model

    torch.set_num_threads(1)
    profile = load_profile(args.profile)
    model = load_model(profile.model_id, "cpu", "float32")
    setup = make_setup(profile, model, args)
    pred = predicted(profile, setup)
    table = profile.corun_table() or {}
    corun_args = (profile.model_id, model, int(table.get("threads_per_process", 1)), int(table.get("context", 64)),
                  float(table.get("seconds_per_round", 1.5)))
    probe = RuntimeProbe(model)
    rounds = [priced_round(one_round(model, profile, probe, setup, corun_args), profile, setup, pred)
              for _ in range(args.rounds)]
    doc = {"profile": str(args.profile), "plan": setup["plan"].label(), "alpha": args.alpha, "predicted_speedup": pred,
           "profile_corun": profile.corun_slowdown(2), "rounds": rounds}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    return 0


def priced_round(got: dict, profile, setup: dict, pred: float) -> dict:
    """The round's errors: priced from the profile, and re-priced with the pieces timed now and each
    check's co-run slowdown now over the profile's."""
    scale = got.pop("scale")
    got["error_pct"] = percent_error(pred, got["measured_speedup"])
    base = {"corun_check": max(float((profile.corun_table() or {}).get("slowdown") or 1.0), 1.0),
            "runtime_probe": profile.corun_slowdown(2)}
    got["retimed"] = {}
    for name, then in base.items():
        p_now = predicted(profile.retimed(replace(scale, corun=max(got[name], 1.0) / then)), setup)
        got["retimed"][name] = {"predicted": p_now, "error_pct": percent_error(p_now, got["measured_speedup"])}
    log(f"measured {got['measured_speedup']:.3f}x, predicted {pred:.3f}x ({got['error_pct']:+.1f}%); re-timed: "
        + ", ".join(f"{k} {v['error_pct']:+.1f}%" for k, v in got["retimed"].items())
        + f"; stage 2 in pipeline / alone {got['stage2_pass_over_alone']:.3f}, co-run check {got['corun_check']:.3f}, "
        f"runtime probe {got['runtime_probe']:.3f}; steal {got['steal_pct']:.1f}%")
    return got


if __name__ == "__main__":
    sys.exit(main())
