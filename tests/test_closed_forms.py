"""sim/planner/closed_forms.py (plans priced by their schemes' closed forms) and the planner's helpers around it
(sim/planner/heads.py best_over_heads, sim/planner/gpus.py round_robin); torch-free, seconds."""

from __future__ import annotations

import pickle

import pytest

from dashboard_fixtures import make_multihead, make_synthetic
from ppsd.errors import UserError
from ppsd.profile import load_profile
from sim import api
from sim.planner import gpus, heads
from sim.planner import closed_forms as planning
from ppsd.modes import Mode
from sim.plan import Plan, SimulatedDetails


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return load_profile(make_synthetic(tmp_path_factory.mktemp("planning")))


@pytest.fixture(scope="module")
def multihead(tmp_path_factory):
    return load_profile(make_multihead(tmp_path_factory.mktemp("planning-heads")))


def test_acceptance_by_exit_is_the_mean_match_rate_scaled_and_capped(synth):
    plain = planning.acceptance_by_exit(synth)
    assert plain == pytest.approx(synth.alpha_by_exit())
    scaled = planning.acceptance_by_exit(synth, scale=3.0)
    assert all(scaled[e] == pytest.approx(min(3.0 * a, planning.ALPHA_CAP)) for e, a in plain.items())
    assert max(scaled.values()) == planning.ALPHA_CAP
    acc = synth.acceptance
    cat = sorted(acc["category"].unique())[0]
    beta = acc[acc["category"] == cat].groupby("exit_layer")["beta"].mean()
    t_rec = synth.beta_temperatures()[0]  # the one temperature a synthetic profile holds β at
    sampled = planning.acceptance_by_exit(synth, temperature=t_rec, category=cat)
    assert sampled == pytest.approx({int(e): float(v) for e, v in beta.items()})
    with pytest.raises(UserError, match="holds acceptance at temperature"):  # no silent substitution
        planning.acceptance_by_exit(synth, temperature=t_rec / 2, category=cat)


def test_closed_form_sweep_speedups_equal_the_closed_form_per_plan(synth):
    alpha = planning.acceptance_by_exit(synth)
    results = planning.closed_form_sweep(synth, alpha, range(1, 5), 4, hop_ms=0.3)
    n = synth.num_layers
    modes = [r.plan.mode for r in results]
    assert modes.count(Mode.AR) == 1
    assert modes.count(Mode.EESD) == 4 * len([e for e in alpha if 1 <= e < n])
    assert modes.count(Mode.PPSD) == sum(1 for e in alpha if 1 <= e < n for k in (2, 3, 4) if k <= n - e + 1)
    speedups = [r.speedup_vs_ar for r in results]
    assert speedups == sorted(speedups, reverse=True)  # best first, like sim.api.sweep
    for r in results:
        assert isinstance(r.details, SimulatedDetails)
        assert (r.details.engine, r.details.acceptance_source) == ("closed form", "iid")
        assert planning.is_closed_form(r)
        a = 0.0 if r.plan.mode == Mode.AR else alpha[r.plan.exit_layer]
        cf = api.closed_form(synth, api.resolve_plan(r.plan, synth), a)
        assert r.speedup_vs_ar == cf["speedup_vs_ar"]
        assert r.tokens_per_s == cf["tokens_per_s"]
        assert r.details.ar_tokens_per_s == pytest.approx(1000.0 / cf["ar_time_per_token_ms"])
        if r.plan.mode == Mode.PPSD:
            assert r.plan.stage_bounds is not None and r.plan.hop_ms == 0.3  # resolved
            assert r.mean_accepted == pytest.approx(1 / (1 - a))
    # the preview's Results travel between the sweep worker and the server as pickles
    assert [r.speedup_vs_ar for r in pickle.loads(pickle.dumps(results))] == speedups


def test_a_recommendation_from_closed_forms_is_sim_api_recommend(synth):
    results = planning.closed_form_sweep(synth, planning.acceptance_by_exit(synth), range(1, 9), 3)
    best, reason = api.recommend(results)
    assert best.speedup_vs_ar == max(r.speedup_vs_ar for r in results)
    assert best.plan.label() in reason


def test_best_over_heads_agrees_with_merge_and_recommend(multihead):
    by_head = heads.sweep_heads(multihead, tokens=400)
    head, best, reason = heads.best_over_heads(by_head)
    expected, expected_reason = api.recommend(heads.merge(heads.sweep_heads(multihead, tokens=400)))
    assert best.plan == expected.plan and reason == expected_reason
    assert best.speedup_vs_ar == expected.speedup_vs_ar
    assert head == (expected.plan.exit_head if expected.plan.mode != Mode.AR else next(iter(by_head)))
    # and with every plan slower than AR: AR, drafting with the first head
    slow = {h: [r for r in rs if r.plan.mode == Mode.AR or (r.speedup_vs_ar or 0) < 1.0] for h, rs in by_head.items()}
    head, best, reason = heads.best_over_heads(slow)
    assert best.plan.mode == Mode.AR and head == next(iter(slow)) and reason.startswith("stay with AR")
    with pytest.raises(UserError):
        heads.best_over_heads({})


def test_head_comparison_of_closed_form_results(multihead):
    """sim.planner.heads.comparison works on a closed-form preview as on a sweep (one row per head)."""
    by_head = {h: planning.closed_form_sweep(multihead, planning.acceptance_by_exit(multihead, head=h), range(1, 5),
                                             3, exit_head=h)
               for h in heads.available_heads(multihead)}
    rows = heads.comparison(multihead, by_head)
    assert [r["head"] for r in rows] == ["shared", "trained", "vocab4096"]
    from sim.planner.verdict import degenerate_reason

    for r, (h, results) in zip(rows, by_head.items()):
        # a head's best plan is never a degenerate one (sim/planner/verdict.py: its drafts rarely match)
        top = max((x for x in results if x.plan.mode != Mode.AR and degenerate_reason(x) is None),
                  key=lambda x: x.speedup_vs_ar)
        if top.speedup_vs_ar > 1.0:
            assert r["best_plan"] == top.plan.label() and r["best_speedup"] == round(top.speedup_vs_ar, 4)
        else:
            assert r["best_plan"] == "AR"


def test_round_robin_placement():
    assert gpus.round_robin(3, 4) is None
    assert gpus.round_robin(5, 2) == (0, 1, 0, 1, 0)
