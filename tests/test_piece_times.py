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
