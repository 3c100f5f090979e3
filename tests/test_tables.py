"""The plain same-budget verdict the Overview and What-if pages show (sim/planner/verdict.py, shown by
dashboard/ui.show_verdict) on sweeps where AR on both cores wins and where a plan does."""

from __future__ import annotations

import pytest

from dashboard import tables
from ppsd.profile.synthetic import write_synthetic_profile
from sim import api
from sim.planner.verdict import Outcome, decide


@pytest.mark.parametrize("alpha, thread_speedup, ar_wins", [(0.02, 1.65, True), (0.98, 1.0, False)])
def test_same_budget_verdict(tmp_path, alpha, thread_speedup, ar_wins):
    p = write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: alpha, num_layers=12,
                                layer_ms=2.0, head_ms=12.0, hop_ms=0.2, thread_speedup={2: thread_speedup})
    results = api.sweep(p, devices=2, tokens=300)
    v = decide(results, p)
    table = tables.results_table(results)
    assert v.same_budget and v.budget == "2 cores" and table["speedup_tp"].notna().all()
    assert (v.outcome is not Outcome.WIN) is ar_wins
    assert v.text.startswith("stay with AR on all 2 cores") == ar_wins
    if not ar_wins:
        assert v.recommended is v.best_speculative and "same-budget win on this machine" in v.text


def test_no_same_budget_verdict_without_thread_tables(tmp_path):
    p = write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: 0.5, num_layers=8)
    results = api.sweep(p, devices=2, tokens=200)
    assert tables.results_table(results)["speedup_tp"].isna().all()
    v = decide(results, p)
    assert not v.same_budget and v.baseline == "AR on one thread"
