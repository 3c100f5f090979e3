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
# Set to see the traceback of an unexpected error (a bug) instead of its one-line summary.
TRACEBACK_ENV = "PPSD_TRACEBACK"


class CommandLineError(Exception):
    """A command line argparse refuses (unknown flag, a value of the wrong type): one line, exit 2."""

    def __init__(self, prog: str, message: str):
        self.prog, self.message = prog, message
        super().__init__(f"{prog}: error: {message}")


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser with its refusals as one line naming the command (`ppsd plan: error: ...`)
    instead of the usage block; subparsers inherit the class."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise CommandLineError(self.prog, f"{message}; see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="ppsd",
        description="Profile a model, predict AR / EESD / PPSD decoding speed at every exit layer, "
        "run them for real and compare.",
    )
    parser.add_argument("--version", action="version", version=f"ppsd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:  # every part is there: a part that does not import is a broken install
        importlib.import_module(name).register(sub)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The namespace, or a CommandLineError naming the subcommand whose flags were wrong."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        prog = f"ppsd {args.command}" if getattr(args, "command", None) else "ppsd"
        raise CommandLineError(prog, f"unrecognized arguments: {' '.join(extra)}; see `{prog} --help`")
    return args


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    try:
        args = _parse(parser, argv)
    except CommandLineError as exc:
        print(str(exc), file=sys.stderr)
        return UserError.exit_code
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
    except OSError as exc:  # the machine refused a read or a write: a path, a permission, a full disk
        print(f"ppsd {args.command}: error: {_os_error_line(exc)}", file=sys.stderr)
        return UserError.exit_code
    except Exception as exc:  # noqa: BLE001 - a bug: one line saying so, the traceback on request
        if os.environ.get(TRACEBACK_ENV):
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        print(f"ppsd {args.command}: internal error: {type(exc).__name__}: {first}; this is a bug in ppsd, not "
              f"in your command: rerun with {TRACEBACK_ENV}=1 for the traceback and report it", file=sys.stderr)
        return 1
    return int(rc or 0)


def _os_error_line(exc: OSError) -> str:
    """An OSError as one line: what failed on which path, and what to check."""
    what = exc.strerror or type(exc).__name__
    path = exc.filename if exc.filename is not None else ""
    where = f": {path}" if path != "" else ""
    return f"{what}{where}; check the path, its permissions and the free space"


if __name__ == "__main__":
    sys.exit(main())
