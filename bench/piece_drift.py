"""How far this machine is now from the state a profile measured: the pieces of one decode step.

    .venv/bin/python -m bench.piece_drift --profile examples/smollm2-135m-cpu [--heads DIR] [--repeats 40] [--json]

`ppsd validate`'s `machine_drift` compares AR's whole speed with the profile's price. A speedup is a
ratio, so a machine uniformly faster or slower changes nothing; what moves speedups is the pieces
drifting apart. When the memory-bound LM head gets faster than the layers, plans drafting with a
small exit head (which skip one LM head a token) lose speedup against AR and are over-predicted;
when it gets slower, they gain and are under-predicted. This script re-times the pieces with the
profiler's own step timer (`profiler/piece_times.py`: embedding, the layers one by one, final norm
+ LM head; n = 1 at the profile's smallest context) and prints each against the profile's median.
When the head and the layers drift apart by more than `APART_PCT` points, re-profile before trusting
plans whose stages run the LM head a different number of times than AR does, or validate with
`ppsd validate --retime` (each plan priced with the pieces timed right before it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from profiler.piece_times import APART_PCT, summarize, time_pieces  # noqa: F401 - re-exported

__all__ = ["APART_PCT", "main", "piece_drift", "summarize"]  # the profiler's threshold and summary, re-exported


def piece_drift(profile, adapter, repeats: int = 40, warmup: int = 5, heads=None) -> dict:
    """{context, repeats, pieces: {layers, head, embedding[, exit_head:<name>]: {profile_ms, now_ms,
    drift_pct}}, apart_pct, flagged, note}: each piece of one decode step timed now against the
    profile's median (the exit heads' drafts too, given trained `heads`)."""
    return time_pieces(profile, adapter, heads=heads, repeats=repeats, warmup=warmup).summary()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="a measured profile folder")
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--heads", metavar="DIR", help="the exit-head folder the profile was made with: time their drafts too")
    ap.add_argument("--json", action="store_true", help="print JSON alone on stdout")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ppsd.errors import UserError
    from ppsd.profile import load_profile

    try:
        if args.repeats < 3:
            raise UserError(f"--repeats {args.repeats} is too few for a median", "give --repeats 3 or more")
        profile = load_profile(args.profile)
        if profile.kind != "measured" or profile.meta["hardware"].get("device") not in ("cpu", "cuda"):
            raise UserError(f"profile {args.profile} is not a measurement of a model on this kind of machine",
                            "give a folder written by `ppsd profile --model ...`")
        import torch

        from runtime.llm import load_model

        torch.set_num_threads(int(profile.meta["hardware"].get("threads") or 1))
        adapter = load_model(profile.model_id, profile.meta["hardware"]["device"],
                             profile.meta["model"].get("dtype", "float32"))
        heads = None
        if args.heads:
            from profiler.heads.profiling import load_for_profile

            heads = load_for_profile(args.heads, adapter)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = piece_drift(profile, adapter, repeats=args.repeats, heads=heads)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{profile.model_id}: one decode step's pieces now against {args.profile} (n = 1, context {out['context']})")
    for name, p in out["pieces"].items():
        print(f"  {name:20s} {p['now_ms']:8.2f} ms now  {p['profile_ms']:8.2f} ms profiled  {p['drift_pct']:+6.1f}%")
    print(("warning: " if out["flagged"] else "") + out["note"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
