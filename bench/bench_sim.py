"""Simulator performance figures. Prints each figure; not a timed test.

    .venv/bin/python -m bench.bench_sim

1. `ppsd plan` end to end over the SmolLM2 profile (examples/smollm2-135m-cpu, or a synthetic
   profile of the same shape when it is absent): 29 exits × (EESD γ 1..8 + PPSD k 2..4), 2,000
   trace-driven tokens each. Target ≤ 3 s.
2. One event-level (SimPy) PPSD run of 10,000 tokens. Target ≤ 1 s.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ppsd.paths import EXAMPLES_DIR

ROOT = Path(__file__).resolve().parents[1]


def profile_dir(tmp: str) -> tuple[str, str]:
    example = Path(EXAMPLES_DIR) / "smollm2-135m-cpu"
    if (example / "profile.json").exists():
        from ppsd.profile import load_profile

        if load_profile(example).has_acceptance:
            return str(example), "example SmolLM2 profile"
    from ppsd.profile.synthetic import write_synthetic_profile

    write_synthetic_profile(tmp, alpha_by_exit=lambda e: min(0.95, 0.02 + 0.6 * (e / 30) ** 2), num_layers=30,
                            layer_ms=2.8, head_ms=12.6, embed_ms=0.13, hop_ms=0.2, corun_slowdown=1.3)
    return tmp, "synthetic SmolLM2-shaped profile (30 layers, 2.8 ms/layer, 12.6 ms head)"


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)  # no options; --help
    with tempfile.TemporaryDirectory() as tmp:
        path, what = profile_dir(tmp)
        print(f"profile: {what} ({path})")
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "ppsd", "plan", "--profile", path, "--devices", "4",
                              "--tokens", "2000", "--top", "5"], capture_output=True, text=True, cwd=ROOT)
        dt = time.perf_counter() - t0
        if out.returncode != 0:
            print(out.stderr)
            return 1
        print(out.stdout.rstrip())
        print(f"FIGURE plan_sweep_end_to_end_s = {dt:.2f}  (target <= 3 s)")

        from ppsd.profile import load_profile
        from sim import api
        from ppsd.modes import Mode
        from sim.plan import Plan

        profile = load_profile(path)
        t0 = time.perf_counter()
        results = api.sweep(profile, devices=4, tokens=2000)
        print(f"FIGURE plan_sweep_in_process_s = {time.perf_counter() - t0:.2f}  ({len(results)} plans)")
        plan = Plan(Mode.PPSD, exit_layer=15, stages=2)
        t0 = time.perf_counter()
        r = api.simulate(profile, plan, tokens=10_000, acceptance="bernoulli", alpha=0.6, engine="event")
        dt = time.perf_counter() - t0
        print(f"FIGURE event_ppsd_10k_tokens_s = {dt:.2f}  (target <= 1 s; {r.plan.label()}, "
              f"{r.speedup_vs_ar:.3f}× AR)")
        t0 = time.perf_counter()
        api.simulate(profile, plan, tokens=10_000, acceptance="bernoulli", alpha=0.6, engine="fast")
        print(f"FIGURE fast_ppsd_10k_tokens_s = {time.perf_counter() - t0:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
