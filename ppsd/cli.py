"""The `ppsd` command. Each part registers its own subcommands; handlers import torch lazily so
`ppsd simulate` and `ppsd plan` start fast and run where torch is absent."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ppsd import __version__
from ppsd.errors import UserError

# Modules that own subcommands: each has `register(subparsers)` and must not import torch at import time.
COMMAND_MODULES = ["profiler.cli", "profiler.heads.cli", "sim.cli", "runtime.cli", "runtime.serve.cli", "validation.cli"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ppsd",
        description="Profile a model, predict AR / EESD / PPSD decoding speed at every exit layer, "
        "run them for real and compare.",
    )
    parser.add_argument("--version", action="version", version=f"ppsd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:  # every part is there: a part that does not import is a broken install
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except UserError as exc:
        print(f"ppsd {args.command}: error: {exc.one_line()}", file=sys.stderr)
        return UserError.exit_code
    except BrokenPipeError:
        # output piped into `head` and the like: not an error worth a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"ppsd {args.command}: interrupted; rerun (with --resume where offered) to continue", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
