"""Greedy EESD and PPSD are token-identical to AR (tiny random model over a grid; embedded model on
Spec-Bench prompts)."""

from __future__ import annotations

import os

import pytest
import torch

from runtime.llm import load_model
from runtime.acceptance import Sampler
from runtime.decoding import generate_ar, generate_eesd
from runtime.launch import run_local
from runtime.measure import records_from_logs
from runtime.pipeline import PipelineJob

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

TEXTS = ["Hello world, this is a test prompt.", "Another one: 1 2 3", "x"]


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


@pytest.fixture(scope="module")
def tiny_ar(tiny):
    prompts = [tiny.encode_prompt(t) for t in TEXTS]
    return prompts, [generate_ar(tiny, p, 24, Sampler.make(0, 0)).tokens for p in prompts]


@pytest.mark.parametrize("exit_layer", [1, 2, 3, 5])
@pytest.mark.parametrize("gamma", [1, 2, 4, 7])
def test_eesd_greedy_matches_ar(tiny, tiny_ar, exit_layer, gamma):
    prompts, ar = tiny_ar
    for p, ref in zip(prompts, ar):
        rec = generate_eesd(tiny, p, 24, Sampler.make(0, 0), exit_layer, gamma)
        assert rec.tokens == ref
        assert sum(a + 1 for a in rec.rounds) == len(ref) - 1  # every decode token belongs to a round


@pytest.mark.parametrize("exit_layer, gamma, tau", [(2, 4, 0.05), (3, 6, 0.3), (5, 7, 0.9)])
def test_eesd_confidence_stop_matches_ar(tiny, tiny_ar, exit_layer, gamma, tau):
    """A confidence stop changes how many drafts a round makes, never the tokens: identical to AR; a
    round stops drafting right after its first draft below τ (each stop is at the draft the exit head
    was least sure of)."""
    from profiler.acceptance import layer_states
    from runtime.decoding import draft_confidence

    prompts, ar = tiny_ar
    for p, ref in zip(prompts, ar):
        rec = generate_eesd(tiny, p, 24, Sampler.make(0, 0), exit_layer, gamma, draft_stop=tau, timeline=True)
        assert rec.tokens == ref
        assert sum(a + 1 for a in rec.rounds) == len(ref) - 1
        drafts = [e.args["drafts"] for e in rec.events if e.name == "draft"]
        assert len(drafts) == len(rec.rounds) and all(0 <= d <= gamma for d in drafts)
        # the drafter on AR's own tokens: conf[j] is the exit-E draft's confidence for generated index j
        # with a correct prefix, which a round's draft i has while drafts 0..i-1 matched (i <= a)
        with torch.inference_mode():
            conf = draft_confidence(tiny.head(layer_states(tiny, p, ref)[exit_layer - 1]).float()).numpy()
        at = 1  # a round drafts from generated index len(tokens); the prefill gave index 0
        for d, a in zip(drafts, rec.rounds):
            cap = min(gamma, 24 - at - 1)
            for i in range(min(a, d - 1) + 1 if d else 0):
                if abs(conf[at + i] - tau) < 1e-4:
                    continue  # a float tie between the cached and the teacher-forced pass
                if i < d - 1:
                    assert conf[at + i] >= tau  # a sure draft: the round drafted on
                elif d < cap:
                    assert conf[at + i] < tau  # the round stopped after this unsure draft
            at += a + 1
    rec = generate_eesd(tiny, prompts[0], 24, Sampler.make(0, 0), 3, 6, draft_stop=0.999999, timeline=True)
    assert all(e.args["drafts"] <= 1 for e in rec.events if e.name == "draft")  # every draft is unsure


def _pipeline(tiny, prompts, bounds, max_new=24, **kw):
    job = PipelineJob("tiny-llama", bounds, prompts, [max_new] * len(prompts), warmup=0, repeats=1,
                      timeout_s=30, **kw)
    return job, records_from_logs(job, run_local(job, model=tiny))[0]


@pytest.mark.parametrize("bounds", [(0, 1, 6), (0, 3, 6), (0, 5, 6), (0, 1, 3, 6), (0, 2, 4, 6), (0, 1, 2, 4, 6)])
def test_ppsd_greedy_matches_ar(tiny, tiny_ar, bounds):
    prompts, ar = tiny_ar
    _, recs = _pipeline(tiny, prompts, bounds)
    assert [r.tokens for r in recs] == ar
    for r in recs:
        assert r.verified == len(r.tokens)
        assert len(r.busy_s) == len(bounds) - 1


@pytest.mark.parametrize("bounds, tau", [((0, 2, 6), 0.3), ((0, 3, 6), 0.9), ((0, 1, 3, 6), 0.5)])
def test_ppsd_confidence_stop_matches_ar(tiny, tiny_ar, bounds, tau):
    """Stage 1 waiting for the verdict on an unsure draft changes when it drafts, never the tokens."""
    prompts, ar = tiny_ar
    _, recs = _pipeline(tiny, prompts, bounds, draft_stop=tau, timeline_rep=0)
    assert [r.tokens for r in recs] == ar
    assert all(r.verified == len(r.tokens) for r in recs)


def test_ppsd_with_every_draft_unsure_never_runs_ahead(tiny, tiny_ar):
    """τ above every confidence: stage 1 waits for each verdict, so it never starts a pass that a
    rejection abandons, and every draft it makes is marked unsure in the timeline."""
    prompts, ar = tiny_ar
    _, recs = _pipeline(tiny, prompts[:1], (0, 3, 6), draft_stop=0.999999, timeline_rep=0)
    assert recs[0].tokens == ar[0]
    stage1 = [e for e in recs[0].events if e.row == "stage 1"]
    drafts = [e for e in stage1 if e.name == "draft"]
    assert drafts and all(e.args.get("unsure") for e in drafts)
    assert not any(e.name == "flush" for e in stage1)
    # the last stage's passes say where they went: layers, LM head, the wait for the draft (then the verdict)
    verifies = [e for e in recs[0].events if e.name == "verify"]
    assert verifies and all(e.args["layers_ms"] > 0 and e.args["head_ms"] > 0 and e.args["draft_wait_ms"] >= 0
                            and e.args["layers_ms"] + e.args["head_ms"] + e.args["draft_wait_ms"] <= e.dur_s * 1e3 + 1e-3
                            for e in verifies)


@pytest.mark.parametrize("extra, words", [
    (["--mode", "ppsd", "--launch", "torchrun"], "local launch"),
    (["--mode", "ar"], "add --mode eesd or --mode ppsd"),
    (["--mode", "ppsd", "--batch", "2"], "batched decoding"),
])
def test_run_refuses_a_stop_where_it_does_not_run(extra, words, capsys):
    """`ppsd run --draft-stop-confidence` outside a stop's reach: one line, exit 2, before any model loads."""
    from ppsd.cli import main

    assert main(["run", "--model", "tiny-llama", "--exit", "3", "--draft-stop-confidence", "0.5", *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_ppsd_stops_at_eos_like_ar(tiny):
    """With an EOS id that AR emits, both stop at the same place."""
    p = tiny.encode_prompt(TEXTS[0])
    ref = generate_ar(tiny, p, 24, Sampler.make(0, 0)).tokens
    eos = {ref[7]}
    ar = generate_ar(tiny, p, 24, Sampler.make(0, 0), eos).tokens
    ee = generate_eesd(tiny, p, 24, Sampler.make(0, 0), 4, 3, eos).tokens
    job = PipelineJob("tiny-llama", (0, 4, 6), [p], [24], eos=tuple(eos), warmup=0, repeats=1, timeout_s=30)
    pp = records_from_logs(job, run_local(job, model=tiny))[0][0].tokens
    assert ar == ee == pp == ref[:ref.index(ref[7]) + 1]


@pytest.mark.slow
def test_embedded_model_lossless_on_spec_bench(spec_bench_path):
    """SmolLM2-135M, 8 Spec-Bench prompts × 32 tokens: EESD and PPSD == AR, token for token."""
    from ppsd.prompts import load_prompts

    model = load_model("smollm2-135m")
    prompts = [model.encode_prompt(p.text)[-160:] for p in load_prompts("spec-bench", limit=8)]
    assert len(prompts) == 8
    ar = [generate_ar(model, p, 32, Sampler.make(0, 0)).tokens for p in prompts]
    ee = [generate_eesd(model, p, 32, Sampler.make(0, 0), 20, 4).tokens for p in prompts]
    assert ee == ar
    job = PipelineJob("smollm2-135m", (0, 20, 30), prompts, [32] * 8, warmup=0, repeats=1, timeout_s=120)
    pp = [r.tokens for r in records_from_logs(job, run_local(job, model=model))[0]]
    assert pp == ar
