"""`--runtime hf` for `ppsd simulate` and `ppsd plan` (torch-free): predict transformers' own early-exit
assisted generation (sim/schemes/hf.py) from a profile with a `latency.hf` block."""

from __future__ import annotations

import json

from ppsd.errors import UserError
from sim.plan import RUNTIMES, SCHEDULES


def add_runtime_options(p, *, schedule: bool = True, both: bool = False) -> None:
    p.add_argument("--runtime", choices=RUNTIMES, default="ppsd",
                   help="ppsd's decoders (default) or hf: transformers' generate(assistant_early_exit=E), needs "
                        "`ppsd profile add-hf`")
    if schedule:
        p.add_argument("--schedule", choices=SCHEDULES + (("both",) if both else ()), default="constant",
                       help="hf EESD: transformers' schedule, constant (default) or heuristic"
                            + ("; both: every EESD plan under each" if both else ""))


def check_runtime_args(args, mode) -> None:
    from sim.schemes import runtime_decodes

    if getattr(args, "runtime", "ppsd") != "hf":
        if getattr(args, "schedule", "constant") != "constant":
            raise UserError("--schedule is transformers' draft-length schedule", "add --runtime hf, or drop --schedule")
        return
    if not runtime_decodes("hf", mode):
        raise UserError("transformers' generate has no pipeline (PPSD) mode", "use --mode ar or eesd with --runtime hf")
    if getattr(args, "synthetic_layers", None) is not None:
        raise UserError("--runtime hf needs a measured profile's latency.hf block", "give --profile DIR")
    if getattr(args, "temperature", 0.0):
        raise UserError("--runtime hf is modelled for greedy decoding only", "drop --temperature")


def sweep_hf(profile, *, gammas=range(1, 9), tokens: int = 2000, category=None, prompt_len=None, exits=None,
             draft_stops=()) -> list:
    """transformers' AR and assisted generation at every traced exit × γ0 × {constant, heuristic} (×
    each confidence threshold in `draft_stops`: `HFAssisted.sweep_plans`), best first (each plan replays
    the same trace-driven stream of its exit)."""
    from sim import api
    from ppsd.modes import Mode
    from sim.plan import Plan
    from sim.model.streams import _traces
    from sim.schemes.hf import HFAssisted

    if exits is None:
        exits = sorted(e for e in _traces(profile, "shared") if 1 <= e < profile.num_layers)
    if not exits:
        raise UserError(f"profile {profile.path} has no acceptance traces", "re-run `ppsd profile` with acceptance")
    results = [api.simulate(profile, Plan(Mode.AR, runtime="hf"), tokens=tokens, category=category, engine="fast",
                            prompt_len=prompt_len)]
    if draft_stops:
        profile.require_confidence()
    base = Plan(Mode.AR)
    for e in exits:
        for plan in HFAssisted().sweep_plans(base, e, num_layers=profile.num_layers, gammas=[int(g) for g in gammas],
                                             devices=1, draft_stops=tuple(draft_stops)):
            results.append(api.simulate(profile, plan, tokens=tokens, category=category, engine="fast",
                                        prompt_len=prompt_len))
    results.sort(key=lambda r: -(r.speedup_vs_ar or 0.0))
    return results


def plan_hf(args, profile) -> int:
    """`ppsd plan --runtime hf`: every profiled exit × γ0 in 1..--max-draft-len × {constant, heuristic}."""
    from sim.schemes.hf import hf_block

    hf_block(profile)  # the one-line refusal before any work
    if args.temperature:
        raise UserError("--runtime hf is modelled for greedy decoding only", "drop --temperature")
    results = sweep_hf(profile, gammas=range(1, args.max_draft_len + 1), tokens=args.tokens, category=args.category,
                       prompt_len=args.prompt_len, draft_stops=getattr(args, "draft_stops", ()))
    if args.json:
        print(json.dumps([r.to_json_dict() for r in results]))
        return 0
    print(f"{profile.model_id} on {profile.device_name}: transformers' assisted generation, {len(results)} plans, "
          f"{args.tokens} trace-driven tokens each (speedup against transformers' own greedy generate)")
    print(f"{'rank':>4}  {'plan':<36} {'speedup':>8} {'tokens/s':>9} {'α':>5} {'tok/round':>9}")
    for i, r in enumerate(results[: args.top], 1):
        alpha = r.details.stream_alpha if r.plan.mode.speculative else float("nan")
        print(f"{i:>4}  {r.plan.label():<36} {r.speedup_vs_ar:>7.3f}× {r.tokens_per_s:>9.2f} {alpha:>5.2f} "
              f"{r.mean_accepted:>9.2f}")
    best = results[0]
    print(f"recommendation: {best.plan.label()} ({best.speedup_vs_ar:.3f}× transformers' greedy generate)")
    return 0
