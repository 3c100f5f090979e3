"""`ppsd heads train` and `ppsd heads eval`. No torch at import time (ppsd.cli imports this)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ppsd.errors import UserError


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("sizes must be positive")
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r} names no size; give e.g. 4096,8192")
    return values


def register(subparsers) -> None:
    heads = subparsers.add_parser("heads", help="train and evaluate exit heads (self-distilled early-exit adapters)",
                                  description="Trained exit heads: a linear adapter before the frozen final norm + "
                                  "LM head, self-distilled on the model's own greedy generations.")
    sub = heads.add_subparsers(dest="heads_command", metavar="ACTION")
    heads.set_defaults(func=lambda args: (heads.print_help(), 2)[1])

    tr = sub.add_parser("train", help="train exit heads for a model (resumable)")
    tr.add_argument("--model", default="smollm2-135m", help="model to train heads for (default: the embedded SmolLM2)")
    tr.add_argument("--exits", default="all", help="exit layers: all, or a list like 6,10,15 or 4-8 (default: all)")
    tr.add_argument("--prompts", default="spec-bench",
                    help="prompt source: spec-bench (default), a Spec-Bench-format JSONL file, or builtin")
    tr.add_argument("--per-category", type=int, default=8, help="training prompts per category (default 8)")
    tr.add_argument("--heldout-per-category", type=int, default=3,
                    help="prompts per category kept out of training for `heads eval` (the last ones; default 3)")
    tr.add_argument("--max-new-tokens", type=int, default=64, help="greedy tokens generated per prompt (default 64)")
    tr.add_argument("--max-prompt-tokens", type=int, default=384,
                    help="longer prompts keep their first and last halves of this many tokens (default 384)")
    tr.add_argument("--epochs", type=int, default=2, help="distillation passes after the closed-form fit (default 2)")
    tr.add_argument("--init", choices=["lstsq", "identity"], default="lstsq",
                    help="start from a ridge least-squares fit (default) or from the identity (the naive head)")
    tr.add_argument("--lr", type=float, default=1e-3)
    tr.add_argument("--vocab-sizes", type=_int_list, default=[4096, 8192, 16384],
                    help="reduced-vocabulary head sizes to record for evaluation (default 4096,8192,16384)")
    tr.add_argument("--out", default=None, help="head folder (default: <cache>/heads/<model>); never inside git")
    tr.add_argument("--fresh", action="store_true", help="discard heads already in --out instead of resuming")
    tr.add_argument("--threads", type=int, default=1, help="torch threads (default 1; decoding is memory bound)")
    tr.add_argument("--device", default="cpu", help="cpu (default), cuda (or its alias gpu) or cuda:N")
    tr.add_argument("--dtype", default="float32")
    tr.add_argument("--quiet", action="store_true", help="no progress bars")
    tr.set_defaults(func=_train)

    ev = sub.add_parser("eval", help="held-out α / β per exit: naive vs trained vs reduced vocabulary")
    ev.add_argument("--heads", required=True, help="head folder written by `ppsd heads train`")
    ev.add_argument("--model", default=None, help="model (default: the one the heads were trained for)")
    ev.add_argument("--prompts", default=None,
                    help="prompt source whose held-out split to use (default: the training source)")
    ev.add_argument("--heldout-per-category", type=int, default=None,
                    help="held-out prompts per category (default: as at training)")
    ev.add_argument("--limit-per-category", type=int, default=None, help="use at most this many of them")
    ev.add_argument("--exits", default=None, help="exits to score (default: every trained exit)")
    ev.add_argument("--vocab-sizes", type=_int_list, default=None,
                    help="reduced-vocabulary sizes (default: those recorded at training)")
    ev.add_argument("--max-new-tokens", type=int, default=None, help="default: as at training")
    ev.add_argument("--out", default=None, help="write the summary table (exit, head, category, tokens, α, β) as CSV")
    ev.add_argument("--acceptance-out", default=None,
                    help="write the per-token acceptance long table (profile format) as .csv or .csv.gz")
    ev.add_argument("--latency-out", default=None, help="write the heads' latency (profile latency.exit_heads) as JSON")
    ev.add_argument("--no-latency", action="store_true", help="skip the latency measurement")
    ev.add_argument("--threads", type=int, default=1)
    ev.add_argument("--device", default="cpu", help="cpu (default), cuda (or its alias gpu) or cuda:N")
    ev.add_argument("--dtype", default="float32",
                    help="model and heads dtype: float32 (default), bfloat16, float16 (as in `ppsd run`); "
                         "--latency-out is timed in it")
    ev.add_argument("--quiet", action="store_true")
    ev.set_defaults(func=_eval)


def _positive(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise UserError(f"{name} must be at least 1 (got {value})", "give a positive number")


def _check_train_args(args) -> None:
    """`ppsd heads train`'s flags before the model loads: numbers, the model spec and its exits, --out."""
    from ppsd.devices import normalize_device
    from runtime.model_shape import layer_count

    args.device = normalize_device(args.device)  # "gpu" is "cuda"; an unknown name fails before loading
    for name in ("--per-category", "--max-new-tokens", "--threads", "--max-prompt-tokens"):
        _positive(name, getattr(args, name[2:].replace("-", "_")))
    if args.epochs < 0:
        raise UserError(f"--epochs must be 0 or more (got {args.epochs})", "give 0 (closed form only) or more")
    if args.heldout_per_category < 0:
        raise UserError(f"--heldout-per-category must be 0 or more (got {args.heldout_per_category})", "give e.g. 3")
    if not args.lr > 0:
        raise UserError(f"--lr {args.lr} must be a positive learning rate", "give e.g. --lr 1e-3")
    layers = layer_count(args.model)  # refuses a model spec nothing could load
    if layers is not None:
        from profiler.heads.exits import parse_exits

        parse_exits(args.exits, layers)
    if args.out:
        _check_heads_out(Path(args.out).expanduser())


def _check_heads_out(out: Path) -> None:
    """A head folder to train into: new, empty, or one of heads to resume (never a file, nor a folder of
    other files), in a place this process may write."""
    from ppsd.paths import check_writable_parent
    from runtime.heads.store import HEADS_FILE

    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file", "give --out a folder path (a new folder)")
    if out.is_dir() and any(out.iterdir()) and not (out / HEADS_FILE).is_file():
        raise UserError(f"--out {out} holds files that are not exit heads; ppsd does not write into them",
                        "give --out a new or empty folder, or a head folder to resume")
    check_writable_parent(out / HEADS_FILE, "--out")


def _train(args) -> int:
    _check_train_args(args)
    import torch

    from ppsd.progress import SequentialProgress
    from runtime.heads.store import default_heads_dir
    from profiler.heads.train import TrainConfig, parse_exits, train_heads
    from runtime.llm import load_model

    torch.set_num_threads(args.threads)
    adapter = load_model(args.model, device=args.device, dtype=args.dtype)
    exits = parse_exits(args.exits, adapter.num_layers)
    cfg = TrainConfig(exits=exits, prompts=None if args.prompts == "builtin" else args.prompts,
                      per_category=args.per_category, heldout_per_category=args.heldout_per_category,
                      max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.max_prompt_tokens,
                      epochs=args.epochs, init=args.init, lr=args.lr, vocab_sizes=args.vocab_sizes)
    out = Path(args.out).expanduser() if args.out else default_heads_dir(adapter.model_id)
    with SequentialProgress(enabled=not args.quiet) as progress:
        meta = train_heads(adapter, cfg, out, progress=progress, fresh=args.fresh)
    print(f"trained exit heads for {meta.model_id} at exits {meta.exits} in {out} "
          f"({meta.training.get('tokens')} training tokens, {meta.training.get('total_s')} s this run)")
    print(f"next: ppsd heads eval --heads {out}")
    return 0


def _eval(args) -> int:
    from ppsd.devices import normalize_device

    args.device = normalize_device(args.device)
    _positive("--threads", args.threads)
    _positive("--limit-per-category", args.limit_per_category)
    _positive("--max-new-tokens", args.max_new_tokens)
    if args.heldout_per_category is not None and args.heldout_per_category < 1:
        raise UserError(f"--heldout-per-category must be at least 1 (got {args.heldout_per_category})", "give e.g. 3")
    from ppsd.paths import check_output_file

    for flag, path in (("--out", args.out), ("--acceptance-out", args.acceptance_out),
                       ("--latency-out", args.latency_out)):
        if path:
            check_output_file(path, flag)
    import torch

    from ppsd.paths import atomic_write_json, atomic_write_text
    from ppsd.progress import SequentialProgress
    from profiler.heads.evaluate import comparison_table, evaluate_heads, heldout_prompts
    from runtime.heads.store import load_heads, read_meta
    from profiler.heads.train import parse_exits
    from runtime.llm import load_model

    torch.set_num_threads(args.threads)
    meta = read_meta(args.heads)
    if args.exits:
        parse_exits(args.exits, meta.num_layers)  # before the model loads
    if args.model:
        from runtime.model_shape import check_spec

        check_spec(args.model)
    adapter = load_model(args.model or meta.model_id, device=args.device, dtype=args.dtype)
    exits = parse_exits(args.exits, adapter.num_layers) if args.exits else None
    heads = load_heads(args.heads, adapter, exits, dtype=adapter.dtype)  # drafted as in the model's dtype
    prompts = heldout_prompts(heads, args.prompts, args.heldout_per_category, args.limit_per_category)
    if not prompts:
        raise UserError("the held-out split is empty", "give --heldout-per-category 1 or more, or another --prompts")
    with SequentialProgress(enabled=not args.quiet) as progress:
        res = evaluate_heads(adapter, heads, prompts, exits=exits, vocab_sizes=args.vocab_sizes,
                             max_new_tokens=args.max_new_tokens, progress=progress, latency=not args.no_latency)
    table = comparison_table(res.summary)
    print(f"held-out: {res.prompts} prompts, {res.tokens} greedy tokens; α = greedy agreement, β = Σ min(p_full, p_exit)")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if res.latency:
        print("draft latency, one token (ms, median [p10-p90]):")
        for name, lat in [("naive", res.shared_latency), *res.latency.items()]:
            print(f"  {name:>10}: {lat['median_ms'][0]:.3f} [{lat['p10_ms'][0]:.3f}-{lat['p90_ms'][0]:.3f}]")
    if args.out:
        atomic_write_text(args.out, res.summary.to_csv(index=False))
        print(f"wrote {args.out}")
    if args.acceptance_out:
        from ppsd.profile.files import acceptance_columns

        data = res.acceptance[acceptance_columns(res.acceptance)].to_csv(index=False, float_format="%.4g")
        if args.acceptance_out.endswith(".gz"):
            import gzip

            from ppsd.paths import atomic_write_bytes

            atomic_write_bytes(args.acceptance_out, gzip.compress(data.encode(), mtime=0))
        else:
            atomic_write_text(args.acceptance_out, data)
        print(f"wrote {args.acceptance_out}")
    if args.latency_out and res.latency:
        atomic_write_json(args.latency_out, {"exit_heads": res.latency, "shared": res.shared_latency})
        print(f"wrote {args.latency_out}")
    return 0
