"""Costs from a profile, vectorised over context length, and plan resolution.

Every engine reads its times through `CostModel`, so the event model, the fast replay and the AR
baseline price the same work identically; they differ only in how they schedule it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import numpy as np

from sim.partition import balanced_bounds
from sim.plan import Plan


def _lin(x, grid: np.ndarray, values: np.ndarray):
    """Piecewise-linear interpolation along the last axis of `values`, extrapolating linearly past
    both ends (the context keeps growing past the profiled grid), never below zero. `x` may be an
    array; the result broadcasts over it."""
    x = np.asarray(x, dtype=float)
    if len(grid) == 1:
        return np.maximum(np.broadcast_to(values[..., 0], x.shape).astype(float), 0.0)
    i = np.clip(np.searchsorted(grid, x) - 1, 0, len(grid) - 2)
    x0, x1 = grid[i], grid[i + 1]
    y0, y1 = values[..., i], values[..., i + 1]
    return np.maximum(y0 + (y1 - y0) * (x - x0) / (x1 - x0), 0.0)


class CostModel:
    """Times in ms of the pieces of decoding, from a profile's median tables.

    Layer ranges are summed on the profiled grid first and interpolated after: bilinear
    interpolation commutes with the sum, so this equals summing `Profile.layer_ms` per layer
    (except where an extrapolation would go negative, which only the per-range sum clamps)."""

    def __init__(self, profile, exit_head: str = "shared"):
        self.profile = profile
        self.num_layers = profile.num_layers
        self.n_grid = np.asarray(profile.n_values, dtype=float)
        self.c_grid = np.asarray(profile.context_values, dtype=float)
        table = np.asarray(profile.layers.median_ms, dtype=float)  # [N][n][c]
        self._cum = np.concatenate([np.zeros((1, *table.shape[1:])), np.cumsum(table, axis=0)], axis=0)
        self.exit_head_name = exit_head
        self._exit_head_1 = float(profile.exit_head_ms(exit_head, 1))
        self._cache: dict = {}

    # --- scalars over n -------------------------------------------------------------------
    def head(self, n: float = 1) -> float:
        return float(self.profile.head_ms(n))

    def embed(self, n: float = 1) -> float:
        return float(self.profile.embed_ms(n))

    def exit_head(self) -> float:
        return self._exit_head_1

    def layer_costs(self, context: float | None = None) -> list[float]:
        """Per-layer one-token time at one context (for partitioning)."""
        ctx = self.c_grid[0] if context is None else context
        c = np.array([ctx], dtype=float)
        return [float(self.layers(c, lo, lo + 1)[0]) for lo in range(self.num_layers)]

    # --- layer ranges over context ----------------------------------------------------------
    def layers(self, context: np.ndarray, lo: int, hi: int, n: float = 1) -> np.ndarray:
        """Σ layers [lo, hi) for n new tokens at each context in `context` (ms, array)."""
        if hi <= lo:
            return np.zeros(np.shape(context))
        key = (lo, hi, float(n))
        per_c = self._cache.get(key)
        if per_c is None:
            table = self._cum[hi] - self._cum[lo]  # [n][c]
            per_c = np.array([_lin(n, self.n_grid, table[:, j]) for j in range(len(self.c_grid))], dtype=float)
            self._cache[key] = per_c
        return _lin(context, self.c_grid, per_c)

    # --- the three schemes' unit costs --------------------------------------------------------
    def ar_step(self, context: np.ndarray) -> np.ndarray:
        """One full pass: embed + every layer + final norm and LM head."""
        return self.embed(1) + self.layers(context, 0, self.num_layers) + self.head(1)

    def draft_step(self, context: np.ndarray, exit_layer: int) -> np.ndarray:
        """One EESD draft: embed + layers [0, E) + exit head."""
        return self.embed(1) + self.layers(context, 0, exit_layer) + self.exit_head()

    def verify_step(self, context: np.ndarray, last_context: np.ndarray, exit_layer: int, gamma) -> np.ndarray:
        """EESD verification of γ drafts: layers [E, N) and the head on γ+1 positions at the round's
        context, plus embed + layers [0, E) for the last draft (the earlier positions' layer-E
        states were computed while drafting). γ may be an array (shortened final rounds); γ=0 is a
        plain AR step."""
        gamma = np.broadcast_to(np.asarray(gamma), np.shape(context))
        out = np.empty(np.shape(context), dtype=float)
        for g in np.unique(gamma):
            sel = gamma == g
            n = int(g) + 1
            out[sel] = (self.layers(context[sel], exit_layer, self.num_layers, n) + self.head(n)
                        + self.embed(1) + self.layers(last_context[sel], 0, exit_layer))
        return out

    def stage_steps(self, context: np.ndarray, bounds: tuple[int, ...]) -> list[np.ndarray]:
        """PPSD per-stage one-token times: stage 1 adds embed and the exit head (it drafts), the last
        stage adds the final norm + LM head (it verifies)."""
        k = len(bounds) - 1
        out = []
        for m in range(k):
            t = self.layers(context, bounds[m], bounds[m + 1])
            if m == 0:
                t = t + self.embed(1) + self.exit_head()
            if m == k - 1:
                t = t + self.head(1)
            out.append(np.asarray(t, dtype=float))
        return out


_MODELS: dict = {}


def cost_model(profile, exit_head: str = "shared") -> CostModel:
    """One CostModel per (profile object, exit head), so sweeps reuse the summed tables."""
    key = (id(profile), exit_head)
    cm = _MODELS.get(key)
    if cm is None or cm.profile is not profile:
        if len(_MODELS) > 32:
            _MODELS.clear()
        cm = _MODELS[key] = CostModel(profile, exit_head)
    return cm


def corun_factors(profile, devices: int) -> list[float]:
    """factor[b] = slowdown of each stage while b devices compute at once (index 0 unused)."""
    return [1.0] + [float(profile.corun_slowdown(b)) for b in range(1, devices + 1)]


def resolve_plan(plan: Plan, profile) -> Plan:
    """Balanced stage bounds (by profiled one-token time at the smallest context, head in the last
    stage, exit head + embedding in stage 1) and the profile's hop when the plan leaves them open."""
    n = profile.num_layers
    plan.validate(n)
    changes: dict = {}
    if plan.mode == "ppsd":
        if plan.stage_bounds is None:
            cm = cost_model(profile, plan.exit_head)
            changes["stage_bounds"] = balanced_bounds(plan.exit_layer, n, plan.num_stages,
                                                      cm.layer_costs(), cm.head(1))
        if plan.hop_ms is None:
            changes["hop_ms"] = float(profile.hop_ms())
    elif plan.hop_ms is None:
        changes["hop_ms"] = 0.0
    if plan.mode == "eesd":
        cost_model(profile, plan.exit_head)  # raises UserError for an unknown exit head
    out = replace(plan, **changes) if changes else plan
    return out.validate(n)


@dataclass
class PPSDCosts:
    """Everything the PPSD engines need: per-stage cost arrays over the stream's positions, the hop,
    the device of each stage and the co-run factors."""

    stage: list[np.ndarray]  # [k][T] ms
    hop_ms: float
    placement: tuple[int, ...]
    factors: list[float]  # factors[b]: slowdown with b devices busy

    @property
    def k(self) -> int:
        return len(self.stage)

    @property
    def num_devices(self) -> int:
        return len(set(self.placement))

    def factor(self, index_in_cycle: int, stage: int) -> float:
        """Co-run slowdown of the pass of the i-th token of a cycle at stage m (0-based). Stage 1
        never idles (it drafts ahead), so when that token reaches stage m, stages 1..m are busy
        with it and its successors, and min(i, k-m-1) later stages with its predecessors: the
        pipeline is fully loaded from its k-th token on. Stages sharing a device count once."""
        busy = min(self.num_devices, stage + 1 + index_in_cycle)
        return self.factors[min(busy, len(self.factors) - 1)]


def ppsd_costs(profile, plan: Plan, context: np.ndarray) -> PPSDCosts:
    cm = cost_model(profile, plan.exit_head)
    placement = plan.devices()
    d = len(set(placement))
    return PPSDCosts(stage=cm.stage_steps(context, plan.stage_bounds), hop_ms=float(plan.hop_ms or 0.0),
                     placement=placement, factors=corun_factors(profile, d))
