"""Emulated devices (issue 13 item 1): PPSD plans on a GPU-like synthetic profile, emulated vs simulated.

  .venv/bin/python bench/bench_emulate.py [--out DIR] [--layers 32] [--layer-ms 0.2] [--head-ms 0.1]
                                          [--hop-ms 0.02] [--plans 'ppsd:16:2;ppsd:8:4;ppsd:4:8'] [--repeats 3]

Writes a synthetic profile (uniform layers, α(E) = 0.5 + 0.4 E/N as seeded Bernoulli traces) and
  1. runs `ppsd validate --emulate` on it: every plan's emulated speedup beside the simulator's, and the MAPE;
  2. runs each PPSD plan with every draft accepted (`ppsd run --emulate --force-trace accept-all`),
     where a plan is bound by its slowest stage: measured time per token minus that stage's profiled
     time is what the control plane (messages, the stage loop's Python) adds to each pass;
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
sys.path.insert(0, str(ROOT))
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

    from profiler.schema import load_profile
    from profiler.synthetic import write_synthetic_profile
    from sim.schemes.ppsd.costs import stage_ms
    from sim.costs import cost_model
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
    prof = load_profile(prof.path)
    cm = cost_model(prof)
    print("\n2. every draft accepted: measured ms/token vs the slowest stage's profiled ms")
    print(f"{'plan':28} {'stage ms':>9} {'meas ms':>8} {'+ µs/pass':>9}")
    for item in filter(None, args.plans.split(";")):
        _, e, k = item.split(":")
        res = json.loads(_ppsd("run", "--emulate", str(prof.path), "--mode", "ppsd", "--exit", e, "--stages", k,
                               "--force-trace", "accept-all", "--limit", "4", "--max-new-tokens", str(args.tokens),
                               "--repeats", str(args.repeats), "--no-ar", "--json"))
        bounds = tuple(res["stage_bounds"])
        ctx = np.array([float(prof.context_values[0]) + args.tokens / 2])
        slowest = max(float(s[0]) for s in stage_ms(cm, ctx, bounds))
        meas = 1000 / res["tokens_per_s"]
        print(f"PPSD E={e} k={k} {list(bounds)!s:17} {slowest:9.3f} {meas:8.3f} {1e3 * (meas - slowest):9.0f}")
    res = json.loads(_ppsd("run", "--emulate", str(prof.path), "--mode", "ar", "--limit", "4", "--max-new-tokens",
                           str(args.tokens), "--repeats", str(args.repeats), "--json"))
    step = args.embed_ms + n * args.layer_ms + args.head_ms
    meas = 1000 / res["tokens_per_s"]
    print(f"{'AR':28} {step:9.3f} {meas:8.3f} {1e3 * (meas - step):9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
