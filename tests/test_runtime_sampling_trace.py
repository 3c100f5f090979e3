"""Speculative sampling keeps AR's distribution (chi-square), and trace replay follows the given
accept/reject pattern exactly."""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch
from scipy.stats import chi2_contingency

from runtime.llm import load_model
from runtime.acceptance import ForcedTrace, Sampler, load_forced_trace
from runtime.decoding import generate_ar, generate_eesd
from runtime.launch import run_local
from runtime.measure import records_from_logs
from runtime.pipeline import PipelineJob

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


def _table(a: list[int], b: list[int], min_count: int = 8):
    """2×C contingency table; rare tokens pooled so every expected count is usable."""
    ca, cb = Counter(a), Counter(b)
    keep = [t for t in set(ca) | set(cb) if ca[t] + cb[t] >= min_count]
    rows = [[ca[t] for t in keep] + [sum(v for t, v in ca.items() if t not in keep)],
            [cb[t] for t in keep] + [sum(v for t, v in cb.items() if t not in keep)]]
    if rows[0][-1] + rows[1][-1] == 0:
        rows = [r[:-1] for r in rows]
    return rows


# T = 0.5: the random tiny model's distributions are nearly flat at T = 1, which leaves a chi-square
# on 400 samples without the power to see a wrong sampler (the power check below proves it has it).
TEMPERATURE = 0.5


def test_eesd_sampling_distribution_equals_ar(tiny):
    prompt = tiny.encode_prompt("The quick brown fox")
    n, temp = 400, TEMPERATURE
    ar = [generate_ar(tiny, prompt, 3, Sampler.make(temp, 10_000 + i)).tokens for i in range(n)]
    ee = [generate_eesd(tiny, prompt, 3, Sampler.make(temp, 50_000 + i), 4, 2).tokens for i in range(n)]
    for pos in (1, 2):  # positions decided by draft acceptance / residual resampling
        chi2, p, dof, _ = chi2_contingency(_table([s[pos] for s in ar], [s[pos] for s in ee]))
        assert dof >= 3, "the test needs several likely tokens to have power"
        assert p > 0.001, f"position {pos}: EESD sampling differs from AR (chi2={chi2:.1f}, p={p:.2g})"


def _median_confidence(tiny, prompt, exit_layer):
    """The middle of the exit head's draft confidences along one AR continuation: a τ that stops about
    half the drafts."""
    from profiler.acceptance import layer_states
    from runtime.decoding import draft_confidence

    cont = generate_ar(tiny, prompt, 8, Sampler.make(0, 0)).tokens
    with torch.inference_mode():
        conf = draft_confidence(tiny.head(layer_states(tiny, prompt, cont)[exit_layer - 1]).float())
    return float(conf.median())


def test_sampling_with_a_confidence_stop_keeps_ars_distribution(tiny):
    """A confidence stop decides how many drafts a round makes (EESD) or whether stage 1 waits for a
    verdict (PPSD), never how a draft is accepted: both still sample AR's distribution."""
    prompt = tiny.encode_prompt("The quick brown fox")
    n, temp = 400, TEMPERATURE
    tau = _median_confidence(tiny, prompt, 2)
    ar = [generate_ar(tiny, prompt, 3, Sampler.make(temp, 10_000 + i)).tokens for i in range(n)]
    ee = [generate_eesd(tiny, prompt, 3, Sampler.make(temp, 50_000 + i), 2, 4, draft_stop=tau).tokens
          for i in range(n)]
    job = PipelineJob("tiny-llama", (0, 2, 6), [prompt] * n, [3] * n, temperature=temp, seed=7, warmup=0, repeats=1,
                      timeout_s=60, draft_stop=tau)
    pp = [r.tokens for r in records_from_logs(job, run_local(job, model=tiny))[0]]
    for name, got in (("EESD", ee), ("PPSD", pp)):
        for pos in (1, 2):
            chi2, p, dof, _ = chi2_contingency(_table([s[pos] for s in ar], [s[pos] for s in got]))
            assert dof >= 3, "the test needs several likely tokens to have power"
            assert p > 0.001, f"position {pos}: {name} with a stop differs from AR (chi2={chi2:.1f}, p={p:.2g})"


def test_sampling_without_residual_would_be_caught(tiny):
    """Power check: drafts accepted blindly (no min(1, p/q) test) give a detectably different distribution."""
    prompt = tiny.encode_prompt("The quick brown fox")
    n = 400
    ar = [generate_ar(tiny, prompt, 3, Sampler.make(TEMPERATURE, 10_000 + i)).tokens for i in range(n)]
    bad = [generate_eesd(tiny, prompt, 3, Sampler.make(TEMPERATURE, 50_000 + i), 4, 2,
                         forced=ForcedTrace((1,))).tokens
           for i in range(n)]
    _, p, _, _ = chi2_contingency(_table([s[1] for s in ar], [s[1] for s in bad]))
    assert p < 0.001


@pytest.mark.parametrize("bounds", [(0, 2, 6), (0, 2, 4, 6)])
def test_ppsd_sampling_distribution_equals_ar(tiny, bounds):
    """The pipeline's verifier tests a draft with the q(d) stage 1 sent along and recomputes all of q
    only for a rejection's residual: still AR's distribution (k = 2, and k = 3 with the layer-E
    state carried through the middle stage)."""
    prompt = tiny.encode_prompt("The quick brown fox")
    n, temp = 400, TEMPERATURE
    ar = [generate_ar(tiny, prompt, 3, Sampler.make(temp, 10_000 + i)).tokens for i in range(n)]
    job = PipelineJob("tiny-llama", bounds, [prompt] * n, [3] * n, temperature=temp, seed=7, warmup=0, repeats=1,
                      timeout_s=60)
    pp = [r.tokens for r in records_from_logs(job, run_local(job, model=tiny))[0]]
    assert len(pp) == n and all(len(t) == 3 for t in pp)
    for pos in (1, 2):
        chi2, p, dof, _ = chi2_contingency(_table([s[pos] for s in ar], [s[pos] for s in pp]))
        assert dof >= 3, "the test needs several likely tokens to have power"
        assert p > 0.001, f"position {pos}: PPSD sampling differs from AR (chi2={chi2:.1f}, p={p:.2g})"


def test_verifying_with_q_of_the_draft_decides_as_with_all_of_q():
    """Sampler.verify given q(d) (and all of q only on demand) makes the same decisions and draws as
    given all of q, and asks for all of q only to reject."""
    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        p_logits, q_logits = torch.randn(50, generator=g) * 2, torch.randn(50, generator=g) * 2
        a, b = Sampler.make(0.8, trial), Sampler.make(0.8, trial)
        q = a.probs(q_logits)
        d = int(torch.multinomial(q, 1, generator=g))
        asked = []

        def q_full():
            asked.append(1)
            return b.probs(q_logits)

        full = a.verify(d, q, p_logits)
        lazy = b.verify(d, None, p_logits, q_draft=float(q[d]), q_full=q_full)
        assert full == lazy
        assert bool(asked) == (not full[0])


def _expected_eesd_rounds(pattern, max_new, gamma):
    rounds, g = [], 1  # token 0 comes from prefill; the first draft proposes generated index 1
    while g < max_new:
        gg = min(gamma, max_new - g - 1)
        a = 0
        while a < gg and pattern[(g + a) % len(pattern)]:
            a += 1
        rounds.append(a)
        g += a + 1
    return rounds


def _expected_ppsd_rounds(pattern, max_new):
    rounds, run = [], 0
    for g in range(max_new):
        if pattern[g % len(pattern)]:
            run += 1
        else:
            rounds.append(run)
            run = 0
    if pattern[(max_new - 1) % len(pattern)]:
        rounds.append(run)
    return rounds


PATTERN = (1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 0, 1)


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_eesd_trace_replay_reproduces_pattern(tiny, gamma):
    prompt = tiny.encode_prompt("trace me")
    rec = generate_eesd(tiny, prompt, 30, Sampler.make(0, 0), 2, gamma, forced=ForcedTrace(PATTERN))
    assert rec.rounds == _expected_eesd_rounds(PATTERN, 30, gamma)
    assert len(rec.tokens) == 30


@pytest.mark.parametrize("bounds", [(0, 2, 6), (0, 2, 4, 6)])
def test_ppsd_trace_replay_reproduces_pattern(tiny, bounds):
    prompt = tiny.encode_prompt("trace me")
    job = PipelineJob("tiny-llama", bounds, [prompt], [30], forced=[ForcedTrace(PATTERN)], warmup=0, repeats=1,
                      timeout_s=30)
    rec = records_from_logs(job, run_local(job, model=tiny))[0][0]
    assert rec.rounds == _expected_ppsd_rounds(PATTERN, 30)
    assert len(rec.tokens) == 30


def test_force_trace_specs(tmp_path):
    assert load_forced_trace("accept-all").accept(5) and not load_forced_trace("reject-all").accept(0)
    f = tmp_path / "t.txt"
    f.write_text("1 0 1\n1")
    assert load_forced_trace(str(f)).pattern == (1, 0, 1, 1)
    f.write_text("[0, 1]")
    assert load_forced_trace(str(f)).pattern == (0, 1)
    f.write_text("yes no")
    from ppsd.errors import UserError

    with pytest.raises(UserError):
        load_forced_trace(str(f))
