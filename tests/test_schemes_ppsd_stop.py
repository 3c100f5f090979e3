"""PPSD with a confidence stop (`Plan.draft_stop`): after a draft less confident than τ stage 1 waits
for its verdict instead of running it. The event model (sim/schemes/ppsd/event_model.py), the replay
(replay.py) and the closed form (closed_form.py: `stopped_commits`, `stopped_times_per_token`) price it
alike."""

from __future__ import annotations

import numpy as np
import pytest

from ppsd.errors import UserError
from ppsd.profile.synthetic import write_synthetic_profile
from sim import api
from sim.model.stops import StopOdds
from sim.model.streams import Stream
from sim.plan import Plan
from sim.schemes.ppsd import closed_form as ppsd_cf
from sim.schemes.ppsd import replay as ppsd_replay
from sim.schemes.ppsd.stage_costs import PPSDCosts, corun_factor
from engine_checks import assert_ppsd_engines_agree, per_stage_factors, simulate_both_engines


def stream(bits, conf, gens=()):
    m = np.asarray(bits, dtype=bool)
    seg = np.zeros(len(m), dtype=bool)
    seg[[0, *gens]] = True
    return Stream(m, 64.0 + np.arange(len(m), dtype=float), seg, "trace", np.asarray(conf, dtype=float))


def costs_of(t, stage, hop=0.0, factors=None, exit=0.0, jitter=0.0, checkpoints=None, tau=None, cap=None):
    k = len(stage)
    cps = None if checkpoints is None else np.repeat(np.asarray(checkpoints, dtype=float)[:, None], t, axis=1)
    return PPSDCosts([np.full(t, c) for c in stage], hop, tuple(range(k)), factors or [1.0] * (k + 1),
                     exit_ms=np.full(t, exit), jitter_cv=jitter, checkpoints=cps, inflight_cap=cap, draft_stop=tau)


both = assert_ppsd_engines_agree


def test_hand_timing_a_stop_waits_for_the_verdict():
    """k = 2, stages 1 and 2 ms, no hop. Tokens 0..3 all match; token 1's draft is unsure (τ = 0.5).
    Without the stop: one cycle, stage 1 back to back, stage 2 the bottleneck: commits at 3, 5, 7, 9.
    With it: token 1 commits at 5 (1, 3 | stage 2 at 3..5); stage 1 waits for that verdict, then
    tokens 2 and 3 pass as a new cycle from 5: 5 + 1 + 2 = 8, then 10, and stage 1 idles 2 ms."""
    bits, conf = [1, 1, 1, 1], [0.9, 0.2, 0.9, 0.9]
    plain = both(stream(bits, conf), costs_of(4, (1.0, 2.0)))
    stopped = both(stream(bits, conf), costs_of(4, (1.0, 2.0), tau=0.5))
    # the decode clock runs from the first commit (3) to the last, scaled by L / (L − 1)
    assert plain.time_ms == pytest.approx((9 - 3) * 4 / 3)
    assert stopped.time_ms == pytest.approx((10 - 3) * 4 / 3)
    # (the stop's draft matched: its cycle keeps it, so the stop leaves acceptance as it was)
    assert stopped.rounds_a == [2, 1] and stopped.rounds_rejected == [False, False]
    assert stopped.stage_busy_ms[0] < stopped.span_ms - 1.0  # stage 1 idled at the stop


def test_the_last_pass_of_a_stopped_cycle_runs_alone():
    """Co-run slowdown 1.5 with two stages busy: the verifier's pass of the stopped token finds stage 1
    idle and takes its plain time."""
    assert corun_factor([1.0, 1.0, 1.5], 2, 3, 1) == 1.5
    assert corun_factor([1.0, 1.0, 1.5], 2, 3, 1, ahead=0) == 1.0
    bits, conf = [1, 1, 1], [0.9, 0.2, 0.9]
    st = both(stream(bits, conf), costs_of(3, (1.0, 2.0), factors=[1.0, 1.0, 1.5], tau=0.5))
    # stage 1: token 0 alone (0..1), token 1 beside stage 2 (1..2.5); stage 2: token 0 at 1..4 (slowed),
    # token 1 alone 4..6 -> commit 6; then token 2 from 6: stage 1 alone to 7, stage 2 beside stage 1's
    # next draft (the cycle does not stop there) 7..10
    assert st.span_ms == pytest.approx(10.0)


def test_a_stop_below_every_confidence_is_the_plain_plan():
    rng = np.random.default_rng(3)
    bits = rng.random(300) < 0.7
    s = stream(bits, 0.01 + 0.99 * rng.random(300), gens=[140])
    plain = both(s, costs_of(300, (1.0, 1.5), hop=0.2, factors=[1.0, 1.0, 1.2], exit=0.3))
    low = both(s, costs_of(300, (1.0, 1.5), hop=0.2, factors=[1.0, 1.0, 1.2], exit=0.3, tau=0.001))
    assert low.time_ms == pytest.approx(plain.time_ms) and low.rounds_a == plain.rounds_a


def test_replay_equals_the_event_model_on_random_pipelines():
    """Random pipelines (k = 2..5, hops, exit heads, layer checkpoints, jitter, co-run factors shared or
    per stage, generations, τ): the replay equals the SimPy model in time, rounds and busy time."""
    rng = np.random.default_rng(17)
    for _ in range(30):
        k = int(rng.integers(2, 6))
        stage = tuple(float(x) for x in rng.uniform(0.3, 3.0, size=k))
        hop = float(rng.choice([0.0, 0.05, 0.4]))
        exit = float(rng.uniform(0.0, 0.8)) * stage[0]
        cps = None if rng.random() < 0.3 else np.sort(rng.uniform(0.0, stage[0] - exit, size=int(rng.integers(1, 5))))
        factors = None if rng.random() < 0.3 else [1.0] + list(1.0 + np.sort(rng.uniform(0.0, 0.4, size=k)))
        if factors is not None and rng.random() < 0.5:
            factors = per_stage_factors(factors, rng.uniform(0.9, 1.1, size=k), float(rng.uniform(1.0, 1.06)))
        t = 300
        bits = rng.random(t) < float(rng.choice([0.3, 0.7, 0.95]))
        conf = np.clip(np.where(bits, 0.3, 0.0) + 0.7 * rng.random(t), 0.0, 1.0)
        costs = costs_of(t, stage, hop, factors, exit, float(rng.choice([0.0, 0.03])), cps,
                         tau=float(rng.uniform(0.1, 0.9)), cap=None if rng.random() < 0.7 else 0)
        both(stream(bits, conf, gens=[100, 200]), costs)


@pytest.mark.parametrize("stage, hop, exit_ms, factors", [
    ((1.0, 2.0), 0.0, 0.0, None),
    ((3.0, 1.0), 0.5, 1.2, [1.0, 1.0, 1.3]),
    ((1.0, 2.2, 0.5), 0.3, 0.4, [1.0, 1.0, 1.2, 1.4]),
    ((31.0, 30.0), 0.5, 9.55, [[1.0, 1.0, 1.15 * 0.97 * 1.03], [1.0, 1.0, 1.15 * 1.03 * 1.03]]),
])
def test_closed_form_prices_iid_odds_like_the_replay(stage, hop, exit_ms, factors):
    """On a long stream of i.i.d. (match, confidence) pairs, the closed form at the stream's odds equals
    the replay's time per token (per cycle it is exact; the stream's odds are sampled)."""
    rng = np.random.default_rng(9)
    t = 60_000
    bits = rng.random(t) < 0.75
    conf = np.where(bits, 0.3, 0.0) + 0.7 * rng.random(t)
    s = stream(bits, conf)
    k = len(stage)
    for tau in (0.35, 0.6):
        st = ppsd_replay.replay(s, costs_of(t, stage, hop, factors, exit_ms, tau=tau))
        low = conf < tau
        odds = StopOdds(float(low.mean()), float(bits[~low].mean()), float(bits[low].mean()))
        want = ppsd_cf.stopped_times_per_token(list(stage), hop, [odds], factors, k, exit_ms)[0]
        assert st.span_ms / t == pytest.approx(want, rel=0.01)


def test_stopped_commits_are_exact_per_cycle():
    """D_stop(a) against the replay of one stopped cycle of a + 1 tokens (then the last token)."""
    stage, hop, exit_ms, factors = (2.0, 1.0, 1.5), 0.3, 0.5, [1.0, 1.0, 1.2, 1.5]
    d = ppsd_cf.stopped_commits(stage, hop, 8, factors, 3, exit_ms, cap=3)
    for a in range(8):
        bits = [1] * (a + 2)
        conf = [0.9] * a + [0.1, 0.9]
        costs = costs_of(a + 2, stage, hop, factors, exit_ms, tau=0.5)
        st = ppsd_replay.replay(stream(bits, conf), costs)
        # the stopped cycle's commit + hop, then the next token alone: pipeline empty, no co-run
        alone = ppsd_cf.pipeline_departures(stage, hop, 1, factors, 3, exit_ms, cap=3)[0]
        assert st.span_ms == pytest.approx(d[a] + hop + alone, rel=1e-12)


def test_simulate_prices_a_ppsd_stop_from_the_profiles_traces(sure, tmp_path):
    plain = Plan("ppsd", exit_layer=6, stages=2)
    stop = Plan("ppsd", exit_layer=6, stages=2, draft_stop=0.5)
    a = simulate_both_engines(sure, stop)
    c = api.simulate(sure, plain, engine="fast")
    assert a.details.rounds > c.details.rounds and a.speedup_vs_ar != pytest.approx(c.speedup_vs_ar)
    assert a.acceptance_rate == pytest.approx(c.acceptance_rate)  # every draft is judged either way
    assert "τ=0.5" in a.plan.label() and a.plan.slug() == "ppsd-e6-k2-stop0.5"
    cf = api.closed_form(sure, api.resolve_plan(stop, sure), 0.7)
    assert cf["speedup_vs_ar"] > 0
    old = write_synthetic_profile(tmp_path / "old", alpha_by_exit=lambda e: 0.5, num_layers=12)
    with pytest.raises(UserError, match="ppsd profile"):
        api.simulate(old, stop, engine="fast")


def test_a_ppsd_stop_needs_the_local_launch():
    with pytest.raises(UserError, match="local launch"):
        Plan("ppsd", exit_layer=6, stages=2, draft_stop=0.5, launch="torchrun")
    with pytest.raises(UserError, match="confidence stop"):
        Plan("ar", draft_stop=0.5)


@pytest.fixture(scope="module")
def sampled_sure(tmp_path_factory):
    return write_synthetic_profile(tmp_path_factory.mktemp("s"), alpha_by_exit=lambda e: 0.1 + 0.07 * e,
                                   num_layers=12, layer_ms=2.0, head_ms=6.0, confidence=True,
                                   beta_by_temperature={0.8: lambda e: 0.1 + 0.06 * e})


@pytest.mark.parametrize("plan", [Plan("ppsd", exit_layer=6, stages=2, draft_stop=0.5, temperature=0.8),
                                  Plan("eesd", exit_layer=6, draft_len=4, draft_stop=0.5, temperature=0.8)])
def test_a_stop_under_sampling_reads_the_confidences_along_the_sampled_trajectories(sampled_sure, tmp_path, plan):
    """At T > 0 the stream draws each match from β along the trajectories sampled at T and carries
    their confidences; the engines agree, and the closed form reads β's odds there (the synthetic
    table gives unsure positions a third of β: a stop's odds see it)."""
    from dataclasses import replace

    from sim.model.stops import stop_odds

    a = simulate_both_engines(sampled_sure, plan, temperature=0.8)
    plain = api.simulate(sampled_sure, replace(plan, draft_stop=None), engine="fast", temperature=0.8)
    assert a.speedup_vs_ar != pytest.approx(plain.speedup_vs_ar)
    odds = stop_odds(sampled_sure, 6, "shared", 0.5, 0.8)
    assert 0.4 < odds.low < 0.6 and odds.match_low == pytest.approx(odds.match_high / 3, rel=0.1)
    assert api.closed_form(sampled_sure, api.resolve_plan(plan, sampled_sure), 0.5)["speedup_vs_ar"] > 0
    # a profile whose sampled trajectories carry no confidences is refused at T, with the command
    old = write_synthetic_profile(tmp_path / "old", alpha_by_exit=lambda e: 0.5, num_layers=12, confidence=True,
                                  beta_by_temperature={0.8: lambda e: 0.5})
    old._sampled = old.sampled_acceptance.drop(columns="confidence")  # as a file written before the column
    old._views.clear()
    assert old.has_confidence("shared") and not old.has_confidence("shared", 0.8)
    with pytest.raises(UserError, match="--temperatures 0.8"):
        api.simulate(old, plan, engine="fast", temperature=0.8)
