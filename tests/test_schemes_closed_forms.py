"""The event simulation against the closed forms (1% over >= 20,000 Bernoulli tokens)."""

from __future__ import annotations

import itertools

import pytest

from ppsd.profile.synthetic import write_synthetic_profile
from sim import api
from sim.schemes import eesd
from sim.schemes.ppsd import closed_form as ppsd_cf
from sim.schemes.ppsd import event_model as ppsd_event
from sim.schemes.ppsd import replay as ppsd_replay
from sim.schemes.ppsd.stage_costs import PPSDCosts
from sim.plan import Plan

ALPHAS = (0.2, 0.4, 0.6, 0.8, 0.95)
TOKENS = 20_000


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """SmolLM2-like real costs: unbalanced stages (12.6 ms head), hops, co-run slowdown, verify cost
    growing with the number of positions."""
    return write_synthetic_profile(tmp_path_factory.mktemp("real"), num_layers=30, layer_ms=2.8, head_ms=12.6,
                                   embed_ms=0.13, hop_ms=0.3, corun_slowdown=1.3, per_token_fraction=0.04)


@pytest.fixture(scope="module")
def ideal(tmp_path_factory):
    return write_synthetic_profile(tmp_path_factory.mktemp("ideal"), num_layers=32, layer_ms=1.0, head_ms=0.0,
                                   embed_ms=0.0, hop_ms=0.0)


def closed(profile, plan, alpha):
    return api.closed_form(profile, api.resolve_plan(plan, profile), alpha)["speedup_vs_ar"]


def sim(profile, plan, alpha, engine, seed=11):
    return api.simulate(profile, plan, acceptance="bernoulli", alpha=alpha, tokens=TOKENS, seed=seed,
                        engine=engine).speedup_vs_ar


def check(profile, plan, alpha, engine):
    """Within 1% of the closed form evaluated at the draw's own acceptance frequency (a 20,000-token
    draw of Bernoulli(0.4) can land at 0.406, which alone moves EESD by 1%); the draw itself must be
    within 1% of α."""
    r = api.simulate(profile, plan, acceptance="bernoulli", alpha=alpha, tokens=TOKENS, seed=11, engine=engine)
    a_hat = r.details.stream_alpha
    assert a_hat == pytest.approx(alpha, abs=0.01)
    assert r.speedup_vs_ar == pytest.approx(closed(profile, plan, a_hat), rel=0.01), plan


GRID_PPSD = [Plan("ppsd", exit_layer=e, stages=k) for e, k in itertools.product((5, 10, 15, 20), (2, 3, 4))]
GRID_EESD = [Plan("eesd", exit_layer=e, draft_len=g) for e, g in itertools.product((5, 10, 15, 20), (1, 3, 6))]


@pytest.mark.parametrize("alpha", ALPHAS)
def test_event_sim_matches_closed_form(real, alpha):
    """SimPy model vs closed form on a representative subset: every α × k and every α × γ."""
    for i, k in enumerate((2, 3, 4)):
        plan = Plan("ppsd", exit_layer=(5, 10, 15)[(i + ALPHAS.index(alpha)) % 3], stages=k)
        check(real, plan, alpha, "event")
    for i, g in enumerate((1, 3, 6)):
        plan = Plan("eesd", exit_layer=(5, 10, 20)[(i + ALPHAS.index(alpha)) % 3], draft_len=g)
        check(real, plan, alpha, "event")


@pytest.mark.parametrize("alpha", ALPHAS)
def test_fast_replay_matches_closed_form_on_grid(real, alpha):
    """The full grid through the exact fast replay (itself tested equal to the SimPy model)."""
    for plan in GRID_PPSD + GRID_EESD:
        check(real, plan, alpha, "fast")


def test_ppsd_paper_point(ideal):
    """k = 4, E/N = 1/4, balanced, free hops, α = 0.8056 → 1 / (1 − α(1 − E/N)) = 2.53."""
    plan = Plan("ppsd", exit_layer=8, stages=4)
    assert api.resolve_plan(plan, ideal).stage_bounds == (0, 8, 16, 24, 32)
    assert ppsd_cf.ideal_speedup(0.8056, 8, 32) == pytest.approx(2.53, abs=0.005)
    assert closed(ideal, plan, 0.8056) == pytest.approx(ppsd_cf.ideal_speedup(0.8056, 8, 32), rel=1e-9)
    assert sim(ideal, plan, 0.8056, "event") == pytest.approx(2.53, rel=0.01)
    assert api.simulate(ideal, plan, acceptance="bernoulli", alpha=0.8056, tokens=200_000, engine="fast",
                        seed=3).speedup_vs_ar == pytest.approx(2.53, rel=0.005)


@pytest.mark.parametrize("alpha, gamma", [(0.3, 1), (0.6, 3), (0.8, 6), (0.95, 6)])
def test_eesd_matches_leviathan(ideal, alpha, gamma):
    """Free heads and verification at the cost of one pass: c = E/N exactly."""
    plan = Plan("eesd", exit_layer=8, draft_len=gamma)
    expect = eesd.leviathan_speedup(alpha, gamma, 8 / 32)
    assert closed(ideal, plan, alpha) == pytest.approx(expect, rel=1e-9)
    assert sim(ideal, plan, alpha, "event") == pytest.approx(expect, rel=0.01)


def test_general_closed_form_reduces_to_ideal(ideal):
    for alpha, (e, k) in itertools.product((0.0, 0.3, 0.9, 1.0), ((8, 4), (16, 2))):
        assert closed(ideal, Plan("ppsd", exit_layer=e, stages=k), alpha) == pytest.approx(
            ppsd_cf.ideal_speedup(alpha, e, 32), rel=1e-9)


def test_real_costs_ppsd_slower_than_ar_at_low_alpha(real):
    """The exit head in stage 1 and the head again in the last stage: at low α PPSD loses to AR."""
    plan = Plan("ppsd", exit_layer=15, stages=2)
    assert sim(real, plan, 0.1, "event") < 1.0
    assert sim(real, plan, 0.95, "event") > 1.0
    # and the co-run slowdown keeps a 2-stage pipeline well below 2× even at α = 1
    assert closed(real, plan, 1.0) < 1.6


@pytest.mark.parametrize("stage, hop, exit_ms", [((3.0, 1.0), 0.5, 2.5), ((1.0, 2.0, 0.5), 0.3, 0.4),
                                                 ((2.0, 2.5), 0.2, 1.0)])
def test_closed_form_matches_replay_with_overlapped_exit_head(stage, hop, exit_ms):
    """Stage 1's exit head overlaps the later stages; the draft's arrival binds in the first case."""
    import numpy as np

    from sim.model.streams import Stream

    k, t = len(stage), 40_000
    for alpha in (0.3, 0.8):
        match = np.random.default_rng(5).random(t) < alpha
        seg = np.zeros(t, dtype=bool)
        seg[0] = True
        costs = PPSDCosts([np.full(t, c) for c in stage], hop, tuple(range(k)), [1.0, 1.0, 1.2, 1.4][:k + 1],
                          exit_ms=np.full(t, exit_ms))
        st = ppsd_replay.replay(Stream(match, np.full(t, 64.0), seg, "bernoulli"), costs)
        a_hat = float(match[:-1].mean())
        want = ppsd_cf.time_per_token(stage, hop, a_hat, costs.factors, k, exit_ms)
        assert st.time_ms / t == pytest.approx(want, rel=0.01)


@pytest.mark.parametrize("stage, hop, exit_ms, factors", [
    ((31.0, 31.0), 0.5, 9.55, [1.0, 1.0, 1.15]),  # SmolLM2-like: the correction lands in the exit head
    ((3.0, 1.0), 0.5, 2.2, [1.0, 1.0, 1.0]),
    ((1.0, 2.2, 0.5), 0.5, 0.4, [1.0, 1.0, 1.2, 1.4]),
    ((2.0, 1.0, 1.0, 3.0), 0.3, 1.5, [1.0, 1.0, 1.1, 1.2, 1.3]),
    # per stage: stage 1 and the verifier's shares of the co-run slowdown, and a lock step's wait
    ((31.0, 30.0), 0.5, 9.55, [[1.0, 1.0, 1.15 * 0.97 * 1.03], [1.0, 1.0, 1.15 * 1.03 * 1.03]]),
])
def test_closed_form_cycles_exact_on_a_trace_with_uncuttable_exit_head(stage, hop, exit_ms, factors):
    """Per cycle, L(a) (`cycle_lengths`: the commit, the verdict's hop, the stretch stage 1 cannot cut)
    is exact (any k): summed over a trace's cycles it equals both engines to rounding."""
    import numpy as np

    from sim.model.streams import Stream

    k, t = len(stage), 600
    match = np.random.default_rng(11).random(t) < 0.6
    seg = np.zeros(t, dtype=bool)
    seg[0] = True
    s = Stream(match, np.full(t, 64.0), seg, "bernoulli")
    costs = PPSDCosts([np.full(t, c) for c in stage], hop, tuple(range(k)), factors, exit_ms=np.full(t, exit_ms))
    d = ppsd_cf.pipeline_departures(stage, hop, t + 1, factors, k, exit_ms, cap=k)
    starts = np.flatnonzero(np.concatenate([[True], ~match[:-1]]))
    a = np.append(starts[1:], t) - 1 - starts
    lengths = ppsd_cf.cycle_lengths(stage, hop, t + 1, factors, k, exit_ms)
    want = sum(lengths[x] for x in a[:-1]) + d[a[-1]]
    assert ppsd_replay.replay(s, costs).span_ms == pytest.approx(want, rel=1e-12)
    assert ppsd_event.run(s, costs).span_ms == pytest.approx(want, rel=1e-12)
    # and the cut-at-the-flush model would be faster whenever a flush lands in an exit head
    cut = sum(d[x] + hop for x in a[:-1]) + d[a[-1]]
    assert want >= cut
    # with timing jitter the closed form stays exact per cycle
    costs.jitter_cv = 0.03
    soft_len = ppsd_cf.cycle_lengths(stage, hop, t + 1, factors, k, exit_ms, 0.03)
    soft = sum(soft_len[x] for x in a[:-1]) + d[a[-1]]
    assert ppsd_replay.replay(s, costs).span_ms == pytest.approx(soft, rel=1e-12)
    assert ppsd_event.run(s, costs).span_ms == pytest.approx(soft, rel=1e-12)
    assert soft >= cut


@pytest.mark.parametrize("launch", ["local", "torchrun"])
@pytest.mark.parametrize("stage, hop, exit_ms, layers", [
    ((2.0, 2.0, 2.0, 2.0), 0.6, 0.3, 4),   # hops long against the exit head: the in-flight cap binds
    ((1.6, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.6), 0.4, 0.1, 8),  # 8 stages
    ((3.0, 1.0, 2.0), 0.2, 1.2, 3),
])
def test_closed_form_cycles_exact_with_cap_checkpoints_and_launch(stage, hop, exit_ms, layers, launch):
    """With stage 1's layer checkpoints, the in-flight cap and either launch rule, L(a) summed over a
    trace's cycles equals both engines, with and without jitter."""
    import numpy as np

    from sim.model.streams import Stream

    k, t = len(stage), 500
    match = np.random.default_rng(3).random(t) < 0.7
    seg = np.zeros(t, dtype=bool)
    seg[0] = True
    s = Stream(match, np.full(t, 64.0), seg, "bernoulli")
    cps = list(np.linspace(0.05, stage[0] - exit_ms - 0.1, layers + 1))
    starts = np.flatnonzero(np.concatenate([[True], ~match[:-1]]))
    a = np.append(starts[1:], t) - 1 - starts
    d = ppsd_cf.pipeline_departures(stage, hop, t + 1, None, k, exit_ms, cap=k)
    for cv in (0.0, 0.03):
        costs = PPSDCosts([np.full(t, c) for c in stage], hop, tuple(range(k)), [1.0] * (k + 1),
                          exit_ms=np.full(t, exit_ms), jitter_cv=cv,
                          checkpoints=np.repeat(np.asarray(cps)[:, None], t, axis=1), launch=launch)
        lengths = ppsd_cf.cycle_lengths(stage, hop, t + 1, None, k, exit_ms, cv, checkpoints=cps, launch=launch)
        want = sum(lengths[x] for x in a[:-1]) + d[a[-1]]
        assert ppsd_replay.replay(s, costs).span_ms == pytest.approx(want, rel=1e-12)
        assert ppsd_event.run(s, costs).span_ms == pytest.approx(want, rel=1e-12)
    # the cap holds stage 1 back: without it the accepted stretches would run faster
    free = ppsd_cf.time_per_token(stage, hop, 1.0, None, k, exit_ms, cap=0)
    capped = ppsd_cf.time_per_token(stage, hop, 1.0, None, k, exit_ms)
    assert capped >= free - 1e-12


def test_ppsd_closed_forms_at_many_alphas_equal_one_at_a_time():
    """The intervals price ~10 α per plan in one call (the cycle lengths shared): exactly the same."""
    from sim.schemes.ppsd import closed_form as cf

    alphas = [0.0, 0.1, 0.37, 0.8, 0.95, 1.0]
    for kw in (dict(), dict(jitter_cv=0.05, exit_ms=0.4), dict(launch="torchrun", cap=3)):
        stages, hop = [1.2, 2.0, 0.7], 0.3
        many = cf.times_per_token(stages, hop, alphas, [1.0, 1.0, 1.1, 1.2], 3, **kw)
        assert many == [cf.time_per_token(stages, hop, a, [1.0, 1.0, 1.1, 1.2], 3, **kw) for a in alphas]


@pytest.mark.parametrize("hop_ms", [0.3, 20.0, 100.0])
def test_ppsd_at_full_acceptance_paces_by_whole_bursts(tmp_path, hop_ms):
    """α = 1 with the in-flight cap: once the verdicts' round trip binds, tokens leave the pipeline in
    bursts of `cap`, and the pace is a burst's time over its tokens (the gap between the last two
    departures alone read a long hop as no cost at all)."""
    p = write_synthetic_profile(tmp_path / "p", num_layers=12, layer_ms=1.0, head_ms=2.0, hop_ms=hop_ms)
    plan = Plan("ppsd", 6, stages=2)
    replayed = api.simulate(p, api.resolve_plan(plan, p), acceptance="bernoulli", alpha=1.0, tokens=3000,
                            engine="fast").speedup_vs_ar
    assert closed(p, plan, 1.0) == pytest.approx(replayed, rel=0.01)
