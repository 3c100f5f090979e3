"""`python -m bench.serve`: the load generator of `ppsd bench-serve` (runtime/serve/loadgen.py), the same flags.

    .venv/bin/python -m bench.serve --base-url http://127.0.0.1:8000 --request-rate 1 --num-prompts 50

It replays a workload open loop against any OpenAI-compatible endpoint (ppsd serve, vLLM, llama.cpp's
server) and prints vLLM's TTFT / TPOT / ITL / E2E table (`--json`: JSON alone on stdout).
"""

from __future__ import annotations

import argparse
import os
import sys

from ppsd.errors import UserError


def main(argv: list[str] | None = None) -> int:
    from runtime.serve.cli import add_bench_arguments
    from runtime.serve.loadgen import bench_command

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__.split("\n\n")[0])
    add_bench_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return bench_command(args)
    except UserError as exc:
        print(f"bench.serve: error: {exc.one_line()}", file=sys.stderr)
        return UserError.exit_code


if __name__ == "__main__":
    sys.exit(main())
