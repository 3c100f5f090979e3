"""validation/machine.py: the checks a validation takes of the machine while it measures (the
co-run check, `--retime`)."""

from __future__ import annotations

import pytest


def test_retimer_checks_the_corun_before_pipelined_plans_but_prices_pieces_only(monkeypatch):
    """`ppsd validate --retime` with a co-run check: before a pipelined plan the co-run check runs (a
    diagnostic, `corun_drift`), but no plan is priced with it: its layers-only reading moves apart from
    what a pipeline's stages see, so a plan's co-run slowdown stays the profile's."""
    import profiler.piece_times as pt
    from validation.machine import Retimer

    then = {"layers": 10.0, "head": 4.0, "embedding": 0.1}
    now = {"layers": 11.0, "head": 4.0, "embedding": 0.1}
    monkeypatch.setattr(pt, "time_pieces", lambda *a, **k: pt.PieceTimes(8, 30, dict(now), then))

    class Corun:
        def __init__(self):
            self.asked = []

        def measure(self, when):
            self.asked.append(when)

    corun = Corun()
    retimer = Retimer(profile=None, adapter=None, corun=corun)
    assert retimer.now("AR").corun == 1.0 and retimer.now("EESD E=2 γ=3").corun == 1.0
    ppsd = retimer.now("PPSD E=3 k=2", pipelined=True)
    assert ppsd.corun == 1.0 and ppsd.layers == pytest.approx(1.1)
    assert corun.asked == ["before PPSD E=3 k=2"]
    timings = retimer.summary(None)["timings"]
    assert [t["drift_pct"].get("corun") for t in timings] == [None, None, None]
    assert "co-run slowdown stays the profile's" in retimer.summary(None)["method"]
