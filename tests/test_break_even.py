"""Break-even acceptance (sim/planner/break_even.py): the acceptance at which a plan ties AR, on one
thread and within the same budget, in `ppsd plan` (table and --json), `ppsd simulate` and the verdict."""

import json

import numpy as np
import pytest

from ppsd.cli import main
from ppsd.profile.synthetic import write_synthetic_profile
from sim.api import resolve_plan, simulate, sweep
from sim.plan import Plan
from sim.planner.break_even import BreakEven, attach_break_even, break_even, crossing, mean_decode_context
from sim.planner.verdict import decide

N = 12


@pytest.fixture(scope="module")
def prof(tmp_path_factory):
    # a cheap exit head and a 1.65x faster AR on two threads: PPSD pays against one thread from low
    # acceptance, against both cores only from high acceptance
    return write_synthetic_profile(tmp_path_factory.mktemp("be") / "p", alpha_by_exit=lambda e: 0.3 + 0.05 * e,
                                   num_layers=N, layer_ms=1.0, head_ms=2.0, hop_ms=0.05,
                                   thread_speedup={2: 1.65})


def _speedup_at(prof, plan, alpha) -> float:
    return simulate(prof, plan, acceptance="bernoulli", alpha=alpha, tokens=6000, engine="fast", seed=3).speedup_vs_ar


def test_crossing_interpolates_between_grid_points():
    a = np.array([0.0, 0.5, 1.0])
    assert crossing(a, np.array([0.8, 0.9, 1.1])) == pytest.approx(0.75)
    assert crossing(a, np.array([1.0, 1.2, 1.4])) == 0.0
    assert crossing(a, np.array([0.5, 0.6, 0.9])) is None


@pytest.mark.parametrize("plan", [Plan("eesd", 6, draft_len=3), Plan("ppsd", 6, stages=2)], ids=lambda p: p.label())
def test_a_plan_run_at_its_break_even_acceptance_ties_ar(prof, plan):
    plan = resolve_plan(plan, prof)
    r = simulate(prof, plan, engine="fast")
    be = break_even(prof, r, mean_decode_context(prof))
    assert be is not None and be.note is None and 0.0 < be.alpha < 1.0
    # simulated for real at that acceptance (Bernoulli draws), the plan ties AR; a little above it pays,
    # a little below it does not
    assert _speedup_at(prof, plan, be.alpha) == pytest.approx(1.0, abs=0.03)
    assert _speedup_at(prof, plan, min(be.alpha + 0.15, 0.99)) > 1.0 > _speedup_at(prof, plan, max(be.alpha - 0.15, 0))


def test_eesd_break_even_matches_leviathans_formula(tmp_path):
    """EESD with costs that do not grow with the tokens verified: speedup = (1 − α^(γ+1)) / ((1 − α)(γc + 1))."""
    p = write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: 0.6, num_layers=N, layer_ms=1.0,
                                head_ms=0.0, embed_ms=0.0)
    plan = resolve_plan(Plan("eesd", 3, draft_len=4), p)
    c, g = 3 / N, 4

    def levi(a):
        return (1 - a ** (g + 1)) / ((1 - a) * (g * c + 1))

    grid = np.linspace(0.01, 0.99, 9801)
    expected = grid[np.argmax(np.array([levi(a) for a in grid]) >= 1.0)]
    # a long i.i.d. stream, as the formula assumes (a trace's runs of matches and its generations'
    # ends move the replayed point, and the break-even with it)
    r = simulate(p, plan, acceptance="bernoulli", alpha=0.6, tokens=40000, engine="fast", seed=1)
    be = break_even(p, r, 64.0)
    assert be.alpha == pytest.approx(expected, abs=0.01)


def test_same_budget_break_even_is_higher_and_a_costly_draft_never_pays(prof, tmp_path):
    plan = resolve_plan(Plan("ppsd", 6, stages=2), prof)
    r = simulate(prof, plan, engine="fast", budget=2)
    be = break_even(prof, r, mean_decode_context(prof))
    assert be.alpha_tp is not None and be.alpha_tp > be.alpha  # AR on both cores is the harder baseline
    # a hop of 100 ms between the stages (AR: 14 ms a token): the pipeline waits for verdicts that take
    # longer than the whole model, so PPSD cannot pay at any acceptance
    slow = write_synthetic_profile(tmp_path / "slow", alpha_by_exit=lambda e: 0.5, num_layers=N, layer_ms=1.0,
                                   head_ms=2.0, hop_ms=100.0)
    far = resolve_plan(Plan("ppsd", 6, stages=2), slow)
    never = break_even(slow, simulate(slow, far, engine="fast"), 64.0)
    assert never.alpha is None and "does not pay at any acceptance" in never.words()


def test_words_say_pays_or_needs():
    assert BreakEven(0.41, None, 0.54).words() == "pays while acceptance ≥ 0.41; profiled 0.54"
    assert BreakEven(0.83, None, 0.54).words() == "needs acceptance ≥ 0.83 to pay; profiled 0.54"
    assert BreakEven(0.3, 0.7, 0.5).words(same_budget=True) == "needs acceptance ≥ 0.70 to pay; profiled 0.50"
    assert BreakEven(0.0, None, 0.5).words().startswith("pays at any acceptance")


def test_every_swept_plan_and_the_verdict_carry_it(prof):
    results = sweep(prof, tokens=600)
    attach_break_even(prof, results)
    spec = [r for r in results if r.plan.mode.speculative]
    assert spec and all(r.details.break_even_alpha is None or 0.0 <= r.details.break_even_alpha <= 1.0 for r in spec)
    assert all(r.details.break_even_alpha_tp is None or r.details.break_even_alpha_tp >= r.details.break_even_alpha - 1e-9
               for r in spec if r.details.break_even_alpha is not None)
    ar = next(r for r in results if not r.plan.mode.speculative)
    assert ar.details.break_even_alpha is None
    v = decide(results, prof)
    assert v.break_even is not None and v.break_even_words in v.text
    assert v.to_json_dict()["break_even_alpha"] == v.break_even_alpha


def test_plan_and_simulate_show_it(prof, capsys):
    assert main(["plan", "--profile", str(prof.path), "--tokens", "600", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    spec = [r for r in rows if r["mode"] != "ar"]
    assert all("break_even_alpha" in r and "break_even_alpha_tp" in r for r in rows)
    assert any(r["break_even_alpha"] is not None for r in spec)
    verdict = next(r["verdict"] for r in rows if r["recommended"])
    assert "break_even_alpha" in verdict and verdict["break_even"]
    assert main(["plan", "--profile", str(prof.path), "--tokens", "600"]) == 0
    out = capsys.readouterr().out
    assert "pays at α ≥ (1 / all)" in out and "acceptance ≥" in out.splitlines()[1]
    assert main(["simulate", "--profile", str(prof.path), "--mode", "ppsd", "--exit", "6"]) == 0
    out = capsys.readouterr().out
    assert "break-even acceptance: against AR on one thread it pays while acceptance ≥" in out
