"""Prices of the pieces of decoding from a profile, vectorised over context length.

The one module that reads a profile's latency tables for the simulator (DistServe's time estimator
plays this part there): every scheme prices its work through `CostModel` (layer ranges, LM head,
embedding, exit head, co-run slowdown), so all engines and the AR baseline price the same work
identically; they differ only in how they schedule it. What a scheme's unit of work is (a draft, a
verification, a stage pass) lives with the scheme, under `sim/schemes/`. docs/model.md has every term of
the timing model, what measures it and what validates it.
"""

from __future__ import annotations

import numpy as np

from ppsd.exit_heads import SHARED
from ppsd.profile import PassOverheads


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

    def __init__(self, profile, exit_head: str = SHARED):
        self.profile = profile
        self.num_layers = profile.num_layers
        self.n_grid = np.asarray(profile.n_values, dtype=float)
        self.c_grid = np.asarray(profile.context_values, dtype=float)
        table = np.asarray(profile.layers.median_ms, dtype=float)  # [N][n][c]
        self._cum = np.concatenate([np.zeros((1, *table.shape[1:])), np.cumsum(table, axis=0)], axis=0)
        self.exit_head_name = exit_head
        self._exit_head_1 = float(profile.exit_head_ms(exit_head, 1))
        self.full_vocab = profile.head_vocab(SHARED)
        self.draft_vocab = profile.head_vocab(exit_head)
        self._sample: dict = {}
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

    def sample(self, vocab: int | None) -> float:
        """Drawing one token at T > 0 from `vocab` logits (softmax + multinomial; the profile's
        `latency.sampling`); 0 when the profile never measured it (`sampled_costs_missing` says so)."""
        v = self._sample.get(vocab)
        if v is None:
            got = self.profile.draws.sample_ms(vocab)
            v = self._sample[vocab] = float(got) if got is not None else 0.0
        return v

    def sample_full(self) -> float:
        """One draw over the model's whole vocabulary (the verifier's or AR's token)."""
        return self.sample(self.full_vocab)

    def sample_draft(self) -> float:
        """One draw over the exit head's vocabulary (a draft)."""
        return self.sample(self.draft_vocab)

    def pass_overhead(self, stages: int) -> float:
        """The fixed cost of one stage pass in a `stages`-stage pipeline (the profile's control
        plane, `latency.control_plane`; 0 without it): host sync, sends and receives, the loop."""
        return self.profile.overheads.pass_overhead_ms(stages)

    def pass_overheads(self, stages: int) -> PassOverheads:
        """Each role's fixed cost of a pass in a `stages`-stage pipeline (`PassOverheads`: stage 1's
        and its part before the send, a middle stage's, the last stage's; stage 1's figure for all
        when the profile does not tell the roles apart)."""
        return self.profile.overheads.pass_overheads_ms(stages)

    def transit(self, stages: int) -> float:
        """A message's transit between stage processes at `stages` stages (0 without a measurement);
        a pipeline's hop is never shorter."""
        return self.profile.overheads.transit_ms(stages)

    def hop_jitter(self, stages: int) -> float:
        """The spread of a message's transit at `stages` stages (ms; 0 without a measurement)."""
        return self.profile.overheads.hop_jitter_ms(stages)

    def layer_costs(self, context: float | None = None) -> list[float]:
        """Per-layer one-token time at one context (for partitioning); kept per context."""
        ctx = float(self.c_grid[0] if context is None else context)
        out = self._layer_costs.get(ctx)
        if out is None:
            c = np.array([ctx], dtype=float)
            out = self._layer_costs[ctx] = [float(self.layers(c, lo, lo + 1)[0]) for lo in range(self.num_layers)]
        return list(out)

    def prefill_layers(self, prompt_len: float, lo: int, hi: int) -> float:
        """Σ layers [lo, hi) over a whole prompt of `prompt_len` tokens, empty cache (ms): the tables
        at n = L and the smallest context, extrapolated linearly in n past the grid, as
        `Profile.prefill_ms` does without a measured prefill and as emulated devices wait."""
        return float(self.layers(self.c_grid[:1], lo, hi, n=float(prompt_len))[0])

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


_MODELS: dict = {}


def per_profile(store: dict, make, profile, exit_head: str, limit: int = 32):
    """`make(profile, exit_head)`, kept in `store` per (profile object, exit head) while that object lives
    (a cleared store past `limit` entries): pricers that cache what they computed are made once a sweep."""
    key = (id(profile), exit_head)
    got = store.get(key)
    if got is None or got.profile is not profile:
        if len(store) > limit:
            store.clear()
        got = store[key] = make(profile, exit_head)
    return got


def cost_model(profile, exit_head: str = SHARED) -> CostModel:
    """One CostModel per (profile object, exit head), so sweeps reuse the summed tables."""
    return per_profile(_MODELS, CostModel, profile, exit_head)


def pass_jitter_cv(profile) -> float:
    """The timing model's one pass jitter (docs/model.md): a stage pass's relative spread from one pass to
    the next in the runtime's own pipeline (the runtime probe's, where a drift or a growing context
    cancels), else the pipeline probe's pass spread, else 0. The restart race's σ and the lock step read it."""
    return float(profile.lockstep_jitter_cv() or profile.pass_jitter_cv())


def corun_factors(profile, devices: int) -> list[float]:
    """factor[b] = slowdown of each stage while b devices compute at once (index 0 unused)."""
    return [1.0] + [float(profile.corun_slowdown(b)) for b in range(1, devices + 1)]


def sampled_costs_missing(profile) -> bool:
    """True when sampled plans on `profile` are priced without the cost of a draw (never measured)."""
    return profile.draws.sample_ms(profile.head_vocab(SHARED)) is None
