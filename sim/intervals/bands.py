"""The interval itself: its level, how it is written onto a Result, and how often intervals
held the measured values (`coverage`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ppsd.errors import UserError
from ppsd.statistics import widened
from sim.intervals.shift import Shift
from ppsd.modes import Mode
from sim.plan import Result, SimulatedDetails


LEVEL = 0.9


DEFAULT_PROMPTS_N = 8  # the prompts `ppsd validate` measures by default (--limit 8)


REPLAY_DRAWS = 200


SWEEP_DRAWS = 1000


@dataclass(frozen=True)
class Interval:
    """A predicted speedup's interval: `lo`..`hi` at `level`, for `prompts_n` prompts."""

    lo: float
    hi: float
    level: float = LEVEL
    prompts_n: int | None = None
    draws: int = 0
    method: str = "replay"  # "replay" | "closed form" | "latency" (no prompts to draw from) | "exact" (AR)
    latency_cv: float = 0.0
    shift: Shift | None = None  # the prompt set's acceptance shift the draws carried (sim/intervals/shift.py)

    def covers(self, x: float | None) -> bool:
        return x is not None and self.lo <= x <= self.hi

    def scaled(self, point: float | None, other: float | None, extra_cv: float = 0.0) -> tuple[float | None, float | None]:
        """The same relative interval around another point (`other`, e.g. the same-budget speedup),
        each side widened in log space by a further independent spread `extra_cv` (`budget_cv`)."""
        return widened(self.lo / point if point else None, self.hi / point if point else None, other, extra_cv)

    @property
    def half_width(self) -> float | None:
        """Half the interval relative to its middle, (hi − lo) / (hi + lo): how wide it is, beside coverage."""
        return (self.hi - self.lo) / (self.hi + self.lo) if self.hi + self.lo > 0 else None

    def to_dict(self) -> dict:
        return {"lo": self.lo, "hi": self.hi, "level": self.level, "prompts_n": self.prompts_n, "draws": self.draws,
                "method": self.method, "latency_cv": round(self.latency_cv, 5),
                "shift": self.shift.to_dict() if self.shift is not None else None}


def check_prompts_n(n) -> int:
    if n is None:
        return DEFAULT_PROMPTS_N
    if int(n) < 1:
        raise UserError(f"--prompts-n {n} must be at least 1", "give the number of prompts the prediction is for")
    return int(n)


def _quantiles(draws: np.ndarray, level: float) -> tuple[float, float]:
    q = (1.0 - level) / 2.0
    lo, hi = np.quantile(draws, [q, 1.0 - q])
    return float(lo), float(hi)


def apply(result: Result, interval: Interval) -> Result:
    """Write an interval into a simulated Result's details (relative to its speedup_vs_ar when the
    interval came from draws around another point: see `attach_sweep_intervals`)."""
    d = result.details
    if not isinstance(d, SimulatedDetails):
        return result
    d.predicted_speedup_lo, d.predicted_speedup_hi = interval.lo, interval.hi
    d.speedup_vs_ar_tp_lo, d.speedup_vs_ar_tp_hi = interval.scaled(result.speedup_vs_ar, result.speedup_vs_ar_tp)
    d.interval_level, d.interval_prompts, d.interval_method = interval.level, interval.prompts_n, interval.method
    d.interval_shift = interval.shift.tau if interval.shift is not None else None
    return result


def coverage(rows: Sequence[dict], lo_key: str = "predicted_speedup_lo", hi_key: str = "predicted_speedup_hi",
             value_key: str = "measured_speedup") -> tuple[float | None, int]:
    """(share of rows whose measured value lies in their interval, rows counted): speculative rows
    that carry an interval and a measurement."""
    rows = [r for r in rows if Mode.parse(r.get("mode") or Mode.EESD).speculative and r.get(lo_key) is not None
            and r.get(hi_key) is not None and r.get(value_key) is not None]
    if not rows:
        return None, 0
    inside = sum(1 for r in rows if r[lo_key] <= r[value_key] <= r[hi_key])
    return inside / len(rows), len(rows)
