"""sim/model/budget.py: same-budget baselines. A plan is compared with AR using every core it uses: AR and
EESD run on all threads of the budget, PPSD stages split it; `speedup_vs_ar` keeps its meaning
(against AR on one thread)."""

from __future__ import annotations

import json

import pytest

from ppsd.cli import main
from ppsd.profile import load_profile
from ppsd.profile.synthetic import write_synthetic_profile
from sim import api
from sim.model.budget import Budget, THREADS, default_budget, units_for
from ppsd.modes import Mode
from sim.plan import Plan

SPEEDUP_2T = 1.65  # what 2 threads gave ppsd's AR on the Intel machine (../shared/ARCHITECTURE.md)


@pytest.fixture(scope="module")
def two_cores(tmp_path_factory):
    return write_synthetic_profile(tmp_path_factory.mktemp("budget"), alpha_by_exit=lambda e: 0.3 + 0.05 * e,
                                   num_layers=12, layer_ms=2.0, head_ms=6.0, hop_ms=0.2, corun_slowdown=1.1,
                                   thread_speedup={2: SPEEDUP_2T})


def test_the_profile_carries_the_thread_tables(two_cores, tmp_path):
    p = load_profile(two_cores.path)  # through the loader, not the object that wrote it
    assert p.parallel_kind == "threads" and p.parallel_units() == [1, 2]
    assert p.at_parallel(2).layer_ms(0) == pytest.approx(p.layer_ms(0) / SPEEDUP_2T)
    assert p.at_parallel(1) is p and p.at_parallel(2) is p.at_parallel(2)
    with pytest.raises(Exception, match="no latency tables at 4 threads"):
        p.at_parallel(4)
    bare = write_synthetic_profile(tmp_path / "bare", num_layers=4)
    assert bare.parallel_kind is None and default_budget(bare) is None


def test_units_per_worker():
    b = Budget(4, THREADS)
    assert units_for(Plan(Mode.AR), b, [1, 2, 4]) == 4
    assert units_for(Plan(Mode.EESD, 2), b, [1, 2, 4]) == 4
    assert units_for(Plan(Mode.PPSD, 2, stages=2), b, [1, 2, 4]) == 2
    assert units_for(Plan(Mode.PPSD, 2, stages=3), b, [1, 2, 4]) == 1
    assert units_for(Plan(Mode.PPSD, 2, stages=2), b, [1, 4]) == 1  # no 2-thread tables: the largest below


def test_same_budget_figures(two_cores):
    ar = api.simulate(two_cores, Plan(Mode.AR), tokens=500)
    pp = api.simulate(two_cores, Plan(Mode.PPSD, 6, stages=2), tokens=500)
    ee = api.simulate(two_cores, Plan(Mode.EESD, 6, draft_len=3), tokens=500)
    assert ar.speedup_vs_ar == pytest.approx(1.0) and ar.speedup_vs_ar_tp == pytest.approx(1.0)
    # PPSD on 2 cores runs one thread a stage: its time is unchanged, the baseline 1.65× faster
    assert pp.details.budget == "2 cores"
    assert pp.speedup_vs_ar_tp == pytest.approx(pp.speedup_vs_ar / SPEEDUP_2T, rel=1e-9)
    assert pp.details.ar_tp_tokens_per_s == pytest.approx(ar.tokens_per_s * SPEEDUP_2T, rel=1e-9)
    # EESD gets both threads, like AR: every cost scales alike here, so its ratio to AR stays
    assert ee.speedup_vs_ar_tp == pytest.approx(ee.speedup_vs_ar, rel=1e-9)
    assert ee.details.budget_tokens_per_s == pytest.approx(ee.tokens_per_s * SPEEDUP_2T, rel=1e-9)
    one = api.simulate(two_cores, Plan(Mode.PPSD, 6, stages=2), tokens=500, budget=1)
    assert one.speedup_vs_ar_tp == pytest.approx(one.speedup_vs_ar, rel=1e-9)


def test_plan_json_carries_the_same_budget_speedup_on_every_row(two_cores, capsys):
    assert main(["plan", "--profile", str(two_cores.path), "--devices", "2", "--tokens", "300", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["speedup_vs_ar_tp"] is not None for r in rows)
    ar = next(r for r in rows if r["mode"] == "ar")
    assert ar["speedup_vs_ar_tp"] == pytest.approx(1.0) and ar["budget"] == "2 cores"
    assert main(["plan", "--profile", str(two_cores.path), "--devices", "2", "--tokens", "300"]) == 0
    out = capsys.readouterr().out
    assert "×AR 2 cores" in out and "recommendation:" in out


def test_recommend_says_when_ar_on_the_whole_budget_wins(two_cores):
    results = api.sweep(two_cores, devices=2, tokens=400)
    best, reason = api.recommend(results)
    ppsd_best = max((r for r in results if r.plan.mode is Mode.PPSD), key=lambda r: r.speedup_vs_ar)
    if ppsd_best.speedup_vs_ar_tp <= 1.0 and all(r.speedup_vs_ar_tp <= 1.0 for r in results if r.plan.mode.speculative):
        assert best.plan.mode is Mode.AR and reason.startswith("stay with AR on all 2 cores")
    # the one-thread ranking would have picked a speculative plan here: the budget changed the answer
    assert ppsd_best.speedup_vs_ar > 1.0 > ppsd_best.speedup_vs_ar_tp


def test_estimated_gpu_profiles_carry_tensor_parallel_baselines(tmp_path):
    from profiler.estimated_profile import write_analytic_profile

    p = load_profile(write_analytic_profile(tmp_path / "tp", "llama-2-7b", "a100-80gb", gpu_count=4).path)
    assert p.parallel_kind == "tensor_parallel" and p.parallel_units() == [1, 2, 3, 4]
    one, two, four = (p.at_parallel(k).layer_ms(0) for k in (1, 2, 4))
    # the weights split k ways, but every layer pays two all-reduces: faster, never k times faster
    assert one / 2 < two < one and one / 4 < four < two
    eager = load_profile(write_analytic_profile(tmp_path / "eager", "llama-2-7b", "a100-80gb", gpu_count=2,
                                                stack="eager").path)
    # an eager stack is host-bound at batch 1: splitting the GPU work saves nothing, the all-reduces cost
    assert eager.at_parallel(2).layer_ms(0) >= eager.layer_ms(0)
    assert default_budget(p, None).label == "4 GPUs"


def test_thread_tables_price_the_whole_step_ratio_the_profiler_measured(two_cores, tmp_path):
    """Pieces timed alone are distorted differently at each thread count; the tables at 2 threads
    are scaled so that AR on 2 threads relates to AR on 1 thread as the measured whole steps do."""
    import shutil

    folder = tmp_path / "whole"
    shutil.copytree(two_cores.path, folder)
    meta = json.loads((folder / "profile.json").read_text())
    base = load_profile(folder)
    parts_1 = base._parts_ms(base.layers, base.embedding, base.head)
    parts_2 = parts_1 / SPEEDUP_2T
    # measured: the whole step is 1.15x the pieces at 1 thread, 1.03x at 2 threads
    meta["latency"]["whole_step"] = {"context": int(base.context_values[0]), "n": 1, "median_ms": 1.15 * parts_1,
                                     "sum_of_parts_ms": parts_1, "ratio": 1 / 1.15}
    meta["latency"]["parallel"]["tables"]["2"]["whole_step_ms"] = 1.03 * parts_2
    (folder / "profile.json").write_text(json.dumps(meta))
    p = load_profile(folder)
    assert p.whole_step_consistency(1) == 1.0
    assert p.whole_step_consistency(2) == pytest.approx(1.03 / 1.15)
    assert p.at_parallel(2).layer_ms(0) == pytest.approx(p.layer_ms(0) / SPEEDUP_2T * 1.03 / 1.15)
    ar = api.simulate(p, Plan(Mode.AR), tokens=300)
    whole_ratio = (1.15 * parts_1) / (1.03 * parts_2)
    assert ar.details.ar_tp_tokens_per_s / ar.tokens_per_s == pytest.approx(whole_ratio, rel=1e-6)
    pp = api.simulate(p, Plan(Mode.PPSD, 6, stages=2), tokens=300)  # 1-thread pricing untouched
    assert pp.speedup_vs_ar == pytest.approx(api.simulate(two_cores, Plan(Mode.PPSD, 6, stages=2),
                                                          tokens=300).speedup_vs_ar, rel=1e-9)
