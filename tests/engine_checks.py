"""Shared checks of the PPSD engines (imported by the test modules that build their own costs)."""

from __future__ import annotations

import pytest

from sim.schemes.ppsd import event_model as ppsd_event
from sim.schemes.ppsd import replay as ppsd_replay


def assert_ppsd_engines_agree(stream, costs):
    """The replay equals the SimPy model in rounds, time, span and busy time; returns the event model's
    stats. (The replay's segmented sums subtract running totals: ~1e-12 relative on long streams.)"""
    a = ppsd_event.run(stream, costs)
    b = ppsd_replay.replay(stream, costs)
    assert a.rounds_a == b.rounds_a and a.rounds_rejected == b.rounds_rejected
    assert a.time_ms == pytest.approx(b.time_ms, rel=1e-11, abs=1e-9)
    assert a.span_ms == pytest.approx(b.span_ms, rel=1e-11, abs=1e-9)
    assert a.stage_busy_ms == pytest.approx(b.stage_busy_ms, rel=1e-9, abs=1e-9)
    return a


def simulate_both_engines(profile, plan, **kw):
    """One plan through the fast replay and the event model, which must agree; the fast result."""
    from sim import api

    a = api.simulate(profile, plan, engine="fast", **kw)
    b = api.simulate(profile, plan, engine="event", **kw)
    assert a.time_s == pytest.approx(b.time_s, rel=1e-9) and a.details.rounds == b.details.rounds
    return a


def per_stage_factors(base, shares, lock: float) -> list[list[float]]:
    """factors[m][b] that differ by stage (as the waiting last stage makes them): `base[b]` times the
    stage's share and a lock step while b >= 2, for the engines to agree on."""
    return [[float(f) * (float(s) * lock if b >= 2 else 1.0) for b, f in enumerate(base)] for s in shares]
