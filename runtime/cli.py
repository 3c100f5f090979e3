"""`ppsd run`: decode for real with AR, EESD or PPSD.

No torch at import time: the handlers import the runtime lazily.
"""

from __future__ import annotations

from ppsd.modes import MODES, Mode
from sim.hf_cli import add_runtime_options
from sim.schemes import SCHEMES


def register(sub) -> None:
    p = sub.add_parser("run", help="decode for real with AR, EESD or PPSD and measure it",
                       description="Decode prompts for real and report tokens/s (median of repeats), prefill and "
                       "load time, accepted lengths and per-stage busy time. Speculative modes also run AR "
                       "in the same session for the speedup and the losslessness check.")
    p.add_argument("--model", default="smollm2-135m", help="smollm2-135m (default), tiny-llama, a folder, a .gguf")
    p.add_argument("--mode", choices=MODES, default=Mode.PPSD.value)
    p.add_argument("--exit", type=int, dest="exit_layer", help="exit layer E (1..N-1); needed for eesd/ppsd")
    p.add_argument("--draft-len", type=int, default=4, help="EESD drafts per round γ (default 4)")
    p.add_argument("--draft-stop-confidence", metavar="TAU", help="a confidence stop, 0 < TAU < 1: EESD stops a "
                   "round's drafting after the first draft whose confidence (the exit head's top-1 probability) "
                   "is below TAU, --draft-len staying the cap; PPSD's stage 1 waits for the verdict on such a draft "
                   "instead of running it (default: no stop). With --runtime hf it is transformers' "
                   "assistant_confidence_threshold, and `default` keeps transformers' own (0.4)")
    p.add_argument("--stages", type=int, default=2, help="PPSD pipeline stages k (default 2); with --emulate it "
                   "may exceed the CPU cores")
    p.add_argument("--stage-bounds", help="PPSD layer cuts, e.g. 0,15,30 (default: balanced by the profile's "
                   "time, as `ppsd simulate` cuts them)")
    p.add_argument("--profile", metavar="DIR", help="profile whose times cut the PPSD stages (default: the committed "
                   "example of this model, else by layers)")
    p.add_argument("--prompts", default=None, help="JSONL in Spec-Bench format, or spec-bench (default: built-in)")
    p.add_argument("--limit", type=int, default=4, help="number of prompts (default 4)")
    p.add_argument("--batch", type=int, default=1, metavar="B", help="decode B sequences at once (AR, EESD, PPSD), "
                   "against AR at batch B; --limit rounds up to a multiple of B (default 1)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force-trace", help="FILE of 0/1, accept-all or reject-all: acceptance follows it (timing only)")
    p.add_argument("--ignore-eos", action="store_true", help="always generate --max-new-tokens tokens")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu", help="cpu (default), cuda (or its alias gpu) or cuda:N; PPSD "
                   "needs one GPU per stage")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--port", type=int, help="rendezvous port for the stage processes (default: a free one)")
    p.add_argument("--stage-timeout", type=float, default=60.0, help="seconds without progress before a stage "
                   "counts as hung (default 60)")
    p.add_argument("--oversubscribe", action="store_true", help="allow more stages than CPU cores (slow; not "
                   "needed with --emulate)")
    p.add_argument("--launch", choices=("local", "torchrun"), default=None,
                   help="PPSD stage rules: local (default; stage 1 drops a stale pass mid-way) or torchrun "
                        "(always so under torchrun)")
    p.add_argument("--emulate", metavar="PROFILE", help="emulated devices: layers and heads wait for PROFILE's times; "
                   "acceptance from its traces or --force-trace")
    p.add_argument("--cores", type=int, default=None, metavar="N",
                   help="same-budget baseline: also AR (and EESD) on N threads, PPSD stages on N cores (default: "
                        "all; 1 = off)")
    p.add_argument("--no-ar", action="store_true", help="skip the AR baseline run")
    p.add_argument("--heads", metavar="DIR", help="exit-head folder from `ppsd heads train`: draft with a trained head")
    p.add_argument("--exit-head", metavar="NAME", help="shared, trained (default with --heads) or vocab<V> "
                   "(trained over the V most frequent tokens)")
    add_runtime_options(p)
    p.add_argument("--timeline", help="write the measured timeline as a Chrome trace to this file")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_run)


def check_draft_stop_args(args) -> None:
    """`--draft-stop-confidence` where a confidence stop runs (EESD at batch 1 on the real model, ppsd's or
    transformers'; ppsd's PPSD with the local launch), as a float in args; a one-line UserError elsewhere."""
    from ppsd.errors import UserError
    from sim.plan import check_draft_stop

    given = getattr(args, "draft_stop_confidence", None)
    if given is None:
        return
    hf = getattr(args, "runtime", "ppsd") == "hf"
    if str(given).strip().lower() == "default":
        if not hf:
            raise UserError("--draft-stop-confidence default is transformers' own threshold",
                            "add --runtime hf, or give a number between 0 and 1")
        from runtime.hf_assisted import hf_default_threshold

        given = hf_default_threshold()
    args.draft_stop_confidence = check_draft_stop(given)
    scheme = SCHEMES[Mode.parse(args.mode)]
    if not scheme.speculative:
        raise UserError("--draft-stop-confidence stops an EESD round's drafting or PPSD's stage 1",
                        "add --mode eesd or --mode ppsd")
    if args.batch != 1:
        raise UserError("batched decoding drafts without a confidence stop", "drop --draft-stop-confidence or --batch")
    if scheme.pipelined and getattr(args, "launch", None) == "torchrun":
        raise UserError("a PPSD confidence stop runs with the local launch (stage 1 waits for a verdict the shared "
                        "epoch board brings)", "drop --draft-stop-confidence or --launch torchrun")
    if args.emulate:
        raise UserError("an emulated model has no draft confidences", "drop --emulate or --draft-stop-confidence")


def check_run_args(args) -> None:
    """Every flag value `ppsd run` can judge without the model, before anything loads (torch-free): the
    numbers, the output file, the prompt file, and the exit layer, draft length and stages against the
    layer count read from the model's shape or config.json (or the emulated profile)."""
    import math
    from pathlib import Path

    from ppsd.devices import normalize_device
    from ppsd.errors import UserError
    from ppsd.exit_heads import resolve_head_name
    from ppsd.paths import check_output_file
    from runtime.model_shape import check_dtype

    normalize_device(args.device)  # an unknown name first (the run normalises it again where it reads it)
    check_dtype(args.dtype)
    for flag, value, least in (("--limit", args.limit, 1), ("--batch", args.batch, 1),
                               ("--max-new-tokens", args.max_new_tokens, 1), ("--repeats", args.repeats, 1),
                               ("--warmup", args.warmup, 0), ("--cores", args.cores, 1)):
        if value is not None and value < least:
            raise UserError(f"{flag} {value} must be at least {least}", f"give {flag} {least} or more")
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise UserError(f"--temperature {args.temperature} is not a number >= 0", "give 0 (greedy) or e.g. 0.7")
    if not (math.isfinite(args.stage_timeout) and args.stage_timeout > 0):
        raise UserError(f"--stage-timeout {args.stage_timeout} must be a positive number of seconds", "give e.g. 60")
    if args.port is not None and not 1 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a TCP port", "give a port between 1024 and 65535, or leave it out")
    if args.timeline:
        check_output_file(args.timeline, "--timeline")
    if args.heads and not Path(args.heads).expanduser().is_dir():
        raise UserError(f"--heads {args.heads} is not a folder", "give a folder written by `ppsd heads train --out DIR`")
    resolve_head_name(args.heads, args.exit_head)
    if args.emulate and args.prompts:
        raise UserError("--prompts does not apply with --emulate (prompts are synthetic, of the profile's "
                        "prompt lengths)", "drop --prompts; --limit picks how many")
    if not args.emulate:
        from ppsd.prompts import load_prompts

        load_prompts(args.prompts, limit=args.limit)  # a missing or malformed file fails here, not after the load
    _check_plan_shape(args)


def _check_plan_shape(args) -> None:
    """Exit layer, γ, stages and stage cuts against the model's layer count, where it is known unloaded."""
    from runtime.model_shape import layer_count
    from runtime.request import make_plan, parse_bounds

    if args.emulate:
        from ppsd.profile import load_profile

        layers = load_profile(args.emulate).num_layers
    else:
        layers = layer_count(args.model)  # also refuses a model spec nothing could load
    if layers is None:
        return  # a GGUF file or an uncached hub id: checked once it loads
    make_plan(args.mode, layers, args.exit_layer, args.draft_len, args.stages, parse_bounds(args.stage_bounds))


def cmd_run(args) -> int:
    check_run_args(args)
    check_draft_stop_args(args)
    if args.batch != 1:  # before the runtime choice: the batched runtime refuses what it does not run
        from runtime.batch_run import run_batched

        return run_batched(args)
    if getattr(args, "runtime", "ppsd") == "hf":
        from runtime.hf_assisted import run_command as run_hf_command

        return run_hf_command(args)
    from runtime.runner import run_command

    return run_command(args)


