"""2-stage PPSD at E=15 with forced full acceptance vs AR, in one session.

  .venv/bin/python -m bench.bench_runtime [--model smollm2-135m] [--exit 15] [--tokens 48] [--rounds 3]

AR and PPSD blocks are interleaved (the machine drifts by several % over minutes). Prints:
  * PPSD tokens/s vs AR tokens/s (target >= 1.4x on an idle 2-core machine);
  * PPSD vs its stage-time bound: 1 / (slowest stage's measured compute per token) (target >= 0.95).
Numbers on a loaded machine are noisy; compare only figures taken in one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--exit", type=int, default=15)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved AR/PPSD blocks")
    args = ap.parse_args()

    import torch

    from runtime.llm import load_model
    from ppsd.prompts import load_prompts
    from runtime.acceptance import ACCEPT_ALL
    from runtime.measure import Job, measure
    from runtime.request import make_plan
    from ppsd.modes import Mode

    torch.set_num_threads(1)
    model = load_model(args.model)
    prompts = [model.encode_prompt(p.text) for p in load_prompts(None, limit=args.prompts)]
    n = model.num_layers
    ar_plan = make_plan(Mode.AR, n)
    pp_plan = make_plan(Mode.PPSD, n, args.exit, stages=2, bounds=(0, args.exit, n))
    common = dict(prompts=prompts, max_new=[args.tokens] * len(prompts), stop_at_eos=False, warmup=1, repeats=1,
                  timeline=False)
    ar_tps, pp_tps, bound_tps = [], [], []
    for r in range(args.rounds):
        ar = measure(model, Job(plan=ar_plan, **common)).result
        pp = measure(model, Job(plan=pp_plan, forced=[ACCEPT_ALL] * len(prompts), **common)).result
        # stage-time bound: the slowest stage's compute per token sets the pipeline's best rate
        per_tok = [b * pp.time_s / pp.tokens for b in pp.stage_busy]
        ar_tps.append(ar.tokens_per_s)
        pp_tps.append(pp.tokens_per_s)
        bound_tps.append(1.0 / max(per_tok))
        print(f"round {r + 1}: AR {ar.tokens_per_s:6.2f} tok/s | PPSD E={args.exit} k=2 accept-all "
              f"{pp.tokens_per_s:6.2f} tok/s ({pp.tokens_per_s / ar.tokens_per_s:.3f}x) | stage ms/token "
              + ", ".join(f"{1000 * t:.1f}" for t in per_tok)
              + f" | bound {bound_tps[-1]:.2f} tok/s -> {pp.tokens_per_s / bound_tps[-1]:.3f} of bound", flush=True)
    speed = statistics.median(p / a for p, a in zip(pp_tps, ar_tps))
    frac = statistics.median(p / b for p, b in zip(pp_tps, bound_tps))
    print(f"\nPPSD vs AR (median of {args.rounds} interleaved rounds): {speed:.3f}x   (target >= 1.40)")
    print(f"PPSD vs its stage-time bound:                   {frac:.3f}    (target >= 0.95)")
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} (numbers are noisy on a loaded machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
