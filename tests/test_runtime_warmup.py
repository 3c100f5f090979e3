"""runtime/warmup.py: a short warm-up pass (`--warmup-tokens N`) decodes each prompt's start and N new
tokens, in this process and in a pipeline's stage processes alike, and leaves the timed passes as they
were (the same tokens as AR, the same lengths)."""

from __future__ import annotations

import os

import pytest
import torch

from runtime.llm import load_model
from runtime.acceptance import Sampler
from runtime.decoding import generate_ar
from runtime.launch import run_local
from runtime.measure import Job, measure, records_from_logs
from runtime.pipeline import PipelineJob
from runtime.warmup import WARMUP_PROMPT_TOKENS, warmup_view
from ppsd.modes import Mode
from sim.plan import Plan

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

LONG = "a prompt long enough to be cut: " + " ".join(f"word{i}" for i in range(40))


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


def test_a_short_warmup_cuts_the_prompt_and_the_new_tokens():
    prompt = list(range(100))
    assert warmup_view(prompt, 64, 0) == (prompt, 64)  # 0: the whole sequence
    cut, n = warmup_view(prompt, 64, 16)
    assert cut == prompt[:WARMUP_PROMPT_TOKENS] and n == 16
    assert warmup_view([1, 2], 8, 16) == ([1, 2], 8)  # never longer than the sequence itself
    with pytest.raises(ValueError):
        warmup_view(prompt, 64, -1)


def test_a_pipeline_job_cuts_only_its_warmup_sequences():
    job = PipelineJob("tiny-llama", (0, 2, 4), [list(range(50)), [7, 8]], [20, 30], warmup=1, repeats=2,
                      warmup_tokens=4)
    got = [(len(job.prompt_of(s)), job.max_new_of(s)) for s in range(len(job.schedule))]
    assert got == [(WARMUP_PROMPT_TOKENS, 4), (2, 4), (50, 20), (2, 30), (50, 20), (2, 30)]
    whole = PipelineJob("tiny-llama", (0, 2, 4), [list(range(50))], [20], warmup=1, repeats=1)
    assert [(len(whole.prompt_of(s)), whole.max_new_of(s)) for s in (0, 1)] == [(50, 20), (50, 20)]  # 0: whole


def test_in_process_short_warmup_decodes_the_cut_sequence_then_times_the_whole(tiny, monkeypatch):
    import runtime.measure as rm

    prompt = tiny.encode_prompt(LONG)
    assert len(prompt) > WARMUP_PROMPT_TOKENS
    seen = []
    real = rm.generate_ar

    def spy(model, p, max_new, *a, **kw):
        seen.append((len(p), max_new))
        return real(model, p, max_new, *a, **kw)

    monkeypatch.setattr(rm, "generate_ar", spy)
    m = measure(tiny, Job(Plan(Mode.AR), [prompt], [24], stop_at_eos=False, warmup=1, repeats=1, warmup_tokens=4))
    assert seen == [(WARMUP_PROMPT_TOKENS, 4), (len(prompt), 24)]
    assert m.outputs == [real(tiny, prompt, 24, Sampler.make(0, 0)).tokens]
    assert m.result.details.warmup == 1 and m.result.details.warmup_tokens == 4


def test_pipeline_short_warmup_stays_lossless(tiny):
    prompt = tiny.encode_prompt(LONG)
    ar = generate_ar(tiny, prompt, 24, Sampler.make(0, 0)).tokens
    job = PipelineJob("tiny-llama", (0, 3, 6), [prompt], [24], warmup=1, repeats=1, timeout_s=30, warmup_tokens=4)
    logs = run_local(job, model=tiny)
    (timed,) = records_from_logs(job, logs)
    assert [r.tokens for r in timed] == [ar]
    assert len(logs[-1].seqs[0]["tokens"]) == 4  # the warm-up sequence: 4 new tokens, then the timed one
