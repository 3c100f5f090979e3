"""Serving simulator performance figures. Prints each figure; not a timed test.

    .venv/bin/python -m bench.bench_serve_sim [--policy SPEC] [--requests N] [--rate R]

1. One simulated serving run (`sim.serve.simulate_serving`) of 10,000 requests under one policy on the
   committed batch profile (examples/smollm2-135m-batch-amd-epyc/profile), Poisson arrivals at half of AR's
   capacity, max batch 8, each request its prompt's own generation length. Target ≤ 10 s on one core. The
   CPU time of the process is printed beside the wall time (the machine may be shared).
2. `ppsd plan --rate` end to end on the same profile. Target ≤ 3 s.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from ppsd.paths import EXAMPLES_DIR

ROOT = Path(__file__).resolve().parents[1]
PROFILE = Path(EXAMPLES_DIR) / "smollm2-135m-batch-amd-epyc" / "profile"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="eesd:29:1", help="the policy served (default eesd:29:1)")
    ap.add_argument("--requests", type=int, default=10_000, help="requests in the run (default 10000)")
    ap.add_argument("--rate", type=float, default=None, help="requests a second (default: half AR's capacity)")
    args = ap.parse_args(argv)

    from ppsd.profile import load_profile
    from sim.serve.predict import simulate_serving
    from sim.serve.scheduler import SchedulerConfig
    from sim.serve.sweep import ar_capacity
    from sim.serve.workload import profile_prompts, synthetic_workload

    profile = load_profile(PROFILE)
    prompts = profile_prompts(profile)
    config = SchedulerConfig(max_batch=max(profile.batch.sizes))
    rate = args.rate or 0.5 * ar_capacity(profile, prompts, config)
    workload = synthetic_workload(prompts, rate=rate, count=args.requests, seed=0)
    simulate_serving(profile, synthetic_workload(prompts, rate=rate, count=20, seed=1), args.policy, config)  # warm
    t0, c0 = time.perf_counter(), time.process_time()
    run = simulate_serving(profile, workload, args.policy, config)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    m = run.metrics
    print(f"profile: {PROFILE}; {args.requests} requests at {rate:.3g} req/s, {args.policy}, max batch "
          f"{config.max_batch}: {len(run.iterations)} iterations, {m.total_output_tokens} output tokens, "
          f"median TTFT {m.ttft_ms.median:.0f} ms, median TPOT {m.tpot_ms.median:.1f} ms")
    print(f"FIGURE serve_sim_{args.requests}_requests_s = {wall:.2f}  (cpu {cpu:.2f} s; target <= 10 s on one core)")

    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "ppsd", "plan", "--profile", str(PROFILE), "--rate", f"{rate:.3g}"],
                         capture_output=True, text=True, cwd=ROOT)
    dt = time.perf_counter() - t0
    if out.returncode != 0:
        print(out.stderr)
        return 1
    print(out.stdout.rstrip())
    print(f"FIGURE plan_rate_end_to_end_s = {dt:.2f}  (target <= 3 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
