"""runtime/validation/machine.py: the checks a validation takes of the machine while it measures (the
co-run check, `--retime`)."""

from __future__ import annotations

import pytest


def test_retimer_measures_the_corun_before_pipelined_plans_only(monkeypatch):
    """`ppsd validate --retime` with a co-run check: before a pipelined plan the co-run slowdown is taken
    again and priced as now / profiled; before AR or EESD it is not measured."""
    import profiler.piece_times as pt
    from runtime.validation.machine import Retimer

    then = {"layers": 10.0, "head": 4.0, "embedding": 0.1}
    monkeypatch.setattr(pt, "time_pieces", lambda *a, **k: pt.PieceTimes(8, 30, dict(then), then))

    class Corun:
        def __init__(self):
            self.asked = []

        def now_over_profile(self, when):
            self.asked.append(when)
            return 1.04

    corun = Corun()
    retimer = Retimer(profile=None, adapter=None, corun=corun)
    assert retimer.now("AR").corun == 1.0 and retimer.now("EESD E=2 γ=3").corun == 1.0
    assert retimer.now("PPSD E=3 k=2", pipelined=True).corun == pytest.approx(1.04)
    assert corun.asked == ["before PPSD E=3 k=2"]
    timings = retimer.summary(None)["timings"]
    assert [t["drift_pct"].get("corun") for t in timings] == [None, None, pytest.approx(4.0)]
    assert "co-run" in retimer.summary(None)["method"]


def test_a_corun_figure_under_one_is_read_as_one(monkeypatch):
    """Sharing a machine cannot speed two processes up: a profile's 0.91 (a slow one-process baseline)
    and checks under 1 count as 1; "now" is the median of the run's checks so far, so one burst
    (1.50) does not price a plan alone while a lasting rise (1.04, 1.06, ...) does."""
    from runtime.validation.machine import CorunCheck

    check = CorunCheck(profile_slowdown=0.91, model_spec="m", adapter=None, threads=1, context=64, seconds=1.0)
    got = iter([0.97, 1.04, 1.50, 1.06, 1.07])
    monkeypatch.setattr(CorunCheck, "measure", lambda self, when: self.runs.append(next(got)))
    assert check.now_over_profile("before a") == pytest.approx(1.0)
    assert check.now_over_profile("before b") == pytest.approx(1.005)  # median of 0.97 and 1.04
    assert check.now_over_profile("before c") == pytest.approx(1.04)   # the 1.50 burst is not the machine
    assert check.now_over_profile("before d") == pytest.approx(1.05)
    assert check.now_over_profile("before e") == pytest.approx(1.06)   # a lasting rise is
    assert check.runs == [0.97, 1.04, 1.50, 1.06, 1.07]  # the report keeps what was measured
