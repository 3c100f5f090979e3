"""transformers' assisted generation, forward call by forward call, against the profile's price.

    .venv/bin/python -m bench.hf_calls --profile DIR [--exits 20,27] [--gammas 1,2,6] [--prompts 3]
        [--max-new-tokens 32] [--out calls.json]

Every forward call of `generate(..., assistant_early_exit=E)` at constant γ is timed (the runtime's
forward-call log, `runtime/hf_assisted.py: instrumented`) and priced with the simulator's own pieces
(`sim/schemes/hf.py: HFCosts`: a draft pass through E layers with the head on its last position, a
verification through every layer with the head on each of its γ + 1 positions). Plain AR
calls are timed beside them. Printed per (E, γ, layers run, new tokens): calls, median measured ms,
median priced ms and their ratio; per (E, γ): the median wall time of a full round and what the
forward calls in it leave over (host time between calls).

A machine faster or slower than when profiled moves every ratio alike; one kind of call off the others
is a pricing error of that call (the drafter's re-feed, say, computing its LM head on more positions
than priced). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="a measured CPU profile of the model (its tables price the calls)")
    ap.add_argument("--exits", default="20,27", help="exit layers (default 20,27)")
    ap.add_argument("--gammas", default="1,2,6", help="constant draft lengths (default 1,2,6)")
    ap.add_argument("--prompts", type=int, default=3, help="the profile's first N prompts (default 3)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--out", help="write every call and round here (JSON)")
    return ap.parse_args(argv)


def load_inputs(args: argparse.Namespace):
    """(the profile, its exits, the draft lengths); a UserError when they do not fit its model."""
    from ppsd.errors import UserError
    from ppsd.profile import load_profile

    prof = load_profile(args.profile)
    exits, gammas = _ints(args.exits), _ints(args.gammas)
    if not exits or not gammas or any(not 1 <= e < prof.num_layers for e in exits) or min(gammas) < 1:
        raise UserError(f"--exits {args.exits} / --gammas {args.gammas} do not fit a {prof.num_layers}-layer model",
                        f"give exits between 1 and {prof.num_layers - 1} and draft lengths of at least 1")
    return prof, exits, gammas


def pricer(prof):
    """price(call) -> ms: a forward call priced with the simulator's own pieces (sim/schemes/hf.py),
    overheads left out, so the ratio is the pieces' alone."""
    from sim.model.cost_model import cost_model
    from sim.schemes.hf import HFCosts

    cm = cost_model(prof)
    n_layers = prof.num_layers

    def price(c) -> float:
        costs = HFCosts(cm, prof, exit_layer=c.layers, draft_len=1, schedule="constant", refeed="tail",
                        ar_overhead=0.0, round_overhead=0.0, draft_overhead=0.0, scale=1.0)
        if c.cached == 0:  # a prompt's prefill (the drafter's cut to its layers): the profile's prefill price
            return float(prof.prefill_ms(c.n)) * c.layers / n_layers
        if c.layers == n_layers:  # a verification of n positions (n = 1: an AR step)
            return costs.verify_ms(c.cached, c.n - 1)
        return costs.refeed_ms(c.n, c.cached) if c.n > 1 else costs.draft_ms(c.cached)

    return price


def time_calls(model, prompts: list, exits: list[int], gammas: list[int], max_new: int, price):
    """Every forward call of assisted generation at each (E, γ), then of plain AR (E = γ = 0), timed
    and priced: (calls [E, γ, layers, n, cached, ms, priced ms, start, end], rounds [E, γ, drafts,
    start, end])."""
    from runtime.hf_assisted import ForwardCall, assisted_config, generate_hf, hf_model

    hf = hf_model(model)
    calls, rounds = [], []
    generate_hf(model, prompts[0], 8, eos=set())  # warm up
    for e in exits:
        for g in gammas:
            for p in prompts:
                log: list[ForwardCall] = []
                with assisted_config(hf, g, "constant"):
                    rec = generate_hf(model, p, max_new, exit_layer=e, eos=set(), log=log)
                calls += [[e, g, c.layers, c.n, c.cached, (c.end - c.start) * 1e3, price(c), c.start, c.end] for c in log]
                for k in range(1, len(rec.commit_times)):
                    rounds.append([e, g, rec.drafts[k - 1], rec.commit_times[k - 1], rec.commit_times[k]])
            print(f"E={e} γ={g} done", file=sys.stderr, flush=True)
    for p in prompts:
        log = []
        generate_hf(model, p, max_new, eos=set(), log=log)
        calls += [[0, 0, c.layers, c.n, c.cached, (c.end - c.start) * 1e3, price(c), c.start, c.end] for c in log]
    return calls, rounds


def print_calls(calls: list) -> None:
    """Per (E, γ, layers, n), prefills apart: calls, median measured and priced ms, their ratio."""
    by_kind = defaultdict(list)
    for e, g, layers, n, cached, ms, priced, *_ in calls:
        if cached > 0:  # prefills apart
            by_kind[(e, g, layers, n)].append((ms, priced))
    for (e, g, layers, n), xs in sorted(by_kind.items()):
        a = np.asarray(xs)
        what = "AR" if e == 0 else f"E={e} γ={g}"
        print(f"{what:12s} layers {layers:3d} n {n:2d}: {len(a):4d} calls, measured {np.median(a[:, 0]):7.1f} ms, "
              f"priced {np.median(a[:, 1]):7.1f} ms, ratio {np.median(a[:, 0] / a[:, 1]):.3f}")


def print_rounds(calls: list, rounds: list, exits: list[int], gammas: list[int]) -> None:
    """Per (E, γ): the median wall time of a full round, and what its forward calls leave over."""
    for e in exits:
        for g in gammas:
            full = [(t0, t1) for re, rg, d, t0, t1 in rounds if (re, rg, d) == (e, g, g)]
            if not full:
                continue
            inside = [sum(c[8] - c[7] for c in calls if c[0] == e and c[1] == g and t0 < c[7] and c[8] <= t1)
                      for t0, t1 in full]
            wall = np.array([t1 - t0 for t0, t1 in full]) * 1e3
            print(f"E={e} γ={g}: {len(full)} full rounds, wall median {np.median(wall):.1f} ms, "
                  f"outside forward calls {np.median(wall - np.array(inside) * 1e3):.1f} ms")


def main(argv=None) -> int:
    args = parse_args(argv)

    import torch

    from ppsd.errors import UserError
    from runtime.llm import load_model

    try:
        prof, exits, gammas = load_inputs(args)
    except UserError as exc:
        print(f"hf_calls: error: {exc}", file=sys.stderr)
        return 2
    price = pricer(prof)
    model = load_model(prof.model_id)
    torch.set_num_threads(1)
    gens = [g for g in prof.generations() if g.get("prompt")][: args.prompts]
    prompts = [model.encode_prompt(g["prompt"]) for g in gens]
    calls, rounds = time_calls(model, prompts, exits, gammas, args.max_new_tokens, price)
    print_calls(calls)
    print_rounds(calls, rounds, exits, gammas)
    if args.out:
        tmp = Path(args.out).with_suffix(".tmp")
        tmp.write_text(json.dumps({"profile": str(args.profile), "calls": calls, "rounds": rounds}))
        tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
