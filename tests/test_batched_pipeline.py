"""runtime/batched_pipeline.py: two-stage PPSD over a batch, stage 1 in its own process, is lossless (greedy,
tiny random model) with ragged acceptance and sequences leaving, spends one extra tick on each rejected draft
(the tick count the batched replay prices), and refuses what it does not run."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from ppsd.errors import UserError
from runtime.acceptance import Sampler
from runtime.batched import generate_ar_batch
from runtime.batched_pipeline import StageOneProcess, generate_ppsd_batch
from runtime.heads import make_drafter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

def _ar(model, prompts, budgets):
    return generate_ar_batch(model, prompts, budgets, [Sampler.make(0, 0) for _ in prompts])


@pytest.mark.parametrize("exit_layer", [1, 3, 5])
def test_batched_ppsd_is_lossless_with_sequences_leaving(tiny, prompts, exit_layer):
    budgets = [16, 7, 11, 3]  # sequences leave the batch at different ticks
    with StageOneProcess(tiny, exit_layer, make_drafter(tiny, exit_layer)) as stage_one:
        rec = generate_ppsd_batch(tiny, stage_one, prompts, budgets, exit_layer)
        again = generate_ppsd_batch(tiny, stage_one, prompts[:2], [9, 9], exit_layer)  # the process is reused
    assert rec.tokens == _ar(tiny, prompts, budgets).tokens
    assert again.tokens == _ar(tiny, prompts[:2], [9, 9]).tokens
    assert [len(t) for t in rec.tokens] == budgets
    # one verdict per token after the first
    assert [len(v) for v in rec.rounds] == [b - 1 for b in budgets]
    assert rec.finish_s[3] <= rec.finish_s[1] <= rec.finish_s[0]


def test_acceptance_is_ragged_and_a_rejection_costs_one_tick(tiny, prompts):
    exit_layer = 3
    with StageOneProcess(tiny, exit_layer, make_drafter(tiny, exit_layer)) as stage_one:
        verdicts = [generate_ppsd_batch(tiny, stage_one, [p], [20], exit_layer) for p in prompts]
    every = [v for rec in verdicts for v in rec.rounds[0]]
    assert 0 in every and 1 in every, "the tiny model should both accept and reject some drafts at exit 3"
    for rec in verdicts:
        v = rec.rounds[0]
        # the first tick feeds the first token; then a tick a token, and one more after each rejected draft
        # (the last token's needs none: the sequence has left)
        assert rec.passes == 1 + len(v) + v[:-1].count(0)


def test_the_replay_prices_the_ticks_the_runtime_runs(tiny, prompts):
    from ppsd.profile.synthetic import write_synthetic_profile
    from sim.batch.costs import BatchCosts
    from sim.batch.replay import BatchRun, replay_ppsd_group
    import tempfile

    exit_layer = 3
    with StageOneProcess(tiny, exit_layer, make_drafter(tiny, exit_layer)) as stage_one:
        rec = generate_ppsd_batch(tiny, stage_one, prompts, [14, 9, 12, 6], exit_layer)
    with tempfile.TemporaryDirectory() as d:
        costs = BatchCosts(write_synthetic_profile(d, alpha_by_exit=lambda e: 0.5, num_layers=6, batch_free_tokens=4))
        out = BatchRun()
        replay_ppsd_group(costs, [(np.array(v, dtype=bool), 8.0) for v in rec.rounds], exit_layer, out)
    assert out.rounds + 1 == rec.passes
    assert set(out.accepted) <= {0, 1}
    assert sum(out.accepted) == sum(map(sum, rec.rounds))


def test_stage_one_errors_come_back_as_one_line(tiny):
    with StageOneProcess(tiny, 3, make_drafter(tiny, 3)) as stage_one:
        stage_one.send("tick", None)  # a tick before any prefill
        with pytest.raises(UserError, match="stage 1 failed"):
            stage_one.receive()
