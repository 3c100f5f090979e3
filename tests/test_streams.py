"""sim/model/streams.py at temperature T > 0: the profile's beta at exactly T (sampled trajectories), never
another temperature's; simulate, plan and the planner's closed forms refuse a T the profile lacks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ppsd.cli import main
from ppsd.errors import UserError
from ppsd.paths import EXAMPLES_DIR
from ppsd.profile import load_profile
from ppsd.profile.synthetic import write_synthetic_profile
from sim import api
from sim.planner import closed_forms as planning
from sim.plan import Plan
from sim.model.streams import trace_stream

EXAMPLE = EXAMPLES_DIR / "smollm2-135m-cpu"
BETA = {0.7: lambda e: 0.15 + 0.1 * e, 1.0: lambda e: 0.05 + 0.05 * e}


@pytest.fixture(scope="module")
def prof(tmp_path_factory):
    return write_synthetic_profile(tmp_path_factory.mktemp("streams") / "p", alpha_by_exit=lambda e: 0.9,
                                   num_layers=8, layer_ms=2.0, head_ms=6.0, beta_by_temperature=BETA)


@pytest.mark.parametrize("t", [0.7, 1.0])
def test_the_stream_at_t_draws_from_the_beta_sampled_at_t(prof, t):
    e = 4
    want = float(np.mean(prof.beta_rows(t)[lambda d: d["exit_layer"] == e]["beta"]))
    draws = [trace_stream(prof, e, temperature=t, seed=s) for s in range(20)]
    assert {d.source for d in draws} == {"beta-sampled"}
    assert np.mean([d.alpha for d in draws]) == pytest.approx(want, abs=0.02)
    assert want == pytest.approx(BETA[t](e), abs=0.01)
    # the greedy trace (α 0.9 here) is what T = 0 replays
    assert trace_stream(prof, e).alpha == pytest.approx(0.9, abs=0.05)


def test_temperature_changes_the_prediction(prof):
    plan = Plan("ppsd", 5, stages=2)
    sp = {t: np.mean([api.simulate(prof, plan, temperature=t, seed=s, engine="fast").speedup_vs_ar
                      for s in range(5)]) for t in (0.0, 0.7, 1.0)}
    assert sp[0.0] > sp[0.7] > sp[1.0]
    cf = {t: planning.acceptance_by_exit(prof, temperature=t)[5] for t in (0.0, 0.7, 1.0)}
    assert cf[0.7] == pytest.approx(BETA[0.7](5), abs=0.01) and cf[1.0] == pytest.approx(BETA[1.0](5), abs=0.01)


@pytest.mark.parametrize("t", [0.3, 0.85, 1.5])
def test_a_temperature_the_profile_lacks_is_refused_everywhere(prof, t):
    plan = Plan("ppsd", 4, stages=2)
    for call in (lambda: api.simulate(prof, plan, temperature=t),
                 lambda: api.sweep(prof, temperature=t, devices=2, gammas=[1]),
                 lambda: planning.acceptance_by_exit(prof, temperature=t)):
        with pytest.raises(UserError, match=r"temperature\(s\) 0 \(greedy\), 0.7, 1, not at"):
            call()


def test_the_cli_refuses_in_one_line_with_exit_2(prof, capsys):
    for argv in (["simulate", "--profile", str(prof.path), "--mode", "ppsd", "--exit", "4", "--temperature", "0.5"],
                 ["plan", "--profile", str(prof.path), "--temperature", "0.5", "--devices", "2"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "0 (greedy), 0.7, 1" in err and "--temperatures 0.5" in err
    assert main(["simulate", "--profile", str(prof.path), "--mode", "ppsd", "--exit", "4", "--temperature", "0.7",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["acceptance_source"] == "beta-sampled"


def test_a_legacy_profile_keeps_its_one_temperature_and_nothing_else(tmp_path):
    import json
    import shutil

    legacy = tmp_path / "legacy"  # the example without its sampled trajectories: beta along the greedy path
    shutil.copytree(EXAMPLE, legacy)
    meta = json.loads((legacy / "profile.json").read_text())
    meta["acceptance"].pop("sampled", None)
    (legacy / "profile.json").write_text(json.dumps(meta))
    (legacy / "acceptance_sampled.csv.gz").unlink(missing_ok=True)
    ex = load_profile(legacy)
    t = ex.beta_temperatures()
    assert ex.beta_trajectory == "greedy" and len(t) == 1
    assert trace_stream(ex, 20, temperature=t[0]).source == "beta"
    with pytest.raises(UserError, match="not at 0.7"):
        trace_stream(ex, 20, temperature=0.7)  # issue 14: used to replay the T = 1 beta silently
