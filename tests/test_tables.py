"""dashboard/tables.py: Results as the pages' tables, and the plain same-budget sentence the Overview
and What-if pages show."""

from __future__ import annotations

import pytest

from dashboard import tables
from profiler.synthetic import write_synthetic_profile
from sim import api


@pytest.mark.parametrize("alpha, thread_speedup, ar_wins", [(0.02, 1.65, True), (0.98, 1.0, False)])
def test_same_budget_sentence(tmp_path, alpha, thread_speedup, ar_wins):
    p = write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: alpha, num_layers=12,
                                layer_ms=2.0, head_ms=12.0, hop_ms=0.2, thread_speedup={2: thread_speedup})
    table = tables.results_table(api.sweep(p, devices=2, tokens=300))
    text, wins = tables.same_budget_sentence(table)
    spec = table[table["mode"] != "ar"]
    assert wins is ar_wins is bool(spec["speedup_tp"].max() <= 1.0) and "2 cores" in text
    assert text.startswith("On the same hardware, plain AR using all 2 cores wins") == ar_wins


def test_no_sentence_without_thread_tables(tmp_path):
    p = write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: 0.5, num_layers=8)
    table = tables.results_table(api.sweep(p, devices=2, tokens=200))
    assert table["speedup_tp"].isna().all() and tables.same_budget_sentence(table) is None
