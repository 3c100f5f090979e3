"""The latency grid in interleaved rounds with a paired whole step (profiler/latency.py), the
calibration it gives the tables, and the doubt it leaves in the intervals (issue 27)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from profiler import latency as lat
from runtime.llm import load_model
from ppsd.profile.synthetic import write_synthetic_profile
from ppsd.statistics import widened
from sim.intervals import budget_cv, latency_cv
from ppsd.modes import Mode
from sim.plan import Plan


def test_whole_step_block_calibrates_to_the_paired_whole_step():
    whole = [10.0, 11.0, 9.0, 10.0, 12.0]
    parts = [12.0, 13.2, 10.8, 12.0, 14.4]  # every pair 1.2x its whole step
    ws = lat.whole_step_block(whole, parts, context=64, n=1)
    assert ws["method"] == "paired" and ws["ratio"] == pytest.approx(1.2)
    assert ws["calibration"] == pytest.approx(1 / 1.2) and ws["flagged"]
    assert "scaled by 0.833" in ws["note"] and "slower" in ws["note"]
    assert ws["ratio_cv"] == pytest.approx(0.0, abs=1e-9)  # the pairs agree exactly
    assert ws["median_ms"] == 10.0 and ws["samples_ms"] == whole  # the machine's speed, in time order
    fine = lat.whole_step_block([10.0] * 4, [10.3] * 4, context=64, n=1)
    assert not fine["flagged"] and fine["note"].startswith("sum of parts within")


def test_measure_grids_interleaves_thread_counts_and_calibrates_each(monkeypatch):
    adapter = load_model("tiny-llama")
    cfg = lat.LatencyConfig(n_values=(1, 2), context_values=(8, 16), warmup=1, repeats=3, whole_step_repeats=4)
    seen = []
    real = lat.timed_step

    def spy(adapter, cache, ids, context, clock):
        import torch
        seen.append(torch.get_num_threads())
        return real(adapter, cache, ids, context, clock)

    monkeypatch.setattr(lat, "timed_step", spy)
    ticks = []
    grids = lat.measure_grids(adapter, cfg, (1, 2), tick=lambda: ticks.append(1))
    assert set(grids) == {1, 2} and len(ticks) == 2 * 4  # a tick per cell and thread count
    # interleaved: the thread count changes within the run, round after round (not one block each)
    changes = sum(1 for a, b in zip(seen, seen[1:]) if a != b)
    assert changes >= 2 * (cfg.warmup + cfg.repeats) - 1
    for t, g in grids.items():
        ws = g["whole_step"]
        assert ws["method"] == "paired" and ws["repeats"] == cfg.repeats * 2
        assert ws["calibration"] == pytest.approx(1 / ws["ratio"])
        layers = np.asarray(g["layers"]["median_ms"])
        assert layers.shape == (adapter.num_layers, 2, 2) and np.all(layers > 0)
    assert grids[2]["whole_step"]["speedup_vs_base"] > 0 and grids[2]["whole_step"]["speedup_cv"] >= 0
    block = lat.thread_tables_block(grids, 1)
    assert list(block["tables"]) == ["2"] and block["tables"]["2"]["calibration"] == grids[2]["whole_step"]["calibration"]


def test_probe_against_alone_ignores_drift_between_grid_and_probe():
    # stage passes: alone 8 ms (layers 6 + head 2), in the pipeline 8.8 ms; the tables priced 11 ms
    # alone rows: (layers ms, head ms)
    alone = {0: [(6.0, 2.0)] * 5, 1: [(6.0, 2.0)] * 5}
    # pipeline rows: (token, layers ms, head ms, sent at s, waiting since s, received at s)
    piped = {r: [(i, 6.6, 2.2, float(i), float(i), float(i) + 1e-4) for i in range(5)] for r in (0, 1)}
    rounds = [(alone, piped)] * 3
    vs_tables = lat.summarise_probe_rounds(rounds, 2, 4, "gloo", [11.0, 11.0])
    vs_alone = lat.summarise_probe_rounds(rounds, 2, 4, "gloo", [11.0, 11.0], against_alone=True)
    assert vs_tables["slowdown"] == pytest.approx(0.8) and vs_tables["slowdown_base"] == "tables"
    assert vs_alone["slowdown"] == pytest.approx(1.1) and vs_alone["slowdown_base"] == "alone"
    assert vs_alone["rounds"][0]["alone_vs_tables"] == [0.7273, 0.7273]  # the drift is still on record
    warn = lat.probe_warnings(vs_alone)
    assert warn and "does not carry that" in warn[0]


def _whole(ratio: float) -> dict:
    return {"context": 64, "n": 1, "median_ms": 50.0, "sum_of_parts_ms": 50.0 * ratio, "ratio": ratio,
            "flagged": abs(ratio - 1) > 0.1, "note": "", "method": "paired", "calibration": 1 / ratio}


def _paired(prof_dir, ratio: float, speedup_cv: float | None = None):
    """A synthetic profile whose whole step was measured paired at `ratio` (parts / whole)."""
    import json

    from ppsd.profile import load_profile

    f = prof_dir / "profile.json"
    meta = json.loads(f.read_text())
    meta["latency"]["whole_step"] = _whole(ratio)
    if speedup_cv is not None:
        for t in meta["latency"]["parallel"]["tables"].values():
            t["speedup_cv"] = speedup_cv
    f.write_text(json.dumps(meta))
    return load_profile(prof_dir)


def test_calibration_doubt_widens_speculative_plans_only(tmp_path):
    base = write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: 0.6, num_layers=8)
    assert base.calibration_doubt() == 0.0 and base.piece_calibration == 1.0
    prof = _paired(tmp_path / "p", 1.2)
    assert prof.calibration_doubt() == pytest.approx(math.log(1.2) / math.sqrt(3))
    assert prof.piece_calibration == pytest.approx(1 / 1.2)
    eesd, ar = Plan(Mode.EESD, 4, draft_len=2), Plan(Mode.AR)
    assert latency_cv(prof, eesd) > latency_cv(base, eesd)
    assert latency_cv(prof, eesd) >= prof.calibration_doubt()
    assert latency_cv(prof, ar) == 0.0


def test_budget_cv_reads_the_thread_speedup_spread(tmp_path):
    base = write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: 0.6, num_layers=8, thread_speedup={2: 1.5})
    assert budget_cv(base, 2) == 0.0
    prof = _paired(tmp_path / "p", 1.0, speedup_cv=0.04)
    assert budget_cv(prof, 2) == pytest.approx(0.04) and budget_cv(prof, 1) == 0.0


def test_widened_combines_spreads_in_log_space():
    assert widened(0.9, 1.1, 2.0, 0.0) == pytest.approx((1.8, 2.2))
    lo, hi = widened(0.9, 1.1, 2.0, 0.05)
    z = 1.6448536 * 0.05
    assert lo == pytest.approx(2.0 * math.exp(-math.hypot(math.log(1 / 0.9), z)))
    assert hi == pytest.approx(2.0 * math.exp(math.hypot(math.log(1.1), z)))
    assert widened(None, 1.1, 2.0, 0.1) == (None, None)


def test_piece_times_compare_raw_pieces_with_the_uncalibrated_price(tmp_path):
    from profiler.piece_times import time_pieces

    base = write_synthetic_profile(tmp_path / "q", num_layers=6)
    adapter = load_model("tiny-llama")
    plain = time_pieces(base, adapter, repeats=3, warmup=1)
    import json

    from ppsd.profile import load_profile

    f = tmp_path / "q" / "profile.json"
    meta = json.loads(f.read_text())
    meta["latency"]["whole_step"] = _whole(1.25)
    f.write_text(json.dumps(meta))
    prof = load_profile(tmp_path / "q")
    cal = time_pieces(prof, adapter, repeats=3, warmup=1)
    for k in ("layers", "head", "embedding"):
        assert cal.profile_ms[k] == pytest.approx(plain.profile_ms[k] / 0.8)


def test_paired_thread_tables_price_ar_by_the_round_by_round_speedup(tmp_path):
    import json

    from ppsd.profile import load_profile

    write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: 0.6, num_layers=8, thread_speedup={2: 1.5})
    f = tmp_path / "p" / "profile.json"
    meta = json.loads(f.read_text())
    meta["latency"]["whole_step"] = _whole(1.0)
    meta["latency"]["parallel"]["tables"]["2"].update(whole_step_ms=30.0, speedup_vs_base=1.25, speedup_cv=0.02)
    f.write_text(json.dumps(meta))
    prof = load_profile(tmp_path / "p")
    one = prof._parts_ms(prof.layers, prof.embedding, prof.head)
    two = prof.at_parallel(2)
    # AR on 2 threads = AR on one over the paired speedup, not the medians' 50 / 30 nor the tables' 1.5
    assert two._parts_ms(two.layers, two.embedding, two.head) == pytest.approx(one / 1.25)
