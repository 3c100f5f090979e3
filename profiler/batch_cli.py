"""`ppsd profile add-batch DIR`: measure passes of B sequences on this machine into a measured profile
(`latency.batch`, profiler/batch_latency.py). Torch-free at import."""

from __future__ import annotations

import sys
from pathlib import Path

from ppsd.errors import UserError

DEFAULT_SIZES = "1,2,4,8"


def register_add_batch(sub) -> None:
    add = sub.add_parser("add-batch", help="measure passes of B sequences at once on this machine and add them to a "
                                           "measured profile (latency.batch: what ppsd plan --batch prices)")
    add.add_argument("dir", help="measured profile folder (rewritten in place, atomically)")
    add.add_argument("--batch-sizes", default=DEFAULT_SIZES, help=f"batch sizes to time (default {DEFAULT_SIZES})")
    add.add_argument("--repeats", type=int, default=5, help="timed rounds, every cell once a round (default 5)")
    add.add_argument("--threads", type=int, default=None, help="torch threads (default: the profile's timing.threads)")
    add.add_argument("--force", action="store_true", help="replace a latency.batch block the profile already has")
    add.set_defaults(func=run_add_batch)


def parse_batch_sizes(text: str) -> list[int]:
    if not str(text).replace(",", " ").strip():
        raise UserError(f"--batch-sizes {text!r} names no batch size", "give e.g. --batch-sizes 1,2,4,8")
    try:
        sizes = sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        raise UserError(f"--batch-sizes {text!r} is not a list of integers", "give e.g. 1,2,4,8") from None
    if not sizes or sizes[0] < 1 or sizes[-1] > 256:
        raise UserError(f"--batch-sizes {text!r}: each must be between 1 and 256", "give e.g. 1,2,4,8")
    return sizes


def run_add_batch(args) -> int:
    """Time the batch cells with the profile's model, device, dtype, threads and context grid, then
    write profile.json back with `latency.batch`."""
    from ppsd.profile import add_latency_block, load_profile

    sizes = parse_batch_sizes(args.batch_sizes)
    if args.repeats < 1:
        raise UserError(f"--repeats {args.repeats} must be at least 1", "give e.g. 5")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads {args.threads} must be at least 1", "give --threads 1 or more")
    profile = load_profile(args.dir)
    from ppsd.paths import check_rewritable
    from ppsd.profile import PROFILE_FILE

    check_rewritable(Path(args.dir) / PROFILE_FILE, "DIR")
    if profile.meta.get("kind") != "measured":
        raise UserError(f"profile {args.dir} is {profile.meta.get('kind')!r}, not measured",
                        "add-batch times this machine: use it on a profile measured here")
    if profile.batch.measured and not args.force:
        raise UserError(f"profile {args.dir} already has latency.batch", "add --force to measure it again")
    model = profile.meta["model"]
    hardware = profile.meta.get("hardware", {})
    threads = args.threads or int(profile.meta.get("timing", {}).get("threads") or 1)
    import torch

    from ppsd.progress import PhaseBars
    from profiler.batch_latency import measure_batch_block
    from runtime.llm import load_model

    torch.set_num_threads(threads)
    adapter = load_model(str(model.get("spec") or model.get("id")), device=str(hardware.get("device") or "cpu"),
                         dtype=str(model.get("dtype") or "float32"))
    contexts = [int(c) for c in profile.context_values if int(c) + 8 <= adapter.max_context][:2]
    from profiler.batch_latency import cell_count

    cells = cell_count(adapter, sizes, context_values=contexts)
    with PhaseBars() as bar:
        bar.phase("batch passes", cells * args.repeats)
        block = measure_batch_block(adapter, sizes, context_values=contexts, repeats=args.repeats,
                                    tick=lambda: bar.advance("batch passes"))
    block["threads"] = threads
    path = add_latency_block(args.dir, "batch", block)
    ratios = ", ".join(f"B={b}: {r[0][0]:.2f}x" for b, r in zip(block["batch_sizes"], block["layers_ratio"]))
    print(f"a decode pass of B sequences against one (n=1, context {contexts[0]}): {ratios} -> {path}", file=sys.stderr)
    return 0
