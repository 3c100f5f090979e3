"""The few statistics every part shares (torch-free): normal quantiles, robust spreads, percent error,
MAPE and medians. One home each, so a z or a spread reads the same in the profiler, the intervals,
the verdict and the validation reports."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import NormalDist

import numpy as np

MAD_TO_SD = 1.4826  # a normal's standard deviation per median absolute deviation

Z90 = NormalDist().inv_cdf(0.9)  # 1.2816: a normal's p10..p90 spans 2 · Z90 standard deviations


def z_two_sided(level: float) -> float:
    """The normal quantile a two-sided `level` interval reaches (1.645 at 90%)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


def robust_sd(x, min_n: int = 2) -> float:
    """A spread that one outlier does not move: (p90 − p10) / (2 · Z90), the sd of a normal with that
    p10..p90; 0 for fewer than `min_n` values."""
    a = np.asarray([v for v in x if v is not None], dtype=float)
    if len(a) < max(min_n, 2):
        return 0.0
    p10, p90 = np.percentile(a, [10, 90])
    return float((p90 - p10) / (2 * Z90))


def robust_cv(x) -> float:
    """`robust_sd` relative to the median (0 when the median is not positive)."""
    med = float(np.median(np.asarray(x, dtype=float))) if len(x) else 0.0
    return robust_sd(x) / med if med > 0 else 0.0


def robust_log_sd(x, min_n: int = 2) -> float:
    """`robust_sd` of the positive figures on the log scale: a relative spread of ratios."""
    return robust_sd(np.log(np.asarray([v for v in x if v > 0], dtype=float)), min_n)


def mad_log_sd(x) -> float:
    """The spread of positive figures on the log scale from their median absolute deviation (1.4826 ·
    MAD, a normal's sd): one outlier in a handful of values does not move it, where p10..p90 of five
    values already reaches the fifth. 0 for fewer than three values."""
    logs = np.log(np.asarray([v for v in x if v > 0], dtype=float))
    if len(logs) < 3:
        return 0.0
    return float(MAD_TO_SD * np.median(np.abs(logs - np.median(logs))))


def percent_error(predicted: float | None, measured: float | None) -> float | None:
    """100 · (predicted / measured − 1): positive when the prediction is too high; None without both."""
    if predicted is None or not measured:
        return None
    return 100.0 * (float(predicted) / float(measured) - 1.0)


def mape(errors: Iterable[float | None]) -> float | None:
    """The mean absolute value of the percent errors that are there (None without any)."""
    vals = [abs(float(e)) for e in errors if e is not None and not math.isnan(float(e))]
    return sum(vals) / len(vals) if vals else None


def median(xs: Iterable[float | None], min_n: int = 1) -> float | None:
    """The median of the values that are there (None and NaN left out); None with fewer than `min_n`."""
    vals = sorted(float(x) for x in xs if x is not None and float(x) == float(x))
    if len(vals) < max(min_n, 1):
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def widened(lo_rel: float | None, hi_rel: float | None, point: float | None,
            extra_cv: float = 0.0, level: float = 0.9) -> tuple[float | None, float | None]:
    """point × [lo_rel, hi_rel] with each side's log half-width combined in quadrature with a further
    independent relative spread `extra_cv` at `level`."""
    if point is None or lo_rel is None or hi_rel is None or lo_rel <= 0 or hi_rel <= 0:
        return None, None
    z = z_two_sided(level) * max(float(extra_cv), 0.0)
    down = math.hypot(max(-math.log(lo_rel), 0.0), z)
    up = math.hypot(max(math.log(hi_rel), 0.0), z)
    return float(point * math.exp(-down)), float(point * math.exp(up))


def expected_max(a: float, b: float, cv: float) -> float:
    """E[max(X, Y)] for independent normal X, Y with means a, b and relative spread `cv` each (Clark's
    formula, `expected_max_of`): what waiting for the slower of two jittery tasks costs; max(a, b) when
    cv is 0."""
    return expected_max_of([a, b], cv)


def expected_max_of(means: Sequence[float], cv: float) -> float:
    """E[max] of independent normal tasks with the given means and relative spread `cv` each: Clark's
    formulas folded pairwise (the running maximum kept as a normal with Clark's mean and variance).
    What a lock step that waits for the slowest of several jittery tasks costs per step."""
    vals = [float(m) for m in means]
    if not vals:
        raise ValueError("expected_max_of needs at least one mean")
    mean, var = vals[0], (cv * vals[0]) ** 2
    unit = NormalDist()
    for b in vals[1:]:
        vb = (cv * b) ** 2
        theta = math.sqrt(var + vb)
        if theta <= 0.0:
            mean, var = max(mean, b), 0.0
            continue
        z = (mean - b) / theta
        first = mean * unit.cdf(z) + b * unit.cdf(-z) + theta * unit.pdf(z)
        second = ((mean ** 2 + var) * unit.cdf(z) + (b ** 2 + vb) * unit.cdf(-z)
                  + (mean + b) * theta * unit.pdf(z))
        mean, var = first, max(second - first ** 2, 0.0)
    return mean


def short_jitter_cv(durations: Sequence[float]) -> float:
    """Relative pass-to-pass spread of a series of task durations in time order: the robust spread of
    the log ratio of each duration to the one before, over sqrt 2. A slow drift or a trend (a context
    that grows) cancels between neighbours; what is left is the independent jitter of each pass."""
    d = [float(x) for x in durations if x is not None and float(x) > 0.0]
    if len(d) < 3:
        return 0.0
    steps = [math.log(b / a) for a, b in zip(d, d[1:])]
    centre = median(steps)
    mad = median(abs(s - centre) for s in steps)
    return float(MAD_TO_SD * mad / math.sqrt(2.0))
