"""Emulated devices: PPSD plans on a GPU-like synthetic profile, emulated vs simulated.

  .venv/bin/python -m bench.bench_emulate [--out DIR] [--layers 32] [--layer-ms 0.2] [--head-ms 0.1]
                                          [--hop-ms 0.02] [--plans 'ppsd:16:2;ppsd:8:4;ppsd:4:8'] [--repeats 3]

Writes a synthetic profile (uniform layers, α(E) = 0.5 + 0.4 E/N as seeded Bernoulli traces) and
  1. runs `ppsd validate --emulate` on it: every plan's emulated speedup beside the simulator's, and the MAPE;
  2. runs each PPSD plan with every draft accepted (what `ppsd run --emulate --force-trace accept-all`
     does), where a plan is bound by its slowest stage: measured time per token minus that stage's
     profiled time is what the control plane (messages, the stage loop's Python) adds to each pass;
     stage 1's measured pass and period beside its profiled time show where;
  3. the same for AR: measured time per token minus embed + N layers + head.
Run it on an idle machine; compare only figures from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _ppsd(*argv: str) -> str:
    out = subprocess.run([sys.executable, "-m", "ppsd", *argv], cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr.strip() or f"ppsd {argv[0]} failed")
    return out.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for the profile and the validation (default: a temporary one)")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--layer-ms", type=float, default=0.2)
    ap.add_argument("--head-ms", type=float, default=0.1)
    ap.add_argument("--embed-ms", type=float, default=0.01)
    ap.add_argument("--hop-ms", type=float, default=0.02)
    ap.add_argument("--plans", default="ppsd:16:2;ppsd:8:2;ppsd:8:4;ppsd:4:4;ppsd:4:8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64, help="tokens per prompt in the accept-all runs")
    args = ap.parse_args()

    from ppsd.profile import load_profile
    from ppsd.profile.synthetic import write_synthetic_profile
    from sim.schemes.ppsd.stage_costs import stage_ms
    from sim.model.cost_model import cost_model
    import numpy as np

    base = Path(args.out or tempfile.mkdtemp(prefix="ppsd-emulate-"))
    n = args.layers
    prof = write_synthetic_profile(base / "profile", alpha_by_exit=lambda e: 0.5 + 0.4 * e / n, num_layers=n,
                                   layer_ms=args.layer_ms, head_ms=args.head_ms, embed_ms=args.embed_ms,
                                   hop_ms=args.hop_ms)
    print(f"profile {prof.path}: {n} layers × {args.layer_ms} ms, head {args.head_ms} ms, embed {args.embed_ms} ms, "
          f"hop {args.hop_ms} ms; α(E) = 0.5 + 0.4 E/{n}")

    # 1. validate --emulate
    val = base / "validation"
    doc = json.loads(_ppsd("validate", "--emulate", str(prof.path), "--plans", args.plans, "--limit", "4",
                           "--repeats", str(args.repeats), "--out", str(val), "--json"))
    print(f"\n1. ppsd validate --emulate ({val})")
    print(f"{'plan':28} {'α':>5} {'sim ×':>6} {'emu ×':>6} {'err %':>6}")
    for r in doc["rows"][1:]:
        a = r.get("predicted_acceptance_rate")
        print(f"{r['plan']:28} {a if a is None else round(a, 3):>5} {r['predicted_speedup']:6.3f} "
              f"{r['measured_speedup']:6.3f} {r['speedup_error_pct']:6.1f}")
    print(f"MAPE of the speedup {doc['mape_speedup_pct']:.1f}% over {len(doc['rows']) - 1} plans; AR "
          f"{doc['rows'][0]['measured_tokens_per_s']:.1f} tokens/s emulated, {doc['rows'][0]['predicted_tokens_per_s']:.1f} "
          "simulated")

    # 2. accept-all: each plan at its slowest stage's bound, plus what the control plane adds a pass
    from runtime.acceptance import ACCEPT_ALL
    from runtime.emulate import EmulatedModel, emulated_prompts
    from runtime.measure import Job, measure
    from sim.api import resolve_plan
    from ppsd.modes import Mode
    from sim.plan import Plan

    prof = load_profile(prof.path)
    cm = cost_model(prof)
    model = EmulatedModel(prof)
    prompts = [p.tokens for p in emulated_prompts(prof)][:4]
    ctx = np.array([float(prof.context_values[0]) + args.tokens / 2])
    print("\n2. every draft accepted: ms per token against the slowest stage's profiled time; stage 1's pass")
    print("   (embed + layers + exit head, its two sends) and its period, measured beside the profile's time")
    print(f"{'plan':28} {'slowest':>8} {'ms/tok':>7} {'+µs/tok':>8} {'s1 prof':>8} {'s1 pass':>8} {'s1 period':>9}")
    for item in filter(None, args.plans.split(";")):
        _, e, k = item.split(":")
        plan = resolve_plan(Plan(Mode.PPSD, int(e), stages=int(k)), prof)
        m = measure(model, Job(plan=plan, prompts=prompts, max_new=[args.tokens] * len(prompts), warmup=1,
                               repeats=args.repeats, forced=[ACCEPT_ALL] * len(prompts), timeout_s=60))
        stages = [float(x[0]) for x in stage_ms(cm, ctx, plan.stage_bounds)]
        meas = 1000 / m.result.tokens_per_s
        s1 = sorted((ev for ev in m.result.timeline if ev.row == "stage 1" and ev.name == "draft"),
                    key=lambda ev: ev.start_s)
        passes = float(np.median([ev.dur_s * 1e3 for ev in s1]))
        period = float(np.median([(b.start_s - a.start_s) * 1e3 for a, b in zip(s1, s1[1:])]))
        print(f"{plan.label():28} {max(stages):8.3f} {meas:7.3f} {1e3 * (meas - max(stages)):8.0f} "
              f"{stages[0]:8.3f} {passes:8.3f} {period:9.3f}")
    # 3. AR: the decoding loop's own cost per token
    m = measure(model, Job(plan=Plan(Mode.AR), prompts=prompts, max_new=[args.tokens] * len(prompts), warmup=1,
                           repeats=args.repeats))
    step = args.embed_ms + n * args.layer_ms + args.head_ms
    meas = 1000 / m.result.tokens_per_s
    print(f"\n3. AR: {meas:.3f} ms per token against embed + N layers + head = {step:.3f} ms: "
          f"+{1e3 * (meas - step):.0f} µs per token")
    return 0


if __name__ == "__main__":
    sys.exit(main())
