"""sim/schemes/eesd.py: EESD's confidence stop (`Plan.draft_stop`), priced from the traces' joint
(match, confidence) sequence by the replay, the event model and the closed form alike."""

import numpy as np
import pytest

from ppsd.errors import UserError
from ppsd.profile.synthetic import write_synthetic_profile
from sim import api
from sim.model.streams import Stream
from sim.plan import Plan
from sim.schemes import eesd, scheme
from engine_checks import simulate_both_engines


class FlatCosts:
    """Every draft 1 ms; a verification of n drafts 10 + n ms."""

    def __init__(self, gamma, draft_stop):
        self.draft_len, self.draft_stop = gamma, draft_stop

    def draft(self, context):
        return np.full(np.shape(context), 1.0)

    def verify(self, context, gamma):
        return 10.0 + np.broadcast_to(np.asarray(gamma, dtype=float), np.shape(context))


def stream(bits, conf, gens=()):
    m = np.asarray(bits, dtype=bool)
    seg = np.zeros(len(m), dtype=bool)
    seg[[0, *gens]] = True
    return Stream(m, 64.0 + np.arange(len(m), dtype=float), seg, "trace", np.asarray(conf, dtype=float))


def both(s, gamma, tau):
    costs = FlatCosts(gamma, tau)
    a = scheme("eesd").event_model(s, costs)
    b = scheme("eesd").replay(s, costs)
    assert a.rounds_a == b.rounds_a and a.rounds_rejected == b.rounds_rejected
    assert a.time_ms == pytest.approx(b.time_ms, rel=1e-12)
    return a


def test_hand_count():
    """γ = 4, τ = 0.5. Round 1 from 0: drafts 0 (0.9), 1 (0.2: unsure, stop) -> 2 drafts, both match,
    then the verifier's token at 2; round 2 from 3: drafts 3 (0.8), 4 (0.9), 5 (0.7), 6 (0.6) -> the
    cap, mismatch at 5 -> keeps 2; round 3 from 6: one token left to draft (6, 0.6: the cap), a mismatch
    -> 0; round 4 from 7: the last token, no draft."""
    bits = [1, 1, 1, 1, 1, 0, 0, 1]
    conf = [0.9, 0.2, 0.9, 0.8, 0.9, 0.7, 0.6, 0.1]
    s = stream(bits, conf)
    st = both(s, 4, 0.5)
    assert st.rounds_a == [2, 2, 0, 0] and st.rounds_rejected == [False, True, True, False]
    starts, n, a = eesd.stopped_rounds(s, 4, 0.5)
    assert starts.tolist() == [0, 3, 6, 7] and n.tolist() == [2, 4, 1, 0] and a.tolist() == [2, 2, 0, 0]
    assert st.time_ms == pytest.approx((2 + 12) + (4 + 14) + (1 + 11) + 10)


def test_replay_equals_the_event_model_on_random_traces():
    rng = np.random.default_rng(4)
    for _ in range(30):
        t = int(rng.integers(20, 400))
        bits = rng.random(t) < rng.uniform(0.2, 0.95)
        conf = np.clip(np.where(bits, 0.35, 0.0) + rng.random(t) * 0.65, 0.0, 1.0)
        gens = sorted(set(rng.integers(1, t, size=int(rng.integers(0, 4))).tolist()))
        both(stream(bits, conf, gens), int(rng.integers(1, 9)), float(rng.uniform(0.05, 0.95)))


def test_a_stop_below_every_confidence_is_a_fixed_gamma():
    rng = np.random.default_rng(5)
    bits = rng.random(500) < 0.7
    s = stream(bits, 0.01 + rng.random(500) * 0.99)
    fixed = scheme("eesd").replay(s, FlatCosts(5, None))
    stopped = scheme("eesd").replay(s, FlatCosts(5, 0.001))
    assert stopped.rounds_a == fixed.rounds_a and stopped.time_ms == pytest.approx(fixed.time_ms)


def test_closed_form_prices_iid_odds_like_the_replay():
    """On a long stream of i.i.d. (match, confidence) pairs the closed form (`stopped_time_per_token`
    at the stream's odds) equals the replay's time per token."""
    rng = np.random.default_rng(6)
    t = 200_000
    bits = rng.random(t) < 0.7
    conf = np.where(bits, 0.3, 0.0) + 0.7 * rng.random(t)
    s = stream(bits, conf)
    for gamma, tau in ((4, 0.5), (6, 0.35), (2, 0.8)):
        st = scheme("eesd").replay(s, FlatCosts(gamma, tau))
        low = conf < tau
        odds = eesd.StopOdds(float(low.mean()), float(bits[~low].mean()), float(bits[low].mean()))
        want = eesd.stopped_time_per_token(1.0, lambda n: 10.0 + n, odds, gamma)
        assert st.time_ms / t == pytest.approx(want, rel=0.01)
    # at its own α the odds are the same; scaled, both conditional rates move by the same factor
    assert odds.at(odds.alpha) == odds
    half = odds.at(odds.alpha / 2)
    assert half.match_high == pytest.approx(odds.match_high / 2) and half.low == odds.low


def test_a_stream_without_confidences_is_refused():
    s = Stream(np.ones(10, dtype=bool), np.arange(10.0), np.eye(1, 10, dtype=bool)[0], "bernoulli")
    with pytest.raises(UserError, match="confidence"):
        scheme("eesd").replay(s, FlatCosts(3, 0.5))


def test_simulate_prices_a_stop_from_the_profiles_traces(sure, tmp_path):
    fixed = Plan("eesd", exit_layer=8, draft_len=6)
    stop = Plan("eesd", exit_layer=8, draft_len=6, draft_stop=0.5)
    a = simulate_both_engines(sure, stop)
    c = api.simulate(sure, fixed, engine="fast")
    assert a.details.rounds > c.details.rounds  # shorter rounds
    assert a.speedup_vs_ar != pytest.approx(c.speedup_vs_ar)
    # the closed form reads the same profile's odds
    cf = api.closed_form(sure, api.resolve_plan(stop, sure), 0.7)
    assert cf["speedup_vs_ar"] > 0
    old = write_synthetic_profile(tmp_path / "old", alpha_by_exit=lambda e: 0.5, num_layers=12)
    with pytest.raises(UserError, match="ppsd profile"):
        api.simulate(old, stop, engine="fast")
