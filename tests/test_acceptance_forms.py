"""Acceptance in the forms papers report (sim/model/acceptance_forms.py) and α-curve files in any form
(sim/model/alpha_curve.py): formulas, inverses, ranges, statements."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ppsd.errors import UserError
from sim.model.alpha_curve import load_alpha_curve, read_alpha_curve
from sim.model.acceptance_forms import (AcceptanceForm, AcceptanceInput, acceptance_rate, alpha_from_acceptance_rate,
                                  alpha_from_mean_accepted, mean_accepted, to_alpha)

ALPHAS = np.linspace(0.0, 1.0, 201)
GAMMAS = range(1, 17)


def test_known_values():
    # α = 0.8, γ = 4: 1 + .8 + .64 + .512 + .4096 tokens per round; 2.3616 / 4 of the drafts accepted
    assert mean_accepted(0.8, 4) == pytest.approx(3.3616, abs=1e-12)
    assert acceptance_rate(0.8, 4) == pytest.approx(0.5904, abs=1e-12)
    assert mean_accepted(0.5, 1) == pytest.approx(1.5, abs=1e-15)
    assert (mean_accepted(0.0, 4), mean_accepted(1.0, 4)) == (1.0, 5.0)
    assert (acceptance_rate(0.0, 4), acceptance_rate(1.0, 4)) == (0.0, 1.0)


@pytest.mark.parametrize("gamma", [1, 2, 4, 8, 16])
def test_closed_forms_agree(gamma):
    for a in ALPHAS[:-1]:  # the closed forms divide by 1 − α
        assert mean_accepted(a, gamma) == pytest.approx((1 - a ** (gamma + 1)) / (1 - a), rel=1e-12, abs=1e-12)
        assert acceptance_rate(a, gamma) == pytest.approx(a * (1 - a ** gamma) / ((1 - a) * gamma),
                                                          rel=1e-12, abs=1e-12)


def test_round_trips_to_1e_12():
    worst = 0.0
    for g in GAMMAS:
        for a in ALPHAS:
            worst = max(worst, abs(alpha_from_mean_accepted(mean_accepted(a, g), g) - a),
                        abs(alpha_from_acceptance_rate(acceptance_rate(a, g), g) - a))
        for tau in np.linspace(1.0, g + 1.0, 101):
            assert mean_accepted(alpha_from_mean_accepted(tau, g), g) == pytest.approx(tau, abs=1e-12)
        for r in np.linspace(0.0, 1.0, 101):
            assert acceptance_rate(alpha_from_acceptance_rate(r, g), g) == pytest.approx(r, abs=1e-12)
    assert worst <= 1e-12
    # a tiny R keeps its digits (solved as E[a] = γR, not through τ = 1 + γR)
    assert alpha_from_acceptance_rate(1e-15, 4) == pytest.approx(4e-15, rel=1e-9)


def test_monotone():
    for g in (1, 4, 12):
        assert np.all(np.diff([mean_accepted(a, g) for a in ALPHAS]) > 0)
        assert np.all(np.diff([alpha_from_acceptance_rate(r, g) for r in ALPHAS]) > 0)


@pytest.mark.parametrize("call, needle", [
    (lambda: alpha_from_mean_accepted(0.9, 4), "[1, 5]"),
    (lambda: alpha_from_mean_accepted(5.5, 4), "PPSD-style"),
    (lambda: alpha_from_mean_accepted(float("nan"), 4), "[1, 5]"),
    (lambda: alpha_from_acceptance_rate(1.2, 4), "[0, 1]"),
    (lambda: alpha_from_acceptance_rate(-0.1, 4), "[0, 1]"),
    (lambda: alpha_from_acceptance_rate(0.5, 0), "positive integer"),
    (lambda: mean_accepted(1.5, 4), "[0, 1]"),
    (lambda: to_alpha("alpha", 3.3616), "--mean-accepted 3.3616"),
    (lambda: to_alpha("mean_accepted", 3.0), "--draft-len"),
    (lambda: to_alpha("acceptance_rate", 0.6), "--draft-len"),
])
def test_range_errors_are_one_line(call, needle):
    with pytest.raises(UserError) as exc:
        call()
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_to_alpha_statement():
    conv = to_alpha(AcceptanceForm.ACCEPTANCE_RATE, 0.6, 4)
    assert conv.alpha == pytest.approx(alpha_from_acceptance_rate(0.6, 4), abs=0)
    assert acceptance_rate(conv.alpha, 4) == pytest.approx(0.6, abs=1e-12)
    assert conv.statement == (f"acceptance rate 0.6 at γ=4 → α = {conv.alpha:.3f} per position "
                              "(independent positions)")
    assert AcceptanceInput(AcceptanceForm.MEAN_ACCEPTED, 3.3616, 4).to_alpha().alpha == pytest.approx(0.8, abs=1e-12)
    assert to_alpha("alpha", 0.8).alpha == 0.8 and "given" in to_alpha("alpha", 0.8).statement


def test_forms_are_not_interchangeable():
    # the same number read in another form is a different α, by tens of percent
    assert alpha_from_acceptance_rate(0.6, 4) - 0.6 > 0.15
    assert alpha_from_mean_accepted(1.6, 4) < 0.6 - 0.15
    # and a PPSD round (until the first rejection, τ = 1/(1−α)) is not the EESD round these take
    assert 1 / (1 - 0.8) != pytest.approx(mean_accepted(0.8, 4), rel=0.3)


# --- α-curve files in any form -------------------------------------------------------------------
def test_curve_acceptance_rate_column(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text("exit_layer,acceptance_rate,draft_len\n16,0.7,4\n8,0.5,4\n")
    c = read_alpha_curve(f)
    assert c.kind == "exit_layer" and c.form is AcceptanceForm.ACCEPTANCE_RATE and list(c.x) == [8, 16]
    assert list(c.alpha) == [alpha_from_acceptance_rate(0.5, 4), alpha_from_acceptance_rate(0.7, 4)]
    assert "acceptance rate 0.5 at γ=4" in c.statements[0] and "acceptance rate 0.7" in c.statements[1]
    assert load_alpha_curve(f)[2].tolist() == c.alpha.tolist()


def test_curve_mean_accepted_needs_draft_len(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text("relative_depth,mean_accepted\n0.25,2.0\n0.5,3.3616\n")
    with pytest.raises(UserError, match="draft_len column"):
        read_alpha_curve(f)
    c = read_alpha_curve(f, draft_len=4)
    assert c.kind == "relative_depth" and c.alpha[1] == pytest.approx(0.8, abs=1e-12)
    g = tmp_path / "g.csv"
    g.write_text("exit_layer,mean_accepted,draft_len\n4,2.0,4\n")
    with pytest.raises(UserError, match="--draft-len is 6"):
        read_alpha_curve(g, draft_len=6)
    assert read_alpha_curve(g, draft_len=4).alpha[0] == pytest.approx(alpha_from_mean_accepted(2.0, 4))


def test_curve_json_columns_and_errors(tmp_path):
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"exit_layer": [4, 8], "mean_accepted": [2.0, 3.0], "draft_len": 4}))
    assert read_alpha_curve(js).alpha.tolist() == [alpha_from_mean_accepted(2.0, 4), alpha_from_mean_accepted(3.0, 4)]
    for text, needle in [("exit_layer,alpha,acceptance_rate\n4,0.5,0.5\n", "one acceptance column"),
                         ("exit_layer,acceptance\n4,0.5\n", "no acceptance column"),
                         ("exit_layer,mean_accepted,draft_len\n4,7,4\n", "[1, 5]"),
                         ("exit_layer,alpha\n4,3.36\n", "mean_accepted column"),
                         ("exit_layer,acceptance_rate,draft_len\n4,0.5,2.5\n", "whole numbers")]:
        f = tmp_path / "bad.csv"
        f.write_text(text)
        with pytest.raises(UserError) as exc:
            read_alpha_curve(f)
        assert needle in str(exc.value) and "\n" not in str(exc.value), (text, str(exc.value))
