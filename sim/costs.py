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


class _Interp:
    """Where one context array falls on the context grid: the left grid index and the two
    differences `_lin` divides. Computed once per distinct context array and reused for every
    layer range, so a sweep's thousands of cost lookups are a gather and three array operations
    each, with the very same arithmetic as `_lin` (hence bit-identical results)."""

    __slots__ = ("uid", "shape", "i", "num", "den", "single")
    _count = 0

    def __init__(self, x: np.ndarray, grid: np.ndarray):
        _Interp._count += 1
        self.uid = _Interp._count  # never reused, so cost arrays can be keyed by it, not by the bytes
        self.shape = x.shape
        self.single = len(grid) == 1
        if self.single:
            return
        i = np.clip(np.searchsorted(grid, x) - 1, 0, len(grid) - 2)
        self.i = i
        self.num = x - grid[i]
        self.den = grid[i + 1] - grid[i]

    def __call__(self, per_c: np.ndarray, step: np.ndarray) -> np.ndarray:
        """`_lin(x, grid, per_c)`, given `step = per_c[1:] - per_c[:-1]`."""
        if self.single:
            return np.maximum(np.broadcast_to(per_c[..., 0], self.shape).astype(float), 0.0)
        return np.maximum(per_c[self.i] + step[self.i] * self.num / self.den, 0.0)


# Bounded caches (a sweep reuses a handful of context arrays, one stream per exit layer, and the
# layer ranges priced on them); past these sizes they are dropped and rebuilt, a few ms. Memory
# stays in the tens of MB: ~50 KB per context array, 8 bytes a token per cost array.
_MAX_INTERPS = 256
_MAX_RANGES = 1024


class CostModel:
    """Times in ms of the pieces of decoding, from a profile's median tables.

    Layer ranges are summed on the profiled grid first and interpolated after: bilinear
    interpolation commutes with the sum, so this equals summing `Profile.layer_ms` per layer
    (except where an extrapolation would go negative, which only the per-range sum clamps).

    Speed (the planner sweeps ~400 plans per control change): each (layer range, n) is
    interpolated over n once into a per-context table; each distinct context array gets its grid
    position once (`_Interp`); and a range's cost over one context array is kept, read-only, so
    the AR baseline and the stages shared by many plans of one stream are computed once."""

    def __init__(self, profile, exit_head: str = "shared"):
        self.profile = profile
        self.num_layers = profile.num_layers
        self.n_grid = np.asarray(profile.n_values, dtype=float)
        self.c_grid = np.asarray(profile.context_values, dtype=float)
        table = np.asarray(profile.layers.median_ms, dtype=float)  # [N][n][c]
        self._cum = np.concatenate([np.zeros((1, *table.shape[1:])), np.cumsum(table, axis=0)], axis=0)
        self.exit_head_name = exit_head
        self._exit_head_1 = float(profile.exit_head_ms(exit_head, 1))
        self._head: dict[float, float] = {}
        self._embed: dict[float, float] = {}
        self._per_c: dict = {}  # (lo, hi, n) -> (per-context table, its steps)
        self._interps: dict[bytes, _Interp] = {}
        self._ranges: dict = {}  # (lo, hi, n, context's _Interp uid) -> read-only cost array
        self._layer_costs: dict = {}
        self.bounds: dict = {}  # (E, k) -> balanced stage bounds (see resolve_plan)

    # --- scalars over n -------------------------------------------------------------------
    def head(self, n: float = 1) -> float:
        v = self._head.get(n)
        if v is None:
            v = self._head[n] = float(self.profile.head_ms(n))
        return v

    def embed(self, n: float = 1) -> float:
        v = self._embed.get(n)
        if v is None:
            v = self._embed[n] = float(self.profile.embed_ms(n))
        return v

    def exit_head(self) -> float:
        return self._exit_head_1

    def layer_costs(self, context: float | None = None) -> list[float]:
        """Per-layer one-token time at one context (for partitioning); kept per context."""
        ctx = float(self.c_grid[0] if context is None else context)
        out = self._layer_costs.get(ctx)
        if out is None:
            c = np.array([ctx], dtype=float)
            out = self._layer_costs[ctx] = [float(self.layers(c, lo, lo + 1)[0]) for lo in range(self.num_layers)]
        return list(out)

    # --- layer ranges over context ----------------------------------------------------------
    def _table(self, lo: int, hi: int, n: float):
        key = (lo, hi, float(n))
        hit = self._per_c.get(key)
        if hit is None:
            table = self._cum[hi] - self._cum[lo]  # [n][c]
            if len(self.n_grid) > 1:  # all context columns at once, elementwise as `_lin` per column
                per_c = np.asarray(_lin(n, self.n_grid, table.T), dtype=float)  # [c]
            else:
                per_c = np.array([_lin(n, self.n_grid, table[:, j]) for j in range(len(self.c_grid))], dtype=float)
            hit = self._per_c[key] = (per_c, per_c[1:] - per_c[:-1])
        return hit

    def _interp(self, context: np.ndarray, ckey: bytes) -> _Interp:
        it = self._interps.get(ckey)
        if it is None:
            if len(self._interps) >= _MAX_INTERPS:
                self._interps.clear()
            it = self._interps[ckey] = _Interp(context, self.c_grid)
        return it

    def layers(self, context: np.ndarray, lo: int, hi: int, n: float = 1) -> np.ndarray:
        """Σ layers [lo, hi) for n new tokens at each context in `context` (ms, read-only array)."""
        context = np.asarray(context, dtype=float)
        if hi <= lo:
            return np.zeros(context.shape)
        it = self._interp(context, context.tobytes() + repr(context.shape).encode())
        rkey = (lo, hi, float(n), it.uid)
        out = self._ranges.get(rkey)
        if out is None:
            per_c, step = self._table(lo, hi, n)
            out = it(per_c, step)
            out.flags.writeable = False  # shared between callers
            if len(self._ranges) >= _MAX_RANGES:
                self._ranges.clear()
            self._ranges[rkey] = out
        return out

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
        stage adds the final norm + LM head (it verifies). Stage 1's time is its whole occupancy per
        token; its hidden state leaves `exit_head()` earlier (see `PPSDCosts.exit_ms`)."""
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
            key = (plan.exit_layer, plan.num_stages)
            if key not in cm.bounds:  # a sweep resolves each (E, k) for every setting: cut once
                cm.bounds[key] = balanced_bounds(plan.exit_layer, n, plan.num_stages, cm.layer_costs(), cm.head(1))
            changes["stage_bounds"] = cm.bounds[key]
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
    the device of each stage and the co-run factors.

    `exit_ms` is the exit-head part of `stage[0]` per position (None: 0). Stage 1's pass of a token
    is embed + layers [0, E) (the hidden state leaves for stage 2 then), followed by the exit head
    (the draft for the next token, sent to the last stage on its own channel); both parts get the
    pass's co-run factor."""

    stage: list[np.ndarray]  # [k][T] ms
    hop_ms: float
    placement: tuple[int, ...]
    factors: list[float]  # factors[b]: slowdown with b devices busy
    exit_ms: np.ndarray | None = None  # [T] ms, the exit head's share of stage[0]
    jitter_cv: float = 0.0  # relative spread of a pass: softens the restart race (sim/restart.py)

    def exit_array(self) -> np.ndarray:
        n = len(self.stage[0])
        if self.exit_ms is None:
            return np.zeros(n)
        return np.broadcast_to(np.asarray(self.exit_ms, dtype=float), (n,))

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
                     placement=placement, factors=corun_factors(profile, d),
                     exit_ms=np.full(np.shape(context), cm.exit_head(), dtype=float),
                     jitter_cv=float(profile.pass_jitter_cv()))
