"""The speed benchmarks in turn, then their headline figures: `python -m bench` (what `make bench` runs).

    .venv/bin/python -m bench [bench_sim] [bench_serve_sim] [bench_dashboard]

  bench_sim        the simulator: `ppsd plan` end to end and in process, a 10k-token event run (seconds)
  bench_serve_sim  the serving simulator: 10,000 requests of one policy, `ppsd plan --rate` (seconds)
  bench_dashboard  the What-if planner's response to each control change, cold and warm (a minute or two)

Each runs as `python -m bench.NAME` from the project root, its output shown as it comes; the `FIGURE`
lines they print are repeated at the end. Exit 1 when a benchmark fails. The other benchmarks and
checks decode with a model or take far longer: run them one by one (see bench/__init__.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ("bench_sim", "bench_serve_sim", "bench_dashboard")
HEADLINE = "FIGURE "  # how a benchmark marks a headline figure


def run_one(name: str) -> tuple[int, list[str]]:
    """`python -m bench.NAME`, its output passed through: (its exit code, its headline lines)."""
    proc = subprocess.Popen([sys.executable, "-m", f"bench.{name}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    headlines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        if line.startswith(HEADLINE):
            headlines.append(line.rstrip("\n"))
    return proc.wait(), headlines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", metavar="NAME",
                    help=f"benchmarks to run, in order: {', '.join(BENCHMARKS)} (default: all)")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        ap.error(f"unknown benchmark {unknown[0]!r}; give {' or '.join(BENCHMARKS)}")
    results = []
    for name in args.names or BENCHMARKS:
        print(f"== {name} ==", flush=True)
        t0 = time.perf_counter()
        rc, headlines = run_one(name)
        results.append((name, rc, time.perf_counter() - t0, headlines))
    print("\nheadline figures:")
    for name, rc, seconds, headlines in results:
        print(f"  {name} ({seconds:.0f} s){'' if rc == 0 else f': FAILED (exit {rc})'}")
        for line in headlines:
            print(f"    {line}")
    return 1 if any(rc for _, rc, _, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
