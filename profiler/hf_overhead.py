"""The profile's `latency.hf` block: what the simulator needs to predict transformers' own early-exit
assisted generation (sim/schemes/hf.py), measured by running it (runtime/hf_assisted.py).

On the profile's own prompts (greedy, `max_new_tokens` each, one torch thread by default):

- plain greedy `generate` (transformers' AR): each decode step's wall time minus the profile's price of
  a full pass at its context; the median is `ar_token_overhead_ms` (generate's loop, logits
  processors, stopping criteria, HF's forward around the layers: masks, rotary, cache bookkeeping).
- assisted generation at each of `exits`, constant draft length at each of `gammas`: each decode
  round's wall time minus the priced pieces of the round as sim/schemes/hf.py lays them out (the
  first draft pass re-feeding the sequence, the one-token drafts, the whole-model verification of
  g + 1 positions); a least-squares line through the residuals over the rounds' draft counts g gives
  `round_overhead_ms` (intercept: the drafter's `generate` call, candidate bookkeeping, cache crops)
  and `draft_overhead_ms` (slope: the drafter's loop per draft token).
- what the drafter re-feeds (`refeed`): "sequence" when a round's first draft pass takes more than two
  new tokens on top of a non-empty cache (transformers 5.24), else "tail".
- acceptance per exit: the drafter's match rate along those runs (accepted drafts over drafts judged:
  accepted + rounds ending at a mismatch) beside the profile's clean match trace over the same
  prompts' positions. With the cache re-fed as it should be ("tail") the drafts are the clean exit's
  (the same greedy prefix, the same layers and head), the rates agree up to the runs' other lengths,
  and `scale` is 1; with "sequence" (the drafter reading the sequence twice) `scale` = hf α / clean α
  and the simulator thins the trace by it.

The runs are interleaved per prompt and exit: ppsd's own AR on the prompt, transformers' AR, then
assisted generation at each γ, so a drifting machine weighs on every kind of sample alike. ppsd's AR
over its price in the tables is that prompt's scale (the machine's state then against the tables'),
and every priced piece of the samples that follow is scaled by it before the residual is taken (the
overheads are what is left of the wall time once the machine's state is accounted for; `piece_scale`
is their median). The raw samples stay in the block (`raw_ar`: [context, wall ms, scale] per step;
`raw_rounds`: [exit, drafts, context, wall ms, scale] per round), so `fit_block` can price them again.

Every figure is relative to the profile's own prices, so it is only meaningful on the machine the
profile was measured on: `ppsd profile` measures it right after the tables, `ppsd profile
add-hf DIR` later (marked `added_later`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import statistics
import time
from pathlib import Path

import numpy as np

from ppsd.errors import UserError

DEFAULT_GAMMAS = (2, 6)
DEFAULT_MAX_NEW = 32
METHOD = ("wall time of each decode step / round (streamer commits) minus the profile's priced pieces, the pieces "
          "scaled by ppsd's own AR measured beside them over its price (piece_scale)")


def _fit_line(gs: list[int], rs: list[float]) -> tuple[float, float]:
    """(intercept, slope) of r ≈ a + b·g through each g's median residual, weighted by its count
    (robust to a few stalled rounds); a single g gives slope 0."""
    by: dict[int, list[float]] = {}
    for g, r in zip(gs, rs):
        by.setdefault(int(g), []).append(float(r))
    xs = np.array(sorted(by), float)
    ys = np.array([statistics.median(by[int(x)]) for x in xs])
    w = np.array([len(by[int(x)]) for x in xs], float)
    if len(xs) < 2:
        return float(ys[0]) if len(ys) else 0.0, 0.0
    b, a = np.polyfit(xs, ys, 1, w=np.sqrt(w))
    return float(a), float(b)


def _clean_alpha(profile, exit_layer: int, prompt_ids: list[str], max_new: int) -> float | None:
    df = profile.acceptance
    if df is None or not len(df):
        return None
    sel = df[(df["exit_layer"] == exit_layer) & (df["head"] == "shared") &
             (df["prompt_id"].astype(str).isin(prompt_ids)) & (df["position"] < max_new)]
    return float(sel["match"].mean()) if len(sel) else None


def _ppsd_ar_ms_per_token(model, prompt, max_new_tokens, eos, cm) -> float:
    """ppsd's own AR (the profile's pieces, run whole) on one prompt: its ms per decode token over the
    profile's price of the same steps (the machine's state now against the tables')."""
    from runtime.acceptance import Sampler
    from runtime.decoding import generate_ar

    rec = generate_ar(model, prompt, max_new_tokens, Sampler.make(0.0, 0), eos)
    c = len(prompt) + np.arange(max(rec.decode_tokens, 1), dtype=float)
    priced = float(np.sum(cm.embed(1) + cm.layers(c, 0, cm.num_layers) + cm.head(1)))
    return rec.decode_s * 1e3 / priced if priced > 0 else 1.0


def fit_block(profile, raw: dict) -> dict:
    """The overheads from the raw samples (`raw_ar`: [context, wall ms, scale] per AR decode step;
    `raw_rounds`: [exit, drafts, context, wall ms, scale] per assisted decode round), each priced by
    `profile` times its scale (ppsd's own AR on the same prompt right before, over its price)."""
    from sim.model.cost_model import cost_model
    from sim.schemes.hf import HFCosts

    cm = cost_model(profile)
    ar_res = []
    for ctx, wall, k in raw["raw_ar"]:
        c = np.array([float(ctx)])
        ar_res.append(wall - k * (cm.embed(1) + float(cm.layers(c, 0, cm.num_layers)[0]) + cm.head(1)))
    gs, rs = [], []
    for e, g, ctx, wall, k in raw["raw_rounds"]:
        bare = HFCosts(cm, profile, int(e), int(g), "constant", raw["refeed"], 0.0, 0.0, 0.0, 1.0)
        gs.append(int(g))
        rs.append(wall - k * bare.round_ms(float(ctx), int(g)))
    round_oh, draft_oh = _fit_line(gs, rs)
    return {"ar_token_overhead_ms": round(float(statistics.median(ar_res)), 4) if ar_res else 0.0,
            "ar_steps": len(ar_res), "round_overhead_ms": round(round_oh, 4), "draft_overhead_ms": round(draft_oh, 4),
            "rounds": len(rs),
            "round_residual_p10_ms": round(float(np.percentile(rs, 10)), 3) if rs else None,
            "round_residual_p90_ms": round(float(np.percentile(rs, 90)), 3) if rs else None}


@dataclass
class _Samples:
    """What the interleaved runs collect: AR steps and assisted rounds (context, wall ms, the piece
    scale beside them), the n of every re-fed drafter call, each exit's accepted / rejected drafts."""

    raw_ar: list = field(default_factory=list)
    raw_rounds: list = field(default_factory=list)
    scales: list = field(default_factory=list)
    refeed_seen: list = field(default_factory=list)
    judged: dict = field(default_factory=dict)


def measure_hf_block(model, profile, *, exits, gammas=DEFAULT_GAMMAS, max_new_tokens: int = DEFAULT_MAX_NEW,
                     limit: int | None = 6, threads: int = 1, progress=None) -> dict:
    """Run transformers' AR and assisted generation on the profile's prompts and return the block.
    Interleaved per prompt and exit (ppsd's AR for the scale, transformers' AR, then assisted at each γ)
    so a drifting machine weighs on every kind of sample alike."""
    import torch
    import transformers

    gens, exits = _hf_inputs(profile, exits, limit)
    prompts = [model.encode_prompt(g["prompt"]) for g in gens]
    ids = [str(g["prompt_id"]) for g in gens]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    t_start = time.time()
    try:
        got = _interleaved_runs(model, profile, prompts, exits, gammas, max_new_tokens, progress)
    finally:
        torch.set_num_threads(before)
    refeed = "sequence" if got.refeed_seen and max(got.refeed_seen) > 2 else "tail"
    return {
        "method": METHOD,
        "transformers": transformers.__version__,
        "prompts": ids, "max_new_tokens": int(max_new_tokens), "threads": int(threads),
        "exits": exits, "gammas": [int(g) for g in gammas], "schedule_probed": "constant",
        "confidence_threshold": 0.0,
        **fit_block(profile, {"refeed": refeed, "raw_ar": got.raw_ar, "raw_rounds": got.raw_rounds}),
        "refeed": refeed,
        "acceptance": _hf_acceptance(profile, got.judged, refeed, ids, max_new_tokens),
        "piece_scale": round(float(statistics.median(got.scales)), 4), "piece_scales": got.scales,
        "seconds": round(time.time() - t_start, 1),
        "raw_ar": got.raw_ar, "raw_rounds": got.raw_rounds,
    }


def _hf_inputs(profile, exits, limit: int | None) -> tuple[list[dict], list[int]]:
    """The profile's generations that carry their prompt text (the first `limit`) and the exits, checked."""
    gens = [g for g in profile.generations() if g.get("prompt")]
    if not gens:
        raise UserError(f"profile {profile.path} records no prompt texts", "re-run `ppsd profile`")
    exits = sorted({int(e) for e in exits})
    bad = [e for e in exits if not 1 <= e < profile.num_layers]
    if bad or not exits:
        raise UserError(f"exit layers {bad or exits} are out of range", f"use exits between 1 and {profile.num_layers - 1}")
    return (gens[:limit] if limit else gens), exits


def _interleaved_runs(model, profile, prompts, exits, gammas, max_new_tokens: int, progress) -> _Samples:
    """Per prompt and exit: ppsd's AR (the piece scale), transformers' AR, then assisted at each γ."""
    from runtime.hf_assisted import generate_hf
    from sim.model.cost_model import cost_model

    eos, cm = model.eos_token_ids, cost_model(profile)
    got = _Samples(judged={e: [0, 0] for e in exits})  # accepted, rejected
    generate_hf(model, prompts[0], min(8, max_new_tokens), eos=eos)  # warm up both paths
    _ppsd_ar_ms_per_token(model, prompts[0], min(8, max_new_tokens), eos, cm)
    for i, p in enumerate(prompts):
        for j, e in enumerate(exits):
            k = _ppsd_ar_ms_per_token(model, p, max_new_tokens, eos, cm)
            got.scales.append(round(k, 4))
            ts = generate_hf(model, p, max_new_tokens, eos=eos).commit_times
            got.raw_ar += [[len(p) + n - 1, round((ts[n] - ts[n - 1]) * 1e3, 4), round(k, 4)] for n in range(1, len(ts))]
            for gamma in gammas:
                _assisted_rounds(model, p, e, gamma, max_new_tokens, k, got)
            if progress:
                progress(i * len(exits) + j + 1, len(prompts) * len(exits))
    return got


def _assisted_rounds(model, prompt, exit_layer: int, gamma: int, max_new_tokens: int, scale: float,
                     got: _Samples) -> None:
    """One assisted `generate` at constant γ: each drafting round's wall time and acceptance."""
    from runtime.hf_assisted import ForwardCall, assisted_config, generate_hf, hf_model

    log: list[ForwardCall] = []
    with assisted_config(hf_model(model), gamma, "constant"):
        rec = generate_hf(model, prompt, max_new_tokens, exit_layer=exit_layer, eos=model.eos_token_ids, log=log)
    got.refeed_seen += [c.n for c in log if c.layers == exit_layer and c.cached > 0 and c.n > 1]
    seq = len(prompt) + rec.commit_sizes[0]
    judged = got.judged[exit_layer]
    judged[0] += rec.first_commit - 1
    judged[1] += int(rec.first_commit - 1 < rec.first_drafts)
    for n in range(1, len(rec.commit_times)):
        g, a = rec.drafts[n - 1], rec.commit_sizes[n] - 1
        if g > 0:
            wall = (rec.commit_times[n] - rec.commit_times[n - 1]) * 1e3
            got.raw_rounds.append([exit_layer, g, seq - 1, round(wall, 4), round(scale, 4)])
            judged[0] += a
            judged[1] += int(a < g)
        seq += rec.commit_sizes[n]


def _hf_acceptance(profile, judged: dict, refeed: str, ids: list[str], max_new_tokens: int) -> dict:
    """Per exit: transformers' acceptance, the profile's clean one for the same prompts, and the scale
    a drafter on a stale cache (re-fed sequences) puts between them."""
    acceptance = {}
    for e, (a, r) in judged.items():
        hf_alpha = a / (a + r) if a + r else None
        clean = _clean_alpha(profile, e, ids, max_new_tokens)
        scale = 1.0
        if refeed == "sequence" and hf_alpha is not None and clean:
            scale = min(1.0, hf_alpha / clean)  # a drafter on a stale cache drafts otherwise
        acceptance[str(e)] = {"hf_alpha": None if hf_alpha is None else round(hf_alpha, 4),
                              "clean_alpha": None if clean is None else round(clean, 4),
                              "scale": round(scale, 4), "judged": a + r}
    return acceptance


def with_hf_block(profile_dir, block: dict, *, added_later: bool = True) -> None:
    """Write `block` into the profile folder's profile.json as latency.hf (atomic)."""
    import json
    from pathlib import Path

    from ppsd.paths import atomic_write_json

    path = Path(profile_dir) / "profile.json"
    meta = json.loads(path.read_text())
    meta.setdefault("latency", {})["hf"] = {**block, **({"added_later": True} if added_later else {})}
    atomic_write_json(path, meta)


def add_hf(profile_dir, *, model_spec: str | None = None, exits=None, gammas=DEFAULT_GAMMAS,
           max_new_tokens: int = DEFAULT_MAX_NEW, limit: int | None = 6, threads: int | None = None,
           force: bool = False, progress=None, added_later: bool = True) -> dict:
    """`ppsd profile add-hf DIR`: measure the block for an existing measured profile and write it."""
    from runtime.llm import load_model
    from ppsd.profile import load_profile

    profile = load_profile(profile_dir)
    if profile.kind != "measured":
        raise UserError(f"profile {profile_dir} is {profile.kind}, not measured",
                        "add the hf block to a profile measured on this machine")
    if (profile.latency or {}).get("hf") and not force:
        raise UserError(f"profile {profile_dir} already has a latency.hf block", "pass --force to measure it again")
    if exits is not None and (not exits or any(not 1 <= int(e) < profile.num_layers for e in exits)):
        raise UserError(f"exits {','.join(map(str, exits)) or '(none)'} are not exit layers of this "
                        f"{profile.num_layers}-layer model", f"give exits between 1 and {profile.num_layers - 1}, "
                        f"e.g. {profile.num_layers // 2},{round(profile.num_layers * 0.8)}")
    model = load_model(model_spec or profile.model_id, "cpu", profile.meta.get("model", {}).get("dtype", "float32"))
    traced = sorted({int(e) for e in profile.acceptance["exit_layer"].unique()}) if profile.acceptance is not None else []
    if exits is None:
        want = [round(profile.num_layers * f) for f in (0.5, 0.8)]
        exits = sorted({min(traced, key=lambda t: abs(t - w)) for w in want}) if traced else want
    thr = threads or int(profile.meta.get("timing", {}).get("threads") or 1)
    block = measure_hf_block(model, profile, exits=exits, gammas=gammas, max_new_tokens=max_new_tokens,
                             limit=limit, threads=thr, progress=progress)
    with_hf_block(profile_dir, block, added_later=added_later)
    return block


def _int_list(text: str) -> tuple[int, ...]:
    import argparse

    try:
        values = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer, e.g. 20,24")
    return values


def _hf_options(p, *, prefix: str = "") -> None:
    p.add_argument(f"--{prefix}exits", dest="hf_exits", type=_int_list, default=None, metavar="E1,E2",
                   help="exit layers transformers' assisted generation is run at (default: two traced exits near "
                        "N/2 and 4N/5)" if not prefix else
                   "also measure transformers' assisted generation (latency.hf, for --runtime hf) at these exits, "
                   "e.g. 20,24")
    p.add_argument(f"--{prefix}gammas", dest="hf_gammas", type=_int_list, default=DEFAULT_GAMMAS, metavar="G1,G2",
                   help=f"constant draft lengths probed (default {','.join(map(str, DEFAULT_GAMMAS))})")
    p.add_argument(f"--{prefix}max-new-tokens", dest="hf_max_new_tokens", type=int, default=DEFAULT_MAX_NEW,
                   metavar="T", help=f"tokens per prompt (default {DEFAULT_MAX_NEW})")
    p.add_argument(f"--{prefix}limit", dest="hf_limit", type=int, default=6, metavar="P",
                   help="prompts of the profile run (default 6)")


def register_add_hf(sub, profile_parser) -> None:
    """`ppsd profile add-hf DIR` and `ppsd profile --hf-exits ...` (torch-free)."""
    add = sub.add_parser("add-hf", help="measure transformers' early-exit assisted generation (host overheads, "
                                        "drafter) on this machine and add it to a measured profile (latency.hf)")
    add.add_argument("dir", help="measured profile folder (rewritten in place, atomically)")
    _hf_options(add)
    add.add_argument("--threads", type=int, default=None, help="torch threads (default: the profile's timing.threads)")
    add.add_argument("--force", action="store_true", help="replace a latency.hf block the profile already has")
    add.set_defaults(func=lambda args: run_hf_block(args.dir, args, added_later=True))
    _hf_options(profile_parser, prefix="hf-")


def check_hf_args(args, *, added_later: bool, num_layers: int | None = None) -> tuple[int, ...]:
    """The hf options' values checked before any model loads (`ppsd profile --hf-*` before it measures
    anything); returns the draft lengths. `num_layers`, when known, checks the exits too."""
    flag = "--" if added_later else "--hf-"  # add-hf's flags, or `ppsd profile --hf-...`
    if getattr(args, "hf_limit", 6) is not None and getattr(args, "hf_limit", 6) < 1:
        raise UserError(f"{flag}limit {args.hf_limit} runs no prompt", f"give {flag}limit 1 or more (default 6)")
    if getattr(args, "hf_max_new_tokens", DEFAULT_MAX_NEW) < 4:
        raise UserError(f"{flag}max-new-tokens must be at least 4", "give e.g. 32")
    gammas = tuple(getattr(args, "hf_gammas", DEFAULT_GAMMAS) or DEFAULT_GAMMAS)
    if len(set(gammas)) < 2 or min(gammas) < 1:
        raise UserError(f"{flag}gammas {','.join(map(str, gammas))}: the overhead fit needs two different γ >= 1",
                        f"give e.g. {flag}gammas 2,6")
    exits = getattr(args, "hf_exits", None)
    if num_layers is not None and exits is not None and any(not 1 <= int(e) < num_layers for e in exits):
        raise UserError(f"{flag}exits {','.join(map(str, exits))} are not exit layers of this {num_layers}-layer model",
                        f"give exits between 1 and {num_layers - 1}")
    threads = getattr(args, "threads", None)
    if threads is not None and threads < 1:
        raise UserError(f"--threads {threads} must be at least 1", "give --threads 1 or more")
    return gammas


def run_hf_block(profile_dir, args, *, added_later: bool) -> int:
    """Measure the block into `profile_dir` and print its summary line."""
    import sys

    from ppsd.progress import report

    if added_later:
        from ppsd.paths import check_rewritable
        from ppsd.profile import PROFILE_FILE, load_profile

        profile = load_profile(profile_dir)
        if profile.kind != "measured":
            raise UserError(f"profile {profile_dir} is {profile.kind}, not measured",
                            "add the hf block to a profile measured on this machine")
        gammas = check_hf_args(args, added_later=True, num_layers=profile.num_layers)
        latency = profile.latency or {}
        check_rewritable(Path(profile_dir) / PROFILE_FILE, "DIR")
        if latency.get("hf") and not getattr(args, "force", False):
            raise UserError(f"profile {profile_dir} already has a latency.hf block", "pass --force to measure it again")
    else:
        gammas = check_hf_args(args, added_later=False)
    print("measuring transformers' assisted generation (latency.hf) ...", file=sys.stderr, flush=True)
    block = add_hf(profile_dir, exits=getattr(args, "hf_exits", None), gammas=gammas,
                   max_new_tokens=getattr(args, "hf_max_new_tokens", DEFAULT_MAX_NEW),
                   limit=getattr(args, "hf_limit", 6), threads=getattr(args, "threads", None),
                   force=bool(getattr(args, "force", False)) or not added_later,
                   progress=lambda d, t: report("hf", d, t), added_later=added_later)
    print(f"latency.hf: AR {block['ar_token_overhead_ms']:+.2f} ms a token, a round {block['round_overhead_ms']:+.2f} ms "
          f"{block['draft_overhead_ms']:+.2f} ms a draft (transformers {block['transformers']}, drafter re-feeds "
          f"{block['refeed']}, piece scale {block['piece_scale']:.3f}, {block['seconds']:.0f} s) -> {profile_dir}")
    return 0
