"""sim/batch/events.py: the SimPy view of a batch agrees with the replay step for step (AR, EESD, PPSD without
jitter), and with jittered stage passes its PPSD ticks average to the expected slower stage the replay and
the closed form price."""

from __future__ import annotations

import numpy as np
import pytest

from ppsd.profile.synthetic import write_synthetic_profile
from sim.batch.costs import BatchCosts
from sim.batch.events import simulate_batches
from sim.batch.replay import closed_form_ppsd_speedup, replay_batches
from sim.model.streams import Stream

LAYERS = 8


@pytest.fixture(scope="module")
def batched(tmp_path_factory):
    return write_synthetic_profile(tmp_path_factory.mktemp("ev"), alpha_by_exit=lambda e: 0.6, num_layers=LAYERS,
                                   layer_ms=1.0, head_ms=4.0, embed_ms=0.1, batch_free_tokens=4)


def _stream(lengths, alpha: float, seed: int = 0) -> Stream:
    rng = np.random.default_rng(seed)
    matches = [rng.random(n) < alpha for n in lengths]
    match = np.concatenate(matches)
    seg = np.zeros(len(match), dtype=bool)
    seg[np.cumsum([0, *lengths[:-1]])] = True
    ctx = np.concatenate([64.0 + np.arange(n, dtype=float) for n in lengths])
    return Stream(match, ctx, seg, "trace")


@pytest.mark.parametrize("exit_layer, draft_len, pipelined", [(None, 1, False), (3, 2, False), (5, 4, False),
                                                               (3, 1, True), (6, 1, True)])
@pytest.mark.parametrize("batch", [1, 3, 4])
def test_events_agree_with_the_replay_step_for_step(batched, exit_layer, draft_len, pipelined, batch):
    costs = BatchCosts(batched)
    costs.pass_cv = 0.0  # no spread: the tick is the slower stage exactly, in both views
    stream = _stream([40, 17, 33, 5, 28, 9, 21], 0.6)
    replayed = replay_batches(costs, stream, batch, exit_layer, draft_len, pipelined=pipelined)
    events = simulate_batches(costs, stream, batch, exit_layer, draft_len, pipelined=pipelined)
    assert events.time_ms == pytest.approx(replayed.time_ms)
    assert (events.rounds, events.accepted, events.tokens) == (replayed.rounds, replayed.accepted, replayed.tokens)
    assert events.sequence_ms == pytest.approx(replayed.sequence_ms)


@pytest.mark.parametrize("exit_layer", [3, 4, 6])
def test_jittered_stages_average_to_the_expected_slower_one(batched, exit_layer):
    costs = BatchCosts(batched)
    costs.pass_cv = 0.06
    stream = _stream([3000, 3000], 0.5, seed=2)
    replayed = replay_batches(costs, stream, 2, exit_layer, pipelined=True)
    jittered = simulate_batches(costs, stream, 2, exit_layer, pipelined=True, jitter=True, seed=7)
    assert jittered.time_ms == pytest.approx(replayed.time_ms, rel=0.01)
    flat = BatchCosts(batched)
    flat.pass_cv = 0.0
    first, second = flat.ppsd_stages(2, 64.0, exit_layer)
    if abs(first - second) < 0.05 * second:  # waiting for the slower of two balanced jittery stages costs more
        assert jittered.time_ms > 1.01 * replay_batches(flat, stream, 2, exit_layer, pipelined=True).time_ms


def test_events_agree_with_the_closed_form(batched):
    costs = BatchCosts(batched)
    stream = _stream([4000] * 4, 0.7, seed=3)
    ar = simulate_batches(costs, stream, 4, None)
    ppsd = simulate_batches(costs, stream, 4, 4, pipelined=True, jitter=True, seed=1)
    assert ppsd.tokens_per_s / ar.tokens_per_s == pytest.approx(closed_form_ppsd_speedup(costs, 4, 64.0, 4, 0.7),
                                                                rel=0.03)
