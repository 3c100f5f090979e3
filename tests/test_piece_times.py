"""profiler/piece_times.py and `Profile.retimed`: a decode step's pieces timed now, and a profile priced
with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.piece_times import PieceScale, PieceTimes
from ppsd.profile import load_profile

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "smollm2-135m-cpu"


def test_piece_times_give_now_over_profiled_per_piece():
    t = PieceTimes(64, 30, {"layers": 44.0, "head": 6.3, "embedding": 0.1, "exit_head:vocab4096": 0.6},
                   {"layers": 40.0, "head": 12.6, "embedding": 0.1, "exit_head:vocab4096": 0.5})
    s = t.scale
    assert (s.layers, s.head, s.embedding) == pytest.approx((1.1, 0.5, 1.0))
    assert s.exit_heads == {"vocab4096": pytest.approx(1.2)}
    assert s.drift_pct() == {"layers": 10.0, "head": -50.0, "embedding": 0.0, "exit_head:vocab4096": 20.0}
    assert t.summary()["flagged"]  # 60 points apart


def test_retimed_profile_scales_every_piece_and_nothing_else():
    p = load_profile(EXAMPLE)
    heads = list((p.latency.get("exit_heads") or {}))
    assert heads, "the example profile carries exit-head prices"
    loaded = p.acceptance  # a view shares what its profile has loaded
    scale = PieceScale(layers=1.1, head=0.6, embedding=2.0, exit_heads={heads[0]: 1.5})
    r = p.retimed(scale)
    assert r.layer_ms(3, 2, 100) == pytest.approx(1.1 * p.layer_ms(3, 2, 100))
    assert r.head_ms(1) == pytest.approx(0.6 * p.head_ms(1)) and r.embed_ms(4) == pytest.approx(2 * p.embed_ms(4))
    assert r.exit_head_ms(heads[0]) == pytest.approx(1.5 * p.exit_head_ms(heads[0]))
    for other in heads[1:]:
        assert r.exit_head_ms(other) == pytest.approx(p.exit_head_ms(other))
    assert r.exit_head_ms("shared") == pytest.approx(0.6 * p.exit_head_ms("shared"))  # the LM head
    units = [u for u in p.parallel_units() if u != p.parallel_base]
    if units:
        assert r.at_parallel(units[0]).head_ms(1) == pytest.approx(0.6 * p.at_parallel(units[0]).head_ms(1))
    # the rest of the profile is the same, and the original is untouched
    assert r.hop_ms() == p.hop_ms() and r.corun_slowdown(2) == p.corun_slowdown(2)
    assert r.acceptance is loaded
    assert load_profile(EXAMPLE).head_ms(1) == pytest.approx(p.head_ms(1))
    assert p.retimed(PieceScale()).layer_ms(0, 1) == pytest.approx(p.layer_ms(0, 1))


def test_retimed_profile_scales_the_corun_slowdown_by_the_corun_factor():
    """A co-run measured 5% dearer than profiled (`PieceScale.corun`) prices every k >= 2 stages 5% slower
    and leaves the pieces, the hop and one process alone."""
    p = load_profile(EXAMPLE)
    assert p.corun_slowdown(2) > 0 and p.latency.get("corun"), "the example profile carries a co-run table"
    r = p.retimed(PieceScale(corun=1.05))
    for k in (2, 3, 4):
        assert r.corun_slowdown(k) == pytest.approx(1.05 * p.corun_slowdown(k))
    assert r.corun_slowdown(1) == 1.0 and r.layer_ms(3, 1) == pytest.approx(p.layer_ms(3, 1))
    assert r.hop_ms() == p.hop_ms() and r.head_ms(1) == pytest.approx(p.head_ms(1))
    assert PieceScale(corun=1.05).drift_pct()["corun"] == pytest.approx(5.0)
    assert "corun" not in PieceScale().drift_pct()  # not measured: not reported
    assert load_profile(EXAMPLE).corun_slowdown(2) == pytest.approx(p.corun_slowdown(2))  # original untouched


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
    and a check's 0.97 both count as 1, and a check's 1.04 against the profile's 0.91 prices 1.04."""
    from runtime.validation.machine import CorunCheck

    check = CorunCheck(profile_slowdown=0.91, model_spec="m", adapter=None, threads=1, context=64, seconds=1.0)
    got = iter([0.97, 1.04])
    monkeypatch.setattr(CorunCheck, "measure", lambda self, when: self.runs.append(next(got)))
    assert check.now_over_profile("before a") == pytest.approx(1.0)
    assert check.now_over_profile("before b") == pytest.approx(1.04)
    assert check.runs == [0.97, 1.04]  # the report keeps what was measured
