"""Acceptance for an estimated profile, which cannot be estimated from shapes. Torch-free.

It comes either from a measured profile of another model, rescaled by relative depth (exit E of
the target reads the source's exit at the nearest E/N), or from a user-given α curve, turned into
a seeded Bernoulli match table.
"""

from __future__ import annotations

from pathlib import Path


from ppsd.errors import UserError
from ppsd.profile import SHARED_HEAD, Profile, load_profile
from sim.model.alpha_curve import alpha_at, load_alpha_curve


def rescale_exit_map(src_exits: list[int], src_layers: int, dst_layers: int) -> dict[int, int]:
    """Target exit E' (1..N'-1) -> the source exit whose relative depth E/N is nearest E'/N'
    (ties to the shallower one, the conservative side)."""
    if not src_exits:
        raise UserError("the acceptance profile has no exit layers in its match table",
                        "profile acceptance with `ppsd profile` first")
    src = sorted(set(int(e) for e in src_exits))
    out = {}
    for e in range(1, dst_layers):
        d = e / dst_layers
        out[e] = min(src, key=lambda s: (abs(s / src_layers - d), s))
    return out


def rescaled_acceptance(source: Profile | str | Path, dst_layers: int):
    """(match table for a dst_layers-deep model, generations, acceptance meta) from a measured
    profile: the shared head's traces, copied exit by exit by relative depth."""
    src = source if isinstance(source, Profile) else load_profile(source)
    if not src.has_acceptance:
        raise UserError(f"profile {src.path} has no acceptance data to rescale",
                        "give a profile written by `ppsd profile` with acceptance, or use --alpha-curve FILE")
    df = src.acceptance
    df = df[df["head"] == SHARED_HEAD]
    if df.empty:
        raise UserError(f"profile {src.path} has no traces for the shared exit head",
                        "give a profile whose acceptance table includes the shared head")
    mapping = rescale_exit_map(df["exit_layer"].unique().tolist(), src.num_layers, dst_layers)
    import pandas as pd

    by_exit = {int(e): g for e, g in df.groupby("exit_layer")}
    parts = []
    for e_dst, e_src in mapping.items():
        g = by_exit[e_src].copy()
        g["exit_layer"] = e_dst
        parts.append(g)
    out = pd.concat(parts, ignore_index=True)
    src_acc = src.meta.get("acceptance") or {}
    meta = {k: src_acc.get(k) for k in ("temperature", "max_new_tokens", "prompt_set", "num_prompts")}
    meta.update({
        "categories": sorted(out["category"].unique().tolist()),
        "heads": [SHARED_HEAD],
        "rescaled_from": {
            "profile": str(src.path), "model": src.model_id, "num_layers": src.num_layers,
            "device_name": src.device_name, "kind": src.kind,
            "method": "per-exit match traces copied from the source exit at the nearest relative depth E/N "
                      "(shared exit head only; generations' token ids are the source model's)",
            "exit_map": {str(k): v for k, v in mapping.items()},
        },
    })
    return out, src.generations() or None, meta


def curve_acceptance(path: str | Path, num_layers: int, seed: int = 0, prompts: int = 8, tokens: int = 128):
    """(seeded Bernoulli match table, acceptance meta) for a user-given α curve."""
    from ppsd.profile.synthetic import bernoulli_acceptance

    kind, x, a = load_alpha_curve(path)
    if kind == "exit_layer" and x[-1] > num_layers - 1:
        raise UserError(f"alpha curve {path} names exit layer {int(x[-1])}, past this {num_layers}-layer model",
                        f"give exit layers 1..{num_layers - 1}, or relative depths")
    alphas = {e: alpha_at(kind, x, a, e, num_layers) for e in range(1, num_layers)}
    df = bernoulli_acceptance(num_layers, alphas, prompts=prompts, tokens=tokens, seed=seed)
    meta = {"temperature": 0.0, "max_new_tokens": tokens, "prompt_set": "alpha-curve", "num_prompts": prompts,
            "categories": sorted(df["category"].unique().tolist()), "heads": [SHARED_HEAD],
            "alpha_curve": {"file": str(path), "kind": kind, "x": x.tolist(), "alpha": a.tolist(), "seed": seed,
                            "method": "Bernoulli(α(E)) match per position, α linear in the curve, ends held"}}
    return df, meta
