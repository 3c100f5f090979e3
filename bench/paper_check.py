"""The PPSD paper's settings, estimated: closed form vs stage-time-aware speedup.

For Vicuna-7B/13B and LLaMA-2-13B/70B on A100-80GB and H100-SXM (NVLink, one GPU per stage,
k = 2..4 stages with the exit at E = N/k), print
  - the closed-form ideal  S = 1 / (1 − α(1 − E/N))   (balanced stages, free hops, free heads)
  - a stage-time-aware estimate from the analytic profile's stage times: an accepted token costs
    the slowest stage, a rejected one the whole pipeline's latency (all stages + hops):
        S = T_AR / (α · max_i s_i + (1 − α) · (Σ s_i + (k − 1) · hop))
    where stage 1 = embedding + layers [0, E) + the exit head (shared: final norm + LM head) and
    the last stage carries the final head; later cuts from sim.partition.balanced_bounds
  - the simulator's number when `sim.api` exists (Bernoulli acceptance at the same α).

α comes from a "measured-like" curve over relative depth anchored at the paper's one published
point (α = 0.8056 at E/N = 1/4, HumanEval, reported 2.58×); the other points are a plausible
monotone shape, not the paper's data. The paper reports 2.01×–3.81× across its benchmarks.

    .venv/bin/python bench/paper_check.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from profiler.estimated_profile import write_analytic_profile  # noqa: E402
from sim.partition import balanced_bounds  # noqa: E402

MODELS = ("vicuna-7b", "vicuna-13b", "llama-2-13b", "llama-2-70b")
GPUS = ("a100-80gb", "h100-sxm")
STAGES = (2, 3, 4)
# relative depth E/N -> α (measured-like; only the 1/4 point is the paper's)
ALPHA_CURVE = {"relative_depth": [0.125, 0.25, 1 / 3, 0.5, 0.75], "alpha": [0.70, 0.8056, 0.85, 0.90, 0.95]}
PAPER_POINT = {"alpha": 0.8056, "exit_fraction": 0.25, "reported_speedup": 2.58}
PAPER_RANGE = (2.01, 3.81)


def closed_form(alpha: float, exit_fraction: float) -> float:
    return 1.0 / (1.0 - alpha * (1.0 - exit_fraction))


def stage_times(profile, bounds, exit_head_ms: float) -> list[float]:
    """ms per stage for one token at the profile's smallest context."""
    times = []
    k = len(bounds) - 1
    for i in range(k):
        t = sum(profile.layer_ms(l, 1) for l in range(bounds[i], bounds[i + 1]))
        if i == 0:
            t += profile.embed_ms(1) + exit_head_ms  # stage 1 embeds and drafts
        if i == k - 1:
            t += profile.head_ms(1)  # the last stage produces the verified token
        times.append(t)
    return times


def stage_aware_speedup(profile, exit_layer: int, k: int, alpha: float) -> dict:
    n = profile.num_layers
    layer_cost = [profile.layer_ms(l, 1) for l in range(n)]
    bounds = balanced_bounds(exit_layer, n, k, layer_cost=layer_cost, head_cost=profile.head_ms(1))
    s = stage_times(profile, bounds, profile.exit_head_ms("shared", 1))
    hop = profile.hop_ms()
    t_ar = profile.embed_ms(1) + sum(layer_cost) + profile.head_ms(1)
    accepted = max(s)
    rejected = sum(s) + (k - 1) * hop
    per_token = alpha * accepted + (1 - alpha) * rejected
    return {"bounds": list(bounds), "stage_ms": s, "t_ar_ms": t_ar, "per_token_ms": per_token,
            "speedup": t_ar / per_token, "ar_tokens_per_s": 1e3 / t_ar, "ppsd_tokens_per_s": 1e3 / per_token}


def simulated_speedup(profile, exit_layer: int, k: int, alpha: float) -> float | None:
    """The simulator's PPSD speedup (fast engine, Bernoulli(α), balanced stages, the profile's hop);
    None while sim.api (or the engine behind it) is not there yet."""
    try:
        from sim.api import simulate
        from sim.modes import Mode
        from sim.plan import Plan

        res = simulate(profile, Plan(mode=Mode.PPSD, exit_layer=exit_layer, stages=k), tokens=2000,
                       acceptance="bernoulli", alpha=alpha, seed=0, engine="fast")
    except ImportError:
        return None
    return res.speedup_vs_ar


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        curve = Path(tmp) / "alpha.json"
        curve.write_text(json.dumps(ALPHA_CURVE))
        for model in MODELS:
            for gpu in GPUS:
                prof = write_analytic_profile(Path(tmp) / f"{model}-{gpu}", model, gpu, "bf16", "nvlink",
                                              alpha_curve=curve, seed=0)
                alpha_trace = prof.alpha_by_exit()
                n = prof.num_layers
                min_gpus = prof.meta["estimate"]["min_gpus_for_weights"]
                for k in STAGES:
                    e = round(n / k)
                    # the curve's α at E/N (the Bernoulli trace's mean goes into the JSON rows)
                    a = float(np.interp(e / n, ALPHA_CURVE["relative_depth"], ALPHA_CURVE["alpha"]))
                    est = stage_aware_speedup(prof, e, k, a)
                    sim = simulated_speedup(prof, e, k, a)
                    rows.append({"model": model, "gpu": gpu, "k": k, "exit_layer": e, "num_layers": n,
                                 "alpha": a, "alpha_trace": alpha_trace.get(e),
                                 "closed_form": closed_form(a, e / n), "estimate": est["speedup"],
                                 "simulated": sim, "bounds": est["bounds"],
                                 "stage_ms": [round(x, 3) for x in est["stage_ms"]],
                                 "ar_tokens_per_s": est["ar_tokens_per_s"], "min_gpus_for_weights": min_gpus,
                                 "ppsd_tokens_per_s": est["ppsd_tokens_per_s"]})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    p = PAPER_POINT
    print(f"paper: α = {p['alpha']} at E/N = 1/4 -> closed form {closed_form(p['alpha'], 0.25):.2f}×, "
          f"reported {p['reported_speedup']}×; range over benchmarks {PAPER_RANGE[0]}–{PAPER_RANGE[1]}×")
    print("estimates: analytic roofline profiles (bf16, NVLink, one GPU per stage), context 64\n")
    head = f"{'model':<12} {'gpu':<10} {'k':>2} {'E/N':>6} {'α':>6} {'closed':>7} {'stage-aware':>11} " \
           f"{'sim':>6} {'AR tok/s':>9} {'PPSD tok/s':>10}  stage ms"
    print(head)
    print("-" * len(head))
    for r in rows:
        sim = f"{r['simulated']:.2f}" if r["simulated"] is not None else "-"
        print(f"{r['model']:<12} {r['gpu']:<10} {r['k']:>2} {r['exit_layer']:>3}/{r['num_layers']:<2} "
              f"{r['alpha']:>6.3f} {r['closed_form']:>6.2f}× {r['estimate']:>10.2f}× {sim:>6} "
              f"{r['ar_tokens_per_s']:>9.1f} {r['ppsd_tokens_per_s']:>10.1f}  {r['stage_ms']}"
              + ("  *" if r["min_gpus_for_weights"] > 1 else ""))
    if any(r["min_gpus_for_weights"] > 1 for r in rows):
        print("\n* the weights do not fit one GPU: the AR baseline is the hypothetical one-GPU time "
              "(a k-GPU pipelined AR adds (k-1) hops, a few µs each on NVLink)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
