"""The layerwise view of a model (runtime.llm + the acceptance passes) against the model itself."""

import numpy as np
import pytest
import torch

from profiler.acceptance import exit_traces, generate_greedy, layer_states, profile_acceptance
from runtime.llm import load_model
from ppsd.prompts import Prompt


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


def _check_exits_against_hf(adapter, ids, exits=None):
    """Exit N through the shared head == the model's logits; hidden_states[-1] is already normed
    (so the shared head must not be applied to it); exits k < N == head(hidden_states[k])."""
    with torch.inference_mode():
        out = adapter.model(torch.tensor([ids]), output_hidden_states=True)
    logits, hs = out.logits[0], out.hidden_states
    N = adapter.num_layers
    assert len(hs) == N + 1
    states = layer_states(adapter, ids[:1], ids[1:] + [0])   # positions 0..len-1 of `ids`
    with torch.inference_mode():
        ours = adapter.head(states[N - 1])
        torch.testing.assert_close(ours, logits, rtol=1e-4, atol=1e-4)
        # transformers' last hidden state has the final norm applied already ...
        torch.testing.assert_close(adapter.lm_head(hs[-1][0]), logits, rtol=1e-4, atol=1e-4)
        # ... so norming it again changes the logits: the profiler never does that
        assert not torch.allclose(adapter.head(hs[-1][0]), logits, rtol=1e-3, atol=1e-3)
        for k in exits or range(1, N):
            torch.testing.assert_close(adapter.head(states[k - 1]), adapter.head(hs[k][0]), rtol=1e-4, atol=1e-4)


def test_exit_at_last_layer_reproduces_logits_tiny():
    adapter = load_model("tiny-llama")
    # RMSNorm with unit weights is idempotent, which would hide a second norm: give it real weights.
    with torch.no_grad():
        adapter.norm.weight.copy_(torch.linspace(0.5, 2.0, adapter.hidden_size))
    _check_exits_against_hf(adapter, adapter.encode_prompt("The quick brown fox jumps over the lazy dog."))


@pytest.mark.slow
def test_exit_at_last_layer_reproduces_logits_smollm2():
    adapter = load_model("smollm2-135m")
    assert adapter.num_layers == 30 and adapter.hidden_size == 576 and adapter.vocab_size == 49152
    _check_exits_against_hf(adapter, adapter.encode_prompt("Name three colours."), exits=[1, 15, 29])


@torch.inference_mode()
def _step_by_step(adapter, prompt, max_new, exits):
    """Reference: batch-1 greedy decoding with the KV cache, applying the shared exit head to the
    hidden state after each exit layer as the token is produced (how a drafter would see it)."""
    cache = adapter.new_cache()
    cuts = sorted(exits) + [adapter.num_layers]
    x, pos, tokens, drafts = torch.tensor([prompt]), 0, [], {e: [] for e in exits}
    for _ in range(max_new):
        h, start = adapter.embed(x), 0
        for end in cuts:
            h = adapter.forward_layers(h, start, end, cache, pos)
            if end in drafts:
                drafts[end].append(int(adapter.head(h[:, -1]).argmax(-1)))
            start = end
        pos += x.shape[1]
        tok = int(adapter.head(h[:, -1]).argmax(-1))
        tokens.append(tok)
        if tok in adapter.eos_token_ids:
            break
        x = torch.tensor([[tok]])
    return tokens, drafts


def test_teacher_forced_trace_equals_step_by_step(tiny):
    texts = ["Hello there, how are you?", "abc", "A much longer prompt about nothing in particular, padded.",
             "Why is the sky blue?"]
    prompts = [Prompt(f"p{i}", "qa", t) for i, t in enumerate(texts)]
    encoded = [tiny.encode_prompt(t) for t in texts]
    max_new, exits = 12, [1, 2, 3, 4, 5]
    results = profile_acceptance(tiny, prompts, encoded, max_new, temperature=1.0)
    some_match = 0
    for r, ids in zip(results, encoded):
        tokens, drafts = _step_by_step(tiny, ids, max_new, exits)
        assert r.token_ids == tokens  # batched, left-padded generation == batch-1 decoding
        assert r.teacher_forced_agree == len(tokens)
        for e in exits:
            expected = [int(d == t) for d, t in zip(drafts[e], tokens)]
            assert r.match[e - 1].tolist() == expected, f"exit {e} of {r.prompt_id}"
            some_match += sum(expected)
        assert ((r.beta >= 0) & (r.beta <= 1 + 1e-6)).all()
    assert some_match > 0  # the comparison is not vacuous


def test_beta_at_zero_temperature_is_the_match(tiny):
    ids = tiny.encode_prompt("Zero temperature")
    gen = generate_greedy(tiny, [ids], 8)[0]
    states = layer_states(tiny, ids, gen)
    match, beta, agree, conf = exit_traces(tiny, states, gen, temperature=0.0)
    assert agree == len(gen)
    assert (beta == match).all()
    match1, beta1, _, conf1 = exit_traces(tiny, states, gen, temperature=1.0)
    assert (match1 == match).all() and not (beta1 == match).all()
    assert np.array_equal(conf, conf1)  # the draft's confidence does not depend on the sampling temperature


def test_draft_confidence_is_the_exit_heads_top_probability(tiny):
    """conf[E-1, p] = max softmax of the shared exit head's logits on layer E's state at position p."""
    import torch

    from runtime.decoding import draft_confidence

    ids = tiny.encode_prompt("Confidence of a draft")
    gen = generate_greedy(tiny, [ids], 6)[0]
    states = layer_states(tiny, ids, gen)
    _, _, _, conf = exit_traces(tiny, states, gen, temperature=0.0)
    assert conf.shape == (tiny.num_layers - 1, len(gen)) and ((conf > 0) & (conf <= 1 + 1e-6)).all()
    with torch.inference_mode():
        want = torch.softmax(tiny.head(states[2]).float(), -1).max(-1).values.numpy()
    assert np.allclose(conf[2], want, atol=1e-5)
    logits = torch.tensor([[0.0, 0.0], [5.0, -5.0]])
    assert draft_confidence(logits).tolist() == pytest.approx([0.5, 1 / (1 + np.exp(-10.0))])
