"""The simulator's cost lookups and fast replay as they were before the sweep was sped up
(sim/costs.py and sim/fast.py at a309c93, unchanged but for imports): the slow, obviously
correct reference that tests/test_sim_speed.py compares the fast path against."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sim.costs import PPSDCosts, corun_factors
from sim.engine import RunStats, _seg_ends
from sim.restart import TIE_MS, head_wait, jitter_sigma
from sim.partition import balanced_bounds
from sim.plan import Plan
from sim.streams import Stream



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


def ppsd_costs(profile, plan: Plan, context: np.ndarray) -> PPSDCosts:
    cm = cost_model(profile, plan.exit_head)
    placement = plan.devices()
    d = len(set(placement))
    return PPSDCosts(stage=cm.stage_steps(context, plan.stage_bounds), hop_ms=float(plan.hop_ms or 0.0),
                     placement=placement, factors=corun_factors(profile, d),
                     exit_ms=np.full(np.shape(context), cm.exit_head(), dtype=float),
                     jitter_cv=profile.pass_jitter_cv())


def fast_ar(ar_ms: np.ndarray) -> RunStats:
    total = float(np.sum(ar_ms))
    return RunStats(total, len(ar_ms), stage_busy_ms=[total], device_busy_ms={0: total})


def eesd_rounds(stream: Stream, gamma: int):
    """(start position, drafts γ', accepted a) of every EESD round, vectorised but for the chase."""
    t = stream.tokens
    seg_end = _seg_ends(stream)
    pos = np.arange(t)
    zeros = np.flatnonzero(~stream.match)
    nz = np.append(zeros, t)[np.searchsorted(zeros, pos)]  # first mismatch at or after p
    run = np.minimum(nz, seg_end) - pos  # leading matches from p within the generation
    g = np.minimum(gamma, seg_end - pos - 1)
    a = np.minimum(run, g)
    nxt = (pos + a + 1).tolist()
    starts = []
    p = 0
    while p < t:
        starts.append(p)
        p = nxt[p]
    s = np.asarray(starts, dtype=np.int64)
    return s, g[s], a[s]


def fast_eesd(stream: Stream, gamma: int, cm: CostModel, exit_layer: int) -> RunStats:
    s, g, a = eesd_rounds(stream, gamma)
    c = stream.context[s]
    total = float(np.sum(cm.verify_step(c, c + g, exit_layer, g)))
    for q in range(int(g.max()) if len(g) else 0):
        sel = g > q
        total += float(np.sum(cm.draft_step(c[sel] + q, exit_layer)))
    return RunStats(total, stream.tokens, a.tolist(), (a < g).tolist(), [total], {0: total})


def _seg_cumsum(w: np.ndarray, first: np.ndarray, lens: np.ndarray) -> np.ndarray:
    cs = np.cumsum(w)
    base = (cs - w)[first]
    return cs - np.repeat(base, lens)


def _seg_cummax(v: np.ndarray, cyc: np.ndarray) -> np.ndarray:
    # shift each cycle above the previous one so a plain running maximum never crosses cycles
    big = float(v.max() - v.min()) + 1.0
    off = cyc * big
    return np.maximum.accumulate(v + off) - off


def fast_ppsd(stream: Stream, costs: PPSDCosts) -> RunStats:
    if costs.num_devices < costs.k:
        raise ValueError("the fast replay needs one device per stage; use the event engine")
    t, k, h = stream.tokens, costs.k, costs.hop_ms
    match, seg = stream.match, stream.seg_start
    restart = seg.copy()
    restart[1:] |= ~match[:-1]  # a mismatch at j restarts the pipeline at j+1
    starts = np.flatnonzero(restart)
    ends = np.append(starts[1:], t) - 1
    a = ends - starts
    nxt = np.minimum(ends + 1, t - 1)
    rejected = (~match[ends]) & (ends + 1 < t) & ~seg[nxt]
    ncyc = len(starts)
    # factor table per stage over the index in cycle (constant from i = k on)
    ftab = np.array([[costs.factor(i, m) for i in range(k + 1)] for m in range(k)])
    stage_cost = [np.asarray(c, dtype=float) for c in costs.stage]
    exit_cost = costs.exit_array()

    extra = k + 2
    while True:
        lens = a + 1 + extra
        cyc = np.repeat(np.arange(ncyc), lens)
        first = np.concatenate([[0], np.cumsum(lens)[:-1]])
        i = np.arange(len(cyc)) - np.repeat(first, lens)
        j = np.minimum(np.repeat(starts, lens) + i, t - 1)
        ic = np.minimum(i, k)
        w = [stage_cost[m][j] * ftab[m][ic] for m in range(k)]
        dep = [_seg_cumsum(w[0], first, lens)]  # stage 1's pass ends (after the exit head)
        sent = dep[0] - exit_cost[j] * ftab[0][ic]  # the hidden state leaves before the exit head
        for m in range(1, k):
            wcum = _seg_cumsum(w[m], first, lens)
            arrive = (sent if m == 1 else dep[m - 1]) + h
            v = arrive - (wcum - w[m])
            if m == k - 1:  # the last stage finishes a token no earlier than its draft arrives
                v = np.maximum(v, dep[0] + h - wcum)
            dep.append(wcum + _seg_cummax(v, cyc))
        last_useful = first + a
        end_rel = dep[-1][last_useful]  # the cycle's final commit, from its restart
        flush_rel = end_rel + h
        flush_rel[-1] = end_rel[-1]  # the run ends at the last commit
        # enough stale tokens replayed? the last one must leave stage 1 only after the flush
        if np.all(dep[0][first + lens - 1] >= flush_rel) or extra > 4096:
            break
        extra *= 4
    # the flush reaches stage 1 at flush_rel; if stage 1 is then inside an exit head (which cannot be
    # cut), the corrected token enters when that head ends, else at the flush
    x = exit_cost[j] * ftab[0][ic]
    fr = np.repeat(flush_rel, lens)
    if costs.jitter_cv > 0:  # the restart rule with timing jitter (sim/restart.py; added after the speed-up)
        sigma = np.repeat(jitter_sigma(costs.jitter_cv, w[0][first], flush_rel), lens)
        wait = np.where(dep[0] - w[0] < fr - TIE_MS, head_wait(dep[0] - x, dep[0], fr, sigma), 0.0)
        dur = flush_rel + np.add.reduceat(wait, first)
    else:
        in_head = (dep[0] - x < fr - TIE_MS) & (fr < dep[0])
        dur = np.maximum(flush_rel, np.maximum.reduceat(np.where(in_head, dep[0], -np.inf), first))
    dur[-1] = end_rel[-1]
    total = float(np.sum(dur))
    useful = i <= np.repeat(a, lens)
    busy = [total]  # stage 1 drafts without pause
    for m in range(1, k):
        f = np.repeat(end_rel if m == k - 1 else flush_rel, lens)
        start = dep[m] - w[m]  # (the last stage never starts stale work: it drops it at the commit)
        stale = np.clip(np.minimum(dep[m], f) - start, 0.0, None) if m < k - 1 else 0.0
        busy.append(float(np.sum(np.where(useful, w[m], stale))))
    dev: dict[int, float] = {}
    for m, d in enumerate(costs.placement):
        dev[d] = dev.get(d, 0.0) + busy[m]
    return RunStats(total, t, a.tolist(), rejected.tolist(), busy, dev)
