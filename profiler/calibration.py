"""Calibration of the roofline: fit its efficiency factors to a measured profile. Torch-free.

`python -m bench.calibrate` and `python -m bench.gpu_check` print the fit; `ppsd profile --analytic
--bandwidth-efficiency X --launch-us Y` reproduces the calibrated estimate. The fit is of the GPU
side (the compiled stack's model); an eager stack's host cost is `--stack eager --dispatch-us US`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ppsd.errors import UserError
from profiler.roofline import Roofline
from ppsd.profile import Profile, load_profile


def fit_efficiency(meta_estimated: dict, measured_profile: Profile | str | Path) -> dict:
    """Fit the bandwidth efficiency (and the fixed per-layer overhead) to measured per-layer times.

    Over the estimate's memory-bound (n, context) points that lie inside the measured grid, least
    squares on  t_measured(l, n, c) = bytes(n, c) / (bandwidth · eff) + overhead. When the bytes
    spread less than 10% over the points (one model's weights dominate), or the fit comes out
    non-physical (eff or overhead ≤ 0), the overhead stays at the modelled value and only eff is
    fitted; `alternative` gives the other reading (eff held, overhead fitted). Compute efficiency is
    not fitted (batch-1 decode rarely reaches the compute roof). Returns the fitted factors and
    per-layer relative errors (%) of the estimate before and after the fit, at n = 1 and the
    smallest shared context, plus the MAPE over every fitted point."""
    est = meta_estimated.get("estimate") if isinstance(meta_estimated, dict) else None
    if not est or meta_estimated.get("kind") != "estimated":
        raise UserError("fit_efficiency needs the meta of an analytic (estimated) profile",
                        "build it with profiler.estimated_profile.analytic_profile_meta")
    meas = measured_profile if isinstance(measured_profile, Profile) else load_profile(measured_profile)
    roof = Roofline(**{k: v for k, v in est["roofline"].items() if k in Roofline.__dataclass_fields__})
    pts = _fit_points(meta_estimated, meas)
    b, t = np.array([p[3] for p in pts]), np.array([p[4] for p in pts])
    slope, overhead, method = _fit_line(b, t, roof)
    lat = meta_estimated["latency"]
    n_grid, c_grid = lat["n_values"], lat["context_values"]
    stack = est.get("stack", "compiled")  # estimates without the stack choice are compiled
    i0, j0, errors = _errors(pts, np.asarray(lat["layers"]["median_ms"], dtype=float), slope, overhead)
    head_meas = meas.head_ms(1)
    head_est = float(np.interp(1, n_grid, lat["head"]["median_ms"]))
    overhead0 = roof.kernels_per_layer * roof.launch_s
    # the other reading of the same data: bandwidth efficiency as modelled, overhead fitted
    alt_overhead = float(np.mean(t - b * (1.0 / (roof.bandwidth_bps * roof.bandwidth_efficiency))))
    return {
        "bandwidth_efficiency": 1.0 / (slope * roof.bandwidth_bps),
        "overhead_ms_per_layer": overhead * 1e3,
        "launch_us": overhead / roof.kernels_per_layer * 1e6,
        "kernels_per_layer": roof.kernels_per_layer,
        "modelled": {"bandwidth_efficiency": roof.bandwidth_efficiency, "overhead_ms_per_layer": overhead0 * 1e3},
        "method": method,
        "alternative": {"bandwidth_efficiency": roof.bandwidth_efficiency,
                        "overhead_ms_per_layer": alt_overhead * 1e3,
                        "note": "overhead fitted with the modelled efficiency held; prefer it when the "
                                "measurement is host-bound (eager launches)"},
        "stack": stack,
        "stack_note": (None if stack == "compiled" else
                       "the estimate prices an eager (host-bound) stack: its layer time is the host's dispatch, "
                       "not bytes / bandwidth, so this bandwidth fit describes the GPU side only; set the host "
                       "cost with `ppsd profile --analytic --stack eager --dispatch-us US` instead"),
        "points": len(pts),
        "at": {"n": n_grid[i0], "context": c_grid[j0]},
        **errors,
        "head": {"measured_ms": head_meas, "estimated_ms": head_est,
                 "rel_err_pct": (head_est - head_meas) / head_meas * 100 if head_meas > 0 else None},
        "measured_profile": str(meas.path),
        "measured_device": meas.device_name,
    }


def _fit_points(meta_estimated: dict, meas: Profile) -> list[tuple]:
    """(layer, n index, context index, bytes moved, measured seconds) at every memory-bound point of the
    estimate inside the measured grid."""
    est, lat = meta_estimated["estimate"], meta_estimated["latency"]
    n_layers = int(meta_estimated["model"]["num_layers"])
    if meas.num_layers != n_layers:
        raise UserError(f"the measured profile has {meas.num_layers} layers, the estimate {n_layers}",
                        "estimate the same architecture that was measured")
    mn, mx = meas.n_values, meas.context_values
    pts = []
    for i, n in enumerate(lat["n_values"]):
        if not mn[0] <= n <= mn[-1]:
            continue
        for j, c in enumerate(lat["context_values"]):
            if not mx[0] <= c <= mx[-1] or est["layer_bound"][i][j] != "memory":
                continue
            for layer in range(n_layers):
                pts.append((layer, i, j, est["layer_bytes"][i][j], meas.layer_ms(layer, n, c) * 1e-3))
    if not pts:
        raise UserError("the measured profile shares no memory-bound (n, context) point with the estimate",
                        "measure n = 1 at contexts the estimate covers (e.g. 64, 256, 1024)")
    return pts


def _fit_line(b: np.ndarray, t: np.ndarray, roof: Roofline) -> tuple[float, float, str]:
    """(seconds per byte, overhead seconds, method) of t = b · slope + overhead. Weights dominate the
    bytes, so across one model's grid the bytes vary by a few percent only; below 10% spread slope
    and overhead are not separately identifiable (nearly collinear) and the overhead is held."""
    if np.ptp(b) > 0.10 * b.mean():
        A = np.vstack([b, np.ones_like(b)]).T
        (s, o), *_ = np.linalg.lstsq(A, t, rcond=None)
        if s > 0 and o >= 0:
            return float(s), float(o), "slope and overhead"
    overhead = roof.kernels_per_layer * roof.launch_s
    s = float(np.dot(b, t - overhead) / np.dot(b, b))
    if s <= 0:
        raise UserError("the measured layer times do not grow with the bytes moved (overhead-bound)",
                        "measure a larger model or longer contexts, or set the launch overhead by hand")
    return s, overhead, "slope only (overhead held at the modelled value)"


def _errors(pts: list[tuple], est_layers: np.ndarray, slope: float, overhead: float) -> tuple[int, int, dict]:
    """The estimate's relative errors before and after the fit: the MAPE over every point and a
    per-layer table at n = 1 (or the smallest fitted n) and the smallest fitted context."""
    fitted = {(p[0], p[1], p[2]): (p[3] * slope + overhead) for p in pts}
    before = np.array([(est_layers[l, i, j] * 1e-3 - tm) / tm for (l, i, j, _, tm) in pts]) * 100
    after = np.array([(fitted[(l, i, j)] - tm) / tm for (l, i, j, _, tm) in pts]) * 100
    i0 = min(p[1] for p in pts)
    j0 = min(p[2] for p in pts if p[1] == i0)
    rows = []
    for (l, i, j, _, tm) in pts:
        if i == i0 and j == j0:
            e_ms, f_ms = est_layers[l, i, j], fitted[(l, i, j)] * 1e3
            rows.append({"layer": l, "measured_ms": tm * 1e3, "estimated_ms": float(e_ms), "fitted_ms": f_ms,
                         "rel_err_pct": (e_ms - tm * 1e3) / (tm * 1e3) * 100,
                         "fitted_rel_err_pct": (f_ms - tm * 1e3) / (tm * 1e3) * 100})
    return i0, j0, {"mape_pct_before": float(np.mean(np.abs(before))),
                    "mape_pct_after": float(np.mean(np.abs(after))), "per_layer": rows}
