"""bench/bench_conformance.py: the per-profile summary and the note a conformance folder carries."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest


@pytest.fixture
def bc(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the module sets it if unset on import; keep it to this test
    from bench import bench_conformance

    return bench_conformance


def _row(plan, pred, meas):
    return SimpleNamespace(plan=plan, predicted_speedup=pred, measured_speedup=meas,
                           speedup_error_pct=(pred / meas - 1) * 100)


def _table():
    rows = [_row("cpu a k2 x1", 1.0, 1.0), _row("cpu a k2 x10", 1.0, 1.1),   # twins, same prediction
            _row("cpu a k8 x1", 2.0, 1.6), _row("cpu a k8 x10", 2.2, 1.6),   # twins, predictions differ
            _row("l4 a k2 x1", 1.5, 1.5)]
    meta = {"cpu a k2 x1": {"profile": "cpu", "k": 2, "twin": ("cpu", 2)},
            "cpu a k2 x10": {"profile": "cpu", "k": 2, "twin": ("cpu", 2)},
            "cpu a k8 x1": {"profile": "cpu", "k": 8, "twin": ("cpu", 8)},
            "cpu a k8 x10": {"profile": "cpu", "k": 8, "twin": ("cpu", 8)},
            "l4 a k2 x1": {"profile": "l4", "k": 2, "twin": ("l4", 2)}}
    return rows, meta


def test_per_profile_splits_mape_by_profile_and_k_and_measures_replicate_noise(bc):
    rows, meta = _table()
    out = bc.per_profile(rows, meta)
    assert list(out) == ["cpu", "l4"]
    cpu = out["cpu"]
    errs = [abs(r.speedup_error_pct) for r in rows[:4]]
    assert cpu["plans"] == 4 and cpu["mape_speedup_pct"] == pytest.approx(sum(errs) / 4, abs=1e-3)
    assert cpu["mape_by_k"]["2"] == pytest.approx((0 + 100 / 11) / 2, abs=0.01)
    assert cpu["worst_plan"] == "cpu a k8 x10" and cpu["worst_error_pct"] == pytest.approx(37.5)
    # only the k = 2 twins are priced alike: their measured 10% apart is the noise floor
    assert cpu["replicate_pairs"] == 1 and cpu["replicate_disagreement_pct"] == pytest.approx(100 / 11, abs=0.01)
    assert out["l4"]["replicate_pairs"] == 0 and out["l4"]["replicate_disagreement_pct"] is None


def test_the_note_says_how_when_where_and_what_was_found(bc):
    rows, meta = _table()
    started = time.strptime("2026-12-02 03:30", "%Y-%m-%d %H:%M")
    ended = time.strptime("2026-12-02 03:51", "%Y-%m-%d %H:%M")
    note = bc.run_note(["--out", "x", "--stages", "2,8"], started, ended, bc.per_profile(rows, meta), [40.123, 12.5],
                       "a quiet night")
    assert note.startswith("python -m bench.bench_conformance --out x --stages 2,8; CPU")
    assert "2026-12-02 03:30-03:51 UTC (21 min)" in note and "emulated AR 40.12, 12.50 tok/s" in note
    assert "cpu 4 plans MAPE" in note and "worst +37.5%" in note and "replicate disagreement 9.09%" in note
    assert "l4 1 plans" in note and "replicate disagreement n/a" in note  # no twins to compare
    assert note.endswith(". a quiet night")
    # the --note text is said once, at the end, not also in the command line
    for argv in (["--out", "x", "--note", "a quiet night"], ["--out", "x", "--note=a quiet night"]):
        note = bc.run_note(argv, started, ended, bc.per_profile(rows, meta), [40.1], "a quiet night")
        assert note.startswith("python -m bench.bench_conformance --out x; ") and note.count("a quiet night") == 1
