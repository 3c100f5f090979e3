"""runtime/batched.py: AR and EESD over a batch of sequences with ragged acceptance are lossless (greedy,
tiny random model), sequences leave the batch as they finish, rejected drafts leave holes that no
sequence attends to, and the slots every sequence rejected are cropped."""

from __future__ import annotations

import os

import pytest
import torch

from runtime.acceptance import Sampler
from runtime.batched import BatchState, generate_ar_batch, generate_eesd_batch, pass_mask
from runtime.decoding import generate_ar, generate_eesd
from runtime.heads import make_drafter
from runtime.llm import KVCache

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

def _greedy(n: int) -> list[Sampler]:
    return [Sampler.make(0, 0) for _ in range(n)]


def test_pass_mask_attends_valid_slots_pending_slots_and_causally():
    valid = torch.tensor([[True, False, True], [False, False, True]])
    mask = pass_mask(valid, pending=1, n=2)
    assert mask.shape == (2, 1, 2, 6)
    # row 0, first new token (slot 4): valid slots 0 and 2, the pending slot 3, itself; not slot 1 nor slot 5
    assert mask[0, 0, 0].tolist() == [True, False, True, True, True, False]
    assert mask[0, 0, 1].tolist() == [True, False, True, True, True, True]
    assert mask[1, 0, 0].tolist() == [False, False, True, True, True, False]


def test_a_query_with_no_valid_slot_still_attends_to_itself():
    mask = pass_mask(torch.zeros((1, 2), dtype=torch.bool), pending=0, n=1)
    assert mask[0, 0, 0].tolist() == [False, False, True]


def test_batched_ar_equals_each_sequence_alone(tiny, prompts):
    alone = [generate_ar(tiny, p, 12, Sampler.make(0, 0)).tokens for p in prompts]
    rec = generate_ar_batch(tiny, prompts, [12] * len(prompts), _greedy(len(prompts)))
    assert rec.tokens == alone
    assert rec.passes == 11
    assert rec.decode_tokens == sum(len(t) - 1 for t in alone)


@pytest.mark.parametrize("exit_layer,gamma", [(1, 3), (3, 2), (5, 4)])
def test_batched_eesd_is_lossless_with_ragged_acceptance_and_sequences_leaving(tiny, prompts, exit_layer, gamma):
    budgets = [16, 7, 11, 3]  # sequences leave the batch at different rounds
    ar = generate_ar_batch(tiny, prompts, budgets, _greedy(len(prompts)))
    rec = generate_eesd_batch(tiny, prompts, budgets, _greedy(len(prompts)), exit_layer, gamma,
                              drafter=make_drafter(tiny, exit_layer))
    assert rec.tokens == ar.tokens
    assert [len(t) for t in rec.tokens] == budgets
    for mine, tokens in zip(rec.rounds, rec.tokens):
        assert sum(a + 1 for a in mine) >= len(tokens) - 1  # every decode token belongs to a round
    alone = [generate_eesd(tiny, p, b, Sampler.make(0, 0), exit_layer, gamma).rounds for p, b in zip(prompts, budgets)]
    for mine, own, budget in zip(rec.rounds, alone, budgets):
        if budget - 2 >= gamma:  # a full first round alone too: the same drafts, the same acceptance
            assert mine[0] == own[0]
    # finishing earlier means leaving earlier
    assert rec.finish_s[3] <= rec.finish_s[1] <= rec.finish_s[0]


def test_acceptance_is_ragged_within_a_batch(tiny, prompts):
    rec = generate_eesd_batch(tiny, prompts, [16] * len(prompts), _greedy(len(prompts)), 3, 3,
                              drafter=make_drafter(tiny, 3))
    rounds = list(zip(*[r[:3] for r in rec.rounds]))
    assert any(len(set(r)) > 1 for r in rounds), f"every sequence accepted alike: {rec.rounds}"


def _state(valid: list[list[bool]]) -> BatchState:
    cache = KVCache()
    rows, slots = len(valid), len(valid[0])
    for layer in range(2):
        cache.keys[layer] = torch.arange(rows * slots, dtype=torch.float).reshape(rows, 1, slots, 1)
        cache.values[layer] = cache.keys[layer].clone()
    return BatchState(cache, torch.tensor(valid), torch.zeros(rows, dtype=torch.long), list(range(rows)),
                      [[] for _ in range(rows)])


def test_the_slots_every_sequence_rejected_are_cropped_and_others_stay_holes():
    state = _state([[True, True, False, False], [True, False, True, False]])
    state.crop_common_tail()
    assert state.valid.tolist() == [[True, True, False], [True, False, True]]
    assert state.cache.keys[0].shape[-2] == 3 and state.cache.values[1].shape[-2] == 3


def test_a_finished_sequence_leaves_the_cache_and_the_state():
    state = _state([[True, True], [True, False], [False, True]])
    state.tokens = [[1], [2], [3]]
    state.keep([0, 2])
    assert state.rows == [0, 2] and state.tokens == [[1], [3]]
    assert state.cache.keys[0][:, 0, :, 0].tolist() == [[0.0, 1.0], [4.0, 5.0]]
    assert state.valid.tolist() == [[True, True], [False, True]]


def test_batched_decoding_stops_each_sequence_at_its_eos(tiny, prompts):
    free = [generate_ar(tiny, p, 12, Sampler.make(0, 0)).tokens for p in prompts]
    eos = {free[0][4]}
    alone = [generate_ar(tiny, p, 12, Sampler.make(0, 0), eos).tokens for p in prompts]
    ar = generate_ar_batch(tiny, prompts, [12] * len(prompts), _greedy(len(prompts)), eos)
    eesd = generate_eesd_batch(tiny, prompts, [12] * len(prompts), _greedy(len(prompts)), 3, 3, eos,
                               make_drafter(tiny, 3))
    assert ar.tokens == alone == eesd.tokens
    assert len(alone[0]) == free[0].index(free[0][4]) + 1


def test_sampled_batched_eesd_is_seeded_and_keeps_the_budget(tiny, prompts):
    def run():
        samplers = [Sampler.make(1.0, 7 + i) for i in range(len(prompts))]
        return generate_eesd_batch(tiny, prompts, [10] * len(prompts), samplers, 3, 3, drafter=make_drafter(tiny, 3))

    a, b = run(), run()
    assert a.tokens == b.tokens
    assert all(len(t) == 10 for t in a.tokens)
    assert a.tokens != generate_ar_batch(tiny, prompts, [10] * len(prompts), _greedy(len(prompts))).tokens
