"""sim/planner/breakdown.py: where one token's time goes per pipeline stage comes from the scheme, and
adds up to the stage times the simulator runs (embedding, per-pass overhead and draws included)."""

from __future__ import annotations

import numpy as np
import pytest

from dashboard_fixtures import make_synthetic
from ppsd.errors import UserError
from ppsd.profile import load_profile
from ppsd.profile.synthetic import write_synthetic_profile
from sim.api import resolve_plan
from ppsd.modes import Mode
from sim.plan import Plan
from sim.planner.breakdown import stage_breakdown
from sim.schemes.ppsd.stage_costs import ppsd_costs


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return load_profile(make_synthetic(tmp_path_factory.mktemp("breakdown")))


def _by_stage(parts):
    out: dict[str, dict[str, float]] = {}
    for p in parts:
        out.setdefault(p.stage, {})
        out[p.stage][p.part] = out[p.stage].get(p.part, 0.0) + p.ms
    return out


def _assert_sums_to_the_simulated_stages(profile, plan, context=None):
    plan = resolve_plan(plan, profile)
    c = float(profile.context_values[0]) if context is None else float(context)
    costs = ppsd_costs(profile, plan, np.array([c]))
    by = _by_stage(stage_breakdown(profile, plan, context))
    assert len(by) == costs.k
    for m, (stage, parts) in enumerate(by.items()):
        busy = sum(ms for part, ms in parts.items() if part != "hop")
        assert busy == pytest.approx(float(costs.stage[m][0]), rel=1e-12)
        assert ("hop" in parts) == (m < costs.k - 1)
        if "hop" in parts:
            assert parts["hop"] == pytest.approx(costs.hop_ms)
    return by


def test_the_breakdown_sums_to_the_simulated_stage_times(synth):
    by = _assert_sums_to_the_simulated_stages(synth, Plan(Mode.PPSD, exit_layer=4, stages=3))
    first, *_, last = by
    assert first.startswith("stage 1 (L0–L3)")
    assert {"layers", "embedding", "exit head", "overhead", "hop"} <= set(by[first])
    assert "head" in by[last] and "exit head" not in by[last]
    assert by[first]["embedding"] == pytest.approx(synth.embed_ms(1))
    assert by[first]["exit head"] == pytest.approx(synth.exit_head_ms("shared", 1))


def test_the_breakdown_holds_with_a_control_plane_sampling_and_another_context(tmp_path):
    """Per-pass overheads by role, the transit as the hop's floor and the draws at T > 0: every
    piece the engines price is in the chart."""
    from ppsd.profile import load_profile as load

    src = make_synthetic(tmp_path / "base")
    meta_path = src / "profile.json"
    import json

    meta = json.loads(meta_path.read_text())
    meta["latency"]["control_plane"] = {"method": "test", "stages": {"3": {
        "pass_overhead_ms": 0.3, "send_offset_ms": 0.05, "middle_pass_overhead_ms": 0.02,
        "last_pass_overhead_ms": 0.4, "transit_ms": 0.7}}}
    meta["latency"]["sampling"] = {"vocab": [256], "median_ms": [0.5], "p10_ms": [0.4], "p90_ms": [0.6],
                                   "temperature": 1.0, "threads": 1, "repeats": 3, "method": "test"}
    meta_path.write_text(json.dumps(meta))
    profile = load(src)
    plan = Plan(Mode.PPSD, exit_layer=4, stages=3, hop_ms=0.1, temperature=0.7)
    by = _assert_sums_to_the_simulated_stages(profile, plan, context=float(profile.context_values[-1]))
    stages = list(by)
    assert by[stages[0]]["overhead"] == pytest.approx(0.3) and by[stages[1]]["overhead"] == pytest.approx(0.02)
    assert by[stages[0]]["hop"] == pytest.approx(0.7)  # the transit is the hop's floor
    assert "draw" in by[stages[0]] and "draw" in by[stages[-1]]


def test_an_unresolved_plan_is_resolved_and_a_plan_without_stages_refused(synth):
    plan = Plan(Mode.PPSD, exit_layer=4, stages=3)
    assert stage_breakdown(synth, plan) == stage_breakdown(synth, resolve_plan(plan, synth))
    with pytest.raises(UserError, match="no pipeline stages"):
        stage_breakdown(synth, Plan(Mode.EESD, exit_layer=4, draft_len=2))


def test_a_flat_profile_breaks_down_as_the_design_notes_say(tmp_path):
    profile = write_synthetic_profile(tmp_path / "flat", num_layers=8, layer_ms=1.0, head_ms=2.0, embed_ms=0.5,
                                      hop_ms=0.25, alpha_by_exit=lambda e: 0.5)
    by = _by_stage(stage_breakdown(profile, Plan(Mode.PPSD, exit_layer=4, stage_bounds=(0, 4, 8))))
    first, last = list(by)
    assert by[first]["layers"] == pytest.approx(4.0) and by[last]["layers"] == pytest.approx(4.0)
    assert by[first]["embedding"] == pytest.approx(0.5) and by[last]["head"] == pytest.approx(2.0)
