"""90% intervals on predicted speedups (torch-free, seeded).

A prediction replays the profile's acceptance traces; what a user then sees on their own prompts
varies for two reasons the profile itself measures:

- **acceptance differs from prompt to prompt.** The profile's prompts are a sample; a run decodes
  n other prompts. Each bootstrap draw picks n of the predicting profile's prompts with replacement
  and lays their traces over the prompts the question is about (their prompt and generation
  lengths): the spread of what n new prompts show, not the spread of the profile's mean (which
  shrinks with the profile's size, not with n). Fewer prompts, wider interval. Where the targets'
  categories are known, each draws from the predicting prompts of its own category (`strata`).
- **latency drifts.** A run's relative costs sit off the tables by about one step's spread: the
  profile's whole-step p10/p90 (robust cv = (p90 − p10) / (2 · 1.2816 · median)), for PPSD at least
  the pipeline probe's pass spread (`pass_cv`). It is systematic within a run (a machine running
  hot, another process), so it does not average out over tokens: each draw multiplies its speedup by
  exp(cv · z), z ~ N(0, 1).

Two engines price the draws:
- `replay_interval`: each draw is a stream replayed exactly (the scheme's fast replay): simulate,
  validate (a handful of plans, ~0.1–0.5 s a plan at 200 draws).
- `attach_sweep_intervals`: for the planner's hundreds of plans, each draw's pooled α (Σ matches /
  Σ positions of its n prompts) goes through the scheme's closed form on a small α grid, and the
  replayed point is scaled by closed_form(α_draw) / closed_form(α_pool) (speedups rise with α, so
  the ranks carry over); milliseconds a plan.

The interval is the (5%, 95%) quantiles of the draws. AR's speedup is 1 by definition: [1, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ppsd.exit_heads import SHARED
from ppsd.errors import UserError
from sim.modes import Mode
from sim.plan import Plan, Result, SimulatedDetails
from sim.streams import Stream

LEVEL = 0.9
DEFAULT_PROMPTS_N = 8  # the prompts `ppsd validate` measures by default (--limit 8)
REPLAY_DRAWS = 200
SWEEP_DRAWS = 1000
_Z90 = 1.2815515655446004  # the normal's 90th percentile: p10..p90 spans 2 · 1.2816 σ
MIN_STRATUM = 3  # predicting prompts a category needs before its targets are predicted from it alone
GRID = 9  # α points the closed form is evaluated at per plan (interpolated in between)


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

    def covers(self, x: float | None) -> bool:
        return x is not None and self.lo <= x <= self.hi

    def scaled(self, point: float | None, other: float | None, extra_cv: float = 0.0) -> tuple[float | None, float | None]:
        """The same relative interval around another point (`other`, e.g. the same-budget speedup),
        each side widened in log space by a further independent spread `extra_cv` (`budget_cv`)."""
        return widened(self.lo / point if point else None, self.hi / point if point else None, other, extra_cv)

    def to_dict(self) -> dict:
        return {"lo": self.lo, "hi": self.hi, "level": self.level, "prompts_n": self.prompts_n, "draws": self.draws,
                "method": self.method, "latency_cv": round(self.latency_cv, 5)}


def widened(lo_rel: float | None, hi_rel: float | None, point: float | None,
            extra_cv: float = 0.0, level: float = LEVEL) -> tuple[float | None, float | None]:
    """point × [lo_rel, hi_rel] with each side's log half-width combined in quadrature with a further
    independent relative spread `extra_cv` at `level`."""
    if point is None or lo_rel is None or hi_rel is None or lo_rel <= 0 or hi_rel <= 0:
        return None, None
    z = float(_ZQ(level)) * max(float(extra_cv), 0.0)
    down = np.hypot(max(-np.log(lo_rel), 0.0), z)
    up = np.hypot(max(np.log(hi_rel), 0.0), z)
    return float(point * np.exp(-down)), float(point * np.exp(up))


def _ZQ(level: float) -> float:
    """The normal quantile a two-sided `level` interval reaches (1.645 at 90%)."""
    from statistics import NormalDist
    return NormalDist().inv_cdf(0.5 + level / 2)


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


# --- latency spread --------------------------------------------------------------------------------
def step_cv(profile) -> float:
    """Robust relative spread of one decode step: the whole-step p10/p90 when profiled, else the
    layers' median p10/p90 spread at one new token (0 for tables without spread)."""
    ws = profile.latency.get("whole_step") or {}
    med, p10, p90 = ws.get("median_ms"), ws.get("p10_ms"), ws.get("p90_ms")
    if med and p10 is not None and p90 is not None:
        return max(0.0, float(p90 - p10) / (2 * _Z90 * float(med)))
    lay = profile.layers
    n1 = int(np.argmin(np.abs(profile.n_values - 1)))
    med = lay.median_ms[:, n1, 0]
    ok = med > 0
    if not ok.any():
        return 0.0
    return float(np.median((lay.p90_ms[ok, n1, 0] - lay.p10_ms[ok, n1, 0]) / (2 * _Z90 * med[ok])))


def latency_cv(profile, plan: Plan) -> float:
    """The relative latency spread applied to a plan's speedup: 0 for AR (its own baseline), the
    step's spread for EESD, at least the pipeline probe's pass spread for PPSD; and, where the
    profile scaled its pieces to a whole step timed beside them, the doubt that scaling leaves
    (`Profile.calibration_doubt`: a profile whose pieces disagree with the whole step says so here,
    on a machine the model was never shaped on)."""
    if plan.mode is Mode.AR:
        return 0.0
    cv = step_cv(profile)
    if plan.mode is Mode.PPSD:
        cv = max(cv, profile.pass_jitter_cv())
    return float(np.hypot(cv, profile.calibration_doubt()))


def budget_cv(profile, units: int) -> float:
    """The extra relative spread of a same-budget speedup at `units` threads: how unsteady AR's
    thread speedup was over the profile's rounds (`Profile.thread_speedup_cv`; 0 when unknown)."""
    return profile.thread_speedup_cv(units) if units and units > 1 else 0.0


# --- the predicting profile's prompts -------------------------------------------------------------
@dataclass
class PromptTraces:
    """One exit layer's per-prompt acceptance on the predicting profile: `prob[i]` per position is
    1/0 (the recorded match, greedy) or β (sampled: temperature > 0)."""

    exit_layer: int
    prompt_ids: list[str]
    prob: list[np.ndarray]
    start_context: list[float]
    sampled: bool = False
    categories: list[str] | None = None  # each prompt's category (None: not known)

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def stratum(self, category: str | None) -> list[int]:
        """The prompts of `category` when it has at least MIN_STRATUM of them here, else [] (two
        prompts' mean is noisier than the whole pool's bias: a category's prompts differ by up to
        0.4 in acceptance among themselves)."""
        if category is None or not self.categories:
            return []
        mine = [i for i, c in enumerate(self.categories) if c == category]
        return mine if len(mine) >= MIN_STRATUM else []

    def by_category(self, category: str | None) -> list[int]:
        """The prompts that predict a target of `category`: its stratum, else every prompt."""
        return self.stratum(category) or list(range(len(self.prompt_ids)))

    @property
    def alpha(self) -> float:
        total = sum(len(p) for p in self.prob)
        return float(sum(p.sum() for p in self.prob) / total) if total else 0.0


def prompt_traces(profile, exit_layer: int, *, head: str = SHARED, prompt_ids: Sequence[str] | None = None,
                  category: str | None = None, temperature: float = 0.0) -> PromptTraces:
    """The predicting profile's traces at one exit (only `prompt_ids` / `category` when given)."""
    table = _trace_table(profile, head, temperature)
    tr = table.get(int(exit_layer))
    if tr is None:
        raise UserError(f"profile {profile.path} has no acceptance trace for exit layer {exit_layer}",
                        f"use an exit layer in {sorted(table)}")
    keep = set(map(str, prompt_ids)) if prompt_ids is not None else None
    sampled = bool(temperature and temperature > 0)
    ids, prob, ctx, cats = [], [], [], []
    for i, pid in enumerate(tr.prompt_ids):
        if keep is not None and pid not in keep:
            continue
        if category is not None and tr.categories[i] != category:
            continue
        if not len(tr.match[i]):
            continue
        ids.append(pid)
        prob.append(tr.beta[i].astype(float) if sampled else tr.match[i].astype(float))
        ctx.append(float(tr.start_context[i]))
        cats.append(str(tr.categories[i]))
    if not ids:
        raise UserError(f"no prompt of profile {profile.path} has acceptance positions at exit {exit_layer}"
                        + (f" among {len(keep)} prediction prompts" if keep is not None else ""),
                        "predict from prompts the profile traced")
    return PromptTraces(int(exit_layer), ids, prob, ctx, sampled, cats)


def _trace_table(profile, head: str, temperature: float) -> dict:
    """Per exit, each prompt's trace as `sim.streams.trace_stream` reads it at this temperature (β
    along sampled trajectories where the profile holds them)."""
    from sim import streams

    if temperature and temperature > 0 and hasattr(profile, "match_temperature"):
        t = profile.match_temperature(temperature)
        if getattr(profile, "beta_trajectory", None) == "sampled" and hasattr(streams, "_sampled_traces"):
            return streams._sampled_traces(profile, head, t)
    return streams._traces(profile, head)


@dataclass(frozen=True)
class Targets:
    """The prompts a question is about: each one's prompt length (its first token's context) and
    the tokens it generates."""

    start_context: tuple[float, ...]
    lengths: tuple[int, ...]
    categories: tuple[str | None, ...] | None = None  # each target's category, when known

    @classmethod
    def from_generations(cls, gens: Sequence[dict]) -> Targets:
        def plen(g):
            pt = g.get("prompt_tokens")
            return float(len(pt) if isinstance(pt, (list, tuple)) else (pt or g.get("prompt_len") or 0))

        cats = tuple(None if g.get("category") is None else str(g["category"]) for g in gens)
        return cls(tuple(plen(g) for g in gens), tuple(max(1, len(g.get("token_ids") or [])) for g in gens),
                   cats if any(c is not None for c in cats) else None)

    def category(self, i: int) -> str | None:
        return self.categories[i] if self.categories else None

    def __len__(self) -> int:
        return len(self.lengths)


def overlay_stream(traces: PromptTraces, picks: Sequence[int], targets: Targets, rng=None) -> Stream:
    """Target i decoded with prompt picks[i]'s acceptance: its trace tiled or cut to the target's
    length, at the target's contexts (one generation per target)."""
    segs, ctx = [], []
    for i, j in enumerate(picks):
        L = int(targets.lengths[i])
        segs.append(np.resize(traces.prob[int(j)], L))
        ctx.append(targets.start_context[i] + np.arange(L, dtype=float))
    return _stream(segs, ctx, traces.sampled, rng, "trace-overlay")


def strata(traces: PromptTraces, targets: Targets) -> list[tuple[list[int], list[int]]]:
    """(predicting prompts, targets) per stratum. Targets of a category the predicting profile traced
    with at least MIN_STRATUM prompts are predicted from that category's prompts alone: acceptance
    differs several-fold between categories (at exit 24 the shared head matches 0.11 on translation
    and 0.38 on coding), so a measured set whose mix differs from the profile's would be mispredicted
    by the mix alone. The others, and every target when categories are not known, are predicted
    from every predicting prompt."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in range(len(targets)):
        groups.setdefault(tuple(traces.by_category(targets.category(i))), []).append(i)
    return [(list(src), tgt) for src, tgt in groups.items()]


def pooled_stream(traces: PromptTraces, targets: Targets, seed: int = 0) -> Stream:
    """The point prediction for prompts the profile never saw. Per stratum (`strata`), its
    predicting prompts' traces one after another, cut into generations of its targets' lengths and
    contexts, the targets cycled until the pool is spent, so every predicting position counts once.
    (Cutting only sum(targets) positions would read the first few predicting prompts alone: 8
    targets of 64 tokens read 8 of 26 prompts, from the categories listed first.) Strata get
    R · (their targets' tokens) positions with one R for all, so each weighs as its share of the
    targets (a pool shorter than that wraps round). Position order within a trace (runs of matches)
    is kept; no measured trace is read."""
    groups = strata(traces, targets)
    pools = [np.concatenate([traces.prob[j] for j in src]) for src, _ in groups]
    want = [int(sum(targets.lengths[i] for i in tgt)) for _, tgt in groups]
    rounds = max(max(len(p) / w, 1.0) for p, w in zip(pools, want))
    segs, ctx = [], []
    for pool, w, (_, tgt) in zip(pools, want, groups):
        total = max(int(round(rounds * w)), w)
        flat = np.resize(pool, total)
        at, i = 0, 0
        while at < total:
            k = tgt[i % len(tgt)]
            n = min(int(targets.lengths[k]), total - at)  # the last generation may stop short: the pool is spent
            segs.append(flat[at:at + n])
            ctx.append(targets.start_context[k] + np.arange(n, dtype=float))
            at, i = at + n, i + 1
    rng = np.random.default_rng([int(seed), traces.exit_layer, 11])
    return _stream(segs, ctx, traces.sampled, rng, "trace-pooled")


def lengths_stream(targets: Targets) -> Stream:
    """The targets' contexts with no acceptance at all (AR reads only the contexts)."""
    segs = [np.zeros(int(L)) for L in targets.lengths]
    ctx = [targets.start_context[i] + np.arange(targets.lengths[i], dtype=float) for i in range(len(targets))]
    return _stream(segs, ctx, False, None, "none")


def _stream(segs, ctx, sampled: bool, rng, source: str) -> Stream:
    prob = np.concatenate(segs)
    if sampled:
        rng = rng if rng is not None else np.random.default_rng(0)
        match = rng.random(len(prob)) < prob
    else:
        match = prob >= 0.5
    seg = np.zeros(len(prob), dtype=bool)
    seg[np.cumsum([0, *[len(s) for s in segs[:-1]]])] = True
    return Stream(match.astype(bool), np.concatenate(ctx), seg, source if not sampled else source + "-beta")


# --- replayed draws (one plan) -----------------------------------------------------------------------
def replay_interval(profile, plan: Plan, traces: PromptTraces | None, *, targets: Targets | None = None,
                    prompts_n: int | None = None, draws: int = REPLAY_DRAWS, seed: int = 0,
                    level: float = LEVEL, measurement_cv: float = 0.0) -> Interval:
    """The interval of a resolved plan's speedup_vs_ar for `targets` (each draw lays n = len(targets)
    resampled prompts' traces over them), or without targets for `prompts_n` prompts drawn from the
    profile's own (their traces at their own lengths). `traces` None: latency spread only.
    `measurement_cv`: the noise of one measured speedup (`measurement_cv`), for an interval meant to
    hold a measurement rather than the speed itself; it adds to the latency spread in quadrature."""
    from sim.run import run_plan

    cv = float(np.hypot(latency_cv(profile, plan), max(float(measurement_cv), 0.0)))
    n = len(targets) if targets is not None else check_prompts_n(prompts_n)
    if plan.mode is Mode.AR:
        return Interval(1.0, 1.0, level, n, 0, "exact", 0.0)
    rng = np.random.default_rng([int(seed), int(plan.exit_layer or 0), 3])
    z = rng.standard_normal(draws)
    if traces is None:
        return _latency_only(profile, plan, n, draws, level, cv, z)
    out = np.empty(draws)
    pick_from = ([np.asarray(traces.by_category(targets.category(i))) for i in range(n)] if targets is not None
                 else [np.arange(len(traces))] * n)  # each target draws from its own category (see `strata`)
    for b in range(draws):
        picks = [int(src[rng.integers(0, len(src))]) for src in pick_from]
        tg = targets if targets is not None else Targets(tuple(traces.start_context[j] for j in picks),
                                                          tuple(len(traces.prob[j]) for j in picks))
        stats, ar_ms = run_plan(profile, plan, overlay_stream(traces, picks, tg, rng), "fast", False)
        out[b] = ar_ms / stats.time_ms if stats.time_ms > 0 else np.nan
    lo, hi = _quantiles(out * np.exp(cv * z), level)
    return Interval(lo, hi, level, n, draws, "replay", cv)


def measurement_cv(ar_runs: Sequence[float]) -> float:
    """The noise of one measured speedup, from the AR runs a validation measured around its plans
    (each plan against the mean of the AR runs just before and after it). With independent noise σ
    per measurement, consecutive AR runs differ by log-sd √2·σ and a plan's speedup carries
    σ·√(1 + 1/2): so √(3/4) times the log-sd of consecutive AR ratios (robust: p10..p90). 0 with
    fewer than three AR runs."""
    a = np.asarray([x for x in ar_runs if x and x > 0], dtype=float)
    if len(a) < 3:
        return 0.0
    d = np.diff(np.log(a))
    sd = (np.percentile(d, 90) - np.percentile(d, 10)) / (2 * _Z90)
    return float(np.sqrt(0.75) * sd)


def _latency_only(profile, plan, n, draws, level, cv, z, point: float = 1.0) -> Interval:
    lo, hi = _quantiles(point * np.exp(cv * z), level)
    return Interval(lo, hi, level, n, draws, "latency", cv)


def apply(result: Result, interval: Interval) -> Result:
    """Write an interval into a simulated Result's details (relative to its speedup_vs_ar when the
    interval came from draws around another point: see `attach_sweep_intervals`)."""
    d = result.details
    if not isinstance(d, SimulatedDetails):
        return result
    d.predicted_speedup_lo, d.predicted_speedup_hi = interval.lo, interval.hi
    d.speedup_vs_ar_tp_lo, d.speedup_vs_ar_tp_hi = interval.scaled(result.speedup_vs_ar, result.speedup_vs_ar_tp)
    d.interval_level, d.interval_prompts, d.interval_method = interval.level, interval.prompts_n, interval.method
    return result


def simulate_interval(profile, result: Result, *, acceptance: str = "trace", category: str | None = None,
                      prompt_ids: Sequence[str] | None = None, temperature: float = 0.0,
                      prompts_n: int | None = None, draws: int = REPLAY_DRAWS, seed: int = 0) -> Result:
    """`ppsd simulate`'s interval on its Result: replayed draws of n prompts from the profile's traces
    (a given α: latency spread only, around the point)."""
    plan = result.plan
    n = check_prompts_n(prompts_n)
    if plan.mode is Mode.AR:
        return apply(result, Interval(1.0, 1.0, LEVEL, n, 0, "exact"))
    if acceptance != "trace":
        cv = latency_cv(profile, plan)
        z = np.random.default_rng([int(seed), int(plan.exit_layer or 0), 3]).standard_normal(draws)
        return apply(result, _latency_only(profile, plan, n, draws, LEVEL, cv, z, result.speedup_vs_ar or 1.0))
    traces = prompt_traces(profile, plan.exit_layer, head=plan.exit_head, prompt_ids=prompt_ids,
                           category=category, temperature=temperature)
    iv = replay_interval(profile, plan, traces, prompts_n=n, draws=draws, seed=seed)
    return apply(result, iv)


# --- the planner's sweep: closed-form draws ---------------------------------------------------------
def _alpha_draws(traces: PromptTraces, n: int, draws: int, rng, scale: float = 1.0) -> np.ndarray:
    acc = np.array([p.sum() for p in traces.prob])
    pos = np.array([len(p) for p in traces.prob], dtype=float)
    picks = rng.integers(0, len(traces), size=(draws, n))
    return np.clip(acc[picks].sum(axis=1) / pos[picks].sum(axis=1) * scale, 0.0, 1.0)


def attach_sweep_intervals(profile, results: Sequence[Result], *, prompts_n: int | None = None,
                           draws: int = SWEEP_DRAWS, seed: int = 0, category: str | None = None,
                           temperature: float = 0.0, alpha_scale: float = 1.0,
                           given_alpha: bool = False) -> None:
    """Give every result of a sweep its interval in place (see the module doc: the closed form
    scales the replayed point draw by draw). `given_alpha`: acceptance was given, not recorded
    (latency spread only)."""
    from sim.schemes import scheme

    n = check_prompts_n(prompts_n)
    cache: dict = {}
    for r in results:
        plan = r.plan
        if plan.mode is Mode.AR:
            apply(r, Interval(1.0, 1.0, LEVEL, n, 0, "exact"))
            continue
        point = r.speedup_vs_ar or 1.0
        cv = latency_cv(profile, plan)
        key = (plan.exit_layer, plan.exit_head)
        if key not in cache:
            rng = np.random.default_rng([int(seed), int(plan.exit_layer), 5])
            z = rng.standard_normal(draws)
            if given_alpha:
                cache[key] = (None, None, None, z)
            else:
                tr = prompt_traces(profile, plan.exit_layer, head=plan.exit_head, category=category,
                                   temperature=temperature)
                a = _alpha_draws(tr, n, draws, rng, alpha_scale)
                ctx = float(np.mean([c + len(p) / 2 for c, p in zip(tr.start_context, tr.prob)]))
                cache[key] = (a, min(1.0, tr.alpha * alpha_scale), ctx, z)
        a, a_pool, ctx, z = cache[key]
        if a is None:
            apply(r, _latency_only(profile, plan, n, draws, LEVEL, cv, z, point))
            continue
        sch, ar = scheme(plan.mode), scheme(Mode.AR)
        try:
            grid = np.unique(np.clip(np.concatenate([np.linspace(a.min(), a.max(), GRID), [a_pool]]), 0.0, 1.0))
            t_ar = ar.closed_form(profile, plan, 0.0, ctx)
            s = t_ar / np.array(sch.closed_forms(profile, plan, grid, ctx))
        except (ValueError, ZeroDivisionError):  # a shared placement has no closed form: latency only
            apply(r, _latency_only(profile, plan, n, draws, LEVEL, cv, z, point))
            continue
        ratio = np.interp(a, grid, s) / float(np.interp(a_pool, grid, s))
        lo, hi = _quantiles(point * ratio * np.exp(cv * z), LEVEL)
        apply(r, Interval(lo, hi, LEVEL, n, draws, "closed form", cv))


def coverage(rows: Sequence[dict], lo_key: str = "predicted_speedup_lo", hi_key: str = "predicted_speedup_hi",
             value_key: str = "measured_speedup") -> tuple[float | None, int]:
    """(share of rows whose measured value lies in their interval, rows counted): speculative rows
    that carry an interval and a measurement."""
    rows = [r for r in rows if r.get("mode") not in (Mode.AR, "ar") and r.get(lo_key) is not None
            and r.get(hi_key) is not None and r.get(value_key) is not None]
    if not rows:
        return None, 0
    inside = sum(1 for r in rows if r[lo_key] <= r[value_key] <= r[hi_key])
    return inside / len(rows), len(rows)
