"""90% intervals on predictions (sim/intervals/): they hold the point, widen with fewer prompts and
with latency spread, follow the measured prompts' lengths, and reach simulate and plan."""

import json

import numpy as np
import pandas as pd
import pytest

from ppsd.cli import main
from ppsd.exit_heads import SHARED
from ppsd.profile import load_profile, save_profile
from ppsd.profile.synthetic import synthetic_meta
from sim import intervals as iv
from sim.api import resolve_plan, simulate, sweep
from sim.plan import Plan
from sim.run import simulate_stream

N = 12


def _profile(path, alphas=(0.15, 0.9, 0.5, 0.75, 0.3, 0.95), tokens=48, step_spread=None, pass_cv=None):
    """A synthetic profile whose prompts differ a lot in acceptance (one α per prompt, seeded)."""
    meta = synthetic_meta(num_layers=N, layer_ms=1.0, head_ms=3.0, hop_ms=0.05)
    if step_spread is not None:
        med = 16.0
        meta["latency"]["whole_step"] = {"context": 64, "n": 1, "median_ms": med,
                                         "p10_ms": med * (1 - step_spread), "p90_ms": med * (1 + step_spread)}
    if pass_cv is not None:
        meta["latency"]["pipeline"] = {"pass_cv": pass_cv, "slowdown": 1.0}
    rng = np.random.default_rng(0)
    rows, gens = [], []
    for p, a in enumerate(alphas):
        pid = f"p{p}"
        gens.append({"prompt_id": pid, "category": "c", "prompt": f"prompt {p}", "prompt_tokens": [1] * (40 + p),
                     "token_ids": [0] * tokens})
        for e in range(1, N):
            m = rng.random(tokens) < a * (0.5 + e / (2 * N))
            rows += [(SHARED, pid, "c", e, i, int(m[i]), float(a)) for i in range(tokens)]
    acc = pd.DataFrame(rows, columns=["head", "prompt_id", "category", "exit_layer", "position", "match", "beta"])
    meta["acceptance"] = {"temperature": 0.0, "max_new_tokens": tokens, "prompt_set": "test",
                          "num_prompts": len(alphas), "categories": ["c"], "heads": [SHARED]}
    save_profile(path, meta, acceptance=acc, generations=gens)
    return load_profile(path)


@pytest.fixture(scope="module")
def prof(tmp_path_factory):
    return _profile(tmp_path_factory.mktemp("iv") / "p")


PLANS = [Plan("ppsd", 6, stages=2), Plan("eesd", 6, draft_len=3)]


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.label())
def test_interval_holds_the_point_and_widens_with_fewer_prompts(prof, plan):
    plan = resolve_plan(plan, prof)
    traces = iv.prompt_traces(prof, 6)
    point = simulate(prof, plan, engine="fast").speedup_vs_ar  # every prompt's own trace, once
    widths = {}
    for n in (2, 8, 32):
        i = iv.replay_interval(prof, plan, traces, prompts_n=n, draws=300, seed=1)
        assert i.lo < point < i.hi, (n, i, point)
        widths[n] = i.hi - i.lo
    assert widths[2] > widths[8] > widths[32] > 0
    # the spread of n new prompts around a mean the profile's 6 prompts only estimate: the variance of
    # the set's acceptance is σ²/n + σ²/6, so 2 prompts spread √((1/2 + 1/6) / (1/32 + 1/6)) ≈ 1.8× as
    # wide as 32 (less the latency spread both carry), and 32 do not shrink to nothing
    assert widths[2] > 1.4 * widths[32]


def test_the_profiles_own_mean_is_uncertain_too(prof):
    """Each draw resamples the predicting prompts before it picks the set's: however many prompts a run
    decodes, its acceptance is known no better than the profile's few prompts pin their mean down."""
    plan = resolve_plan(PLANS[1], prof)
    traces = iv.prompt_traces(prof, 6)
    many = iv.replay_interval(prof, plan, traces, prompts_n=256, draws=200, seed=1)
    acc = np.array([p.mean() for p in traces.prob])
    # the pool mean of 6 prompts this spread out moves by ±σ/√6 · 1.645: far more than 1% either way
    assert np.std(acc) / np.sqrt(6) > 0.05
    assert many.hi / many.lo > 1.1


def test_interval_is_seeded_and_ar_is_exact(prof):
    plan = resolve_plan(PLANS[0], prof)
    tr = iv.prompt_traces(prof, 6)
    a = iv.replay_interval(prof, plan, tr, prompts_n=4, draws=50, seed=3)
    b = iv.replay_interval(prof, plan, tr, prompts_n=4, draws=50, seed=3)
    c = iv.replay_interval(prof, plan, tr, prompts_n=4, draws=50, seed=4)
    assert a == b and a != c
    ar = iv.replay_interval(prof, resolve_plan(Plan("ar"), prof), tr, prompts_n=4)
    assert (ar.lo, ar.hi, ar.method) == (1.0, 1.0, "exact")


def test_latency_spread_widens_the_interval(tmp_path):
    calm = _profile(tmp_path / "calm", step_spread=0.0)
    noisy = _profile(tmp_path / "noisy", step_spread=0.1, pass_cv=0.05)
    plan = PLANS[1]
    assert iv.step_cv(calm) == 0.0 and iv.step_cv(noisy) == pytest.approx(0.2 / (2 * 1.2815515655446004))
    assert iv.latency_cv(noisy, resolve_plan(Plan("ppsd", 6, stages=2), noisy)) == pytest.approx(iv.step_cv(noisy))
    w = [iv.replay_interval(p, resolve_plan(plan, p), iv.prompt_traces(p, 6), prompts_n=8, draws=300)
         for p in (calm, noisy)]
    w_calm, w_noisy = w[0].hi - w[0].lo, w[1].hi - w[1].lo
    assert w_noisy > w_calm * 1.05
    # the latency factor exp(cv·z) is independent of the prompts drawn: the widths add about in
    # quadrature (the latency part alone spans 2 · 1.645 · cv around the centre)
    centre = (w[0].hi + w[0].lo) / 2
    expected = (w_calm ** 2 + (2 * 1.6448536 * w[1].latency_cv * centre) ** 2) ** 0.5
    assert w_noisy == pytest.approx(expected, rel=0.2)
    assert w[0].latency_cv == 0.0 and w[1].latency_cv > 0.07


def test_one_prompt_profile_has_no_acceptance_spread(tmp_path):
    p = _profile(tmp_path / "one", alphas=(0.6,), step_spread=0.0)
    plan = resolve_plan(PLANS[0], p)
    i = iv.replay_interval(p, plan, iv.prompt_traces(p, 6), prompts_n=3, draws=40)
    assert i.lo == pytest.approx(i.hi)  # every draw is the one prompt's trace: nothing varies


def test_overlay_follows_the_targets_lengths_and_never_their_traces(prof):
    tr = iv.prompt_traces(prof, 6, prompt_ids=["p0", "p1"])
    assert tr.prompt_ids == ["p0", "p1"] and tr.categories == ["c", "c"]
    targets = iv.Targets((100.0, 300.0, 50.0), (10, 130, 7))
    s = iv.pooled_stream(tr, targets)
    assert s.tokens == 147 and list(np.flatnonzero(s.seg_start)) == [0, 10, 140]  # the pool (96) wraps to 147
    assert s.context[0] == 100 and s.context[10] == 300 and s.context[139] == 429 and s.context[140] == 50
    pool = np.concatenate(tr.prob)
    assert np.array_equal(s.match, np.resize(pool, 147) >= 0.5)  # only the prediction prompts' matches
    o = iv.overlay_stream(tr, [1, 1, 0], targets)
    assert np.array_equal(o.match[:10], tr.prob[1][:10] >= 0.5)
    assert np.array_equal(o.match[10:140], np.resize(tr.prob[1], 130) >= 0.5)  # tiled past its end
    # a simulated run on the pooled stream has the targets' prefill and generations
    r = simulate_stream(prof, Plan("ppsd", 6, stages=2), s, engine="fast")
    assert r.tokens == 147 and r.details.generations == 3


def test_pooled_point_reads_every_prediction_prompt_once(prof):
    """A pool longer than the targets is spent whole (the targets cycled), not cut after the first
    prompts: with 6 prompts of 48 tokens over 2 targets of 40, the first two prompts alone would give
    their α, not the pool's."""
    tr = iv.prompt_traces(prof, 6)
    pool = np.concatenate(tr.prob)
    targets = iv.Targets((64.0, 80.0), (40, 40))
    s = iv.pooled_stream(tr, targets)
    assert s.tokens == len(pool) and np.array_equal(s.match, pool >= 0.5)
    assert s.alpha == pytest.approx(tr.alpha) and abs(tr.alpha - pool[:80].mean()) > 0.05
    starts = np.flatnonzero(s.seg_start)
    assert list(np.diff(starts)) == [40] * (len(starts) - 1) and len(pool) - starts[-1] <= 40
    assert s.context[0] == 64 and s.context[40] == 80 and s.context[80] == 64  # the targets in turn


def _categorised(path, cats):
    """A synthetic profile whose prompts carry the given categories; category "hi" accepts always,
    the others never."""
    meta = synthetic_meta(num_layers=N, layer_ms=1.0, head_ms=3.0, hop_ms=0.05)
    rows, gens = [], []
    for p, c in enumerate(cats):
        pid = f"p{p}"
        gens.append({"prompt_id": pid, "category": c, "prompt": f"prompt {p}", "prompt_tokens": [1] * 40,
                     "token_ids": [0] * 16})
        for e in range(1, N):
            rows += [(SHARED, pid, c, e, i, int(c == "hi"), float(c == "hi")) for i in range(16)]
    acc = pd.DataFrame(rows, columns=["head", "prompt_id", "category", "exit_layer", "position", "match", "beta"])
    meta["acceptance"] = {"temperature": 0.0, "max_new_tokens": 16, "prompt_set": "test",
                          "num_prompts": len(cats), "categories": sorted(set(cats)), "heads": [SHARED]}
    save_profile(path, meta, acceptance=acc, generations=gens)
    return load_profile(path)


def test_targets_of_a_well_traced_category_are_predicted_from_it_alone(tmp_path):
    p = _categorised(tmp_path / "cat", ["hi", "hi", "hi", "lo", "lo", "lo", "few", "few"])
    tr = iv.prompt_traces(p, 6)
    assert tr.categories == ["hi"] * 3 + ["lo"] * 3 + ["few"] * 2
    assert tr.by_category("hi") == [0, 1, 2] and tr.by_category("few") == list(range(8))  # < MIN_STRATUM
    assert tr.by_category(None) == list(range(8)) and tr.by_category("unseen") == list(range(8))
    assert tr.stratum("hi") == [0, 1, 2] and tr.stratum("few") == [] and tr.stratum(None) == []
    only_hi = iv.Targets((40.0,), (16,), ("hi",))
    assert iv.pooled_stream(tr, only_hi).alpha == 1.0  # the pool is 3/8 "hi"; a "hi" workload accepts all
    assert iv.pooled_stream(tr, iv.Targets((40.0,), (16,))).alpha == pytest.approx(3 / 8)  # no category known
    mixed = iv.Targets((40.0, 40.0, 40.0, 40.0), (16, 16, 16, 16), ("hi", "lo", "lo", "lo"))
    s = iv.pooled_stream(tr, mixed)
    assert s.alpha == pytest.approx(1 / 4)  # each stratum weighs as its share of the targets' tokens
    assert [(sorted(src), tgt) for src, tgt in iv.strata(tr, mixed)] == [([0, 1, 2], [0]), ([3, 4, 5], [1, 2, 3])]
    # the bootstrap draws each target's prompts from its own stratum: a "hi" workload has no spread
    plan = resolve_plan(Plan("ppsd", 6, stages=2), p)
    i = iv.replay_interval(p, plan, tr, targets=only_hi, draws=30)
    point = simulate_stream(p, plan, iv.pooled_stream(tr, only_hi), engine="fast").speedup_vs_ar
    assert i.latency_cv == 0.0 and i.lo == pytest.approx(point) and i.hi == pytest.approx(point)


def test_sweep_intervals_hold_every_point_and_narrow_with_more_prompts(prof):
    res = sweep(prof, devices=3, gammas=[2, 4], tokens=400)
    iv.attach_sweep_intervals(prof, res, prompts_n=2)
    few = {r.plan.label(): (r.details.predicted_speedup_lo, r.details.predicted_speedup_hi) for r in res}
    iv.attach_sweep_intervals(prof, res, prompts_n=40)
    for r in res:
        d = r.details
        lo, hi = d.predicted_speedup_lo, d.predicted_speedup_hi
        if not r.plan.mode.speculative:
            assert (lo, hi, d.interval_method) == (1.0, 1.0, "exact")
            continue
        assert d.interval_method == "closed form" and d.interval_prompts == 40
        assert lo <= r.speedup_vs_ar <= hi, r.plan.label()
        flo, fhi = few[r.plan.label()]
        assert fhi - flo > hi - lo
    # the closed-form draws agree with replayed draws on the same question (within a few %)
    r = next(r for r in res if r.plan.label().startswith("PPSD E=6 k=2"))
    rep = iv.replay_interval(prof, r.plan, iv.prompt_traces(prof, 6), prompts_n=40, draws=300)
    assert r.details.predicted_speedup_lo == pytest.approx(rep.lo, rel=0.08)
    assert r.details.predicted_speedup_hi == pytest.approx(rep.hi, rel=0.08)


def test_given_alpha_gets_latency_only(tmp_path):
    p = _profile(tmp_path / "g", step_spread=0.1)
    res = sweep(p, devices=2, gammas=[2], tokens=300, alpha_by_exit={e: 0.6 for e in range(1, N)})
    iv.attach_sweep_intervals(p, res, given_alpha=True)
    spec = [r for r in res if r.plan.mode.speculative]
    assert spec and all(r.details.interval_method == "latency" for r in spec)
    for r in spec:
        assert r.details.predicted_speedup_lo < r.speedup_vs_ar < r.details.predicted_speedup_hi


def test_simulate_and_plan_print_intervals(prof, capsys):
    path = str(prof.path)
    assert main(["simulate", "--profile", path, "--mode", "ppsd", "--exit", "6", "--json", "--prompts-n", "3"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["predicted_speedup_lo"] < d["speedup_vs_ar"] < d["predicted_speedup_hi"]
    assert d["interval_prompts"] == 3 and d["interval_level"] == 0.9 and d["interval_method"] == "replay"
    assert main(["plan", "--profile", path, "--devices", "2", "--max-draft-len", "2", "--tokens", "300", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(r["predicted_speedup_lo"] <= r["speedup_vs_ar"] <= r["predicted_speedup_hi"] for r in rows)
    assert all(r["interval_prompts"] == iv.DEFAULT_PROMPTS_N for r in rows)
    assert main(["plan", "--profile", path, "--devices", "2", "--max-draft-len", "2", "--tokens", "300"]) == 0
    assert "90% interval" in capsys.readouterr().out
    assert main(["simulate", "--profile", path, "--mode", "eesd", "--exit", "6", "--prompts-n", "0"]) == 2
    assert "--prompts-n 0" in capsys.readouterr().err


def test_coverage_counts_speculative_rows_with_intervals():
    rows = [{"mode": "ar", "predicted_speedup_lo": 1.0, "predicted_speedup_hi": 1.0, "measured_speedup": 1.0},
            {"mode": "ppsd", "predicted_speedup_lo": 0.9, "predicted_speedup_hi": 1.1, "measured_speedup": 1.0},
            {"mode": "eesd", "predicted_speedup_lo": 0.5, "predicted_speedup_hi": 0.6, "measured_speedup": 0.7},
            {"mode": "eesd", "measured_speedup": 0.7}]
    assert iv.coverage(rows) == (0.5, 2)
    assert iv.coverage(rows[:1]) == (None, 0)


def test_measurement_noise_comes_from_the_ar_runs_and_widens_the_interval(prof):
    assert iv.measurement_cv([20.0, 20.0]) == 0.0 and iv.measurement_cv([20.0] * 6) == 0.0
    rng = np.random.default_rng(1)
    runs = 20.0 * np.exp(0.02 * rng.standard_normal(4000))  # each AR run off by 2%
    # a speedup (a plan against the mean of the AR runs around it) carries 2% · √1.5
    assert iv.measurement_cv(runs) == pytest.approx(0.02 * np.sqrt(1.5), rel=0.08)
    plan = resolve_plan(PLANS[0], prof)
    traces = iv.prompt_traces(prof, 6)
    quiet = iv.replay_interval(prof, plan, traces, prompts_n=4, draws=300)
    noisy = iv.replay_interval(prof, plan, traces, prompts_n=4, draws=300, measurement_cv=0.05)
    assert noisy.lo < quiet.lo and noisy.hi > quiet.hi and noisy.latency_cv == pytest.approx(0.05)
    lat = iv.replay_interval(prof, plan, None, prompts_n=4, draws=400, measurement_cv=0.05)
    assert np.log(lat.hi / lat.lo) == pytest.approx(2 * 1.645 * 0.05, rel=0.2)  # the latency-only interval
