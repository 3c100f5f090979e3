"""sim/planner/verdict.py: the one recommendation `ppsd plan`, the planner and the dashboard share — the
noise band read from the profile, degenerate plans never named best, ties and same-budget wins
said plainly — and `ppsd plan` printing and exposing it (--json)."""

from __future__ import annotations

import json
import math

import pytest

from ppsd.cli import main
from ppsd.profile.synthetic import write_synthetic_profile
from sim import api
from ppsd.modes import Mode
from sim.plan import Plan, Result, SimulatedDetails
from sim.planner.heads import best_over_heads, decide_over_heads
from sim.planner.verdict import (MIN_ALPHA, MIN_DRAFT_SHARE, NOISE_FLOOR, NoiseBand, Outcome, decide, degenerate_reason,
                         noise_band)


def _result(mode: Mode, exit_layer: int | None, speedup: float, tp: float | None = None, alpha: float = 0.7,
            mean_accepted: float = 2.5, draft_len: int = 1, head: str = "shared", stop: float | None = None) -> Result:
    """A hand-made simulated Result: only the figures the verdict reads."""
    plan = {Mode.AR: lambda: Plan(Mode.AR),
            Mode.EESD: lambda: Plan(Mode.EESD, exit_layer=exit_layer, draft_len=draft_len, exit_head=head,
                                    draft_stop=stop),
            Mode.PPSD: lambda: Plan(Mode.PPSD, exit_layer=exit_layer, stages=2, exit_head=head,
                                    draft_stop=stop)}[mode]()
    return Result(plan=plan, source="simulated", tokens=100, time_s=1.0 / speedup, tokens_per_s=20.0 * speedup,
                  speedup_vs_ar=speedup, speedup_vs_ar_tp=tp,
                  mean_accepted=1.0 if mode is Mode.AR else mean_accepted,
                  details=SimulatedDetails(engine="fast", acceptance_source="trace",
                                           stream_alpha=None if mode is Mode.AR else alpha, ar_tokens_per_s=20.0,
                                           budget="2 cores" if tp is not None else None,
                                           budget_tokens_per_s=None if tp is None else 30.0 * tp,
                                           ar_tp_tokens_per_s=None if tp is None else 30.0))


def _ar(tp: float | None = None) -> Result:
    return _result(Mode.AR, None, 1.0, tp)


# --- the noise band ------------------------------------------------------------------------
def _with_whole_step(tmp_path, p10: float, median: float, p90: float):
    p = write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: 0.5, num_layers=8)
    p.latency["whole_step"] = {"median_ms": median, "p10_ms": p10, "p90_ms": p90}
    return p


def test_noise_band_is_the_profiles_whole_step_spread_with_a_floor(tmp_path):
    wide = noise_band(_with_whole_step(tmp_path, 45.0, 50.0, 55.0))  # p10–p90 = ±10% of the median
    assert wide.rel == pytest.approx(0.1) and wide.measured == pytest.approx(0.1)
    assert "whole decode step" in wide.describe() and "±10.0%" in wide.describe()
    quiet = noise_band(_with_whole_step(tmp_path, 49.9, 50.0, 50.1))
    assert quiet.rel == NOISE_FLOOR and quiet.measured == pytest.approx(0.002) and "floor" in quiet.describe()
    bare = write_synthetic_profile(tmp_path / "bare", alpha_by_exit=lambda e: 0.5, num_layers=8)
    assert noise_band(bare).rel == NOISE_FLOOR and noise_band(bare).measured is None
    assert noise_band(None).rel == NOISE_FLOOR


def test_the_example_profiles_band_comes_from_its_whole_step():
    from dashboard_fixtures import EXAMPLE
    from ppsd.profile import load_profile

    p = load_profile(EXAMPLE)
    ws = p.latency["whole_step"]
    band = noise_band(p)
    assert band.measured == pytest.approx((ws["p90_ms"] - ws["p10_ms"]) / (2 * ws["median_ms"]))
    assert band.rel == max(NOISE_FLOOR, band.measured)


# --- win, tie, loss --------------------------------------------------------------------------
@pytest.mark.parametrize("speedup, outcome", [(1.20, Outcome.WIN), (1.02, Outcome.TIE), (0.99, Outcome.TIE),
                                              (0.90, Outcome.LOSS)])
def test_a_plan_within_the_band_is_a_tie_and_keeps_ar(speedup, outcome):
    band = NoiseBand(0.03)
    best = _result(Mode.PPSD, 6, speedup)
    v = decide([_ar(), best, _result(Mode.EESD, 6, 0.8)], band=band)
    assert v.outcome is outcome and v.best_speculative is best and v.band is band
    assert v.recommended is (best if outcome is Outcome.WIN else v.ar)
    if outcome is Outcome.TIE:
        assert v.text.startswith("stay with AR on one thread") and "within noise" in v.text and "±3.0%" in v.text
    elif outcome is Outcome.WIN:
        assert v.text.startswith(best.plan.label()) and "noise band" in v.text
    else:
        assert v.text.startswith("stay with AR") and "no speculative plan beats it" in v.text


def test_same_budget_figures_rank_and_a_same_budget_win_is_said_plainly():
    one_thread_fast = _result(Mode.PPSD, 6, 1.5, tp=0.9)   # fast against one thread, slow against two
    budget_win = _result(Mode.EESD, 8, 1.3, tp=1.2)
    v = decide([_ar(1.0), one_thread_fast, budget_win], band=NoiseBand(0.03))
    assert v.same_budget and v.baseline == "AR on all 2 cores" and v.outcome is Outcome.WIN
    assert v.recommended is budget_win
    assert "same-budget win on this machine" in v.text and "1.20× AR on all 2 cores" in v.text
    assert "1.30× AR on one thread" in v.text  # both figures, one meaning each
    tie = decide([_ar(1.0), _result(Mode.PPSD, 6, 1.5, tp=1.01)], band=NoiseBand(0.03))
    assert tie.outcome is Outcome.TIE and tie.recommended.plan.mode is Mode.AR
    assert tie.text.startswith("stay with AR on all 2 cores") and "within noise" in tie.text
    # without same-budget figures on every plan, the one-thread ranking applies
    assert not decide([_ar(), one_thread_fast, _result(Mode.EESD, 8, 1.3)]).same_budget


# --- degenerate plans ------------------------------------------------------------------------
def test_degenerate_plans_are_never_named_best_and_the_verdict_says_why():
    shallow = _result(Mode.EESD, 1, 0.98, alpha=MIN_ALPHA / 2, mean_accepted=1.05)
    lazy = _result(Mode.EESD, 20, 0.97, alpha=0.9, mean_accepted=1.0 / (1 - MIN_DRAFT_SHARE / 2))
    real = _result(Mode.PPSD, 20, 0.95)
    assert "drafts match only" in degenerate_reason(shallow)
    assert "accepted drafts" in degenerate_reason(lazy) and degenerate_reason(real) is None
    assert degenerate_reason(_ar()) is None
    v = decide([_ar(), shallow, lazy, real], band=NoiseBand(0.01))
    assert v.best_speculative is real and v.outcome is Outcome.LOSS
    assert [e.result for e in v.excluded] == [shallow, lazy]
    assert shallow.plan.label() in v.text and "degenerate" in v.text and len(v.notes) == 2
    # every speculative plan degenerate: no plan to offer, and the reason
    only = decide([_ar(), shallow], band=NoiseBand(0.01))
    assert only.outcome is Outcome.NO_PLAN and only.best_speculative is None and only.recommended.plan.mode is Mode.AR
    assert "drafts usefully" in only.text and "drafts match only" in only.text
    # even a degenerate plan that would "win" is not recommended
    cheap = _result(Mode.EESD, 1, 1.2, alpha=0.05, mean_accepted=1.05)
    assert decide([_ar(), cheap, real], band=NoiseBand(0.01)).recommended.plan.mode is Mode.AR


def test_a_sweep_with_a_useless_shallow_exit_never_recommends_it(tmp_path):
    # exit 1 matches 2% of positions yet is nearly free; deeper exits match often
    p = write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: 0.02 if e == 1 else 0.3 + 0.05 * e,
                                num_layers=12, layer_ms=2.0, head_ms=0.5, hop_ms=0.1, thread_speedup={2: 1.7})
    results = api.sweep(p, devices=2, tokens=300)
    v = decide(results, p)
    assert v.best_speculative is not None and v.best_speculative.plan.exit_layer != 1
    assert all(degenerate_reason(r) is None for r in v.best_by_mode.values())
    assert all(e.result.plan.exit_layer == 1 or "accepted drafts" in e.why for e in v.excluded)
    # the planner's entry points are this verdict
    assert api.recommend(results, p) == (v.recommended, v.text)
    head, best, text = best_over_heads({"shared": results}, p)
    over = decide_over_heads({"shared": results}, p)
    assert (head, best, text) == (over.head, over.recommended, over.text) and head == "shared"


# --- ppsd plan ------------------------------------------------------------------------------
def test_plan_prints_the_verdict_and_its_noise_band_and_json_carries_them(tmp_path, capsys):
    prof = write_synthetic_profile(tmp_path / "p", alpha_by_exit=lambda e: min(0.2 + 0.07 * e, 0.95), num_layers=12,
                                   layer_ms=2.0, head_ms=4.0, hop_ms=0.1, thread_speedup={2: 1.6})
    p = str(prof.path)
    assert main(["plan", "--profile", p, "--devices", "2", "--tokens", "300", "--max-draft-len", "3", "--json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)  # stdout is the JSON document alone
    assert all(r["noise_band"] == NOISE_FLOOR for r in rows)  # a synthetic profile has no whole step
    recommended = [r for r in rows if r["recommended"]]
    assert len(recommended) == 1
    v = recommended[0]["verdict"]
    assert v["outcome"] in {o.value for o in Outcome} and v["noise_band"] == NOISE_FLOOR
    assert v["metric"] == "speedup_vs_ar_tp" and v["baseline"] == "AR on all 2 cores"
    assert all((r["degenerate"] is None) or r["mode"] != "ar" for r in rows)
    if v["best_speculative"] is not None:
        best = next(r for r in rows if r["label"] == v["best_speculative"]["label"])
        assert best["degenerate"] is None
    assert main(["plan", "--profile", p, "--devices", "2", "--tokens", "300", "--max-draft-len", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"verdict ({v['outcome']}): {v['text']}"  # the answer first, word for word the JSON's
    assert out[2].startswith("noise band: ±3.0%") and "tie" in out[2]
    assert any(line.startswith("recommendation: ") and v["text"] in line for line in out)


def test_a_paired_profiles_band_is_its_doubt_not_the_machines_drift(tmp_path):
    p = _with_whole_step(tmp_path, 56.0, 67.7, 85.0)  # a bursty machine: ±21% over the grid
    p.latency["whole_step"].update(method="paired", ratio=1.10, calibration=1 / 1.10, repeats=20)
    band = noise_band(p)
    doubt = 1.6448536 * math.log(1.10) / math.sqrt(3)
    assert band.paired and band.measured == pytest.approx(doubt) and band.rel == pytest.approx(doubt)
    assert "paired timings" in band.source
    p.latency["whole_step"]["ratio"] = 1.0  # no doubt at all: the floor
    assert noise_band(p).rel == NOISE_FLOOR and "floor" in noise_band(p).source


def test_the_verdict_weighs_the_best_confidence_stop_against_the_best_fixed_gamma():
    rows = [_ar(), _result(Mode.EESD, 20, 1.30, draft_len=6, stop=0.5), _result(Mode.EESD, 20, 1.20, draft_len=4),
            _result(Mode.EESD, 20, 1.25, draft_len=6, stop=0.7), _result(Mode.PPSD, 15, 1.10)]
    v = decide(rows)
    assert v.stop_vs_fixed[0].plan.draft_stop == 0.5 and v.stop_vs_fixed[1].plan.draft_stop is None
    assert v.stop_gain == pytest.approx(1.30 / 1.20 - 1)
    assert "the best confidence stop, EESD E=20 γ=6 τ=0.5 (1.30×), is +8.3% against the best fixed γ" in v.text
    assert "beyond the" in v.text.split("confidence stop")[1]
    d = v.to_json_dict()["confidence_stop"]
    assert d["beyond_noise"] and d["best_fixed"]["label"] == "EESD E=20 γ=4"
    close = decide([_ar(), _result(Mode.EESD, 20, 1.21, draft_len=6, stop=0.5), _result(Mode.EESD, 20, 1.20)])
    assert "within the" in close.text.split("confidence stop")[1] and not close.to_json_dict()["confidence_stop"][
        "beyond_noise"]
    assert decide([_ar(), _result(Mode.EESD, 20, 1.2)]).stop_vs_fixed is None  # no stop swept: nothing said
    # a PPSD stop is weighed against the best pipeline without one
    pp = decide([_ar(), _result(Mode.PPSD, 15, 1.40, stop=0.5), _result(Mode.PPSD, 15, 1.30),
                 _result(Mode.EESD, 20, 1.35)])
    assert pp.stop_vs_fixed[1].plan.mode is Mode.PPSD and pp.stop_gain == pytest.approx(1.40 / 1.30 - 1)
    assert "against the best PPSD plan without one, PPSD E=15" in pp.text
