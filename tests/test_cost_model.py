"""CostModel (sim/model/cost_model.py): layer ranges equal the per-layer sum of the profile's tables, and the
cached cost arrays are shared and read-only."""

from __future__ import annotations

import numpy as np
import pytest

from dashboard_fixtures import EXAMPLE
from ppsd.profile import load_profile
from sim.model.cost_model import cost_model


@pytest.fixture(scope="module")
def example():
    return load_profile(EXAMPLE)


def test_layer_ranges_equal_the_per_layer_sum(example):
    cm = cost_model(example)
    c = np.array([64.0, 100.0, 300.0, 900.0])
    for lo, hi in ((0, 10), (10, 30), (0, 30), (15, 16)):
        want = [sum(example.layer_ms(layer, 1, ctx) for layer in range(lo, hi)) for ctx in c]
        assert cm.layers(c, lo, hi) == pytest.approx(want, rel=1e-12)
    # several new tokens (an EESD verification) interpolate over n as well
    want = [sum(example.layer_ms(layer, 3, ctx) for layer in range(20, 30)) for ctx in c]
    assert cm.layers(c, 20, 30, 3) == pytest.approx(want, rel=1e-12)


def test_cost_arrays_are_read_only_and_shared(example):
    cm = cost_model(example)
    c = np.arange(100.0, 180.0)
    a = cm.layers(c, 0, 10)
    assert a is cm.layers(c.copy(), 0, 10)  # same values, same cached array
    with pytest.raises(ValueError):
        a[0] = 1.0


# --- sampled decoding: the draw, and the PPSD verifier's q ---------------------------------------------

@pytest.fixture()
def sampled_profile(tmp_path):
    from ppsd.profile.synthetic import write_synthetic_profile

    return write_synthetic_profile(tmp_path / "s", num_layers=4, layer_ms=1.0, head_ms=2.0, embed_ms=0.1,
                                   vocab_size=1000, sample_ms={100: 0.1, 1000: 0.5})


def test_sample_ms_interpolates_in_the_vocabulary(sampled_profile, tmp_path):
    from ppsd.profile.synthetic import write_synthetic_profile

    p = sampled_profile
    assert p.sample_ms(1000) == pytest.approx(0.5) and p.sample_ms(550) == pytest.approx(0.3)
    assert p.sample_ms(50) == pytest.approx(0.05) and p.sample_ms(4000) == pytest.approx(2.0)  # proportional beyond
    assert p.head_vocab("shared") == 1000 and p.head_vocab("trained") == 1000 and p.head_vocab("vocab100") == 100
    bare = write_synthetic_profile(tmp_path / "bare", num_layers=4, vocab_size=1000)
    assert bare.sample_ms(1000) is None and cost_model(bare).sample_full() == 0.0


def test_sampled_plans_pay_the_runtimes_extra_work(sampled_profile):
    """At T > 0: AR and every verifier draw over the whole vocabulary, each draft over the exit
    head's, and the PPSD verifier runs the exit head again for all of q only where it rejects the
    draft (runtime/pipeline.py: q(draft) comes with the draft)."""
    from sim.plan import Plan
    from sim.schemes.ar import step_ms
    from sim.schemes.eesd import EESDCosts
    from sim.schemes.ppsd.stage_costs import ppsd_costs

    p, c = sampled_profile, np.array([64.0, 64.0])
    assert step_ms(p, c, sampled=True) - step_ms(p, c) == pytest.approx([0.5, 0.5])
    greedy = ppsd_costs(p, Plan("ppsd", exit_layer=2, stage_bounds=(0, 2, 4)), c)
    sampled = ppsd_costs(p, Plan("ppsd", exit_layer=2, stage_bounds=(0, 2, 4), temperature=0.7), c)
    # stage 1: embed 0.1 + 2 layers + exit head 2 (+ the draft's draw); the verifier: 2 layers + head 2
    assert greedy.stage[0] == pytest.approx([4.1, 4.1]) and greedy.stage[1] == pytest.approx([4.0, 4.0])
    assert sampled.stage[0] == pytest.approx([4.6, 4.6]) and sampled.exit_array() == pytest.approx([2.5, 2.5])
    assert sampled.stage[1] == pytest.approx([4.0 + 0.5] * 2) and sampled.reject_ms == pytest.approx(2.0)
    assert greedy.reject_ms == 0.0
    from sim.model.streams import Stream

    s = Stream(np.array([True, False]), c, np.array([False, False]), "t")  # no generation starts here
    assert sampled.stage_for(s)[1] == pytest.approx([4.5, 6.5])  # the rejected draft pays for all of q
    cm = cost_model(p)
    g, s = EESDCosts(cm, 2, 3), EESDCosts(cm, 2, 3, sampled=True)
    assert s.draft(c) - g.draft(c) == pytest.approx([0.5, 0.5])
    assert s.verify(c, 3) - g.verify(c, 3) == pytest.approx([0.5, 0.5])


def test_simulate_at_a_temperature_prices_the_plan_sampled(sampled_profile, capsys, tmp_path):
    from ppsd.profile.synthetic import write_synthetic_profile
    from sim import api
    from sim.plan import Plan

    p = sampled_profile
    kw = dict(acceptance="bernoulli", alpha=1.0, tokens=200, engine="fast")
    greedy = api.simulate(p, Plan("ppsd", exit_layer=2, stage_bounds=(0, 2, 4)), **kw)
    sampled = api.simulate(p, Plan("ppsd", exit_layer=2, stage_bounds=(0, 2, 4)), temperature=1.0, **kw)
    assert sampled.plan.temperature == 1.0 and greedy.plan.temperature == 0.0
    # all accepted: one token per pass of the slowest stage, 4.1 ms greedy; sampled, stage 1's 4.6
    # (its draft's draw), as the verifier (4.5) never needs all of q when it accepts every draft
    assert 1e3 / greedy.tokens_per_s == pytest.approx(4.1, rel=1e-6)
    assert 1e3 / sampled.tokens_per_s == pytest.approx(4.6, rel=1e-6)
    # the AR baseline is sampled too: 0.1 + 4 + 2 + 0.5 ms a token
    assert sampled.details.ar_tokens_per_s == pytest.approx(1e3 / 6.6)
    assert "latency.sampling" not in capsys.readouterr().err
    bare = write_synthetic_profile(tmp_path / "bare", num_layers=4, vocab_size=1000)
    api.simulate(bare, Plan("ar"), temperature=1.0, **kw)
    api.simulate(bare, Plan("ar"), temperature=1.0, **kw)
    err = capsys.readouterr().err
    assert err.count("has no latency.sampling") == 1 and "ppsd profile add-sampling" in err


def test_plan_temperature_round_trips():
    from ppsd.errors import UserError
    from sim.plan import Plan

    greedy, sampled = Plan("eesd", exit_layer=3), Plan("eesd", exit_layer=3, temperature=0.7)
    assert "temperature" not in greedy.to_dict() and sampled.to_dict()["temperature"] == 0.7
    assert Plan.from_dict(sampled.to_dict()).to_dict() == sampled.to_dict() and greedy.at_temperature(0.7) == sampled
    assert greedy.at_temperature(0) is greedy and not greedy.sampled and sampled.sampled
    with pytest.raises(UserError):
        Plan("ar", temperature=-1.0)


def _with_plane(tmp_path, roles: dict):
    from ppsd.profile.synthetic import write_synthetic_profile
    from runtime.control_plane import with_control_plane

    base = write_synthetic_profile(tmp_path / "base", num_layers=8, layer_ms=1.0, head_ms=2.0, embed_ms=0.1,
                                   hop_ms=0.0)
    block = {"method": "test", "stages": {"4": {"pass_overhead_ms": 0.2, "transit_ms": 0.1, **roles}}}
    return load_profile(with_control_plane(base.path, tmp_path / "cp", block))


def test_ppsd_prices_each_stage_with_its_roles_overhead(tmp_path):
    # stage 1's 0.2 ms overhead: 0.05 before its send (delays stage 2), 0.15 after (in its tail with
    # the exit head); a middle stage 0.02 ms, the last stage 0.3 ms
    from sim.model.cost_model import cost_model
    from sim.plan import Plan
    from sim.schemes.ppsd.stage_costs import ppsd_costs

    prof = _with_plane(tmp_path, {"send_offset_ms": 0.05, "middle_pass_overhead_ms": 0.02, "last_pass_overhead_ms": 0.3})
    cm = cost_model(prof)
    plan = Plan("ppsd", exit_layer=2, stage_bounds=(0, 2, 4, 6, 8))
    ctx = np.array([64.0])
    costs = ppsd_costs(prof, plan, ctx)
    bare = [cm.embed(1) + cm.layers(ctx, 0, 2)[0] + cm.exit_head(), cm.layers(ctx, 2, 4)[0], cm.layers(ctx, 4, 6)[0],
            cm.layers(ctx, 6, 8)[0] + cm.head(1)]
    assert [c[0] for c in costs.stage] == pytest.approx([bare[0] + 0.2, bare[1] + 0.02, bare[2] + 0.02, bare[3] + 0.3])
    assert costs.exit_array()[0] == pytest.approx(cm.exit_head() + 0.15)
    assert costs.overhead_ms == pytest.approx(0.2) and costs.hop_ms == pytest.approx(0.1)


def test_a_control_plane_without_roles_prices_every_stage_as_stage_1(tmp_path):
    from sim.model.cost_model import cost_model
    from sim.plan import Plan
    from sim.schemes.ppsd.stage_costs import ppsd_costs

    prof = _with_plane(tmp_path, {})
    roles = prof.pass_overheads_ms(4)
    assert (roles.first, roles.first_before_send, roles.middle, roles.last) == pytest.approx((0.2, 0.2, 0.2, 0.2))
    costs = ppsd_costs(prof, Plan("ppsd", exit_layer=2, stage_bounds=(0, 2, 4, 6, 8)), np.array([64.0]))
    assert costs.exit_array()[0] == pytest.approx(cost_model(prof).exit_head())  # all of it before the send


def test_the_hosts_hop_jitter_softens_the_restart_race_as_a_relative_spread_of_stage_1(tmp_path):
    # an absolute spread s per hand-over enters the engines' σ = cv·sqrt(2·w0·fr) as cv = s / w0
    from sim.plan import Plan
    from sim.schemes.ppsd.stage_costs import ppsd_costs

    plan = Plan("ppsd", exit_layer=2, stage_bounds=(0, 2, 4, 6, 8))
    quiet = ppsd_costs(_with_plane(tmp_path / "a", {}), plan, np.array([64.0]))
    assert quiet.jitter_cv == 0.0  # no probe, no measured jitter: the deterministic race
    noisy = ppsd_costs(_with_plane(tmp_path / "b", {"hop_jitter_ms": 0.3}), plan, np.array([64.0]))
    assert noisy.jitter_cv == pytest.approx(0.3 / noisy.stage[0][0])
