"""`ppsd simulate` / `ppsd plan` with acceptance in any form (--alpha, --acceptance-rate,
--mean-accepted, --alpha-curve): converted to α, the conversion stated (stderr under --json), bad
input one line with exit 2."""

from __future__ import annotations

import json

import pytest

from ppsd.cli import main
from sim.model.acceptance_forms import alpha_from_acceptance_rate, alpha_from_mean_accepted
from test_sim_cli import bare, prof  # noqa: F401 - the same synthetic profiles as the simulate/plan CLI tests

PLAN = ["--tokens", "300", "--devices", "3", "--json"]


def _plan(capsys, *argv):
    assert main(["plan", *argv]) == 0
    cap = capsys.readouterr()
    return json.loads(cap.out), cap.err


def _ranking(rows):
    return [(r["mode"], r["exit_layer"], r["draft_len"], r["stages"], r["speedup_vs_ar"]) for r in rows]


def test_plan_acceptance_rate_ranks_as_its_alpha(prof, capsys):
    rows, err = _plan(capsys, "--profile", prof, "--acceptance-rate", "0.6", "--draft-len", "4", *PLAN)
    alpha = alpha_from_acceptance_rate(0.6, 4)
    assert f"acceptance rate 0.6 at γ=4 → α = {alpha:.3f} per position (independent positions)" in err
    same, _ = _plan(capsys, "--profile", prof, "--alpha", repr(alpha), *PLAN)
    assert _ranking(rows) == _ranking(same)
    # every exit gets the given α (a Bernoulli stream), not the profile's traces (0.17 .. 0.87)
    assert {r["exit_layer"] for r in rows if r["mode"] != "ar"} == set(range(1, 12))
    assert all(r["acceptance_source"] == "bernoulli" for r in rows)
    assert all(abs(r["stream_alpha"] - alpha) < 0.08 for r in rows)
    # the same number read as α is another answer: the forms are not interchangeable
    as_alpha, _ = _plan(capsys, "--profile", prof, "--alpha", "0.6", *PLAN)
    assert as_alpha[0]["speedup_vs_ar"] < rows[0]["speedup_vs_ar"] - 0.05


def test_plan_mean_accepted_and_text_output(prof, capsys):
    assert main(["plan", "--profile", prof, "--mean-accepted", "3.3616", "--draft-len", "4", "--tokens", "300"]) == 0
    out = capsys.readouterr().out
    assert "mean accepted tokens per round 3.3616 at γ=4 → α = 0.800" in out and "Bernoulli(α) tokens" in out
    assert "recommendation:" in out


def test_plan_without_traces_takes_a_given_alpha(bare, capsys):
    rows, err = _plan(capsys, "--profile", bare, "--alpha", "0.8", *PLAN)
    assert rows and "α = 0.8 per position (given)" in err
    assert main(["plan", "--profile", bare]) == 2
    assert "no acceptance data" in capsys.readouterr().err


def test_plan_alpha_curve_in_any_form(bare, tmp_path, capsys):
    curve = tmp_path / "c.csv"
    curve.write_text("exit_layer,mean_accepted,draft_len\n3,2.0,4\n6,3.0,4\n9,4.0,4\n")
    rows, err = _plan(capsys, "--profile", bare, "--alpha-curve", str(curve), *PLAN)
    assert {r["exit_layer"] for r in rows if r["mode"] != "ar"} == set(range(3, 10))  # no extrapolation
    assert "exit_layer 6: mean accepted tokens per round 3 at γ=4" in err
    at6 = [r["stream_alpha"] for r in rows if r["exit_layer"] == 6]
    assert abs(at6[0] - alpha_from_mean_accepted(3.0, 4)) < 0.08
    rate = tmp_path / "r.csv"
    rate.write_text("exit_layer,acceptance_rate\n2,0.3\n10,0.7\n")
    rows, err = _plan(capsys, "--profile", bare, "--alpha-curve", str(rate), "--draft-len", "4", *PLAN)
    assert "exit_layer 10: acceptance rate 0.7 at γ=4" in err


def test_simulate_acceptance_rate_json(bare, capsys):
    base = ["simulate", "--profile", bare, "--mode", "eesd", "--exit", "4", "--draft-len", "4", "--json"]
    assert main(base + ["--acceptance-rate", "0.6"]) == 0
    cap = capsys.readouterr()
    d = json.loads(cap.out)  # stdout is JSON only; the conversion went to stderr
    alpha = alpha_from_acceptance_rate(0.6, 4)
    assert f"α = {alpha:.3f}" in cap.err and d["acceptance_source"] == "bernoulli" and d["draft_len"] == 4
    assert main(base + ["--alpha", repr(alpha)]) == 0
    assert json.loads(capsys.readouterr().out) == d


SYN = ["simulate", "--synthetic-layers", "12", "--exit", "4"]


@pytest.mark.parametrize("argv, needle", [
    (SYN + ["--alpha", "3.3616"], "--mean-accepted 3.3616"),  # τ fed as α is caught
    (SYN + ["--mean-accepted", "3"], "needs the draft length"),
    (SYN + ["--acceptance-rate", "0.6"], "needs the draft length"),
    (SYN + ["--mean-accepted", "7", "--draft-len", "4"], "[1, 5]"),
    (SYN + ["--mean-accepted", "0.5", "--draft-len", "4"], "[1, 5]"),
    (SYN + ["--acceptance-rate", "1.2", "--draft-len", "4"], "[0, 1]"),
    (SYN + ["--alpha", "0.5", "--acceptance-rate", "0.5", "--draft-len", "4"], "both given"),
    (SYN + ["--acceptance", "trace", "--alpha", "0.5"], "--acceptance trace"),
])
def test_simulate_bad_acceptance_one_line_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("ppsd simulate: error:") and needle in err, err


def test_plan_bad_acceptance_one_line_exit_2(prof, tmp_path, capsys):
    curve = tmp_path / "c.csv"
    curve.write_text("exit_layer,acceptance_rate\n2,0.3\n")
    far = tmp_path / "far.csv"
    far.write_text("exit_layer,alpha\n4,0.5\n30,0.9\n")
    for argv, needle in [(["--mean-accepted", "3"], "needs the draft length"),
                         (["--alpha", "0.5", "--alpha-curve", str(curve)], "both given"),
                         (["--alpha", "0.5", "--category", "math"], "--category"),
                         (["--acceptance-rate", "0.5", "--draft-len", "4", "--alpha-scale", "1.2"], "--alpha-scale"),
                         (["--alpha-curve", str(curve)], "draft_len column"),
                         (["--alpha-curve", str(far)], "past this 12-layer model"),
                         (["--alpha-curve", str(tmp_path / "missing.csv")], "does not exist")]:
        assert main(["plan", "--profile", prof, *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith("ppsd plan: error:") and needle in err, (argv, err)
