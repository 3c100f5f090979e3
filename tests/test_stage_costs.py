"""sim/schemes/ppsd/stage_costs.py: the per-stage co-run factors every PPSD engine prices a pass by."""

import copy
import dataclasses

import numpy as np
import pytest

from ppsd.profile.synthetic import write_synthetic_profile
from ppsd.statistics import expected_max
from sim import api
from sim.plan import Plan
from profiler.runtime_probe import waiting_exit_layer
from sim.model.cost_model import pass_jitter_cv
from sim.schemes.ppsd.stage_costs import lockstep_factor, loaded_factors, ppsd_costs
from tests.engine_checks import simulate_both_engines


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return write_synthetic_profile(tmp_path_factory.mktemp("p"), alpha_by_exit=lambda e: 0.05 + 0.9 * e / 12,
                                   num_layers=12, layer_ms=2.0, head_ms=6.0, hop_ms=0.2, corun_slowdown=1.3,
                                   per_token_fraction=0.05)


def with_runtime_probe(profile, per_stage=(1.25, 1.35), jitter=0.05, waiting=None):
    """The profile with a runtime probe: its rounds' per-stage slowdowns and the passes' jitter, and with
    `waiting` the last stage's slowdown at the cut where it waits for every draft."""
    meta = copy.deepcopy(profile.meta)
    out = dataclasses.replace(profile, meta=meta)
    rounds = [{"slowdown_per_stage": list(per_stage)}] * 3
    out.latency["pipeline"] = {"slowdown": 1.3, "runtime": {"slowdown": float(np.mean(per_stage)), "rounds": rounds,
                                                             "pass_jitter_cv": jitter}}
    if waiting is not None:
        out.latency["pipeline"]["runtime"]["waiting"] = {"exit_layer": 10, "last_stage_slowdown": waiting}
    return out


def test_lockstep_factor_is_the_expected_slowest_pass():
    assert lockstep_factor([10.0, 10.0], 0.0) == 1.0
    assert lockstep_factor([10.0], 0.1) == 1.0
    assert lockstep_factor([10.0, 10.0], 0.05) == pytest.approx(expected_max(10.0, 10.0, 0.05) / 10.0)
    assert lockstep_factor([10.0, 10.0], 0.05) > lockstep_factor([10.0, 9.0], 0.05) > 1.0
    assert lockstep_factor([10.0, 5.0], 0.05) == pytest.approx(1.0, abs=1e-6)  # one stage far the slowest


def test_the_lock_step_scales_only_co_running_passes(base):
    p = with_runtime_probe(base, per_stage=(1.3, 1.3), jitter=0.06)
    stage = [np.array([10.0]), np.array([9.5])]
    f = loaded_factors(p, stage, 2)
    lock = lockstep_factor([10.0 * 1.3, 9.5 * 1.3], 0.06)
    assert lock > 1.0
    assert f[0][:2] == [1.0, 1.0] and f[1][:2] == [1.0, 1.0]  # alone: no lock step
    assert f[0][2] == f[1][2] == pytest.approx(1.3 * lock)
    assert loaded_factors(p, stage, 1) == [[1.0, 1.0]] * 2  # sharing a device: they queue instead


def test_one_pass_jitter(base):
    """The restart race and the lock step read one pass jitter: the runtime probe's pass-to-pass spread,
    else the pipeline probe's pass spread, else none."""
    assert pass_jitter_cv(base) == base.pass_jitter_cv()
    p = with_runtime_probe(base, jitter=0.05)
    assert pass_jitter_cv(p) == 0.05
    plan = api.resolve_plan(Plan("ppsd", exit_layer=6, stages=2), p)
    assert ppsd_costs(p, plan, np.array([64.0])).jitter_cv == pytest.approx(0.05)
    older = with_runtime_probe(base, jitter=0.0)
    older.latency["pipeline"]["pass_cv"] = 0.03
    assert pass_jitter_cv(older) == 0.03 and ppsd_costs(older, plan, np.array([64.0])).jitter_cv == pytest.approx(0.03)


def test_profile_reads_the_runtime_probe(base):
    assert base.lockstep_jitter_cv() == 0.0  # no probe: as before
    assert with_runtime_probe(base).lockstep_jitter_cv() == 0.05


def test_older_profiles_price_as_before(base):
    """Without the runtime probe's jitter and waiting cut, every stage shares the co-run factor."""
    c = ppsd_costs(base, api.resolve_plan(Plan("ppsd", exit_layer=6, stages=2), base), np.array([64.0]))
    assert c.factors[0] == c.factors[1] == pytest.approx([1.0, 1.0, base.corun_slowdown(2)])


def test_balanced_stages_wait_out_the_jitter(base):
    """A lock step costs most where the stages balance: the loaded factor carries the expected slowest
    pass of the priced stages; the runtime probe's per-stage shares do not split it (docs/model.md)."""
    p = with_runtime_probe(base, per_stage=(1.3, 1.3), jitter=0.06)
    costs = {e: ppsd_costs(p, api.resolve_plan(Plan("ppsd", exit_layer=e, stages=2), p), np.array([64.0]))
             for e in range(2, 11)}
    lock = {e: c.factors[0][2] / 1.3 for e, c in costs.items()}
    assert all(f >= 1.0 for f in lock.values())
    gap = {e: abs(float(c.stage[0][0] - c.stage[1][0])) for e, c in costs.items()}
    assert lock[min(gap, key=gap.get)] == pytest.approx(max(lock.values()))
    means = [float(s[0]) * 1.3 for s in costs[6].stage]
    assert lock[6] == pytest.approx(expected_max(*means, 0.06) / max(means))
    shares = loaded_factors(with_runtime_probe(base, per_stage=(1.2, 1.4), jitter=0.0), costs[6].stage, 2)
    assert shares[0][2] == shares[1][2] == pytest.approx(1.3)


def test_jitter_slows_a_balanced_pipeline_in_every_engine(base):
    plan = Plan("ppsd", exit_layer=6, stages=2)
    steady = with_runtime_probe(base, per_stage=(1.3, 1.3), jitter=0.0)
    jittery = with_runtime_probe(base, per_stage=(1.3, 1.3), jitter=0.06)
    for engine in ("fast", "event"):
        a = api.simulate(steady, plan, tokens=1500, acceptance="bernoulli", alpha=0.9, engine=engine)
        b = api.simulate(jittery, plan, tokens=1500, acceptance="bernoulli", alpha=0.9, engine=engine)
        assert b.time_s > a.time_s * 1.005
    plan = api.resolve_plan(plan, base)
    assert (api.closed_form(jittery, plan, 0.9, 64.0)["time_per_token_ms"]
            > api.closed_form(steady, plan, 0.9, 64.0)["time_per_token_ms"] * 1.005)


def test_the_waiting_cut_leaves_the_last_stage_a_fifth_of_the_layers():
    assert waiting_exit_layer(30) == 24 and waiting_exit_layer(32) == 26 and waiting_exit_layer(12) == 10
    assert waiting_exit_layer(3) == 2 and waiting_exit_layer(2) is None and waiting_exit_layer(1) is None


def test_a_last_stage_that_waits_is_priced_at_the_waiting_cut(base):
    """Where the last stage is the shorter it sleeps on every hidden state, and its pass costs what the
    runtime probe's waiting cut measured, whether stage 1 runs beside it or not; where it binds, or in a
    longer pipeline, the shared co-run factor stands."""
    plain = with_runtime_probe(base, per_stage=(1.2, 1.3), jitter=0.0)
    waits = with_runtime_probe(base, per_stage=(1.2, 1.3), jitter=0.0, waiting=1.45)
    assert plain.waiting_last_stage_slowdown() is None and waits.waiting_last_stage_slowdown() == 1.45
    retimed = copy.deepcopy(waits)
    retimed.latency["corun"] = {**retimed.latency.get("corun", {}), "now_over_profile": 1.1}
    assert retimed.waiting_last_stage_slowdown() == pytest.approx(1.45 * 1.1)  # as every co-run figure

    def factors(profile, exit_layer, stages=2):
        bounds = None if stages == 2 else (0, 4, 8, 12)
        plan = api.resolve_plan(Plan("ppsd", exit_layer=exit_layer, stages=stages, stage_bounds=bounds), profile)
        return ppsd_costs(profile, plan, np.array([64.0]))

    short_last = factors(waits, 10)  # stage 1: 10 layers and the exit head; the last: 2 layers and the LM head
    assert np.median(short_last.stage[1]) < np.median(short_last.stage[0])
    assert short_last.factors[1][1:] == pytest.approx([1.45, 1.45])
    assert short_last.factors[0] == pytest.approx(factors(plain, 10).factors[0])  # stage 1 as before
    long_last = factors(waits, 3)
    assert np.median(long_last.stage[1]) > np.median(long_last.stage[0])
    assert long_last.factors == factors(plain, 3).factors  # the last stage binds: it never waits
    assert factors(waits, 4, stages=3).factors == factors(plain, 4, stages=3).factors


def test_the_waiting_last_stage_slows_a_plan_alike_in_every_engine(base):
    plan = Plan("ppsd", exit_layer=10, stages=2)
    plain = with_runtime_probe(base, per_stage=(1.2, 1.3), jitter=0.0)
    waits = with_runtime_probe(base, per_stage=(1.2, 1.3), jitter=0.0, waiting=1.6)
    a = simulate_both_engines(plain, plan, tokens=1500, acceptance="bernoulli", alpha=0.6)
    b = simulate_both_engines(waits, plan, tokens=1500, acceptance="bernoulli", alpha=0.6)
    assert b.time_s > a.time_s * 1.01  # every rejection waits for the last stage's verdict
    resolved = api.resolve_plan(plan, base)
    assert (api.closed_form(waits, resolved, 0.6, 64.0)["time_per_token_ms"]
            > api.closed_form(plain, resolved, 0.6, 64.0)["time_per_token_ms"] * 1.01)
