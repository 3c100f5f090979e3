"""The latency tables of a profile: median / p10 / p90 over a grid, and the interpolation between grid points."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ppsd.profile.files import malformed


@dataclass
class StatTable:
    """median / p10 / p90 in ms over some grid; arrays keep the grid's shape."""

    median_ms: np.ndarray
    p10_ms: np.ndarray
    p90_ms: np.ndarray

    @classmethod
    def from_json(cls, obj: dict, shape: tuple[int, ...], path: Path, name: str) -> StatTable:
        try:
            arrays = [np.asarray(obj[k], dtype=float) for k in ("median_ms", "p10_ms", "p90_ms")]
        except (KeyError, TypeError, ValueError) as exc:
            raise malformed(path, f"latency.{name} lacks median_ms/p10_ms/p90_ms ({exc})") from None
        for a in arrays:
            if a.shape != shape:
                raise malformed(path, f"latency.{name} has shape {a.shape}, expected {shape}")
            if not np.all(np.isfinite(a)) or np.any(a < 0):
                raise malformed(path, f"latency.{name} has negative or non-finite times")
        return cls(*arrays)

    @classmethod
    def from_block(cls, block) -> StatTable:
        """From a validated table block (`schema.StatVector`, `schema.StatGrid`): shapes already checked."""
        return cls(*(np.asarray(getattr(block, k), dtype=float) for k in ("median_ms", "p10_ms", "p90_ms")))

    def to_json(self) -> dict:
        return {k: np.round(getattr(self, k), 6).tolist() for k in ("median_ms", "p10_ms", "p90_ms")}

    def scaled(self, factor: float) -> StatTable:
        return self if factor == 1.0 else StatTable(self.median_ms * factor, self.p10_ms * factor, self.p90_ms * factor)


def interp_last(x: float, grid: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`interp` along the last axis of `values` (one answer per leading index, e.g. per layer)."""
    values = np.asarray(values, dtype=float)
    if len(grid) == 1:
        return np.maximum(values[..., 0], 0.0)
    if x <= grid[0]:
        i = 0
    elif x >= grid[-1]:
        i = len(grid) - 2
    else:
        i = int(np.searchsorted(grid, x)) - 1
    x0, x1 = grid[i], grid[i + 1]
    y0, y1 = values[..., i], values[..., i + 1]
    return np.maximum(y0 + (y1 - y0) * (x - x0) / (x1 - x0), 0.0)


def interp(x: float, grid: np.ndarray, values: np.ndarray) -> float:
    """Linear in x between grid points; linear extrapolation past the ends (context keeps growing),
    never below zero."""
    return float(interp_last(x, grid, values))
