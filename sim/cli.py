"""`ppsd simulate` and `ppsd plan` (torch-free)."""

from __future__ import annotations

import argparse
import json
import tempfile

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from sim import gpus
from sim.modes import MODES, Mode


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip() != "")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="predict one decoding plan's speed from a profile (no torch)",
                              description="Simulate AR, EESD or PPSD on a profile (or a synthetic model).")
    src = p.add_argument_group("model")
    src.add_argument("--profile", metavar="DIR", help="profile folder written by `ppsd profile`")
    src.add_argument("--synthetic-layers", type=int, metavar="N", help="what-if without a profile: N uniform layers")
    src.add_argument("--layer-ms", type=float, default=2.8, metavar="T", help="synthetic layer time (default 2.8)")
    src.add_argument("--head-ms", type=float, default=12.6, metavar="H", help="synthetic LM head time (default 12.6)")
    src.add_argument("--embed-ms", type=float, default=0.13, metavar="M", help="synthetic embedding time")
    src.add_argument("--corun", type=float, default=1.0, metavar="F",
                     help="synthetic co-run slowdown of 2+ concurrent stages (default 1.0)")
    p.add_argument("--mode", choices=MODES, default=Mode.PPSD.value)
    p.add_argument("--exit", type=int, dest="exit_layer", metavar="E", help="exit layer (1..N-1)")
    p.add_argument("--stages", type=int, default=2, metavar="K", help="PPSD stages (default 2)")
    p.add_argument("--stage-bounds", type=_ints, metavar="0,E,...,N", help="explicit PPSD layer cuts")
    p.add_argument("--placement", type=_ints, metavar="D0,D1,...", help="device of each stage (default one each)")
    p.add_argument("--draft-len", type=int, default=4, metavar="G", help="EESD drafts per round (default 4)")
    p.add_argument("--tokens", type=int, metavar="T",
                   help="tokens to simulate (default: each trace once; 2000 for bernoulli)")
    p.add_argument("--acceptance", choices=["trace", "bernoulli"],
                   help="recorded match traces or Bernoulli(--alpha) (default: trace, or bernoulli with --alpha)")
    p.add_argument("--alpha", type=float, metavar="A", help="Bernoulli acceptance rate in [0, 1]")
    p.add_argument("--category", metavar="C", help="replay only this prompt category's traces")
    p.add_argument("--temperature", type=float, default=0.0, help="> 0: accept with probability β per position")
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument("--hop-us", type=float, metavar="X", help="stage-to-stage hop in µs (default: the profile's)")
    p.add_argument("--exit-head", default=SHARED, metavar="NAME",
                   help="which exit head drafts: shared (default), or one the profile has from `ppsd profile "
                        "--heads` (trained, vocab4096, ...)")
    p.add_argument("--engine", choices=["event", "fast"], default="event")
    p.add_argument("--trace-out", metavar="FILE", help="write the timeline as Chrome trace JSON (Perfetto)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=simulate_cmd)

    q = subparsers.add_parser("plan", help="rank every plan (exit layer × EESD γ × PPSD stages) on a profile",
                              description="Sweep AR, EESD γ 1..8 and PPSD k 2..K at every exit layer; recommend one.")
    q.add_argument("--profile", metavar="DIR", required=True)
    q.add_argument("--devices", type=int, default=None, metavar="K",
                   help="most PPSD stages / GPUs (default: an estimated profile's GPU count, else 4)")
    q.add_argument("--hop-us", type=float, metavar="X", help="hop latency in µs (default: the profile's)")
    q.add_argument("--alpha-scale", type=float, default=1.0, metavar="F", help="what-if: scale acceptance by F")
    q.add_argument("--temperature", type=float, default=0.0)
    q.add_argument("--tokens", type=int, default=2000, metavar="T", help="trace-driven tokens per plan")
    q.add_argument("--category", metavar="C")
    q.add_argument("--max-draft-len", type=int, default=8, metavar="G", help="EESD γ from 1 to G (default 8)")
    q.add_argument("--top", type=int, default=15, metavar="N", help="rows to print (default 15)")
    q.add_argument("--exit-head", action="append", metavar="NAME",
                   help="only plans drafting with this exit head (repeatable; default: every head the profile "
                        "has, compared side by side)")
    q.add_argument("--json", action="store_true", help="print a JSON array of result objects, best first")
    q.set_defaults(func=plan_cmd)


def _hop_ms(hop_us):
    if hop_us is None:
        return None
    if hop_us < 0:
        raise UserError(f"--hop-us {hop_us} is negative", "give a hop latency >= 0 µs")
    return hop_us / 1000.0


def _load(path):
    from profiler.schema import load_profile

    return load_profile(path)


def simulate_cmd(args) -> int:
    from sim import api
    from sim.plan import Plan
    from sim.timeline import write_chrome_trace

    if (args.profile is None) == (args.synthetic_layers is None):
        raise UserError("give exactly one of --profile DIR or --synthetic-layers N",
                        "e.g. --synthetic-layers 30 --layer-ms 2.8 --head-ms 12.6 --alpha 0.6")
    mode = Mode.parse(args.mode)
    if mode.speculative and args.exit_layer is None:
        raise UserError(f"--mode {mode} needs an exit layer", "give --exit E")
    plan = Plan(mode, exit_layer=args.exit_layer if mode.speculative else None, draft_len=args.draft_len,
                stage_bounds=args.stage_bounds, stages=args.stages, placement=args.placement,
                hop_ms=_hop_ms(args.hop_us), exit_head=args.exit_head)
    if mode is Mode.PPSD and args.stage_bounds is not None and len(args.stage_bounds) < 3:
        raise UserError(f"--stage-bounds {','.join(map(str, args.stage_bounds))} gives fewer than 2 stages",
                        "give at least 0,E,N")
    acceptance = args.acceptance or ("bernoulli" if args.alpha is not None else "trace")
    with tempfile.TemporaryDirectory(prefix="ppsd-synth-") as tmp:
        if args.synthetic_layers is not None:
            from profiler.synthetic import write_synthetic_profile

            n = args.synthetic_layers
            if n < 2 or n > 1000:
                raise UserError(f"--synthetic-layers {n} is out of range", "give between 2 and 1000 layers")
            for name in ("layer_ms", "head_ms", "embed_ms"):
                if getattr(args, name) < 0:
                    raise UserError(f"--{name.replace('_', '-')} is negative", "give times >= 0 ms")
            if args.corun < 1.0:
                raise UserError(f"--corun {args.corun} is below 1", "give a slowdown factor >= 1")
            if acceptance == "trace":
                raise UserError("a synthetic model has no recorded traces", "give --alpha A (Bernoulli acceptance)")
            profile = write_synthetic_profile(tmp, num_layers=n, layer_ms=args.layer_ms, head_ms=args.head_ms,
                                              embed_ms=args.embed_ms, hop_ms=0.0, corun_slowdown=args.corun)
        else:
            profile = _load(args.profile)
            gpus.check_plan(profile, plan)
        from sim.heads import check_head

        check_head(profile, args.exit_head)
        result = api.simulate(profile, plan, tokens=args.tokens, acceptance=acceptance, alpha=args.alpha,
                              category=args.category, seed=args.seed, temperature=args.temperature,
                              engine=args.engine, timeline=bool(args.trace_out))
    if args.trace_out:
        write_chrome_trace(args.trace_out, result.timeline, process_name=f"ppsd simulate: {result.plan.label()}")
    if args.json:
        print(json.dumps(result.to_json_dict()))
        return 0
    r, d = result, result.details
    print(f"{r.plan.label()}: {r.tokens} tokens in {r.time_s:.3f} s simulated = {r.tokens_per_s:.2f} tokens/s, "
          f"{r.speedup_vs_ar:.3f}× AR ({d.ar_tokens_per_s:.2f} tokens/s)")
    if r.plan.mode.speculative:
        print(f"  acceptance {d.acceptance_source}: rate {r.acceptance_rate:.3f}, "
              f"{r.mean_accepted:.2f} tokens per round over {d.rounds} rounds")
    print("  stage busy: " + ", ".join(f"{b:.0%}" for b in r.stage_busy)
          + (f"; hop {r.plan.hop_ms * 1000:.0f} µs" if r.plan.mode is Mode.PPSD else ""))
    if args.trace_out:
        print(f"  timeline: {args.trace_out} (open in https://ui.perfetto.dev)")
    return 0


def plan_cmd(args) -> int:
    from sim import api

    if args.devices is not None and args.devices < 1:
        raise UserError(f"--devices {args.devices} must be at least 1", "give --devices between 1 and the layer count")
    if not 1 <= args.max_draft_len <= 64:
        raise UserError(f"--max-draft-len {args.max_draft_len} is out of range", "give between 1 and 64")
    profile = _load(args.profile)
    args.devices = gpus.devices_for(profile, args.devices)
    from sim import heads as hd

    if not profile.has_acceptance:
        api.sweep(profile, tokens=1)  # the sweep's own error for a profile without traces
    by_head = hd.sweep_heads(profile, args.exit_head, devices=args.devices,
                             gammas=range(1, args.max_draft_len + 1), hop_ms=_hop_ms(args.hop_us),
                             alpha_scale=args.alpha_scale, temperature=args.temperature, tokens=args.tokens,
                             category=args.category)
    results = hd.merge(by_head)
    best, reason = api.recommend(results)
    if args.json:  # best first; per head, the object with head_rank 1 is its best plan
        print(json.dumps([r.to_json_dict() for r in results]))
        return 0
    print(f"{profile.model_id} on {profile.device_name}: {len(results)} plans, {args.tokens} trace-driven tokens each"
          + (f", exit heads {', '.join(by_head)}" if len(by_head) > 1 else ""))
    print(f"{'rank':>4}  {'plan':<36} {'speedup':>8} {'tokens/s':>9} {'α':>5} {'tok/round':>9}")
    for i, r in enumerate(results[: args.top], 1):
        alpha = r.details.stream_alpha if r.plan.mode.speculative else float("nan")
        print(f"{i:>4}  {r.plan.label():<36} {r.speedup_vs_ar:>7.3f}× {r.tokens_per_s:>9.2f} "
              f"{alpha:>5.2f} {r.mean_accepted:>9.2f}")
    print("best per mode:")
    for mode in Mode:
        rs = [r for r in results if r.plan.mode is mode]
        if rs:
            r = rs[0]
            print(f"  {mode.name:<5} {r.plan.label():<36} {r.speedup_vs_ar:.3f}× {r.tokens_per_s:.2f} tokens/s")
    if len(by_head) > 1:
        print("best per exit head (draft ms: the head's cost per drafted token, paid in stage 1):")
        print("\n".join("  " + line for line in hd.format_comparison(hd.comparison(profile, by_head)).splitlines()))
    print(f"recommendation: {gpus.recommendation(profile, best, reason)}")
    return 0
