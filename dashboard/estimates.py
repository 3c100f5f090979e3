"""Estimates next to measurements: for an estimated profile (roofline, `ppsd profile
--analytic`) and a measured one of the same model on the same device, per-layer latency and AR
tokens/s side by side with the relative error. No Streamlit here.

Matching is deliberately by name: the same model id (after dropping an org prefix, a `random:`
prefix and case) or the same architecture with the same layer count and hidden size, and the same
device name once "(estimated)", "NVIDIA" and punctuation are dropped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from dashboard.heldout import norm_model
from sim.schemes.ar import step_ms as ar_step_ms


def norm_device(name: str | None) -> str:
    s = str(name or "").lower().replace("(estimated)", "")
    s = re.sub(r"\bnvidia\b|\bgeforce\b", " ", s)
    return re.sub(r"[^a-z0-9]+", "", s)


def _same_model(a: dict, b: dict) -> bool:
    ma, mb = a.get("model") or {}, b.get("model") or {}
    if norm_model(ma.get("id")) and norm_model(ma.get("id")) == norm_model(mb.get("id")):
        return True
    keys = ("architecture", "num_layers", "hidden_size")
    return all(ma.get(k) for k in keys) and all(ma.get(k) == mb.get(k) for k in keys)


def _same_device(a: dict, b: dict) -> bool:
    da, db = (norm_device((m.get("hardware") or {}).get("device_name")) for m in (a, b))
    if not da or not db:
        return False
    # "H100 80GB HBM3" measured vs "H100-SXM" estimated: one name holds the other's chip
    return da == db or da in db or db in da


def kind(meta: dict) -> str:
    return meta.get("kind", "measured")


def read_meta(path: str | Path) -> dict | None:
    try:
        meta = json.loads((Path(path) / "profile.json").read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return meta if isinstance(meta, dict) else None


def counterparts(meta: dict, candidates: dict[str, dict]) -> list[str]:
    """Paths of profiles of the other kind (estimated ↔ measured) for the same model and device."""
    mine = kind(meta)
    return [p for p, m in candidates.items()
            if m is not None and kind(m) != mine and _same_model(meta, m) and _same_device(meta, m)]


def _context(measured, estimated) -> float:
    """The smallest context both grids cover (the estimate interpolates inside its own grid)."""
    shared = sorted(set(measured.context_values) & set(estimated.context_values))
    return float(shared[0] if shared else measured.context_values[0])


def compare(measured, estimated) -> tuple[pd.DataFrame, dict]:
    """(per-layer table, summary) at one new token and the smallest shared context: layer times,
    head, embedding and the AR step (`sim.schemes.ar.step_ms`) with relative errors of the estimate."""
    n = 1
    if measured.num_layers != estimated.num_layers:
        from ppsd.errors import UserError

        raise UserError(f"the measured profile has {measured.num_layers} layers, the estimate "
                        f"{estimated.num_layers}", "compare profiles of the same architecture")
    c = _context(measured, estimated)
    rows = []
    for layer in range(measured.num_layers):
        m, e = measured.layer_ms(layer, n, c), estimated.layer_ms(layer, n, c)
        rows.append({"layer": layer, "measured_ms": m, "estimated_ms": e, "rel_err_pct": _err(e, m)})
    table = pd.DataFrame(rows)

    def step(p):  # AR's step, as its scheme prices it (one new token)
        return float(ar_step_ms(p, np.array([c]))[0])

    sm, se = step(measured), step(estimated)
    summary = {
        "n": n, "context": c,
        "layer_mape_pct": float(np.mean(np.abs(table["rel_err_pct"]))),
        "head": (measured.head_ms(n), estimated.head_ms(n), _err(estimated.head_ms(n), measured.head_ms(n))),
        "embed": (measured.embed_ms(n), estimated.embed_ms(n), _err(estimated.embed_ms(n), measured.embed_ms(n))),
        "step_ms": (sm, se, _err(se, sm)),
        "ar_tokens_per_s": (1000 / sm, 1000 / se, _err(1000 / se, 1000 / sm)),
    }
    return table, summary


def _err(est: float, meas: float) -> float:
    return (est - meas) / meas * 100 if meas else float("nan")
