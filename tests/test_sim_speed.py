"""The fast cost lookups and replay (sim/costs.py, sim/fast.py) against the slow reference they
replaced (tests/sim_reference.py): whole sweeps agree to 1e-9 relative on the committed example
profile and on synthetic ones, greedy, sampled and rescaled; EESD round starts are identical."""

from __future__ import annotations

import types

import numpy as np
import pytest

import sim_reference as ref
from dashboard_fixtures import EXAMPLE
from profiler.schema import load_profile
from profiler.synthetic import write_synthetic_profile
from sim import fast, run
from sim.streams import Stream

REL = 1e-9


def _reference_sweep(monkeypatch, profile, **kw):
    """sim.run.sweep with the old cost model and replay swapped in (run.py itself is unchanged)."""
    ref._MODELS.clear()
    old_fast = types.SimpleNamespace(fast_ar=ref.fast_ar, fast_eesd=ref.fast_eesd, fast_ppsd=ref.fast_ppsd)
    with monkeypatch.context() as m:
        m.setattr(run, "cost_model", ref.cost_model)
        m.setattr(run, "ppsd_costs", ref.ppsd_costs)
        m.setattr(run, "resolve_plan", ref.resolve_plan)
        m.setattr(run, "fast", old_fast)
        return run.sweep(profile, **kw)


def _close(a, b) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b), 1e-300)


def _compare(new, old):
    assert len(new) == len(old)
    by_label = {r.plan.label(): r for r in old}
    for r in new:
        o = by_label[r.plan.label()]
        assert r.plan.stage_bounds == o.plan.stage_bounds
        for f in ("time_s", "tokens_per_s", "speedup_vs_ar", "mean_accepted"):
            assert _close(getattr(r, f), getattr(o, f)), (r.plan.label(), f, getattr(r, f), getattr(o, f))
        assert r.accepted_hist == o.accepted_hist and r.tokens == o.tokens
        assert all(_close(x, y) for x, y in zip(r.stage_busy, o.stage_busy)), r.plan.label()
        assert all(_close(x, y) for x, y in zip(r.device_busy, o.device_busy)), r.plan.label()


@pytest.fixture(scope="module")
def example():
    return load_profile(EXAMPLE)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    # non-uniform layers, per-token cost, co-run slowdown and a hop: every cost term moves
    return write_synthetic_profile(tmp_path_factory.mktemp("speed") / "s", alpha_by_exit=lambda e: 0.15 + 0.06 * e,
                                   num_layers=14, layer_ms=list(np.linspace(2.0, 3.5, 14)), head_ms=9.0,
                                   hop_ms=0.3, corun_slowdown=1.2, per_token_fraction=0.07, model_id="synth-14L")


@pytest.mark.parametrize("kw", [dict(devices=8), dict(devices=4, hop_ms=1.0, alpha_scale=1.5),
                                dict(devices=3, alpha_scale=0.5, temperature=1.0, tokens=700)])
def test_fast_sweep_equals_reference_on_the_example(monkeypatch, example, kw):
    _compare(run.sweep(example, **kw), _reference_sweep(monkeypatch, example, **kw))


@pytest.mark.parametrize("kw", [dict(devices=6), dict(devices=5, hop_ms=2.0, alpha_scale=1.25, tokens=900)])
def test_fast_sweep_equals_reference_on_a_synthetic_profile(monkeypatch, synthetic, kw):
    _compare(run.sweep(synthetic, **kw), _reference_sweep(monkeypatch, synthetic, **kw))


def test_eesd_round_starts_equal_the_pointer_chase():
    rng = np.random.default_rng(3)
    for trial in range(60):
        t = int(rng.integers(1, 400))
        match = rng.random(t) < rng.random()
        seg = rng.random(t) < 0.03
        seg[0] = True
        s = Stream(match, np.arange(t, dtype=float), seg, "test")
        for gamma in (1, 2, 3, 5, 8):
            got, want = fast.eesd_rounds(s, gamma), ref.eesd_rounds(s, gamma)
            for x, y in zip(got, want):
                assert np.array_equal(x, y), (trial, gamma)


def test_cost_arrays_are_read_only_and_shared(example):
    from sim.costs import cost_model

    cm = cost_model(example)
    c = np.arange(100.0, 180.0)
    a = cm.layers(c, 0, 10)
    assert a is cm.layers(c.copy(), 0, 10)  # same values, same cached array
    with pytest.raises(ValueError):
        a[0] = 1.0
    assert np.allclose(a, ref.CostModel(example).layers(c, 0, 10), rtol=0, atol=0)
