"""`ppsd plan --batch B`: EESD plans ranked at batch size B against AR at B, the best plan's speedup at
every batch size the profile measured, and up to which batch size speculation pays."""

from __future__ import annotations

import json

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED, TRAINED
from sim.batch.costs import check_batch
from sim.batch.sweep import curve, pays_up_to, rank


def batch_heads(profile, asked) -> list[str]:
    """The heads a batched plan may draft with: those asked for, else the shared one and, when the
    profile has it, the trained one (reduced-vocabulary heads are not timed at batch > 1)."""
    have = set(profile.heads()) | {SHARED}
    if asked:
        return list(asked)
    return [h for h in (SHARED, TRAINED) if h in have]


def plan_batch(args, profile) -> int:
    batch = int(args.batch)
    check_batch(profile, batch)
    if args.runtime == "hf" or args.temperature:
        raise UserError("--batch prices greedy ppsd plans", "drop --runtime hf / --temperature with --batch")
    heads = batch_heads(profile, args.exit_head)
    gammas = range(1, args.max_draft_len + 1)
    ranked = rank(profile, batch, heads, gammas)
    by_batch = curve(profile, heads, gammas)
    upto = pays_up_to(by_batch)
    if args.json:
        print(json.dumps({"batch": batch, "plans": [p.to_json_dict() for p in ranked],
                          "curve": [p.to_json_dict() for p in by_batch], "eesd_pays_up_to_batch": upto,
                          "ppsd": "not priced at batch > 1"}))
        return 0
    print(f"{profile.model_id} at batch {batch}: EESD plans against AR at batch {batch} (throughput over the batch; "
          f"replayed over the profile's {len(profile.generations())} generations, {batch} at a time)")
    print(f"{'plan':<26}{'tokens/s':>10}{'AR tokens/s':>13}{'speedup':>9}{'ms/token/seq':>14}{'acceptance':>12}")
    for p in ranked[: args.top]:
        rate = "" if p.acceptance_rate is None else f"{p.acceptance_rate:.3f}"
        print(f"{p.plan:<26}{p.tokens_per_s:>10.1f}{p.ar_tokens_per_s:>13.1f}{p.speedup_vs_ar:>8.3f}×"
              f"{p.ms_per_token:>14.1f}{rate:>12}")
    print("best EESD plan at each batch size the profile measured:")
    for p in by_batch:
        print(f"  batch {p.batch:>3}: {p.plan:<26} {p.speedup_vs_ar:.3f}× AR at batch {p.batch}")
    best = ranked[0]
    if upto is None:
        print("verdict: EESD does not pay even at batch 1 on this profile; decode plainly")
    elif best.speedup_vs_ar > 1.0:
        print(f"verdict: at batch {batch}, {best.plan} ({best.speedup_vs_ar:.2f}× AR); EESD pays up to batch {upto} "
              f"of the sizes measured, beyond that decode plainly")
    else:
        print(f"verdict: at batch {batch}, decode plainly (the best EESD plan, {best.plan}, is "
              f"{best.speedup_vs_ar:.2f}× AR); EESD pays up to batch {upto}")
    print("PPSD is not priced at batch > 1 (its batched runtime is not built)")
    return 0
