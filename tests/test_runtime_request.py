"""runtime/request.py: `ppsd run` resolves a plan with the simulator's one rule, so a plan measured is
the plan predicted (same stage bounds); the checks on the request."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ppsd.cli import main
from ppsd.errors import UserError
from ppsd.profile.synthetic import write_synthetic_profile
from runtime.request import make_plan
from sim import api
from ppsd.modes import Mode
from sim.schemes.ppsd.partition import balanced_bounds
from sim.plan import Plan

LAYERS = 6  # tiny-llama's


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    # late layers cost 3× the early ones and the head as much as 4 layers: balancing by time cuts
    # the later stages differently from balancing by layer count
    return write_synthetic_profile(tmp_path_factory.mktemp("skewed"), alpha_by_exit=lambda e: 0.5,
                                   num_layers=LAYERS, layer_ms=list(np.linspace(1.0, 3.0, LAYERS)), head_ms=8.0)


@pytest.mark.parametrize("exit_layer, stages", [(1, 3), (2, 3), (1, 4), (2, 2)])
def test_run_and_simulate_choose_the_same_bounds(skewed, exit_layer, stages):
    run_plan = make_plan(Mode.PPSD, LAYERS, exit_layer, stages=stages, profile=skewed)
    sim_plan = api.resolve_plan(Plan(Mode.PPSD, exit_layer=exit_layer, stages=stages), skewed)
    assert run_plan.stage_bounds == sim_plan.stage_bounds


def test_the_time_rule_differs_from_the_layer_count_rule(skewed):
    # otherwise the test above could not fail
    by_time = make_plan(Mode.PPSD, LAYERS, 1, stages=3, profile=skewed).stage_bounds
    assert by_time != balanced_bounds(1, LAYERS, 3)
    assert make_plan(Mode.PPSD, LAYERS, 1, stages=3).stage_bounds == balanced_bounds(1, LAYERS, 3)


def test_a_profile_of_another_model_is_refused(tmp_path):
    other = write_synthetic_profile(tmp_path / "p", num_layers=8)
    with pytest.raises(UserError, match="8-layer"):
        make_plan(Mode.PPSD, LAYERS, 2, stages=3, profile=other)


def test_explicit_bounds_win(skewed):
    assert make_plan(Mode.PPSD, LAYERS, 2, bounds=(0, 2, 3, 6), profile=skewed).stage_bounds == (0, 2, 3, 6)


@pytest.mark.slow
def test_ppsd_run_measures_the_plan_ppsd_simulate_predicts(skewed, capsys):
    prof = str(skewed.path)
    assert main(["simulate", "--profile", prof, "--mode", "ppsd", "--exit", "1", "--stages", "3", "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)
    assert main(["run", "--model", "tiny-llama", "--mode", "ppsd", "--exit", "1", "--stages", "3", "--profile", prof,
                 "--oversubscribe", "--max-new-tokens", "4", "--limit", "1", "--repeats", "1", "--warmup", "0",
                 "--no-ar", "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert measured["source"] == "measured" and predicted["source"] == "simulated"
    assert measured["stage_bounds"] == predicted["stage_bounds"] != list(balanced_bounds(1, LAYERS, 3))
