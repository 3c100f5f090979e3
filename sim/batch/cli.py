"""`ppsd plan --batch B`: EESD and two-stage PPSD plans ranked at batch size B against AR at B, each scheme's
best speedup at every batch size the profile measured, and up to which batch size each pays."""

from __future__ import annotations

import json

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED, TRAINED
from ppsd.modes import Mode
from sim.batch.costs import check_batch
from sim.batch.sweep import SCHEMES, curve, pays_up_to, rank
from sim.schemes import scheme as scheme_of


def batch_heads(profile, asked) -> list[str]:
    """The heads a batched plan may draft with: those asked for, else the shared one and, when the
    profile has it, the trained one (reduced-vocabulary heads are not timed at batch > 1)."""
    have = set(profile.heads()) | {SHARED}
    if asked:
        return list(asked)
    return [h for h in (SHARED, TRAINED) if h in have]


def check_batch_args(args) -> None:
    """`ppsd plan --batch B` prices greedy shared/trained-head plans from the batch tables and the recorded
    traces: a flag that would change a batch-1 answer is refused with --batch, never ignored."""
    if args.batch is not None and args.batch < 1:
        raise UserError(f"--batch {args.batch} must be at least 1", "give --batch 1 or more (e.g. 4)")
    from sim.intervals import DEFAULT_PROMPTS_N
    from sim.planner.sweep_spec import DEFAULT_TOKENS

    for flag, given in (("--runtime hf", args.runtime == "hf"), ("--temperature", bool(args.temperature)),
                        ("--draft-stops", args.draft_stops is not None),
                        ("--alpha", args.alpha is not None), ("--acceptance-rate", args.acceptance_rate is not None),
                        ("--mean-accepted", args.mean_accepted is not None),
                        ("--alpha-curve", args.alpha_curve is not None), ("--draft-len", args.draft_len is not None),
                        ("--alpha-scale", args.alpha_scale != 1.0), ("--category", args.category is not None),
                        ("--hop-us", args.hop_us is not None), ("--prompt-len", args.prompt_len is not None),
                        ("--devices", args.devices is not None), ("--cores", args.cores is not None),
                        ("--tokens", args.tokens != DEFAULT_TOKENS), ("--prompts-n", args.prompts_n != DEFAULT_PROMPTS_N)):
        if given:
            why = ("batched decoding drafts without a confidence stop" if flag == "--draft-stops" else
                   "--batch prices greedy ppsd plans from the batch tables and the recorded traces")
            raise UserError(f"{flag} does not apply with --batch {args.batch}: {why}",
                            f"drop {flag.split()[0]}, or drop --batch for one sequence at a time")


def interpolated_between(profile, batch: int) -> tuple[int, int] | None:
    """The measured sizes around `batch` when its pass times are interpolated between them; None when measured."""
    sizes = sorted(int(b) for b in profile.batch.sizes)
    if batch in sizes or batch == 1:
        return None
    return max(b for b in sizes if b < batch), min(b for b in sizes if b > batch)


def plan_batch(args, profile) -> int:
    batch = int(args.batch)
    check_batch(profile, batch)
    between = interpolated_between(profile, batch)
    note = "" if between is None else f" (interpolated between the measured batches {between[0]} and {between[1]})"
    heads = batch_heads(profile, args.exit_head)
    gammas = range(1, args.max_draft_len + 1)
    ranked = rank(profile, batch, heads, gammas)
    curves = {s: curve(profile, heads, gammas, scheme=s) for s in SCHEMES}
    upto = {s: pays_up_to(points) for s, points in curves.items()}
    if args.json:
        print(json.dumps({"batch": batch, "interpolated": between is not None,
                          "measured_batch_sizes": sorted(int(b) for b in profile.batch.sizes),
                          "plans": [p.to_json_dict() for p in ranked],
                          "curve": {s.value: [p.to_json_dict() for p in pts] for s, pts in curves.items()},
                          "eesd_pays_up_to_batch": upto[Mode.EESD], "ppsd_pays_up_to_batch": upto[Mode.PPSD],
                          "baseline": "AR at the same batch size on one thread"}))
        return 0
    print(f"{profile.model_id} at batch {batch}: EESD and two-stage PPSD plans against AR at batch {batch} on one "
          f"thread (throughput over the batch; replayed over the profile's {len(profile.generations())} generations, "
          f"{batch} at a time)")
    if between is not None:
        sizes = ",".join(map(str, sorted({*map(int, profile.batch.sizes), batch})))
        print(f"batch {batch} was not measured: its pass times are interpolated linearly between the measured batches "
              f"{between[0]} and {between[1]} (measure it: ppsd profile add-batch {profile.path} --batch-sizes {sizes} "
              "--force)")
    print(f"{'plan':<26}{'tokens/s':>10}{'AR tokens/s':>13}{'speedup':>9}{'same budget':>13}{'ms/token/seq':>14}"
          f"{'acceptance':>12}")
    for p in ranked[: args.top]:
        rate = "" if p.acceptance_rate is None else f"{p.acceptance_rate:.3f}"
        same = "" if p.speedup_vs_ar_tp is None else f"{p.speedup_vs_ar_tp:.3f}×"
        print(f"{p.plan:<26}{p.tokens_per_s:>10.1f}{p.ar_tokens_per_s:>13.1f}{p.speedup_vs_ar:>8.3f}×{same:>13}"
              f"{p.ms_per_token:>14.1f}{rate:>12}")
    for scheme, points in curves.items():
        print(f"best {scheme.value.upper()} plan at each batch size the profile measured:")
        for p in points:
            print(f"  batch {p.batch:>3}: {p.plan:<26} {p.speedup_vs_ar:.3f}× AR at batch {p.batch}")
    print(verdict(batch, ranked[0], upto, note))
    if any(scheme_of(p.scheme).pipelined for p in ranked[: args.top]):
        if any(p.speedup_vs_ar_tp is not None for p in ranked):
            print("same budget: a PPSD plan's two stages use two cores; against the faster AR on those two cores")
        else:
            print("PPSD's two stages use two cores and this profile did not time AR on two threads: ppsd profile "
                  f"add-batch {profile.path} --force adds it; ppsd run --batch {batch} --mode ppsd measures it")
    return 0


def verdict(batch: int, best, upto: dict, note: str = "") -> str:
    """One line: what to run at `batch` (`note`: how it was priced, when interpolated), and up to which
    batch size each scheme pays."""
    reach = "; ".join(f"{s.value.upper()} pays up to batch {u}" if u is not None else
                      f"{s.value.upper()} does not pay even at batch 1" for s, u in upto.items())
    if best.speedup_vs_ar > 1.0:
        return (f"verdict: at batch {batch}{note}, {best.plan} ({best.speedup_vs_ar:.2f}× AR); {reach} of the sizes "
                "measured")
    return (f"verdict: at batch {batch}{note}, decode plainly (the best plan, {best.plan}, is "
            f"{best.speedup_vs_ar:.2f}× AR); {reach}")
