"""How far this machine is now from the state a profile measured: the pieces of one decode step.

    .venv/bin/python bench/piece_drift.py --profile examples/smollm2-135m-cpu [--repeats 40] [--json]

`ppsd validate`'s `machine_drift` compares AR's whole speed with the profile's price. A speedup is a
ratio, so a machine uniformly faster or slower changes nothing; what moves speedups is the pieces
drifting apart. On 2026-12-03 (Intel VM) AR ran 19% faster than profiled half an hour after the
profile; timed again, the memory-bound LM head took 8.1 ms against 12.6 (-36%) and the layers 42.8 ms
against 48.1 (-11%), so plans drafting with a small exit head (which skip one LM head a token) lost
speedup against AR and were over-predicted by 8-15%. This script re-times the pieces with the
profiler's own step timer (`profiler.latency.timed_step`: embedding, the layers one by one, final norm
+ LM head; n = 1 at the profile's smallest context) and prints each against the profile's median.
When the head and the layers drift apart by more than `APART_PCT` points, re-profile before trusting
plans whose stages run the LM head a different number of times than AR does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

APART_PCT = 10.0  # head and layers drifting this many points apart moves speedups, not just speed


def piece_drift(profile, adapter, repeats: int = 40, warmup: int = 5) -> dict:
    """{context, repeats, pieces: {layers, head, embedding: {profile_ms, now_ms, drift_pct}}, apart_pct,
    flagged, note}: each piece of one decode step timed now against the profile's median."""
    import numpy as np
    import torch

    from profiler.latency import StepClock, filled_cache, timed_step

    context = int(profile.context_values[0])
    clock = StepClock(adapter.device)
    cache = filled_cache(adapter, context, seed=0)
    ids = torch.randint(0, adapter.vocab_size, (1, 1), generator=torch.Generator().manual_seed(0))
    for _ in range(warmup):
        timed_step(adapter, cache, ids, context, clock)
    laps = np.array([timed_step(adapter, cache, ids, context, clock) for _ in range(repeats)])
    # laps columns: embedding, position setup, the layers, head (as the profiler's grid reads them)
    now = {"embedding": float(np.median(laps[:, 0])), "layers": float(np.median(laps[:, 2:-1].sum(axis=1))),
           "head": float(np.median(laps[:, -1]))}
    then = {"embedding": float(profile.embed_ms(1)), "head": float(profile.head_ms(1)),
            "layers": float(sum(profile.layer_ms(layer, 1, context) for layer in range(profile.num_layers)))}
    return summarize(then, now, context, repeats)


def summarize(then: dict, now: dict, context: int, repeats: int) -> dict:
    """The drift of each piece ({layers, head, embedding}: ms profiled `then`, ms timed `now`) and
    whether the head and the layers drifted apart by more than APART_PCT points."""
    pieces = {k: {"profile_ms": round(then[k], 4), "now_ms": round(now[k], 4),
                  "drift_pct": round(100.0 * (now[k] / then[k] - 1.0), 2) if then[k] > 0 else None}
              for k in ("layers", "head", "embedding")}
    apart = abs(pieces["head"]["drift_pct"] - pieces["layers"]["drift_pct"])
    flagged = apart > APART_PCT
    note = (f"the LM head drifted {pieces['head']['drift_pct']:+.1f}% and the layers {pieces['layers']['drift_pct']:+.1f}% "
            f"since the profile ({apart:.1f} points apart): speedups of plans that run the LM head a different number "
            "of times than AR (small exit heads, EESD) are stale; re-profile before trusting them"
            if flagged else f"the LM head and the layers drifted alike (within {APART_PCT:g} points): speedups hold")
    return {"context": context, "repeats": repeats, "pieces": pieces, "apart_pct": round(apart, 2),
            "flagged": bool(flagged), "note": note}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="a measured profile folder")
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--json", action="store_true", help="print JSON alone on stdout")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ppsd.errors import UserError
    from profiler.schema import load_profile

    try:
        if args.repeats < 3:
            raise UserError(f"--repeats {args.repeats} is too few for a median", "give --repeats 3 or more")
        profile = load_profile(args.profile)
        if profile.kind != "measured" or profile.meta["hardware"].get("device") not in ("cpu", "cuda"):
            raise UserError(f"profile {args.profile} is not a measurement of a model on this kind of machine",
                            "give a folder written by `ppsd profile --model ...`")
        import torch

        from profiler.model import load_model

        torch.set_num_threads(int(profile.meta["hardware"].get("threads") or 1))
        adapter = load_model(profile.model_id, profile.meta["hardware"]["device"],
                             profile.meta["model"].get("dtype", "float32"))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = piece_drift(profile, adapter, repeats=args.repeats)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{profile.model_id}: one decode step's pieces now against {args.profile} (n = 1, context {out['context']})")
    for name, p in out["pieces"].items():
        print(f"  {name:9s} {p['now_ms']:8.2f} ms now  {p['profile_ms']:8.2f} ms profiled  {p['drift_pct']:+6.1f}%")
    print(("warning: " if out["flagged"] else "") + out["note"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
