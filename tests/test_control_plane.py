"""runtime/control_plane.py: what a stage pass costs beyond its layers, read from stage 1's passes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from runtime.control_plane import _stage1_pass_ms, _stage1_period_ms
from sim.timeline import Event


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


def test_each_role_has_its_own_overhead_from_the_zero_time_run():
    # k = 3, head 1 ms (HEAD_MS): stage 1 sends 0.05 ms into its 1.25 ms pass, the middle stage's
    # zero-time pass is all overhead (0.02 ms), the last stage's 1.3 ms verify is 0.3 ms beyond its head
    from runtime.control_plane import HEAD_MS, _role_overheads

    evs = []
    for i in range(8):
        evs += [Event("draft", "stage 1", i * 2e-3, (HEAD_MS + 0.25) / 1e3, i, {"layers_ms": 0.05}),
                Event("forward", "stage 2", i * 2e-3 + 0.4e-3, 0.02e-3, None, {}),
                Event("verify", "stage 3", i * 2e-3 + 0.6e-3, (HEAD_MS + 0.3) / 1e3, i, {})]
    got = _role_overheads(SimpleNamespace(timeline=evs), 3)
    assert got == pytest.approx({"send_offset_ms": 0.05, "middle_pass_overhead_ms": 0.02, "last_pass_overhead_ms": 0.3})
    # two stages: no middle stage to measure
    two = [e for e in evs if e.row != "stage 2"]
    two = [Event(e.name, "stage 2" if e.row == "stage 3" else e.row, e.start_s, e.dur_s, e.token, e.args) for e in two]
    assert _role_overheads(SimpleNamespace(timeline=two), 2)["middle_pass_overhead_ms"] is None


def test_the_hop_jitter_is_the_robust_spread_of_the_transits():
    from runtime.control_plane import _hop_jitter_ms, _transit_ms

    # stage 1 sends at the end of its layers (0.05 ms into each pass); stage 2 starts 0.2 ms later,
    # ±0.05 ms, and once 5 ms later (a descheduled process: the robust spread ignores it)
    late = [0.2, 0.25, 0.15, 0.2, 0.25, 0.15, 0.2, 5.0]
    evs = []
    for i, gap in enumerate(late):
        t = i * 10e-3
        evs += [Event("draft", "stage 1", t, 1.2e-3, i, {"pos": i, "layers_ms": 0.05}),
                Event("forward", "stage 2", t + (0.05 + gap) / 1e3, 0.02e-3, None, {"pos": i})]
    res = SimpleNamespace(timeline=evs)
    assert _transit_ms(res) == pytest.approx(0.2)
    assert _hop_jitter_ms(res) == pytest.approx(1.4826 * 0.05, rel=1e-6)
