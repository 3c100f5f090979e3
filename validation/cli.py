"""`ppsd validate`: run plans for real beside the simulator's prediction.

No torch at import time: the handler imports the runtime lazily.
"""

from __future__ import annotations

from sim.hf_cli import add_runtime_options


def register(sub) -> None:
    v = sub.add_parser("validate", help="run plans for real and compare with the simulator's prediction",
                       description="Measure AR and default EESD/PPSD plans on the profile's model and prompts, "
                       "predict each with the simulator from the same profile and traces, and write the "
                       "validation folder (validation.json, validation.csv, timelines/).")
    v.add_argument("--profile", help="profile folder (from ppsd profile); needed unless --emulate")
    v.add_argument("--emulate", metavar="PROFILE", help="emulated devices (as `ppsd run --emulate`): measure and "
                   "predict every plan on PROFILE's times and traces")
    v.add_argument("--predict-from", metavar="DIR", help="profile the simulator predicts from (its latency and "
                   "acceptance; default: the --profile / --emulate one)")
    v.add_argument("--prompts", metavar="FILE", help="measure these prompts (Spec-Bench JSONL, spec-bench, builtin), "
                   "each for the profile's number of new tokens")
    v.add_argument("--unseen", action="store_true", help="with --prompts: only prompts the predicting profile never "
                   "traced (nor, with --heads, trained on)")
    v.add_argument("--measured-traces", metavar="DIR", help="acceptance-only profile of the measured prompts: also "
                   "predict each plan at their own acceptance")
    v.add_argument("--split", type=float, metavar="F", help="out of sample: in each category the profile's first "
                   "fraction F predicts, the rest is measured")
    v.add_argument("--draws", type=int, default=200, metavar="B",
                   help="bootstrap draws for each prediction's 90%% interval (default 200)")
    v.add_argument("--seed", type=int, default=0, help="seed of the intervals' draws (default 0)")
    v.add_argument("--plans", help="mode:exit[:γ|k][:head=NAME][:alpha=A][:stop=TAU];..., e.g. "
                   "'eesd:10:3;ppsd:24:2;eesd:24:6:stop=0.5' (default: 3 exits × EESD, PPSD)")
    v.add_argument("--out", help="validation folder (default runs/validation-<time>)")
    v.add_argument("--force", action="store_true",
                   help="replace the validation folder --out names (it stays intact until the new one is complete; "
                        "--serve too)")
    v.add_argument("--limit", type=int, default=8,
                   help="profiled prompts to decode, taken round-robin over categories (default 8; 0 = all)")
    v.add_argument("--repeats", type=int, default=3)
    v.add_argument("--warmup", type=int, default=1)
    v.add_argument("--warmup-tokens", type=int, default=0, metavar="N",
                   help="cut each warm-up pass to a prompt's first 32 tokens and N new ones (default 0: whole "
                        "passes)")
    v.add_argument("--force-trace", action="store_true", help="replay the profile's traces instead of the drafts")
    v.add_argument("--ar-once", action="store_true",
                   help="measure AR once up front (faster) instead of before and after every plan")
    v.add_argument("--turns", type=int, default=0, metavar="N",
                   help="greedy: AR and each plan take turns every N prompts (default 0: AR before and after every "
                        "plan)")
    v.add_argument("--turn-plans", type=int, default=2, metavar="P",
                   help="with --turns: P plans share one AR turn, on either side of it (default 2; 1: AR beside every "
                        "plan)")
    v.add_argument("--rounds", type=int, default=1, metavar="R",
                   help="greedy: measure every plan R times in alternating order and keep its median round "
                        "(default 1)")
    v.add_argument("--retime", action="store_true",
                   help="re-time a decode step's pieces before AR and every plan and price the plan with them (with "
                        "--serve: every run priced at the machine's speed timed before and after it)")
    v.add_argument("--stage-timeout", type=float, default=60.0)
    v.add_argument("--cores", type=int, default=None, metavar="N",
                   help="same-budget baseline: AR (and EESD) on N threads, predicted and measured (default: all "
                        "cores; 1 = off)")
    v.add_argument("--heads", metavar="DIR", help="exit-head folder the profile was made with (`ppsd profile --heads`)")
    v.add_argument("--exit-head", metavar="NAME", help="shared, trained (default with --heads) or vocab<V>; "
                   "the profile must hold that head's traces and latency")
    v.add_argument("--temperature", type=float, default=0.0,
                   help="sampled decoding at T > 0, once per seed, predicted from the profile's β at exactly T "
                        "(default 0 = greedy)")
    v.add_argument("--seeds", type=int, default=None, metavar="S",
                   help="with --temperature: sampled runs per plan, seeds 0..S-1 (default 3)")
    v.add_argument("--batch-sizes", metavar="1,2,4,8", help="AR, EESD and PPSD plans (eesd:E:γ, ppsd:E) decoding B "
                   "sequences at once, against AR at each B, on prompts the profile never traced (needs latency.batch)")
    add_runtime_options(v, both=True)
    v.add_argument("--json", action="store_true", help="print validation.json alone on stdout (progress on stderr)")
    serve = v.add_argument_group("serving traffic (--serve): `ppsd serve` under open-loop loads against the simulator")
    serve.add_argument("--serve", action="store_true", help="measure the real serving loop at several loads and "
                       "policies, in turns, on prompts the profile never traced, beside `predict_serving` "
                       "(writes serve_validation.json)")
    serve.add_argument("--model", help="the model the servers load (default: the profile's)")
    serve.add_argument("--policies", metavar="SPECS", help="';'-separated policies (default: ar, the best EESD at "
                       "batch 1, goodput at its exit)")
    serve.add_argument("--rates", metavar="R1,R2", help="Poisson loads in requests/s (default: 0.3 and 0.9 of AR's "
                       "estimated capacity at --max-batch)")
    serve.add_argument("--trace", metavar="FILE", help="the trace a window is replayed from (default: the Azure "
                       "conversation trace; none: no trace load)")
    serve.add_argument("--trace-start", type=float, default=0.0, metavar="S", help="where the window starts (s)")
    serve.add_argument("--trace-rate", type=float, metavar="R", help="the window's clock stretched to R requests/s "
                       "(default 0.6 of AR's estimated capacity)")
    serve.add_argument("--num-prompts", type=int, default=32, help="requests per load (default 32)")
    serve.add_argument("--output-len", type=int, help="tokens a request generates (default: the profile's max new "
                       "tokens; a trace's scaled lengths are capped at it)")
    serve.add_argument("--max-batch", type=int, default=8, help="the servers' --max-batch (default 8)")
    serve.add_argument("--max-tokens", type=int, default=2048, help="the servers' token budget an iteration")
    serve.add_argument("--replications", type=int, default=20, help="simulated replications for each 90%% "
                       "interval (default 20)")
    v.set_defaults(func=cmd_validate)


def cmd_validate(args) -> int:
    from validation.command import validate_command

    if args.serve:
        from validation.serve import run_serve_validation

        return run_serve_validation(args)

    if args.batch_sizes is not None:  # given, even empty: refused by its parser, never run unbatched
        from profiler.batch_cli import parse_batch_sizes
        from validation.batch import run_batch_validation

        from validation.config import ValidateConfig

        sizes = parse_batch_sizes(args.batch_sizes)
        return run_batch_validation(ValidateConfig.from_args(args), sizes)

    return validate_command(args)
