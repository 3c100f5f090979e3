"""The latency spread a speedup carries beyond acceptance: one decode step's, the pipeline's pass
jitter, the calibration's doubt, a same-budget comparison's and a measurement's."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ppsd.statistics import Z90, robust_sd
from sim.plan import Plan


def step_cv(profile) -> float:
    """Robust relative spread of one decode step: the whole-step p10/p90 when profiled, else the
    layers' median p10/p90 spread at one new token (0 for tables without spread)."""
    ws = profile.latency.get("whole_step") or {}
    med, p10, p90 = ws.get("median_ms"), ws.get("p10_ms"), ws.get("p90_ms")
    if med and p10 is not None and p90 is not None:
        return max(0.0, float(p90 - p10) / (2 * Z90 * float(med)))
    lay = profile.layers
    n1 = int(np.argmin(np.abs(profile.n_values - 1)))
    med = lay.median_ms[:, n1, 0]
    ok = med > 0
    if not ok.any():
        return 0.0
    return float(np.median((lay.p90_ms[ok, n1, 0] - lay.p10_ms[ok, n1, 0]) / (2 * Z90 * med[ok])))


def latency_cv(profile, plan: Plan) -> float:
    """The relative latency spread applied to a plan's speedup: 0 for AR (its own baseline), the
    step's spread for EESD, at least the pipeline probe's pass spread for PPSD; and, where the
    profile scaled its pieces to a whole step timed beside them, the doubt that scaling leaves
    (`Profile.calibration_doubt`: a profile whose pieces disagree with the whole step says so here,
    on a machine the model was never shaped on)."""
    if not plan.scheme.speculative:
        return 0.0
    cv = plan.scheme.latency_cv(profile, step_cv(profile))
    return float(np.hypot(cv, profile.calibration_doubt()))


def budget_cv(profile, units: int) -> float:
    """The extra relative spread of a same-budget speedup at `units` threads: how unsteady AR's
    thread speedup was over the profile's rounds (`Profile.thread_speedup_cv`; 0 when unknown)."""
    return profile.thread_speedup_cv(units) if units and units > 1 else 0.0


def measurement_cv(ar_runs: Sequence[float]) -> float:
    """The noise of one measured speedup, from the AR runs a validation measured around its plans
    (each plan against the mean of the AR runs just before and after it). With independent noise σ
    per measurement, consecutive AR runs differ by log-sd √2·σ and a plan's speedup carries
    σ·√(1 + 1/2): so √(3/4) times the log-sd of consecutive AR ratios (robust: p10..p90). 0 with
    fewer than three AR runs."""
    a = np.asarray([x for x in ar_runs if x and x > 0], dtype=float)
    if len(a) < 3:
        return 0.0
    return float(np.sqrt(0.75) * robust_sd(np.diff(np.log(a))))
