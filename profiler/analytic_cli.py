"""`ppsd profile --analytic`: its command-line options and its handler. Torch-free.

profiler/cli.py adds these options to the `ppsd profile` parser and hands `--analytic` runs here;
the estimate itself is `profiler/estimated_profile.py`.
"""

from __future__ import annotations

import argparse

from ppsd.errors import UserError
from profiler.archs import known_archs
from profiler.estimated_profile import DEFAULT_GPU_COUNT, write_analytic_profile
from profiler.hardware import INTERCONNECTS, known_hardware


def _has(parser: argparse.ArgumentParser, option: str) -> bool:
    return option in parser._option_string_actions  # noqa: SLF001 - argparse has no public lookup


def add_analytic_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `--analytic` options to a `ppsd profile` parser. Options the parser already has
    (--out, --dtype, --seed) are reused, not redefined."""
    g = parser.add_argument_group("analytic estimate (no model, no GPU: a roofline over a built-in hardware table)")
    g.add_argument("--analytic", action="store_true",
                   help="write an estimated profile from the architecture's shape and a GPU's datasheet figures")
    g.add_argument("--arch", metavar="A",
                   help=f"built-in architecture ({', '.join(known_archs())}) or a Hugging Face config.json path")
    g.add_argument("--hardware", metavar="H", help=f"GPU: {', '.join(known_hardware())}")
    g.add_argument("--interconnect", choices=list(INTERCONNECTS), default=None,
                   help="link between pipeline stages (default: nvlink where the GPU has it, else pcie)")
    g.add_argument("--acceptance-from", metavar="PROFILE",
                   help="take the per-exit match traces from this measured profile, rescaled by relative depth")
    g.add_argument("--alpha-curve", metavar="FILE",
                   help="CSV/JSON of relative_depth (or exit_layer) -> alpha; a seeded Bernoulli match table")
    g.add_argument("--gpus", type=int, default=DEFAULT_GPU_COUNT,
                   help=f"GPUs available for pipeline stages (default {DEFAULT_GPU_COUNT})")
    g.add_argument("--bandwidth-efficiency", type=float, default=None, metavar="F",
                   help="override the achieved fraction of peak memory bandwidth (e.g. a calibrated fit)")
    g.add_argument("--launch-us", type=float, default=None, metavar="US",
                   help="override the fixed cost per kernel in µs")
    if not _has(parser, "--dtype"):
        g.add_argument("--dtype", default=None, help="weights and KV cache dtype: bf16 (default), fp16, fp32, fp8")
    else:
        # The measured profiler's --dtype has a CPU default (fp32); the estimate's default is bf16.
        # Mark the existing action so run_analytic can tell "given" from "defaulted".
        action = parser._option_string_actions["--dtype"]  # noqa: SLF001
        base = type(action)

        class _MarkGiven(base):  # type: ignore[misc, valid-type]
            def __call__(self, parser, namespace, values, option_string=None):
                setattr(namespace, "analytic_dtype_given", True)
                super().__call__(parser, namespace, values, option_string)

        action.__class__ = _MarkGiven
        parser.set_defaults(analytic_dtype_given=False)
    if not _has(parser, "--seed"):
        g.add_argument("--seed", type=int, default=0, help="seed of the Bernoulli match table (--alpha-curve)")
    if not _has(parser, "--out"):
        g.add_argument("--out", metavar="DIR", help="profile folder to write")


def run_analytic(args: argparse.Namespace) -> int:
    """Handler for `ppsd profile --analytic ...`: write the folder, print one summary line."""
    if not getattr(args, "arch", None) or not getattr(args, "hardware", None):
        raise UserError("--analytic needs --arch and --hardware",
                        f"e.g. --arch llama-2-7b --hardware h100-sxm (GPUs: {', '.join(known_hardware())})")
    out = getattr(args, "out", None)
    if not out:
        raise UserError("--analytic needs --out DIR", "name the profile folder to write")
    dtype = getattr(args, "dtype", None)
    if dtype in (None, "auto") or getattr(args, "analytic_dtype_given", True) is False:
        dtype = "bf16"  # the GPU default, unless --dtype was given on the command line
    prof = write_analytic_profile(
        out, args.arch, args.hardware, dtype, getattr(args, "interconnect", None),
        acceptance_from=getattr(args, "acceptance_from", None), alpha_curve=getattr(args, "alpha_curve", None),
        seed=int(getattr(args, "seed", 0) or 0), gpu_count=getattr(args, "gpus", DEFAULT_GPU_COUNT),
        bandwidth_efficiency=getattr(args, "bandwidth_efficiency", None),
        launch_us=getattr(args, "launch_us", None),
    )
    est = prof.meta["estimate"]
    step = prof.meta["latency"]["whole_step"]["median_ms"]
    acc = prof.meta.get("acceptance") or {}
    acc_txt = ("rescaled acceptance from " + acc["rescaled_from"]["profile"] if "rescaled_from" in acc
               else "Bernoulli acceptance from " + acc["alpha_curve"]["file"] if "alpha_curve" in acc
               else "no acceptance (simulate with --acceptance bernoulli --alpha A)")
    print(f"estimated {prof.model_id} on {prof.device_name}, {est['dtype']}: layer {prof.layer_ms(0):.3f} ms, "
          f"head {prof.head_ms(1):.3f} ms, hop {prof.hop_ms() * 1e3:.1f} µs ({est['interconnect']['key']}), "
          f"AR ≈ {step:.2f} ms/token on one GPU ({1e3 / step:.0f} tokens/s); weights {est['weights_gb']:.1f} GB "
          f"need ≥ {est['min_gpus_for_weights']} GPU(s); {acc_txt} -> {prof.path}")
    return 0
