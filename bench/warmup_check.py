"""Does a short warm-up measure what a whole one does? A/B on this machine, paired run by run.

    .venv/bin/python -m bench.warmup_check --prompts FILE [--limit 4] [--chunk 2] [--rounds 2] [--json]

`ppsd validate --warmup-tokens N` cuts every warm-up pass to a prompt's first 32 tokens and N new ones
(runtime/warmup.py): a PPSD run in turns starts its stage processes afresh on every chunk of prompts, and
a warm-up on the whole chunk takes half its time. This runs each plan on each chunk twice, warmed
up whole and short, in alternating order, and reports the timed decode speed of the short runs over the
whole ones (a ratio near 1 within the runs' own spread: the short warm-up measures the same thing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import replace

EXIT, DRAFT_LEN, HEAD = 24, 3, "vocab4096"  # an EESD and a 2-stage PPSD plan of the machine check


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", required=True, help="Spec-Bench-format JSONL (e.g. a machine check's measured_prompts.jsonl)")
    ap.add_argument("--heads", default=None, help="exit heads (default: the cache's smollm2-135m heads)")
    ap.add_argument("--limit", type=int, default=4, help="prompts of the file to decode (default 4)")
    ap.add_argument("--chunk", type=int, default=2, help="prompts a run, as `ppsd validate --turns` cuts them")
    ap.add_argument("--rounds", type=int, default=2, help="times every chunk is measured both ways")
    ap.add_argument("--warmup-tokens", type=int, default=16, help="the short warm-up's new tokens a prompt")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="tokens each timed prompt decodes")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ppsd.paths import cache_dir
    from runtime.llm import load_model
    from ppsd.prompts import load_prompts
    from runtime.measure import Job, measure
    from runtime.request import with_exit_head
    from ppsd.modes import Mode
    from sim.plan import Plan
    from validation.interleave import Turns

    heads = args.heads or str(cache_dir() / "heads" / "smollm2-135m")
    model = load_model("smollm2-135m", "cpu", "float32")
    texts = load_prompts(args.prompts)[:args.limit]
    prompts = [model.encode_prompt(p.text) for p in texts]
    plans = [with_exit_head(model, p, heads, HEAD) for p in (
        Plan(Mode.EESD, EXIT, draft_len=DRAFT_LEN),
        Plan(Mode.PPSD, EXIT, stages=2, stage_bounds=(0, EXIT, model.num_layers)))]
    base = Job(plans[0], prompts, [args.max_new_tokens] * len(prompts), stop_at_eos=False, warmup=1, repeats=1,
               timeline=False, heads_dir=heads)
    measure(model, replace(base, plan=plans[0], prompts=prompts[:1], max_new=[8]))  # this process warm, once
    turns = Turns(len(prompts), args.chunk)
    rows = []
    for r in range(args.rounds):
        for plan in plans:
            for k, chunk in enumerate(turns.chunks):
                pair = {}
                order = (0, args.warmup_tokens) if (r + k) % 2 == 0 else (args.warmup_tokens, 0)
                for wt in order:
                    m = measure(model, turns.job(replace(base, plan=plan, warmup_tokens=wt), chunk))
                    pair[wt] = m.result.tokens_per_s
                rows.append({"round": r, "plan": plan.label(), "chunk": k, "whole": round(pair[0], 3),
                             "short": round(pair[args.warmup_tokens], 3),
                             "ratio": round(pair[args.warmup_tokens] / pair[0], 4)})
                print(f"{plan.label():36s} chunk {k} round {r}: whole {pair[0]:.2f}, short "
                      f"{pair[args.warmup_tokens]:.2f} tokens/s ({rows[-1]['ratio']:.3f})", file=sys.stderr, flush=True)
    summary = {"warmup_tokens": args.warmup_tokens, "rows": rows, "plans": {}}
    for plan in plans:
        ratios = [x["ratio"] for x in rows if x["plan"] == plan.label()]
        summary["plans"][plan.label()] = {"runs": len(ratios), "mean_ratio": round(statistics.mean(ratios), 4),
                                          "sd_ratio": round(statistics.pstdev(ratios), 4)}
    print(json.dumps(summary, indent=1) if args.json else "\n".join(
        f"{k}: short / whole {v['mean_ratio']:.3f} ± {v['sd_ratio']:.3f} over {v['runs']} pairs"
        for k, v in summary["plans"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
