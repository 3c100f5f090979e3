"""`ppsd profile --analytic`: its command-line options and its handler. Torch-free.

profiler/cli.py adds these options to the `ppsd profile` parser and hands `--analytic` runs here;
the estimate itself is `profiler/estimated_profile.py`.
"""

from __future__ import annotations

import argparse

from ppsd.errors import UserError
from ppsd.archs import known_archs
from profiler.estimated_profile import (
    DEFAULT_CONTEXT_VALUES,
    DEFAULT_GPU_COUNT,
    DEFAULT_N_VALUES,
    check_batch_size,
    write_analytic_profile,
)
from profiler.hardware import INTERCONNECTS, known_hardware
from profiler.stacks import DEFAULT_STACK, EAGER_DISPATCH_US, known_stacks

STACK_HELP = (f"what drives the decode step (default {DEFAULT_STACK}): compiled (CUDA graphs, vLLM, "
              "TensorRT-LLM) or eager (PyTorch)")


def _has(parser: argparse.ArgumentParser, option: str) -> bool:
    return option in parser._option_string_actions  # noqa: SLF001 - argparse has no public lookup


def _mark_given(parser: argparse.ArgumentParser, option: str, flag: str) -> None:
    """Make an option the parser already has set `flag` on the namespace when it is given on the
    command line, so the analytic path can tell "given" from "defaulted" (the measured profiler's
    defaults are not the estimate's)."""
    action = parser._option_string_actions[option]  # noqa: SLF001
    base = type(action)

    class _MarkGiven(base):  # type: ignore[misc, valid-type]
        def __call__(self, parser, namespace, values, option_string=None):
            setattr(namespace, flag, True)
            super().__call__(parser, namespace, values, option_string)

    action.__class__ = _MarkGiven
    parser.set_defaults(**{flag: False})


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in str(text).replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like '64,256,1024', got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def add_analytic_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `--analytic` options to a `ppsd profile` parser. Options the parser already has
    (--out, --dtype, --seed, --batch-size, --context-values, --n-values) are reused, not redefined;
    --dtype and --batch-size count only when given on the command line (their measured defaults,
    fp32 and a generation batch of 32, are not the estimate's)."""
    g = parser.add_argument_group("analytic estimate (no model, no GPU: a roofline over a built-in hardware table)")
    g.add_argument("--analytic", action="store_true",
                   help="write an estimated profile from the architecture's shape and a GPU's datasheet figures")
    g.add_argument("--arch", metavar="A",
                   help=f"built-in architecture ({', '.join(known_archs()[:2])}, ...; a wrong name lists all) or a "
                        "Hugging Face config.json")
    g.add_argument("--hardware", metavar="H", help=f"GPU: {', '.join(known_hardware())}")
    g.add_argument("--interconnect", choices=list(INTERCONNECTS), default=None,
                   help="link between pipeline stages (default: nvlink where the GPU has it, else pcie)")
    g.add_argument("--acceptance-from", metavar="PROFILE",
                   help="per-exit match traces from a measured profile of the same model (another's: "
                        "--force-acceptance-transfer)")
    g.add_argument("--alpha-curve", metavar="FILE",
                   help="CSV/JSON of relative_depth (or exit_layer) -> alpha; a seeded Bernoulli match table")
    g.add_argument("--gpus", type=int, default=DEFAULT_GPU_COUNT,
                   help=f"GPUs available for pipeline stages (default {DEFAULT_GPU_COUNT})")
    g.add_argument("--bandwidth-efficiency", type=float, default=None, metavar="F",
                   help="override the achieved fraction of peak memory bandwidth (e.g. a calibrated fit)")
    g.add_argument("--launch-us", type=float, default=None, metavar="US",
                   help="override the fixed cost per kernel in µs")
    g.add_argument("--stack", choices=known_stacks(), default=DEFAULT_STACK, help=STACK_HELP)
    g.add_argument("--dispatch-us", type=float, default=None, metavar="US",
                   help=f"eager stack: host cost per dispatched op in µs (default {EAGER_DISPATCH_US:g}; it follows "
                        "the host CPU)")
    g.add_argument("--force-acceptance-transfer", action="store_true",
                   help="let --acceptance-from copy another model's acceptance by relative depth (flagged in the "
                        "profile's warnings)")
    if not _has(parser, "--dtype"):
        g.add_argument("--dtype", default=None, help="weights and KV cache dtype: bf16 (default), fp16, fp32, fp8")
    else:
        # The measured profiler's --dtype has a CPU default (fp32); the estimate's default is bf16.
        # Mark the existing action so run_analytic can tell "given" from "defaulted".
        _mark_given(parser, "--dtype", "analytic_dtype_given")
    if not _has(parser, "--batch-size"):
        g.add_argument("--batch-size", type=int, default=1,
                       help="sequences decoded at once; only 1 is modelled (ppsd models batch-1 decoding)")
    else:
        # `ppsd profile --batch-size` is the measured profiler's generation batch (prompts at once, 32 by
        # default). With --analytic it means the decode batch: given, it must be 1; not given, it is 1.
        action = parser._option_string_actions["--batch-size"]  # noqa: SLF001
        action.help = (action.help or "") + "; with --analytic: the decode batch, only 1 is modelled"
        _mark_given(parser, "--batch-size", "analytic_batch_given")
    for option, default, metavar, what in (("--context-values", DEFAULT_CONTEXT_VALUES, "64,256,1024",
                                            "tokens already in the KV cache"),
                                           ("--n-values", DEFAULT_N_VALUES, "1,2,4,8,16", "new tokens per step")):
        if not _has(parser, option):
            g.add_argument(option, type=_int_list, default=list(default), metavar=metavar,
                           help=f"{what}: the estimate's grid")
        else:  # the measured profiler's grid option: the estimate honours it too
            action = parser._option_string_actions[option]  # noqa: SLF001
            action.help = (action.help or what) + "; with --analytic: the estimate's grid"
    if not _has(parser, "--seed"):
        g.add_argument("--seed", type=int, default=0, help="seed of the Bernoulli match table (--alpha-curve)")
    if not _has(parser, "--out"):
        g.add_argument("--out", metavar="DIR", help="profile folder to write")


def _grid_arg(values, default) -> list[int]:
    """A grid from the command line, sorted and without repeats (as the measured profiler takes it)."""
    if values is None:
        return list(default)
    return sorted({int(v) for v in values})


def run_analytic(args: argparse.Namespace) -> int:
    """Handler for `ppsd profile --analytic ...`: write the folder, print one summary line."""
    if not getattr(args, "arch", None) or not getattr(args, "hardware", None):
        raise UserError("--analytic needs --arch and --hardware",
                        f"e.g. --arch llama-2-7b --hardware h100-sxm (GPUs: {', '.join(known_hardware())})")
    out = getattr(args, "out", None)
    if not out:
        raise UserError("--analytic needs --out DIR", "name the profile folder to write")
    from ppsd.paths import check_output_folder
    from ppsd.profile import PROFILE_FILE

    check_output_folder(out, "--out", force=bool(getattr(args, "force", False)), marker=PROFILE_FILE,
                        what="profile folder")
    dtype = getattr(args, "dtype", None)
    if dtype in (None, "auto") or getattr(args, "analytic_dtype_given", True) is False:
        dtype = "bf16"  # the GPU default, unless --dtype was given on the command line
    # the measured profiler's --batch-size (generation batch, default 32) counts only when given
    batch = getattr(args, "batch_size", 1) if getattr(args, "analytic_batch_given", True) else 1
    check_batch_size(1 if batch is None else batch)
    prof = write_analytic_profile(
        out, args.arch, args.hardware, dtype, getattr(args, "interconnect", None),
        acceptance_from=getattr(args, "acceptance_from", None), alpha_curve=getattr(args, "alpha_curve", None),
        seed=int(getattr(args, "seed", 0) or 0), gpu_count=getattr(args, "gpus", DEFAULT_GPU_COUNT),
        bandwidth_efficiency=getattr(args, "bandwidth_efficiency", None),
        launch_us=getattr(args, "launch_us", None),
        force_acceptance_transfer=bool(getattr(args, "force_acceptance_transfer", False)),
        n_values=_grid_arg(getattr(args, "n_values", None), DEFAULT_N_VALUES),
        context_values=_grid_arg(getattr(args, "context_values", None), DEFAULT_CONTEXT_VALUES),
        stack=getattr(args, "stack", None) or DEFAULT_STACK,
        dispatch_us=getattr(args, "dispatch_us", None),
    )
    est = prof.meta["estimate"]
    step = prof.meta["latency"]["whole_step"]["median_ms"]
    acc = prof.meta.get("acceptance") or {}
    acc_txt = ("ANOTHER MODEL's acceptance (forced transfer, see warnings) from " + acc["rescaled_from"]["profile"]
               if "transfer" in acc
               else "rescaled acceptance from " + acc["rescaled_from"]["profile"] if "rescaled_from" in acc
               else "Bernoulli acceptance from " + acc["alpha_curve"]["file"] if "alpha_curve" in acc
               else "no acceptance (simulate with --acceptance bernoulli --alpha A)")
    print(f"estimated {prof.model_id} on {prof.device_name}, {est['dtype']}, {est['stack']} stack: "
          f"layer {prof.layer_ms(0):.3f} ms, "
          f"head {prof.head_ms(1):.3f} ms, hop {prof.hop_ms() * 1e3:.1f} µs ({est['interconnect']['key']}), "
          f"AR ≈ {step:.2f} ms/token at context {prof.meta['latency']['whole_step']['context']} on one GPU "
          f"({1e3 / step:.0f} tokens/s, batch 1); weights {est['weights_gb']:.1f} GB "
          f"need ≥ {est['min_gpus_for_weights']} GPU(s); {acc_txt} -> {prof.path}")
    return 0
