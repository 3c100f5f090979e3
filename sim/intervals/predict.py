"""The two engines that price an interval's draws: exact replays (`replay_interval`, `simulate_interval`)
and, for a whole sweep, the closed forms on an α grid (`attach_sweep_intervals`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.intervals.bands import LEVEL, REPLAY_DRAWS, SWEEP_DRAWS, Interval, _quantiles, apply, check_prompts_n
from sim.intervals.shift import Shift, shift_alpha
from sim.intervals.spread import latency_cv
from sim.intervals.traces import PromptTraces, Targets, overlay_stream, prompt_traces
from sim.plan import Plan, Result


GRID = 9  # α points the closed form is evaluated at per plan (interpolated in between)


def replay_interval(profile, plan: Plan, traces: PromptTraces | None, *, targets: Targets | None = None,
                    prompts_n: int | None = None, draws: int = REPLAY_DRAWS, seed: int = 0,
                    level: float = LEVEL, measurement_cv: float = 0.0) -> Interval:
    """The interval of a resolved plan's speedup_vs_ar for `targets` (each draw lays n = len(targets)
    resampled prompts' traces over them), or without targets for `prompts_n` prompts drawn from the
    profile's own (their traces at their own lengths). `traces` None: latency spread only.
    `measurement_cv`: the noise of one measured speedup (`measurement_cv`), for an interval meant to
    hold a measurement rather than the speed itself; it adds to the latency spread in quadrature.
    Each draw first resamples the predicting prompts of every stratum (their own mean is a sample
    too), picks each target's prompt from its stratum's resample, and moves the whole set's
    acceptance by one shift (`sim.intervals.shift`: each stratum's τ times one normal draw)."""
    from sim.run import run_plan

    cv = float(np.hypot(latency_cv(profile, plan), max(float(measurement_cv), 0.0)))
    n = len(targets) if targets is not None else check_prompts_n(prompts_n)
    if not plan.scheme.speculative:
        return Interval(1.0, 1.0, level, n, 0, "exact", 0.0)
    rng = np.random.default_rng([int(seed), int(plan.exit_layer or 0), 3])
    z = rng.standard_normal(draws)
    if traces is None:
        return _latency_only(profile, plan, n, draws, level, cv, z)
    sources = ([tuple(traces.by_category(targets.category(i))) for i in range(n)] if targets is not None
               else [tuple(range(len(traces)))] * n)  # each target draws from its own category (see `strata`)
    shifts = {src: traces.shift(src) for src in set(sources)}
    z_set = rng.standard_normal(draws)  # the prompt set's shift, one draw shared by its strata
    out = np.empty(draws)
    for b in range(draws):
        pools = {src: np.asarray(src)[rng.integers(0, len(src), len(src))] for src in shifts}
        picks = [int(pools[src][rng.integers(0, len(src))]) for src in sources]
        deltas = [shifts[src].tau * z_set[b] for src in sources]
        tg = targets if targets is not None else Targets(tuple(traces.start_context[j] for j in picks),
                                                          tuple(len(traces.prob[j]) for j in picks))
        stats, ar_ms = run_plan(profile, plan, overlay_stream(traces, picks, tg, rng, deltas), "fast", False)
        out[b] = ar_ms / stats.time_ms if stats.time_ms > 0 else np.nan
    lo, hi = _quantiles(out * np.exp(cv * z), level)
    return Interval(lo, hi, level, n, draws, "replay", cv, _widest(shifts.values()))


def _widest(shifts) -> Shift:
    """The largest of a set's strata shifts (what the interval reports it carried)."""
    return max(shifts, key=lambda s: s.tau, default=Shift(0.0))


def _latency_only(profile, plan, n, draws, level, cv, z, point: float = 1.0) -> Interval:
    lo, hi = _quantiles(point * np.exp(cv * z), level)
    return Interval(lo, hi, level, n, draws, "latency", cv)


def simulate_interval(profile, result: Result, *, acceptance: str = "trace", category: str | None = None,
                      prompt_ids: Sequence[str] | None = None, temperature: float = 0.0,
                      prompts_n: int | None = None, draws: int = REPLAY_DRAWS, seed: int = 0) -> Result:
    """`ppsd simulate`'s interval on its Result: replayed draws of n prompts from the profile's traces
    (a given α: latency spread only, around the point)."""
    plan = result.plan
    n = check_prompts_n(prompts_n)
    if not plan.scheme.speculative:
        return apply(result, Interval(1.0, 1.0, LEVEL, n, 0, "exact"))
    if acceptance != "trace":
        cv = latency_cv(profile, plan)
        z = np.random.default_rng([int(seed), int(plan.exit_layer or 0), 3]).standard_normal(draws)
        return apply(result, _latency_only(profile, plan, n, draws, LEVEL, cv, z, result.speedup_vs_ar or 1.0))
    traces = prompt_traces(profile, plan.exit_layer, head=plan.exit_head, prompt_ids=prompt_ids,
                           category=category, temperature=temperature)
    iv = replay_interval(profile, plan, traces, prompts_n=n, draws=draws, seed=seed)
    return apply(result, iv)


def _alpha_draws(traces: PromptTraces, n: int, draws: int, rng, scale: float = 1.0,
                 shift: Shift | None = None) -> np.ndarray:
    """Each draw's pooled acceptance over n prompts: the predicting prompts resampled, n picked from
    the resample, the set moved by the shift (see `replay_interval`)."""
    acc = np.array([p.sum() for p in traces.prob])
    pos = np.array([len(p) for p in traces.prob], dtype=float)
    size = len(traces)
    pools = rng.integers(0, size, size=(draws, size))
    picks = np.take_along_axis(pools, rng.integers(0, size, size=(draws, n)), axis=1)
    alpha = acc[picks].sum(axis=1) / pos[picks].sum(axis=1) * scale
    if shift is not None and shift.tau > 0:
        alpha = shift_alpha(alpha, shift.tau * rng.standard_normal(draws))
    return np.clip(alpha, 0.0, 1.0)


def attach_sweep_intervals(profile, results: Sequence[Result], *, prompts_n: int | None = None,
                           draws: int = SWEEP_DRAWS, seed: int = 0, category: str | None = None,
                           temperature: float = 0.0, alpha_scale: float = 1.0,
                           given_alpha: bool = False) -> None:
    """Give every result of a sweep its interval in place (see the module doc: the closed form
    scales the replayed point draw by draw). `given_alpha`: acceptance was given, not recorded
    (latency spread only)."""
    from sim.schemes import speedup_curve

    n = check_prompts_n(prompts_n)
    cache: dict = {}
    for r in results:
        plan = r.plan
        if not plan.scheme.speculative:
            apply(r, Interval(1.0, 1.0, LEVEL, n, 0, "exact"))
            continue
        point = r.speedup_vs_ar or 1.0
        cv = latency_cv(profile, plan)
        key = (plan.exit_layer, plan.exit_head)
        if key not in cache:
            rng = np.random.default_rng([int(seed), int(plan.exit_layer), 5])
            z = rng.standard_normal(draws)
            if given_alpha:
                cache[key] = (None, None, None, z, None)
            else:
                tr = prompt_traces(profile, plan.exit_layer, head=plan.exit_head, category=category,
                                   temperature=temperature)
                shift = tr.shift(range(len(tr)))
                a = _alpha_draws(tr, n, draws, rng, alpha_scale, shift)
                ctx = float(np.mean([c + len(p) / 2 for c, p in zip(tr.start_context, tr.prob)]))
                cache[key] = (a, min(1.0, tr.alpha * alpha_scale), ctx, z, shift)
        a, a_pool, ctx, z, shift = cache[key]
        if a is None:
            apply(r, _latency_only(profile, plan, n, draws, LEVEL, cv, z, point))
            continue
        try:
            grid = np.unique(np.clip(np.concatenate([np.linspace(a.min(), a.max(), GRID), [a_pool]]), 0.0, 1.0))
            s = speedup_curve(profile, plan, grid, ctx)
        except (ValueError, ZeroDivisionError):  # a shared placement has no closed form: latency only
            apply(r, _latency_only(profile, plan, n, draws, LEVEL, cv, z, point))
            continue
        ratio = np.interp(a, grid, s) / float(np.interp(a_pool, grid, s))
        lo, hi = _quantiles(point * ratio * np.exp(cv * z), LEVEL)
        apply(r, Interval(lo, hi, LEVEL, n, draws, "closed form", cv, shift))
