"""runtime/same_budget.py: `ppsd run` measures the plan against AR on the same cores, by the rule the
simulator prices (sim/model/budget.py)."""

from __future__ import annotations

import json

import pytest

from ppsd.cli import main
from runtime.same_budget import threads_for
from sim.model.budget import THREADS, Budget, units_for
from ppsd.modes import Mode
from sim.plan import Plan


@pytest.mark.parametrize("plan", [Plan(Mode.AR), Plan(Mode.EESD, 2), Plan(Mode.PPSD, 2, stages=2),
                                  Plan(Mode.PPSD, 1, stages=3)])
@pytest.mark.parametrize("cores", [1, 2, 4, 8])
def test_the_runtime_splits_cores_as_the_simulator_prices_them(plan, cores):
    assert threads_for(plan, cores) == units_for(plan, Budget(cores, THREADS), list(range(1, cores + 1)))


RUN = ["run", "--model", "tiny-llama", "--exit", "3", "--max-new-tokens", "6", "--limit", "1", "--repeats", "1",
       "--warmup", "0", "--json"]


@pytest.mark.parametrize("mode", ["ppsd", "eesd", "ar"])
def test_run_reports_the_same_budget_speedup(mode, capsys):
    assert main([*RUN, "--mode", mode, "--cores", "2"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["budget"] == "2 cores" and r["ar_tp_tokens_per_s"] > 0
    assert r["speedup_vs_ar_tp"] == pytest.approx(r["budget_tokens_per_s"] / r["ar_tp_tokens_per_s"], rel=1e-9)
    if mode == "ppsd":  # one thread a stage on 2 cores: the plan's own run is its same-budget run
        assert r["budget_tokens_per_s"] == r["tokens_per_s"]
    if mode == "ar":
        assert r["speedup_vs_ar_tp"] == 1.0
    # speedup_vs_ar keeps its meaning: against AR on one thread, measured in the same run
    assert r["speedup_vs_ar"] == pytest.approx(r["tokens_per_s"] / r["ar_tokens_per_s"], rel=1e-9)


def test_one_core_means_no_same_budget_figures(capsys):
    assert main([*RUN, "--mode", "ppsd", "--cores", "1"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["speedup_vs_ar_tp"] is None and r.get("budget") is None
