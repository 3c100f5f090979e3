"""sim/batch/replay.py: a batch replayed round by round, each sequence committing its own accepted prefix,
finished sequences leaving the batch, agrees with the closed form at i.i.d. acceptance."""

from __future__ import annotations

import numpy as np
import pytest

from ppsd.profile.synthetic import write_synthetic_profile
from sim.batch.costs import BatchCosts
from sim.batch.replay import BatchRun, accepted_run, closed_form_speedup, replay_batches, replay_group
from sim.model.streams import Stream

LAYERS = 8


@pytest.fixture(scope="module")
def batched(tmp_path_factory):
    return write_synthetic_profile(tmp_path_factory.mktemp("b"), alpha_by_exit=lambda e: 0.6, num_layers=LAYERS,
                                   layer_ms=1.0, head_ms=4.0, embed_ms=0.1, batch_free_tokens=4)


def _stream(matches: list[list[bool]], context: float = 64.0) -> Stream:
    match = np.concatenate([np.asarray(m, dtype=bool) for m in matches])
    seg = np.zeros(len(match), dtype=bool)
    seg[np.cumsum([0, *[len(m) for m in matches[:-1]]])] = True
    ctx = np.concatenate([context + np.arange(len(m), dtype=float) for m in matches])
    return Stream(match, ctx, seg, "trace")


def test_accepted_run_counts_leading_matches_up_to_gamma():
    m = np.array([True, True, False, True, True, True])
    assert accepted_run(m, 0, 4) == 2
    assert accepted_run(m, 3, 2) == 2
    assert accepted_run(m, 3, 8) == 3  # the generation ends first


def test_ar_in_a_batch_prices_each_step_at_the_sequences_still_live(batched):
    costs = BatchCosts(batched)
    out = BatchRun()
    replay_group(costs, [(np.ones(3, bool), 64.0), (np.ones(5, bool), 64.0)], None, 1, out)
    # 3 steps with both sequences, then 2 with one; the cache widens one slot a step
    expected = sum(costs.ar_step(2, 64 + i) for i in range(3)) + sum(costs.ar_step(1, 67 + i) for i in range(2))
    assert out.time_ms == pytest.approx(expected)
    assert out.tokens == 8 and out.rounds == 5
    assert out.sequence_tokens == [3, 5]


def test_each_sequence_commits_its_own_prefix(batched):
    costs = BatchCosts(batched)
    out = BatchRun()
    always, never = [True] * 8, [False] * 8
    replay_group(costs, [(np.array(always), 64.0), (np.array(never), 64.0)], 2, 3, out)
    # round 1: one accepts 3 (+1), the other 0 (+1); the all-accepting one is done after 2 rounds
    assert out.accepted[:2] == [3, 0]
    assert out.sequence_tokens[0] == 8 and out.sequence_ms[0] < out.sequence_ms[1]
    assert out.rounds == 8  # the rejecting one needs a round a token


@pytest.mark.parametrize("batch", [1, 2, 4, 8])
@pytest.mark.parametrize("alpha", [0.3, 0.7])
@pytest.mark.parametrize("pipelined", [False, True])
def test_the_replay_agrees_with_the_closed_form(batched, batch, alpha, pipelined):
    """EESD E=2 γ=3, or batched PPSD at E=5, replayed over i.i.d. traces against its closed form."""
    from sim.batch.replay import closed_form_ppsd_speedup

    rng = np.random.default_rng(int(pipelined))
    stream = _stream([list(rng.random(4000) < alpha) for _ in range(batch)])
    costs = BatchCosts(batched)
    ar = replay_batches(costs, stream, batch, None)
    if pipelined:
        run = replay_batches(costs, stream, batch, 5, pipelined=True)
        closed = closed_form_ppsd_speedup(costs, batch, 64.0, 5, alpha)
        assert np.mean(run.accepted) == pytest.approx(alpha, abs=0.02)
    else:
        run = replay_batches(costs, stream, batch, 2, 3)
        closed = closed_form_speedup(costs, batch, 64.0, 2, 3, alpha)
    assert run.tokens_per_s / ar.tokens_per_s == pytest.approx(closed, rel=0.03)


def test_a_ppsd_tick_is_its_slower_stage_slowed_by_the_other(batched):
    costs = BatchCosts(batched)
    first, second = costs.ppsd_stages(4, 64.0, 2)
    assert first < second  # 2 of 8 layers plus the exit head against 6 layers plus the LM head
    from ppsd.statistics import expected_max

    assert costs.ppsd_tick(4, 64.0, 2) == pytest.approx(expected_max(first * costs.corun, second * costs.corun,
                                                                      costs.pass_cv))
    assert costs.ppsd_tick(4, 64.0, 2) >= second * costs.corun
    assert costs.ppsd_tick(4, 64.0, 2, both=False) == pytest.approx(first)
    assert costs.corun >= 1.0


def test_a_rejected_draft_costs_its_sequence_one_tick(batched):
    costs = BatchCosts(batched)
    from sim.batch.replay import replay_ppsd_group

    out = BatchRun()
    # the first tick feeds the first token; then a tick a token, one more after each miss but the last
    replay_ppsd_group(costs, [(np.array([True, False, True, False, False]), 64.0)], 4, out)
    assert out.rounds == 5 + 2 and out.accepted == [1, 0, 1, 0, 0]
    both = BatchRun()
    replay_ppsd_group(costs, [(np.array([True, False, True, False, False]), 64.0), (np.ones(3, bool), 64.0)], 4, both)
    assert both.rounds == 7 and both.sequence_tokens == [3, 5] and both.tokens == 8
