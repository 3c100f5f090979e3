"""runtime/control_plane.py: what a stage pass costs beyond its layers, read from stage 1's passes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from runtime.control_plane import _stage1_pass_ms, _stage1_period_ms
from sim.plan import Event


def _result(pass_ms: float, gap_ms: float, n: int = 12):
    evs = [Event("draft", "stage 1", i * gap_ms / 1e3, pass_ms / 1e3, i, {}) for i in range(n)]
    evs += [Event("verify", "stage 2", i * gap_ms / 1e3 + 0.5e-3, 0.9e-3, i, {}) for i in range(n)]
    return SimpleNamespace(timeline=evs)


def test_a_pass_is_its_own_duration_not_the_time_the_cap_held_stage_1():
    # passes of 1.2 ms that start every 3 ms: stage 1 waited 1.8 ms for a verdict each time (the cap)
    res = _result(1.2, 3.0)
    assert _stage1_pass_ms(res) == pytest.approx(1.2)
    assert _stage1_period_ms(res) == pytest.approx(3.0)  # what the old method took for head + overhead
    # back to back, the two agree
    res = _result(1.2, 1.2)
    assert _stage1_pass_ms(res) == pytest.approx(_stage1_period_ms(res))


def test_too_few_passes_give_no_figure():
    assert _stage1_pass_ms(_result(1.0, 2.0, n=3)) is None
