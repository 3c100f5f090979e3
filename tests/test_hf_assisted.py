"""transformers' early-exit assisted generation as a ppsd runtime (runtime/hf_assisted.py): lossless
against transformers' own greedy generate, rounds counted as ppsd's decoders count them, the draft
schedule exactly as the simulator replays it (sim/schemes/hf.py), and the CLI wiring."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import torch

from ppsd.cli import main
from runtime.llm import tiny_llama
from sim.model.streams import Stream
from ppsd.modes import Mode
from sim.plan import Plan

torch.set_num_threads(1)

PROMPTS = ["The cat sat on the mat.", "Numbers: 1 2 3 4 5 6", "abcabcabcabc", "Hello there, general"]


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(seed=0)


def _prompts(model):
    return [model.encode_prompt(t) for t in PROMPTS]


def test_hf_assisted_is_lossless_against_hf_ar(tiny):
    from runtime.hf_assisted import run_hf

    prompts = _prompts(tiny)
    max_new = [24] * len(prompts)
    ar = run_hf(tiny, Plan(Mode.AR, runtime="hf"), prompts, max_new, warmup=0, repeats=1)[0]
    for schedule in ("constant", "heuristic"):
        for e, g in ((2, 3), (4, 5)):
            recs = run_hf(tiny, Plan(Mode.EESD, exit_layer=e, draft_len=g, runtime="hf", schedule=schedule),
                          prompts, max_new, warmup=0, repeats=1)[0]
            assert [r.tokens for r in recs] == [r.tokens for r in ar], (schedule, e, g)
            for r in recs:  # every committed token is in a round; the first round is the prefill
                assert r.first_commit + sum(a + 1 for a in r.rounds) == len(r.tokens)
                assert r.decode_tokens == len(r.tokens) - r.first_commit
                assert r.verified == sum(a + (a < d) for a, d in zip(r.rounds, r.drafts))
                assert all(a <= d for a, d in zip(r.rounds, r.drafts))
    # the model's generation config is left as it was
    assert tiny.model.generation_config.num_assistant_tokens_schedule in (None, "constant")


def test_measure_job_is_a_validation_measure_fn(tiny):
    from runtime.hf_assisted import measure_job
    from runtime.measure import Job

    prompts = _prompts(tiny)[:2]
    job = Job(Plan(Mode.EESD, exit_layer=3, draft_len=3), prompts, [12, 12], warmup=0, repeats=2)
    m = measure_job(tiny, job)
    assert m.result.plan.runtime == "hf" and m.result.tokens_per_s > 0
    assert m.result.acceptance_rate is not None and len(m.records) == 2
    ar = measure_job(tiny, Job(Plan(Mode.AR), prompts, [12, 12], warmup=0, repeats=1))
    assert ar.outputs == m.outputs


def _clean_trace(model, prompt, tokens, exit_layer):
    """match[j]: the exit-E head on the greedy prefix predicts token j (teacher forced)."""
    with torch.inference_mode():
        out = model.model(torch.tensor([prompt + tokens]), output_hidden_states=True)
        h = out.hidden_states[exit_layer]
        pred = model.lm_head(model.norm(h))[0].argmax(-1).tolist()
    p = len(prompt)
    return np.array([pred[p - 1 + j] == tokens[j] for j in range(len(tokens))], dtype=bool)


class _FreeRounds:
    """Costs for simulate_rounds where only the schedule matters."""

    def __init__(self, gamma, schedule, exit_layer):
        self.draft_len, self.schedule, self.exit_layer = gamma, schedule, exit_layer
        self.scale, self.seed, self.draft_stop = 1.0, 0, None

    def round_ms(self, context, g):
        return 1.0


@pytest.mark.parametrize("schedule,gamma", [("heuristic", 2), ("heuristic", 5), ("constant", 3)])
def test_schedule_matches_transformers_rounds(tiny, schedule, gamma):
    """The simulator replays the clean exit trace with transformers' schedule rules and gets the very
    draft counts and accepted lengths transformers produced, round by round, across generations
    (the heuristic's γ carries from one generate call to the next)."""
    from runtime.hf_assisted import run_hf
    from sim.schemes.hf import simulate_rounds

    E, max_new = 3, 20
    prompts = _prompts(tiny)
    recs = run_hf(tiny, Plan(Mode.EESD, exit_layer=E, draft_len=gamma, runtime="hf", schedule=schedule),
                  prompts, [max_new] * len(prompts), warmup=0, repeats=1)[0]
    assert all(len(r.tokens) == max_new for r in recs), "a generation stopped at EOS; pick other prompts"
    match = np.concatenate([_clean_trace(tiny, p, r.tokens, E) for p, r in zip(prompts, recs)])
    seg = np.zeros(len(match), bool)
    seg[np.arange(len(prompts)) * max_new] = True
    ctx = np.concatenate([len(p) + np.arange(max_new, dtype=float) for p in prompts])
    stats = simulate_rounds(Stream(match, ctx, seg, "trace"), _FreeRounds(gamma, schedule, E), record=True)
    sim_drafts = [e.args["drafts"] for e in stats.events]
    sim_accepted = [e.args["accepted"] for e in stats.events]
    hf_drafts = [d for r in recs for d in [r.first_drafts, *r.drafts]]
    hf_accepted = [a for r in recs for a in [r.first_commit - 1, *r.rounds]]
    assert sim_drafts == hf_drafts
    assert sim_accepted == hf_accepted
    assert stats.rounds_a == [a for r in recs for a in r.rounds]  # decode rounds: the first one is prefill


def test_confidence_stop_matches_transformers_rounds(tiny):
    """transformers' own confidence threshold (`Plan.draft_stop` with runtime "hf") stops the drafter
    where the simulator's replay of the clean trace's confidences stops it: the same accepted lengths
    round by round, the same draft counts wherever the stop came at or before the first mismatch
    (later drafts read a wrong prefix, whose confidence no trace holds), and still lossless."""
    from runtime.hf_assisted import run_hf
    from sim.schemes.hf import simulate_rounds

    E, max_new, gamma = 3, 20, 6
    prompts = _prompts(tiny)
    ar = run_hf(tiny, Plan(Mode.AR, runtime="hf"), prompts, [max_new] * len(prompts), warmup=0, repeats=1)[0]
    with torch.inference_mode():
        confs = []
        for p, r in zip(prompts, ar):
            h = tiny.model(torch.tensor([p + r.tokens]), output_hidden_states=True).hidden_states[E]
            probs = torch.softmax(tiny.lm_head(tiny.norm(h))[0].float(), -1).max(-1).values.tolist()
            confs.append([probs[len(p) - 1 + j] for j in range(max_new)])
    tau = float(np.median(np.concatenate(confs)))  # half the drafts unsure: stops are frequent
    plan = Plan(Mode.EESD, exit_layer=E, draft_len=gamma, runtime="hf", draft_stop=tau)
    recs = run_hf(tiny, plan, prompts, [max_new] * len(prompts), warmup=0, repeats=1)[0]
    assert [r.tokens for r in recs] == [r.tokens for r in ar]
    assert tiny.model.generation_config.assistant_confidence_threshold != tau  # restored after the run
    match = np.concatenate([_clean_trace(tiny, p, r.tokens, E) for p, r in zip(prompts, recs)])
    seg = np.zeros(len(match), bool)
    seg[np.arange(len(prompts)) * max_new] = True
    ctx = np.concatenate([len(p) + np.arange(max_new, dtype=float) for p in prompts])
    costs = _FreeRounds(gamma, "constant", E)
    costs.draft_stop = tau
    stats = simulate_rounds(Stream(match, ctx, seg, "trace", np.concatenate(confs)), costs, record=True)
    sim = [(e.args["drafts"], e.args["accepted"]) for e in stats.events]
    real = [d for r in recs for d in zip([r.first_drafts, *r.drafts], [r.first_commit - 1, *r.rounds])]
    assert [a for _, a in sim] == [a for _, a in real]
    assert any(d < gamma for d, _ in real)  # the threshold stopped drafts
    for (ds, a), (dr, _) in zip(sim, real):
        if min(ds, dr) <= a + 1:
            assert ds == dr


def test_next_gamma_follows_update_candidate_strategy():
    """sim's rule against transformers' own method, on a synthetic accept/reject sequence."""
    from types import SimpleNamespace

    from transformers.generation.candidate_generator import AssistedCandidateGenerator

    from sim.schemes.hf import next_gamma

    rng = np.random.default_rng(3)
    cfg = SimpleNamespace(num_assistant_tokens_schedule="heuristic", assistant_confidence_threshold=None)
    gen = SimpleNamespace(assistant_generation_config=cfg, num_assistant_tokens=4)
    gamma = 4
    for _ in range(200):
        drafts = int(rng.integers(0, gamma + 1))
        accepted = drafts if rng.random() < 0.4 else int(rng.integers(0, drafts + 1))
        scores = torch.zeros(1, drafts + 1, 8)
        AssistedCandidateGenerator.update_candidate_strategy(gen, None, scores, accepted)
        gamma = next_gamma(gamma, drafts, accepted, "heuristic")
        assert gamma == gen.num_assistant_tokens
    assert next_gamma(5, 5, 2, "constant") == 5


def test_cli_run_hf(tmp_path, capsys):
    rc = main(["run", "--runtime", "hf", "--model", "tiny-llama", "--mode", "eesd", "--exit", "3", "--draft-len", "3",
               "--schedule", "heuristic", "--limit", "2", "--max-new-tokens", "10", "--warmup", "0", "--repeats", "1",
               "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["runtime"] == "hf" and d["schedule"] == "heuristic" and d["label"].endswith("[hf heuristic]")
    assert d["outputs_match_ar"] is True


def test_cli_run_hf_at_transformers_default_threshold(capsys):
    """`--draft-stop-confidence default` is transformers' own threshold (what generate fills an unset field
    with), reported as the plan's τ; the run stays lossless. Bad values are one-line errors."""
    from transformers import GenerationConfig

    from runtime.hf_assisted import hf_default_threshold

    unset = GenerationConfig()._get_default_generation_params()["assistant_confidence_threshold"]
    assert hf_default_threshold() == pytest.approx(unset) and 0 < unset < 1
    rc = main(["run", "--runtime", "hf", "--model", "tiny-llama", "--mode", "eesd", "--exit", "3", "--draft-len", "4",
               "--draft-stop-confidence", "default", "--limit", "2", "--max-new-tokens", "10", "--warmup", "0",
               "--repeats", "1", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["draft_stop"] == pytest.approx(unset) and d["outputs_match_ar"] is True
    assert f"τ={unset:g}" in d["label"] and d["label"].endswith("[hf]")
    for bad, words in ((["--draft-stop-confidence", "1.5"], "outside (0, 1)"),
                       (["--draft-stop-confidence", "default", "--runtime", "ppsd"], "transformers' own")):
        args = ["run", "--runtime", "hf", "--model", "tiny-llama", "--mode", "eesd", "--exit", "3", *bad]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1


def test_cli_run_hf_refuses_ppsd(capsys):
    assert main(["run", "--runtime", "hf", "--model", "tiny-llama", "--mode", "ppsd", "--exit", "3"]) == 2
    err = capsys.readouterr().err
    assert "no pipeline" in err and len(err.strip().splitlines()) == 1


def test_logging_forward_calls_leaves_generate_computing_the_logits_it_would(tiny):
    """The forward-call log wraps the model's forward; generate() must still see `logits_to_keep` in its
    signature, or it computes the LM head on every position of every call (the drafter's re-feed
    included), and the profiler times rounds no un-logged run pays for."""
    from runtime.hf_assisted import ForwardCall, generate_hf, hf_model, instrumented

    hf = hf_model(tiny)
    assert hf._supports_logits_to_keep(), "tiny-llama's forward takes logits_to_keep"
    log: list[ForwardCall] = []
    with instrumented(hf, log, []):
        assert hf._supports_logits_to_keep()
    seen = []
    orig = type(hf).forward

    @functools.wraps(orig)  # the spy keeps the signature too
    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("logits_to_keep"))
        return orig(self, *args, **kwargs)

    type(hf).forward = spy
    try:
        rec = generate_hf(tiny, _prompts(tiny)[0], 12, exit_layer=2, eos=set(), log=log)
    finally:
        type(hf).forward = orig
    assert len(rec.tokens) == 12 and log  # the log still records every call
    assert seen and all(k is not None for k in seen)  # every call was told how many logits to keep
