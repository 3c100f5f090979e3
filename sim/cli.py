"""`ppsd simulate` and `ppsd plan` (torch-free)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from sim.planner import gpus
from sim.model.acceptance_forms import AcceptanceForm, to_alpha
from ppsd.modes import LAUNCHES, MODES, Mode
from sim.planner.sweep_spec import DEFAULT_TOKENS, MAX_DRAFT_LEN, SweepSpec


from sim.hf_cli import add_runtime_options, check_runtime_args, plan_hf
from sim.serve.cli import add_plan_options, add_simulate_options

def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip() != "")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r} names no value; give a comma-separated list of integers")
    return values


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip() != "")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r} names no value; give a comma-separated list of numbers")
    return values


def _at_least(*checks) -> None:
    """(flag, value, least) for each numeric flag: a one-line UserError naming the flag below its least."""
    for flag, value, least in checks:
        if value is not None and not value >= least:
            raise UserError(f"{flag} {value} must be at least {least}", f"give {flag} {least} or more")


def _check_temperature(t: float) -> None:
    if not (math.isfinite(t) and t >= 0):
        raise UserError(f"--temperature {t} is not a number >= 0", "give 0 (greedy) or a temperature the profile holds")


def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="predict one decoding plan's speed from a profile (no torch)",
                              description="Simulate AR, EESD or PPSD on a profile (or a synthetic model).")
    src = p.add_argument_group("model")
    src.add_argument("--profile", metavar="DIR", help="profile folder written by `ppsd profile`")
    _add_acceptance_from(src)
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
    p.add_argument("--draft-len", type=int, metavar="G",
                   help="EESD drafts per round (default 4); also the γ a given --acceptance-rate / --mean-accepted "
                        "was measured at")
    p.add_argument("--draft-stop-confidence", type=float, metavar="TAU",
                   help="EESD: a round stops drafting after its first draft less confident than TAU (the exit "
                        "head's top-1 probability, 0 < TAU < 1), --draft-len the cap; priced from the traces' "
                        "confidences")
    p.add_argument("--tokens", type=int, metavar="T",
                   help="tokens to simulate (default: each trace once; 2000 for bernoulli)")
    p.add_argument("--acceptance", choices=["trace", "bernoulli"],
                   help="recorded match traces or Bernoulli(--alpha) (default: trace, or bernoulli with --alpha)")
    _add_acceptance_options(p)
    p.add_argument("--category", metavar="C", help="replay only this prompt category's traces")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="sampled decoding at T > 0, the profile's β at exactly T (`ppsd profile show` lists "
                        "them; default 0 = greedy)")
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument("--hop-us", type=float, metavar="X", help="stage-to-stage hop in µs (default: the profile's)")
    p.add_argument("--launch", choices=LAUNCHES, default="local",
                   help="PPSD stage rules: local (default; stage 1 drops a stale pass mid-way) or torchrun (stage 1 "
                   "finishes it)")
    p.add_argument("--exit-head", default=SHARED, metavar="NAME",
                   help="exit head that drafts: shared (default) or one the profile has from `ppsd profile --heads` "
                        "(e.g. vocab4096)")
    p.add_argument("--engine", choices=["event", "fast"], default="event")
    p.add_argument("--prompt-len", type=int, default=None, metavar="L",
                   help="prompt tokens before each generation, for time to first token and end to end (default: "
                        "the profile's)")
    p.add_argument("--cores", type=int, default=None, metavar="N",
                   help="same-budget baseline: AR on N cores (GPUs for a multi-GPU estimate; default: the most the "
                        "profile measured)")
    add_runtime_options(p)
    p.add_argument("--trace-out", metavar="FILE", help="write the timeline as Chrome trace JSON (Perfetto)")
    _add_interval_options(p)
    add_simulate_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=simulate_cmd)
    _register_plan(subparsers)


def _register_plan(subparsers) -> None:
    q = subparsers.add_parser("plan", help="rank every plan (exit layer × EESD γ × PPSD stages) on a profile",
                              description="Sweep AR, EESD γ 1..8 and PPSD k 2..K at every exit layer; recommend one.")
    q.add_argument("--profile", metavar="DIR", required=True)
    _add_acceptance_from(q)
    q.add_argument("--prompt-len", type=int, default=None, metavar="L",
                   help="prompt tokens before each generation (time to first token, end to end); default: the "
                        "profile's prompts")
    q.add_argument("--cores", type=int, default=None, metavar="N",
                   help="CPU budget: rank plans against AR (and EESD) on N cores (default: the most the profile "
                        "measured)")
    q.add_argument("--devices", type=int, default=None, metavar="K",
                   help="most PPSD stages / GPUs (default: an estimated profile's GPU count, a CPU profile's "
                        "cores (2-8), else 4)")
    q.add_argument("--hop-us", type=float, metavar="X", help="hop latency in µs (default: the profile's)")
    q.add_argument("--alpha-scale", type=float, default=1.0, metavar="F", help="what-if: scale acceptance by F")
    q.add_argument("--temperature", type=float, default=0.0,
                   help="sampled decoding at T > 0, priced with the profile's β at exactly T (default 0 = greedy)")
    q.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, metavar="T",
                   help=f"trace-driven tokens per plan (default {DEFAULT_TOKENS})")
    q.add_argument("--category", metavar="C")
    add_runtime_options(q, schedule=False)
    q.add_argument("--max-draft-len", type=int, default=MAX_DRAFT_LEN, metavar="G",
                   help=f"EESD γ from 1 to G (default {MAX_DRAFT_LEN})")
    q.add_argument("--draft-stops", type=_floats, default=None, metavar="T1,T2,...",
                   help="also try these confidence stops beside every plan (EESD: a round stops drafting after "
                        "its first draft less confident than T; PPSD: stage 1 waits for the verdict on such a draft; "
                        "--runtime hf: transformers' assistant_confidence_threshold, its default 0.4); needs a "
                        "profile traced with confidences")
    q.add_argument("--top", type=int, default=15, metavar="N", help="rows to print (default 15)")
    q.add_argument("--batch", type=int, default=None, metavar="B",
                   help="rank EESD plans at B sequences a batch against AR at B (the profile's latency.batch)")
    q.add_argument("--exit-head", action="append", metavar="NAME",
                   help="only plans drafting with this exit head (repeatable; default: every head the profile has)")
    _add_acceptance_options(q, plan=True)
    _add_interval_options(q)
    q.add_argument("--draft-len", type=int, metavar="G",
                   help="the γ --acceptance-rate / --mean-accepted (or the curve) was measured at; the sweep still "
                        "tries every γ")
    add_plan_options(q)
    q.add_argument("--json", action="store_true", help="print a JSON array of result objects, best first")
    q.set_defaults(func=plan_cmd)


def _add_acceptance_from(p) -> None:
    p.add_argument("--acceptance-from", metavar="DIR",
                   help="price with this profile's latency and DIR's acceptance (e.g. `ppsd profile --prompts "
                        "FILE --skip-latency`)")


def _add_interval_options(p) -> None:
    from sim.intervals import DEFAULT_PROMPTS_N

    p.add_argument("--prompts-n", type=int, default=DEFAULT_PROMPTS_N, metavar="N",
                   help=f"prompts in the run the 90%% interval is for (default {DEFAULT_PROMPTS_N}; fewer prompts, "
                        "wider interval)")


def _add_acceptance_options(p, plan: bool = False) -> None:
    g = p.add_argument_group(
        "given acceptance (at most one; replaces the recorded traces by seeded Bernoulli(α) streams)"
        if plan else "given acceptance (at most one; means --acceptance bernoulli)")
    g.add_argument("--alpha", type=float, metavar="A",
                   help="α: probability that one drafted position matches, positions independent, in [0, 1]"
                        + (" (every exit layer)" if plan else ""))
    g.add_argument("--acceptance-rate", type=float, metavar="R",
                   help="LayerSkip's acceptance rate R = accepted drafts / drafted tokens, in [0, 1]; "
                        "needs --draft-len")
    g.add_argument("--mean-accepted", type=float, metavar="T",
                   help="Spec-Bench's τ = mean tokens per EESD round, bonus token included, in [1, γ+1]; needs "
                        "--draft-len")
    if plan:
        g.add_argument("--alpha-curve", metavar="FILE",
                       help="CSV: exit_layer or relative_depth, and alpha, acceptance_rate or mean_accepted (see "
                            "docs/acceptance-forms.md)")


def _given_form(args) -> AcceptanceForm | str | None:
    """The one acceptance option given ("curve" for --alpha-curve; UserError for two), or None: the
    recorded traces."""
    given = [f for f in AcceptanceForm if getattr(args, f.value, None) is not None]
    if getattr(args, "alpha_curve", None) is not None:
        given.append("curve")
    if len(given) > 1:
        names = [f.option if isinstance(f, AcceptanceForm) else "--alpha-curve" for f in given]
        raise UserError(f"{' and '.join(names)} both given",
                        "give one acceptance figure (they are one fact in different forms)")
    return given[0] if given else None


def _say(line: str, as_json: bool) -> None:
    """Conversions go to stdout, or to stderr under --json so that stdout stays one JSON document."""
    print(line, file=sys.stderr if as_json else sys.stdout)


def _curve_alphas(path, draft_len, num_layers) -> tuple[dict[int, float], list[str]]:
    """{exit: α} from an α-curve file for the exits between its ends (linear in between, no
    extrapolation: a held end value would flatter shallow exits), and the lines saying so."""
    from sim.model.alpha_curve import alpha_at, read_alpha_curve

    c = read_alpha_curve(path, draft_len)
    if c.kind == "exit_layer" and c.x[-1] > num_layers - 1:
        raise UserError(f"alpha curve {path} names exit layer {c.x[-1]:g}, past this {num_layers}-layer model",
                        f"give exit layers 1..{num_layers - 1}, or relative depths")
    pos = {e: (e / num_layers if c.kind == "relative_depth" else float(e)) for e in range(1, num_layers)}
    alphas = {e: alpha_at(c.kind, c.x, c.alpha, e, num_layers) for e, x in pos.items() if c.x[0] <= x <= c.x[-1]}
    if not alphas:
        raise UserError(f"alpha curve {path} spans no exit layer of this {num_layers}-layer model",
                        "give at least two points around the exits to plan")
    lines = [f"alpha curve {path} ({c.form.value} by {c.kind}): exits {min(alphas)}..{max(alphas)} planned, "
             "α linear between points, none past the ends"]
    if c.form is not AcceptanceForm.ALPHA:
        lines += [f"  {c.kind} {x:g}: {s}" for x, s in zip(c.x, c.statements)]
    return alphas, lines


def _plan_acceptance(args, num_layers) -> tuple[dict[int, float] | None, list[str]]:
    """{exit: α} when the user gives acceptance (None: the recorded traces) and the lines stating it."""
    form = _given_form(args)
    if form is None:
        return None, []
    trace_only = [name for name, on in (("--category", args.category is not None),
                                        ("--temperature", args.temperature != 0.0),
                                        ("--alpha-scale", args.alpha_scale != 1.0)) if on]
    if trace_only:
        raise UserError(f"{', '.join(trace_only)} act on the recorded traces, which a given acceptance replaces",
                        f"drop {', '.join(trace_only)}, or give the acceptance you mean directly")
    if form == "curve":
        return _curve_alphas(args.alpha_curve, args.draft_len, num_layers)
    conversion = to_alpha(form, getattr(args, form.value), args.draft_len)
    line = (f"acceptance given: {conversion.statement}; every exit layer 1..{num_layers - 1} gets a seeded "
            "Bernoulli(α) stream instead of the recorded traces")
    return {e: conversion.alpha for e in range(1, num_layers)}, [line]


def _hop_ms(hop_us):
    if hop_us is None:
        return None
    if hop_us < 0:
        raise UserError(f"--hop-us {hop_us} is negative", "give a hop latency >= 0 µs")
    return hop_us / 1000.0


def _load(path, acceptance_from: str | None = None):
    """The profile at `path`; with `acceptance_from`, its latency priced for that profile's prompts."""
    from ppsd.profile import load_profile

    profile = load_profile(path)
    return profile.with_acceptance_from(load_profile(acceptance_from)) if acceptance_from else profile


def simulate_cmd(args) -> int:
    from sim.run import simulate
    from sim.plan import Plan
    from sim.timeline import write_chrome_trace

    if args.serve:
        from sim.serve.cli import serve_cmd

        return serve_cmd(args)
    if (args.profile is None) == (args.synthetic_layers is None):
        raise UserError("give exactly one of --profile DIR or --synthetic-layers N",
                        "e.g. --synthetic-layers 30 --layer-ms 2.8 --head-ms 12.6 --alpha 0.6")
    if args.acceptance_from and args.profile is None:
        raise UserError("--acceptance-from prices a measured profile's latency for other prompts",
                        "give --profile DIR with it, or drop it")
    mode = Mode.parse(args.mode)
    if mode.speculative and args.exit_layer is None:
        raise UserError(f"--mode {mode} needs an exit layer", "give --exit E")
    _at_least(("--tokens", args.tokens, 1), ("--cores", args.cores, 1), ("--prompt-len", args.prompt_len, 0),
              ("--prompts-n", args.prompts_n, 1))
    _check_temperature(args.temperature)
    if args.trace_out:
        from ppsd.paths import check_output_file

        check_output_file(args.trace_out, "--trace-out")  # before any pricing, not after it
    form = _given_form(args)
    alpha = None
    if form is not None:
        if args.acceptance == "trace":
            raise UserError(f"--acceptance trace replays the recorded traces, and {form.option} is given too",
                            f"drop {form.option}, or use --acceptance bernoulli")
        conversion = to_alpha(form, getattr(args, form.value), args.draft_len)
        alpha = conversion.alpha
        if form is not AcceptanceForm.ALPHA:
            _say(conversion.statement, args.json)
    check_runtime_args(args, mode)
    plan = Plan(mode, exit_layer=args.exit_layer if mode.speculative else None,
                draft_len=args.draft_len if args.draft_len is not None else 4,
                stage_bounds=args.stage_bounds, stages=args.stages, placement=args.placement,
                hop_ms=_hop_ms(args.hop_us), exit_head=args.exit_head, launch=args.launch,
                runtime=args.runtime, schedule=args.schedule if mode.speculative else "constant",
                draft_stop=args.draft_stop_confidence)
    acceptance = args.acceptance or ("bernoulli" if alpha is not None else "trace")
    with tempfile.TemporaryDirectory(prefix="ppsd-synth-") as tmp:
        if args.synthetic_layers is not None:
            profile = _synthetic_profile(args, tmp, acceptance)
        else:
            profile = _load(args.profile, args.acceptance_from)
            gpus.check_plan(profile, plan)
            shared = gpus.shared_cores_note(profile, len(set(plan.devices())))
            if shared:
                _say(shared, args.json)
        from sim.planner.heads import check_head

        check_head(profile, args.exit_head)
        result = simulate(profile, plan, tokens=args.tokens, acceptance=acceptance, alpha=alpha,
                              category=args.category, seed=args.seed, temperature=args.temperature,
                              engine=args.engine, timeline=bool(args.trace_out), budget=args.cores,
                              prompt_len=args.prompt_len)
        from sim.intervals import simulate_interval

        simulate_interval(profile, result, acceptance=acceptance, category=args.category,
                          temperature=args.temperature, prompts_n=args.prompts_n, seed=args.seed)
        from sim.planner.break_even import attach_break_even

        attach_break_even(profile, [result])
    if args.trace_out:
        write_chrome_trace(args.trace_out, result.timeline, process_name=f"ppsd simulate: {result.plan.label()}")
    if args.json:
        print(json.dumps(result.to_json_dict()))
        return 0
    _print_simulation(result, args.trace_out)
    return 0


def _synthetic_profile(args, tmp: str, acceptance: str):
    """`--synthetic-layers N`: a what-if profile of N uniform layers (checked first)."""
    from ppsd.profile.synthetic import write_synthetic_profile

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
    return write_synthetic_profile(tmp, num_layers=n, layer_ms=args.layer_ms, head_ms=args.head_ms,
                                   embed_ms=args.embed_ms, hop_ms=0.0, corun_slowdown=args.corun)


def _print_simulation(result, trace_out: str | None) -> None:
    """`ppsd simulate`'s answer as text."""
    r, d = result, result.details
    print(f"{r.plan.label()}: {r.tokens} tokens in {r.time_s:.3f} s simulated = {r.tokens_per_s:.2f} tokens/s, "
          f"{r.speedup_vs_ar:.3f}× AR ({d.ar_tokens_per_s:.2f} tokens/s)")
    if d.predicted_speedup_lo is not None and r.plan.mode.speculative:
        shift = "" if not d.interval_shift else f", a shift of the set's acceptance (logit sd {d.interval_shift:.2f})"
        print(f"  90% interval {d.predicted_speedup_lo:.3f}–{d.predicted_speedup_hi:.3f}× AR over {d.interval_prompts} "
              f"prompts ({d.interval_method}: prompt-to-prompt acceptance{shift} and the profile's latency spread)")
    if d.ttft_s is not None:
        print(f"  prefill: time to first token {d.ttft_s * 1e3:.1f} ms; end to end {d.e2e_s:.3f} s, "
              f"{d.speedup_vs_ar_e2e:.3f}× AR with its prefill (decode only: {r.speedup_vs_ar:.3f}×)")
    if r.speedup_vs_ar_tp is not None:
        print(f"  same budget ({d.budget}): {d.budget_tokens_per_s:.2f} tokens/s, {r.speedup_vs_ar_tp:.3f}× AR on "
              f"all of it ({d.ar_tp_tokens_per_s:.2f} tokens/s)")
    if r.plan.mode.speculative:
        print(f"  acceptance {d.acceptance_source}: rate {r.acceptance_rate:.3f}, "
              f"{r.mean_accepted:.2f} tokens per round over {d.rounds} rounds")
        print(f"  break-even acceptance: {_break_even_line(r)}")
    print("  stage busy: " + ", ".join(f"{b:.0%}" for b in r.stage_busy)
          + (f"; hop {r.plan.hop_ms * 1000:.0f} µs" if r.plan.num_stages > 1 else ""))
    if trace_out:
        print(f"  timeline: {trace_out} (open in https://ui.perfetto.dev)")


def _break_even_line(r) -> str:
    """`ppsd simulate`'s break-even line: against AR on one thread, and on the budget when it has one."""
    from sim.planner.break_even import BreakEven

    d = r.details
    be = BreakEven(d.break_even_alpha, d.break_even_alpha_tp, d.stream_alpha, d.break_even_note)
    line = f"against AR on one thread it {be.words(with_priced=False)}"
    if r.speedup_vs_ar_tp is not None and not d.break_even_note:
        line += f"; against AR on all {d.budget} it {be.words(same_budget=True, with_priced=False)}"
    return line + (f" (replayed {d.stream_alpha:.2f})" if d.stream_alpha is not None else "")


def plan_cmd(args) -> int:
    from sim.intervals import attach_sweep_intervals
    from sim.planner.break_even import attach_break_even
    from sim.planner import heads as hd
    from sim.planner.verdict import decide
    from sim.run import sweep

    if args.devices is not None and args.devices < 1:
        raise UserError(f"--devices {args.devices} must be at least 1", "give --devices between 1 and the layer count")
    if not 1 <= args.max_draft_len <= 64:
        raise UserError(f"--max-draft-len {args.max_draft_len} is out of range", "give between 1 and 64")
    _at_least(("--tokens", args.tokens, 1), ("--cores", args.cores, 1), ("--prompt-len", args.prompt_len, 0),
              ("--prompts-n", args.prompts_n, 1), ("--top", args.top, 1), ("--alpha-scale", args.alpha_scale, 0))
    _check_temperature(args.temperature)
    if args.rate is not None:
        from sim.serve.cli import plan_rate_cmd

        return plan_rate_cmd(args)
    from sim.plan import check_draft_stop

    stops = tuple(check_draft_stop(t, "--draft-stops") for t in args.draft_stops or ())
    if args.batch not in (None, 1):
        from sim.batch.cli import check_batch_args, plan_batch

        check_batch_args(args)
        return plan_batch(args, _load(args.profile, args.acceptance_from))
    args.draft_stops = stops
    profile = _load(args.profile, args.acceptance_from)
    if args.runtime == "hf":
        return plan_hf(args, profile)
    args.devices = gpus.devices_for(profile, args.devices)
    shared = gpus.shared_cores_note(profile, args.devices)
    if shared:
        _say(shared, args.json)
    alpha_by_exit, said = _plan_acceptance(args, profile.num_layers)
    for line in said:
        _say(line, args.json)
    if alpha_by_exit is None and not profile.has_acceptance:
        sweep(profile, tokens=1)  # the sweep's own error for a profile without traces
    heads = args.exit_head
    if alpha_by_exit is not None and heads is None:
        heads = [SHARED]  # a given α is one head's figure: compare other heads only when asked
    if args.temperature and heads is None:  # only the heads the profile sampled β for price sampled decoding
        heads, line = hd.sampled_heads(profile, args.temperature)
        if line:
            _say(line, args.json)
    spec = SweepSpec(devices=args.devices, gammas=tuple(range(1, args.max_draft_len + 1)), tokens=args.tokens,
                     hop_ms=_hop_ms(args.hop_us), alpha_scale=args.alpha_scale, temperature=args.temperature,
                     category=args.category, budget=args.cores, prompt_len=args.prompt_len,
                     alpha_by_exit=alpha_by_exit, draft_stops=args.draft_stops)
    by_head = hd.sweep_heads(profile, heads, spec=spec)
    results = hd.merge(by_head)
    attach_sweep_intervals(profile, results, prompts_n=args.prompts_n, category=args.category,
                           temperature=args.temperature, alpha_scale=args.alpha_scale,
                           given_alpha=alpha_by_exit is not None)
    attach_break_even(profile, results)
    verdict = decide(results, profile)
    if args.json:  # best first; per head, the object with head_rank 1 is its best plan
        print(json.dumps(_plan_rows(results, verdict)))
        return 0
    _print_plan_table(args, profile, by_head, results, verdict, given_alpha=alpha_by_exit is not None)
    return 0


def _print_plan_table(args, profile, by_head, results, verdict, given_alpha: bool) -> None:
    """`ppsd plan`'s answer as text: the verdict, the ranked plans, the best per mode and per head."""
    from sim.planner import heads as hd
    from sim.planner.verdict import degenerate_reason

    drawn = "Bernoulli(α)" if given_alpha else "trace-driven"
    print(f"{profile.model_id} on {profile.device_name}: {len(results)} plans, {args.tokens} {drawn} tokens each"
          + (f", exit heads {', '.join(by_head)}" if len(by_head) > 1 else ""))
    if profile.acceptance_source and not given_alpha:
        print(f"acceptance from {profile.acceptance_source} ({len(profile.generations())} prompts), latency from "
              f"{profile.path}")
    _print_verdict(verdict)
    budget = results[0].details.budget if results and results[0].speedup_vs_ar_tp is not None else None
    if budget:
        unit = "GPU" if "GPU" in budget else "thread"
        print(f"speedup: against AR on one {unit} (the timing model); same budget: against AR on all {budget}, "
              f"the plan using them too (AR and EESD: every {unit}; PPSD: split into its stages)")
    same = f" {'×AR ' + budget if budget else '':>16}" if budget else ""
    pays = "pays at α ≥" + (" (1 / all)" if budget else "")
    print(f"{'rank':>4}  {'plan':<36} {'speedup':>8} {'90% interval':>13}{same} {'tokens/s':>9} {'α':>5} "
          f"{'tok/round':>9}  {pays}")
    for i, r in enumerate(results[: args.top], 1):
        alpha = r.details.stream_alpha if r.plan.mode.speculative else float("nan")
        tp = f" {r.speedup_vs_ar_tp:>15.3f}×" if budget else ""
        lo, hi = r.details.predicted_speedup_lo, r.details.predicted_speedup_hi
        iv = f"{lo:.2f}–{hi:.2f}" if lo is not None and r.plan.mode.speculative else "-"
        print(f"{i:>4}  {r.plan.label():<36} {r.speedup_vs_ar:>7.3f}× {iv:>13}{tp} {r.tokens_per_s:>9.2f} "
              f"{alpha:>5.2f} {r.mean_accepted:>9.2f}  {_break_even_cell(r, bool(budget))}")
    print("best per mode (one thread; degenerate plans left out):")
    for mode in Mode:
        rs = [r for r in results if r.plan.mode is mode and degenerate_reason(r) is None]
        if rs:
            r = rs[0]
            tp = f", {r.speedup_vs_ar_tp:.3f}× AR on all {budget}" if budget else ""
            print(f"  {mode.name:<5} {r.plan.label():<36} {r.speedup_vs_ar:.3f}× {r.tokens_per_s:.2f} tokens/s{tp}")
    if len(by_head) > 1:
        print("best per exit head (draft ms: the head's cost per drafted token, paid in stage 1):")
        print("\n".join("  " + line for line in hd.format_comparison(hd.comparison(profile, by_head)).splitlines()))
    print(f"90% intervals: a run over {args.prompts_n} prompts (--prompts-n), from prompt-to-prompt acceptance, "
          f"the profile's latency spread{_shift_txt(profile, verdict.best_speculative, args, given_alpha)}")
    print("pays at α ≥: the acceptance at which a plan ties AR" + (f" on one thread / on all {budget}" if budget else "")
          + " ('never': not even with every draft accepted)")
    print(f"recommendation: {gpus.recommendation(profile, verdict.recommended, verdict.text)}")


def _shift_txt(profile, best, args, given_alpha: bool) -> str:
    """", and a shift of the whole set's acceptance: ..." for the best speculative plan's traces (the
    assumption its interval carries, sim/intervals/shift.py); "" where acceptance was given."""
    from sim.intervals import prompt_traces

    if given_alpha or best is None:
        return ""
    traces = prompt_traces(profile, best.plan.exit_layer, head=best.plan.exit_head, category=args.category,
                           temperature=args.temperature)
    return f", and a shift of the whole set's acceptance ({best.plan.label()}: {traces.shift(range(len(traces))).words()})"


def _break_even_cell(r, budget: bool) -> str:
    """A plan's break-even acceptance as a table cell: "0.41" or "0.41 / 0.62" with a budget."""
    if not r.plan.mode.speculative:
        return "-"
    d = r.details

    def one(a):
        return "n/a" if d.break_even_note else ("never" if a is None else f"{a:.2f}")

    return f"{one(d.break_even_alpha)} / {one(d.break_even_alpha_tp)}" if budget else one(d.break_even_alpha)


def _plan_rows(results, verdict) -> list[dict]:
    """`ppsd plan --json`: the Results (best first) as objects, each with the verdict's noise band,
    whether it is the recommendation and why it is degenerate (null: usable); the recommended
    object also carries the whole verdict (`sim.planner.verdict.Verdict.to_json_dict`)."""
    from sim.planner.verdict import degenerate_reason

    rows = []
    for r in results:
        row = {**r.to_json_dict(), "noise_band": verdict.band.rel, "degenerate": degenerate_reason(r),
               "recommended": r is verdict.recommended}
        if r is verdict.recommended:
            row["verdict"] = verdict.to_json_dict()
        rows.append(row)
    return rows


def _print_verdict(verdict) -> None:
    """The answer first: the verdict, the noise band it was judged with, and the plans it passed over."""
    print(f"verdict ({verdict.outcome.value}): {verdict.text}")
    print(f"noise band: {verdict.band.describe()}; a plan within it of {verdict.baseline} is a tie")
    for line in verdict.notes[:3]:
        print(f"  not named best: {line}")
    if len(verdict.notes) > 3:
        print(f"  ... and {len(verdict.notes) - 3} more degenerate plans ranked above it")
