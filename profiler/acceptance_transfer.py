"""Acceptance for an estimated profile, which cannot be estimated from shapes. Torch-free.

It comes either from a measured profile of another model, rescaled by relative depth (exit E of
the target reads the source's exit at the nearest E/N), or from a user-given α curve, turned into
a seeded Bernoulli match table.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from ppsd.errors import UserError
from profiler.schema import SHARED_HEAD, Profile, load_profile


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


def load_alpha_curve(path: str | Path) -> tuple[str, np.ndarray, np.ndarray]:
    """Read an α curve: CSV with a header `relative_depth,alpha` or `exit_layer,alpha`, or JSON as
    {"relative_depth"|"exit_layer": [...], "alpha": [...]}, a list of such row objects, or a plain
    mapping {"0.25": 0.8, ...} (keys below 1 or with a decimal point = relative depth, else exit
    layers). Returns (kind, x sorted, alpha)."""
    path = Path(path)
    fix = ('write a CSV with a header "relative_depth,alpha" (or "exit_layer,alpha") and one row per '
           'point, or JSON {"relative_depth": [...], "alpha": [...]}')
    if not path.is_file():
        raise UserError(f"alpha curve file {path} does not exist", fix)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read alpha curve {path} ({exc.__class__.__name__})", fix) from None
    rows: list[dict]
    try:
        if path.suffix.lower() == ".json" or text.lstrip().startswith(("{", "[")):
            obj = json.loads(text)
            if isinstance(obj, dict) and "alpha" in obj:
                key = "relative_depth" if "relative_depth" in obj else "exit_layer"
                rows = [{key: x, "alpha": a} for x, a in zip(obj[key], obj["alpha"], strict=True)]
            elif isinstance(obj, dict):
                keys = list(obj)
                depth = any("." in str(k) for k in keys) or all(float(k) < 1 for k in keys)
                key = "relative_depth" if depth else "exit_layer"
                rows = [{key: k, "alpha": v} for k, v in obj.items()]
            elif isinstance(obj, list):
                rows = obj
            else:
                raise ValueError("not an object or a list")
        else:
            rows = list(csv.DictReader(text.splitlines()))
        kinds = {("relative_depth" if "relative_depth" in r else "exit_layer") for r in rows}
        if len(kinds) != 1:
            raise ValueError("rows mix relative_depth and exit_layer")
        kind = kinds.pop()
        x = np.array([float(r[kind]) for r in rows])
        a = np.array([float(r["alpha"]) for r in rows])
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
        raise UserError(f"alpha curve {path} is malformed ({exc})", fix) from None
    if len(x) == 0:
        raise UserError(f"alpha curve {path} has no points", fix)
    if not np.all(np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise UserError(f"alpha curve {path} has α values outside [0, 1]", "give acceptance rates between 0 and 1")
    if kind == "relative_depth" and np.any((x <= 0) | (x >= 1)):
        raise UserError(f"alpha curve {path} has relative depths outside (0, 1)",
                        "give relative depths E/N strictly between 0 and 1")
    if kind == "exit_layer" and np.any(x < 1):
        raise UserError(f"alpha curve {path} has exit layers below 1", "give exit layers 1..N-1")
    order = np.argsort(x)
    x, a = x[order], a[order]
    if np.any(np.diff(x) == 0):
        raise UserError(f"alpha curve {path} lists the same point twice", "give each depth / exit layer once")
    return kind, x, a


def alpha_at(kind: str, x: np.ndarray, a: np.ndarray, exit_layer: int, num_layers: int) -> float:
    """Linear interpolation of the curve at an exit layer; past the ends the end value holds."""
    pos = exit_layer / num_layers if kind == "relative_depth" else float(exit_layer)
    return float(np.interp(pos, x, a))


def curve_acceptance(path: str | Path, num_layers: int, seed: int = 0, prompts: int = 8, tokens: int = 128):
    """(seeded Bernoulli match table, acceptance meta) for a user-given α curve."""
    from profiler.synthetic import bernoulli_acceptance

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
