"""validation/interleave.py: a job split into chunks of prompts, and the chunks' measurements
summed back into the measurement of the whole prompt set."""

import pytest

from runtime.decoding import SeqRecord
from runtime.measure import Job, summarize
from validation.interleave import Turns, combine
from ppsd.modes import Mode
from sim.plan import Plan
from sim.timeline import Event

PLAN = Plan(Mode.EESD, exit_layer=2, draft_len=3)


def _record(tokens: int, decode_s: float, rounds: list[int], start_s: float) -> SeqRecord:
    return SeqRecord(tokens=list(range(tokens)), prefill_s=0.1, decode_s=decode_s, rounds=rounds,
                     verified=sum(rounds) + len(rounds), busy_s=[decode_s],
                     events=[Event("verify", "stage 1", start_s, decode_s)])


def _measured(records: list[SeqRecord]):
    return summarize(PLAN, [records], load_s=0.5, facts={"model": "tiny", "warmup": 1, "prompts": len(records)})


def test_turns_split_the_prompts_and_keep_their_lengths_and_traces():
    job = Job(PLAN, prompts=[[1], [2, 2], [3], [4], [5]], max_new=[8, 9, 10, 11, 12], forced=["a", "b", "c", "d", "e"])
    turns = Turns(len(job.prompts), size=2)
    assert [list(c) for c in turns.chunks] == [[0, 1], [2, 3], [4]]
    last = turns.job(job, turns.chunks[-1])
    assert last.prompts == [[5]] and last.max_new == [12] and last.forced == ["e"] and last.plan == PLAN
    assert turns.job(Job(PLAN, [[1], [2]], [4, 4]), range(1, 2)).forced is None
    with pytest.raises(ValueError):
        Turns(3, size=0)


def test_combined_chunks_measure_like_one_run_of_the_whole_set():
    a = [_record(11, 2.0, [1, 0, 2], 0.0), _record(21, 3.0, [3, 3], 2.5)]
    b = [_record(6, 4.0, [0, 0], 0.0)]
    whole = combine([_measured(a), _measured(b)])
    # every decode token over every decode second (not the mean of the chunks' speeds: 5/s and 1.25/s)
    assert whole.result.tokens_per_s == pytest.approx((10 + 20 + 5) / (2.0 + 3.0 + 4.0))
    assert whole.outputs == [r.tokens for r in a + b]
    assert whole.result.accepted_hist == {0: 3, 1: 1, 2: 1, 3: 2}
    assert whole.result.details.model == "tiny" and whole.result.details.warmup == 1  # the run's facts kept
    assert whole.result.details.load_s == pytest.approx(1.0)  # each chunk loaded what it needed
    # the second chunk's timeline starts where the first one's ended
    starts = [e.start_s for e in whole.result.timeline]
    assert starts == pytest.approx([0.0, 2.5, 5.5])


def test_one_chunk_is_its_own_measurement():
    m = _measured([_record(5, 1.0, [1], 0.0)])
    assert combine([m]) is m
    with pytest.raises(ValueError):
        combine([])
