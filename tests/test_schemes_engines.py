"""Engines: hand-counted traces, hand-timed pipelines, fast replay == SimPy model, determinism."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ppsd.profile import load_profile, save_profile
from ppsd.profile.synthetic import synthetic_meta, write_synthetic_profile
from sim import api
from sim.schemes import eesd
from sim.schemes import scheme
from sim.schemes.ppsd.stage_costs import PPSDCosts
from sim.plan import Plan
from sim.model.streams import Stream
from engine_checks import assert_ppsd_engines_agree, per_stage_factors


def stream(bits, gens=None):
    m = np.asarray(bits, dtype=bool)
    seg = np.zeros(len(m), dtype=bool)
    seg[0] = True
    for s in gens or []:
        seg[s] = True
    return Stream(m, 64.0 + np.arange(len(m), dtype=float), seg, "trace")


class FlatEESDCosts:
    """Every draft 1 ms, every verification 10 ms, whatever the context and γ'."""

    def __init__(self, gamma, draft_stop=None):
        self.draft_len, self.draft_stop = gamma, draft_stop

    def draft(self, context):
        return np.full(np.shape(context), 1.0)

    def verify(self, context, gamma):
        return np.full(np.shape(context), 10.0)


def eesd_both(bits, gamma, gens=None):
    s = stream(bits, gens)
    costs = FlatEESDCosts(gamma)
    a = scheme("eesd").event_model(s, costs)
    b = scheme("eesd").replay(s, costs)
    assert a.rounds_a == b.rounds_a and a.time_ms == pytest.approx(b.time_ms, rel=1e-12)
    starts, g, acc = eesd.rounds(s, gamma)
    assert acc.tolist() == a.rounds_a and (acc < g).tolist() == a.rounds_rejected
    return a


def ppsd_both(bits, stage=(1.0, 2.0), hop=0.0, gens=None, factors=None, exit=0.0, jitter=0.0, checkpoints=None,
              launch="local", cap=None, first_pass=None):
    s = stream(bits, gens)
    k = len(stage)
    cps = None if checkpoints is None else np.repeat(np.asarray(checkpoints, dtype=float)[:, None], len(bits), axis=1)
    costs = PPSDCosts([np.full(len(bits), c) for c in stage], hop, tuple(range(k)), factors or [1.0] * (k + 1),
                      exit_ms=np.full(len(bits), exit), jitter_cv=jitter, checkpoints=cps, launch=launch,
                      inflight_cap=cap, first_pass=None if first_pass is None else (lambda L: list(first_pass)))
    return assert_ppsd_engines_agree(s, costs)


# --- trace-driven token counts equal a hand count (EESD γ = 3) -------------------------------------
@pytest.mark.parametrize("bits, rounds_a, rejected", [
    ([0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]),  # reject at the first draft
    ([1] * 8, [3, 3], [0, 0]),  # all accepted: γ + 1 tokens a round
    ([1, 0, 1, 0, 1, 0], [1, 1, 1], [1, 1, 0]),  # alternating (last round shortened to γ' = 1)
    ([1, 1, 0, 1, 1, 0, 1], [2, 2, 0], [1, 1, 0]),  # reject at the last draft of γ' = 3
    ([1, 1, 1, 0, 1], [3, 0], [0, 0]),  # all 3 accepted, the mismatch lands on the bonus token
])
def test_eesd_hand_counts(bits, rounds_a, rejected):
    st = eesd_both(bits, 3)
    assert st.tokens == len(bits)
    assert st.rounds_a == rounds_a
    assert st.rounds_rejected == [bool(x) for x in rejected]
    assert sum(a + 1 for a in st.rounds_a) == len(bits)  # every round commits a + 1 tokens
    drafts = sum(min(3, len(bits) - p - 1) for p in np.cumsum([0] + [a + 1 for a in rounds_a[:-1]]))
    assert st.time_ms == pytest.approx(drafts * 1.0 + len(rounds_a) * 10.0)


@pytest.mark.parametrize("bits, rounds_a", [
    ([0, 0, 0, 0, 0, 0], [0] * 6),
    ([1] * 8, [7]),
    ([1, 0, 1, 0, 1, 0], [1, 1, 1]),
    ([1, 1, 0, 1, 1, 0, 1], [2, 2, 0]),
])
def test_ppsd_hand_counts(bits, rounds_a):
    st = ppsd_both(bits)
    assert st.rounds_a == rounds_a and st.tokens == len(bits)


def test_ppsd_hand_timing():
    # stages 1 ms and 2 ms, hop 0.5 ms. Every token rejected: each costs 1 + 0.5 + 2 and a hop back.
    st = ppsd_both([0, 0, 0], hop=0.5)
    assert st.span_ms == pytest.approx(3 * 3.5 + 2 * 0.5)
    # all accepted: the first token's latency, then one every 2 ms (the slower stage)
    st = ppsd_both([1, 1, 1], hop=0.5)
    assert st.span_ms == pytest.approx(3.5 + 2 * 2.0)
    # co-run slowdown 1.5 with both stages busy: first stage-1 pass alone, the rest slowed
    st = ppsd_both([1, 1, 1], hop=0.0, factors=[1.0, 1.0, 1.5])
    assert st.span_ms == pytest.approx(1.0 + 3.0 * 3)
    # a new generation restarts the pipeline without counting a rejection
    st = ppsd_both([1, 1, 1, 1], gens=[2], hop=0.5)
    assert st.rounds_a == [1, 1] and st.rounds_rejected == [False, False]
    assert st.span_ms == pytest.approx((3.5 + 2.0 + 0.5) + (3.5 + 2.0))


def test_ppsd_decode_clock_is_the_runtimes():
    """time_ms is the runtime's decode clock (sim/schemes/ppsd/clock.py): per generation, from its
    first commit to its last, over L − 1 tokens, scaled to its L tokens; the pipeline's fill and the
    restarts between generations are not in it (span_ms keeps the whole axis)."""
    # all accepted, stages 1 and 2 ms, hop 0.5: first commit 3.5, then one every 2 ms
    st = ppsd_both([1, 1, 1], hop=0.5)
    assert st.span_ms == pytest.approx(3.5 + 2 * 2.0) and st.time_ms == pytest.approx(2 * 2.0 * 3 / 2)
    # two generations of 2: each from its first commit to its last (2 ms), over 1 token, times 2
    st = ppsd_both([1, 1, 1, 1], gens=[2], hop=0.5)
    assert st.time_ms == pytest.approx(2 * (2.0 * 2 / 1))
    # a one-token generation counts its single pass, from stage 1's start to the commit
    st = ppsd_both([1, 1, 1], gens=[2], hop=0.5)
    assert st.time_ms == pytest.approx(2.0 * 2 / 1 + 3.5)
    # every token rejected: cycles of 3.5 + 0.5 after the first commit (3.5)
    st = ppsd_both([0, 0, 0], hop=0.5)
    assert st.time_ms == pytest.approx((3 * 3.5 + 2 * 0.5 - 3.5) * 3 / 2)


def test_ppsd_first_pass_is_the_prefill():
    """A generation's first pass is its prefill (sim/schemes/ppsd/stage_costs.py: stage_prefill_ms): stages
    2 and 3 spend a prompt's time on it while stage 1 drafts on up to its in-flight cap (k = 3).
    Stages (2, 1, 1) ms, hop 0, every draft accepted, 4 tokens."""
    # one-token first pass: commits at 4, 6, 8, 10 (stage 1 binds): (10 − 4) · 4/3
    assert ppsd_both([1] * 4, stage=(2.0, 1.0, 1.0)).time_ms == pytest.approx(8.0)
    # prefill (2, 6, 6): token 0 commits at 2 + 6 + 6 = 14; stage 1 has drafted tokens 1 and 2 by then
    # (passes [2, 4], [4, 6]); token 3 waits for the verdict on token 0 (the cap): [14, 16].
    # Commits 14, 15, 16, 18: (18 − 14) · 4/3
    st = ppsd_both([1] * 4, stage=(2.0, 1.0, 1.0), first_pass=(2.0, 6.0, 6.0))
    assert st.time_ms == pytest.approx(16 / 3)
    # the prefill passes are not busy time (the runtime's convention); the rest on the decode clock.
    # Stage 1 also drafts past the last token (pass [16, 18], cut by the last commit at 18)
    assert st.stage_busy_ms == pytest.approx([4 * 2.0 * 4 / 3, 3 * 1.0 * 4 / 3, 3 * 1.0 * 4 / 3])


def test_ppsd_first_pass_is_priced_from_the_prompt(tmp_path):
    from sim.model.cost_model import cost_model
    from sim.schemes.ppsd.stage_costs import ppsd_costs, stage_prefill_ms

    p = write_synthetic_profile(tmp_path / "p", num_layers=6, layer_ms=1.0, head_ms=2.0, embed_ms=0.1,
                                per_token_fraction=0.5)
    s = Stream(np.ones(6, dtype=bool), np.array([40.0, 41, 42, 20, 21, 22]), np.array([1, 0, 0, 1, 0, 0], bool), "t")
    costs = ppsd_costs(p, Plan("ppsd", exit_layer=2, stage_bounds=(0, 2, 4, 6)), s.context)
    arrays = costs.stage_for(s)
    cm = cost_model(p)
    for j, L in ((0, 40.0), (3, 20.0)):
        want = stage_prefill_ms(cm, L, (0, 2, 4, 6))
        assert [a[j] for a in arrays] == pytest.approx(want)
        assert want[0] == pytest.approx(cm.embed(L) + sum(p.layer_ms(i, L) for i in range(2)) + 2.0)
        assert want[2] == pytest.approx(sum(p.layer_ms(i, L) for i in range(4, 6)) + cm.head(1))
    assert [a[1] for a in arrays] == pytest.approx([c[1] for c in costs.stage])  # other tokens: one-token passes


def test_ppsd_hand_timing_exit_head_overlaps():
    # stage 1 = 0.6 ms embed + layers, then a 0.4 ms exit head; the hidden state leaves at 0.6, so a
    # rejected token costs 0.6 + 0.5 + 2 (the draft, at 1.0 + 0.5, is there in time) and a hop back
    st = ppsd_both([0, 0, 0], hop=0.5, exit=0.4)
    assert st.span_ms == pytest.approx(3 * 3.1 + 2 * 0.5)
    # accepted tokens still pay the slower stage's whole occupancy
    st = ppsd_both([1, 1, 1], hop=0.5, exit=0.4)
    assert st.span_ms == pytest.approx(3.1 + 2 * 2.0)
    # a slow exit head binds: stage 2 is done at 0.5 + 0.5 + 1 but the draft arrives at 3 + 0.5; the
    # board announces the rejection at 3.5, just as stage 1's speculative pass ends its layers (before
    # its exit head [3.5, 6.0)): it drops the pass, and the verdict lets the corrected token in at 4.0
    st = ppsd_both([0, 0, 0], stage=(3.0, 1.0), hop=0.5, exit=2.5)
    assert st.span_ms == pytest.approx(2 * 4.0 + 3.5)
    # exit head 2.8: the rejection (3.5) finds stage 1 in its exit head [3.2, 6.0), which it finishes
    st = ppsd_both([0, 0, 0], stage=(3.0, 1.0), hop=0.5, exit=2.8)
    assert st.span_ms == pytest.approx(2 * 6.0 + 3.5)
    # k = 3: the hidden state goes on at 0.6, the draft skips stage 2 and reaches stage 3 at 1.5
    st = ppsd_both([0, 0], stage=(1.0, 2.0, 0.5), hop=0.5, exit=0.4)
    assert st.span_ms == pytest.approx(2 * (0.6 + 0.5 + 2.0 + 0.5 + 0.5) + 0.5)


def test_ppsd_hand_timing_rejection_during_layers():
    # stage 1 = 2.0 layers + 1.0 exit head, stage 2 = 1.0, hop 0.5. Token 0: layers [0, 2), sent, at
    # stage 2 [2.5, 3.5); draft at 3 + 0.5 = 3.5; rejected at 3.5, the flush reaches stage 1 at 4.0,
    # inside the layers [3, 5) of its speculative pass: dropped at once, the cycle lasts 4.0
    st = ppsd_both([0, 0, 0], stage=(3.0, 1.0), hop=0.5, exit=1.0)
    assert st.span_ms == pytest.approx(2 * 4.0 + 3.5)


def test_ppsd_hand_timing_rejection_during_exit_head():
    # stage 1 = 1.0 layers + 2.0 exit head, stage 2 = 1.0, hop 0.5. Token 0: layers [0, 1), stage 2
    # [1.5, 2.5), draft at 3.5; rejected at 3.5, the flush reaches stage 1 at 4.0. Its speculative
    # pass has layers [3, 4) and exit head [4, 6): 4.0 is the end of its last layer, so the pass is
    # dropped right there (nothing sent, no head): the cycle lasts 4.0
    st = ppsd_both([0, 0, 0], stage=(3.0, 1.0), hop=0.5, exit=2.0)
    assert st.span_ms == pytest.approx(2 * 4.0 + 3.5)
    # exit head 2.2: layers [3, 3.8), exit head [3.8, 6.0); the board's rejection at 3.5 lands in the
    # layers: the pass is dropped, the verdict arrives at 4.0 (a flush waiting a hop would find the head)
    st = ppsd_both([0, 0, 0], stage=(3.0, 1.0), hop=0.5, exit=2.2)
    assert st.span_ms == pytest.approx(2 * 4.0 + 3.5)
    # ... but with stage 1 looking at the board only at layer ends (a checkpoint at 0.5 and 0.8 of
    # its pass: [3, 3.5), [3.5, 3.8) cannot be cut) a rejection at 3.5 + ε would wait for 3.8 < 4.0
    st = ppsd_both([0, 0, 0], stage=(3.0, 1.0), hop=0.5, exit=2.2, checkpoints=[0.4, 0.8])
    assert st.span_ms == pytest.approx(2 * 4.0 + 3.5)
    # accepted tokens are untouched; a rejection after two accepts: token 2 commits at 3 * 3 + 0.5,
    # inside the layers [9, 9.8) of token 3's pass: next cycle at 10
    st = ppsd_both([1, 1, 0, 0], stage=(3.0, 1.0), hop=0.5, exit=2.2)
    assert st.span_ms == pytest.approx(10.0 + 3.5)
    # k = 3, stages (1.0, 2.2, 0.5), hop 0.5, head 0.4: token 0 leaves stage 3 at 0.6 + 0.5 + 2.2 +
    # 0.5 + 0.5 = 4.3; stage 1 has run 3 passes and waits at its in-flight cap: cycle 4.3 + 0.5
    st = ppsd_both([0, 0], stage=(1.0, 2.2, 0.5), hop=0.5, exit=0.4)
    assert st.span_ms == pytest.approx(4.8 + 4.3)
    # without the cap stage 1 would be in the layers [4, 4.6) of its fifth pass at 4.3: cycle 4.8 too
    st = ppsd_both([0, 0], stage=(1.0, 2.2, 0.5), hop=0.5, exit=0.4, cap=0)
    assert st.span_ms == pytest.approx(4.8 + 4.3)
    # head 0.1: token 0 leaves stage 3 at 4.6, the flush at 5.1 is inside pass 6's layers [5, 5.9)
    st = ppsd_both([0, 0], stage=(1.0, 2.2, 0.5), hop=0.5, exit=0.1)
    assert st.span_ms == pytest.approx(5.1 + 4.6)


@pytest.mark.parametrize("stage, hop, factors", [
    ((1.0, 2.0), 0.0, None),
    ((3.0, 1.0, 2.0), 0.4, [1.0, 1.0, 1.2, 1.5]),
    ((2.0, 2.0, 2.0, 2.0), 0.1, [1.0, 1.0, 1.1, 1.2, 1.3]),
    ((5.0, 1.0, 1.0, 4.0), 1.0, None),
])
def test_fast_equals_event_random_traces(stage, hop, factors):
    rng = np.random.default_rng(7)
    for alpha in (0.1, 0.5, 0.9):
        bits = (rng.random(400) < alpha).astype(int)
        ppsd_both(bits, stage, hop, gens=[150, 300], factors=factors)
        for share in (0.3, 0.9):  # the exit head's share of stage 1 (0.9: the draft binds)
            ppsd_both(bits, stage, hop, gens=[150, 300], factors=factors, exit=share * stage[0])
            ppsd_both(bits, stage, hop, gens=[150, 300], factors=factors, exit=share * stage[0], jitter=0.03)
        eesd_both(bits, 4, gens=[150, 300])


def test_fast_equals_event_random_pipelines_up_to_8_stages():
    """Random pipelines (k = 2..8, unbalanced stages, hops long and short against the passes, layer
    checkpoints or none, both launch rules, jitter, co-run factors shared or per stage): the replay equals the SimPy model
    to 1e-9, in time, rounds and busy time; some of them with the in-flight cap binding."""
    rng = np.random.default_rng(13)
    bound = 0
    for _ in range(40):
        k = int(rng.integers(2, 9))
        stage = tuple(float(x) for x in rng.uniform(0.3, 3.0, size=k))
        hop = float(rng.choice([0.0, 0.05, 0.4, 1.5]))
        exit = float(rng.uniform(0.0, 0.8)) * stage[0]
        cps = None
        if rng.random() < 0.7:
            cps = np.sort(rng.uniform(0.0, stage[0] - exit, size=int(rng.integers(1, 6))))
        launch = str(rng.choice(["local", "torchrun"]))
        factors = None if rng.random() < 0.5 else [1.0] + list(1.0 + np.sort(rng.uniform(0.0, 0.4, size=k)))
        if factors is not None and rng.random() < 0.5:  # per stage: each role's share and a lock step
            factors = per_stage_factors(factors, rng.uniform(0.9, 1.1, size=k), float(rng.uniform(1.0, 1.06)))
        alpha = float(rng.choice([0.2, 0.6, 0.9, 1.0]))
        bits = (rng.random(300) < alpha).astype(int)
        jitter = float(rng.choice([0.0, 0.03]))
        first = None if rng.random() < 0.4 else tuple(float(x) for x in np.asarray(stage) * rng.uniform(1, 12, k))
        st = ppsd_both(bits, stage, hop, gens=[120], factors=factors, exit=exit, jitter=jitter, checkpoints=cps,
                       launch=launch, first_pass=first)
        free = ppsd_both(bits, stage, hop, gens=[120], factors=factors, exit=exit, jitter=jitter, checkpoints=cps,
                         cap=0, first_pass=first) if launch == "local" else None
        bound += free is not None and st.time_ms > free.time_ms + 1e-9
    assert bound >= 3  # the cap mattered in several of them


def test_torchrun_rejection_waits_for_the_cap():
    # stages (1, 1), hop 0.5, every token rejected. Local: token 0 commits at 1 + 0.5 + 1 = 2.5 and the
    # verdict lets the next token in at 3.0. Torchrun: stage 1 keeps drafting (pass 1 [1, 2]); its
    # cap (2) makes it read the verdict on token 0 before pass 2, at 3.0: the same here ...
    assert ppsd_both([0, 0, 0], stage=(1.0, 1.0), hop=0.5).span_ms == pytest.approx(2 * 3.0 + 2.5)
    assert ppsd_both([0, 0, 0], stage=(1.0, 1.0), hop=0.5, launch="torchrun").span_ms == pytest.approx(2 * 3.0 + 2.5)
    # ... but with a slow stage 1 (3, 1) and exit head 2 it finishes pass 1 [3, 6] before reading the
    # verdict (due at 4.0 + 0.5 = 4.5... token 0 commits at max(1 + 0.5 + 1, 3 + 0.5) = 3.5, verdict 4.0):
    # torchrun's cycle is 6.0, local drops pass 1 at its next checkpoint (here: in the layers, at once)
    assert ppsd_both([0, 0, 0], stage=(3.0, 1.0), hop=0.5, exit=2.0).span_ms == pytest.approx(2 * 4.0 + 3.5)
    assert ppsd_both([0, 0, 0], stage=(3.0, 1.0), hop=0.5, exit=2.0,
                     launch="torchrun").span_ms == pytest.approx(2 * 6.0 + 3.5)


def test_jitter_expected_restart_matches_monte_carlo():
    """The restart rule with jitter is the mean of the hard rule over a Gaussian flush time: a
    flush landing in an exit head waits for its end, one landing in the layers restarts at once."""
    from sim.model.restart import head_wait, jitter_sigma

    # stage 1 passes of 3.0 ms (layers 1.0, head 2.0) back to back from 0; flushes near the knife
    # edge at 4.0 (end of pass 2's layers) and elsewhere
    heads = [(t + 1.0, t + 3.0) for t in (0.0, 3.0, 6.0, 9.0)]
    rng = np.random.default_rng(0)
    for fr in (3.5, 3.95, 4.0, 4.05, 5.2, 6.4):
        sigma = float(jitter_sigma(0.05, 3.0, fr))
        eps = rng.normal(0.0, sigma, 400_000)
        x = fr + eps
        entry = x.copy()
        for hs, he in heads:
            entry = np.where((x > hs) & (x < he), he, entry)
        want = entry.mean()
        got = fr + sum(float(head_wait(hs, he, fr, sigma)) for hs, he in heads if hs - 1.0 < fr)
        assert got == pytest.approx(want, abs=4 * entry.std() / np.sqrt(len(x)) + 1e-3)


def test_jitter_smooths_the_knife_edge():
    # stage 1 = layers L + exit head, stage 2 = 1.0, hop 0.5: the flush reaches stage 1 at 4.0,
    # exactly where its speculative pass's layers end when the exit head is 2.0. Without jitter the
    # cycle jumps from 4.0 (head 2.0) to 6.0 (head 2.2); with jitter it moves smoothly in between
    # and tends to the hard rule as the jitter shrinks.
    # (with the board, the rejection is known at the commit, 3.5, which is where the speculative
    # pass's layers end when the exit head is 2.5: the knife edge sits there)
    def cycle(exit, jitter):
        st = ppsd_both([0] * 41, stage=(3.0, 1.0), hop=0.5, exit=exit, jitter=jitter)
        return (st.span_ms - 3.5) / 40

    assert cycle(2.4, 0.0) == pytest.approx(4.0) and cycle(2.6, 0.0) == pytest.approx(6.0)
    soft = [cycle(e, 0.02) for e in (2.4, 2.45, 2.5, 2.55, 2.6, 2.7)]
    assert all(b >= a - 1e-12 for a, b in zip(soft, soft[1:]))  # later heads never shorten a cycle
    assert 4.0 < soft[2] < 6.0 and soft[-1] - soft[0] < 2.0
    assert cycle(2.5, 0.02) == pytest.approx(5.0, abs=0.05)  # right on the edge: half the time each way
    assert cycle(2.7, 1e-6) == pytest.approx(6.0, abs=1e-3) and cycle(2.3, 1e-6) == pytest.approx(4.0, abs=1e-3)


@pytest.fixture(scope="module")
def prof(tmp_path_factory):
    return write_synthetic_profile(tmp_path_factory.mktemp("p"), alpha_by_exit=lambda e: 0.05 + 0.9 * e / 12,
                                   num_layers=12, layer_ms=2.0, head_ms=6.0, hop_ms=0.2, corun_slowdown=1.3,
                                   per_token_fraction=0.05)


@pytest.mark.parametrize("plan", [Plan("ar"), Plan("eesd", exit_layer=4, draft_len=3),
                                  Plan("ppsd", exit_layer=4, stages=2), Plan("ppsd", exit_layer=3, stages=4),
                                  Plan("ppsd", exit_layer=6, stage_bounds=(0, 6, 9, 12))])
def test_api_fast_equals_event(prof, plan):
    for acc in ("trace", "bernoulli"):
        a = api.simulate(prof, plan, tokens=1500, acceptance=acc, alpha=0.7, engine="event")
        b = api.simulate(prof, plan, tokens=1500, acceptance=acc, alpha=0.7, engine="fast")
        assert a.time_s == pytest.approx(b.time_s, rel=1e-10)
        assert a.accepted_hist == b.accepted_hist and a.tokens == b.tokens == 1500
        assert a.stage_busy == pytest.approx(b.stage_busy, rel=1e-9)


def test_shared_device_serialises(prof):
    split = api.simulate(prof, Plan("ppsd", exit_layer=4, stages=2), acceptance="bernoulli", alpha=1.0, tokens=300)
    shared = api.simulate(prof, Plan("ppsd", exit_layer=4, stages=2, placement=(0, 0)), acceptance="bernoulli",
                          alpha=1.0, tokens=300)
    # one device: the two stages take turns (no co-run slowdown, but no overlap either)
    assert shared.time_s > split.time_s
    assert sum(shared.stage_busy) == pytest.approx(1.0)  # the device never idles, stages never overlap
    assert len(shared.device_busy) == 1 and shared.device_busy[0] <= 1.0 + 1e-9


def test_determinism_per_seed(prof):
    plan = Plan("ppsd", exit_layer=4, stages=3)
    for kw in ({"acceptance": "bernoulli", "alpha": 0.6}, {"temperature": prof.beta_temperatures()[0]}):
        a = api.simulate(prof, plan, tokens=800, seed=5, **kw).to_json_dict()
        b = api.simulate(prof, plan, tokens=800, seed=5, **kw).to_json_dict()
        c = api.simulate(prof, plan, tokens=800, seed=6, **kw).to_json_dict()
        assert a == b
        assert a["time_s"] != c["time_s"]


def test_trace_replay_per_prompt_and_category(tmp_path):
    meta = synthetic_meta(num_layers=6, layer_ms=1.0, head_ms=2.0)
    rows = []
    traces = {"a": [1, 1, 0, 1], "b": [0, 0, 1]}
    for pid, bits in traces.items():
        for pos, m in enumerate(bits):
            rows.append(("shared", pid, "math" if pid == "a" else "coding", 2, pos, m, float(m)))
    df = pd.DataFrame(rows, columns=["head", "prompt_id", "category", "exit_layer", "position", "match", "beta"])
    meta["acceptance"] = {"temperature": 0.0}
    save_profile(tmp_path, meta, acceptance=df)
    p = load_profile(tmp_path)
    plan = Plan("ppsd", exit_layer=2, stages=2, hop_ms=0.0)
    r = api.simulate(p, plan)  # each prompt once, a new generation at each
    assert r.tokens == 7 and r.accepted_hist == {2: 1, 0: 4}
    assert r.details.generations == 2 and r.acceptance_rate == pytest.approx(2 / 5)
    r = api.simulate(p, plan, prompt_ids=["b"])
    assert r.tokens == 3 and r.accepted_hist == {0: 3} and r.details.generations == 1
    r = api.simulate(p, Plan("eesd", exit_layer=2, draft_len=3), category="math")
    assert r.tokens == 4 and r.accepted_hist == {2: 1, 0: 1}


def test_eesd_round_starts_equal_the_pointer_chase():
    # the replay's vectorised round boundaries against the event model's pointer chase
    rng = np.random.default_rng(3)
    for trial in range(60):
        t = int(rng.integers(1, 400))
        match = rng.random(t) < rng.random()
        seg = rng.random(t) < 0.03
        seg[0] = True
        s = Stream(match, np.arange(t, dtype=float), seg, "test")
        for gamma in (1, 2, 3, 5, 8):
            chased = scheme("eesd").event_model(s, FlatEESDCosts(gamma))
            starts, g, a = eesd.rounds(s, gamma)
            assert a.tolist() == chased.rounds_a and (a < g).tolist() == chased.rounds_rejected, (trial, gamma)
            assert int(np.sum(a + 1)) == t and starts[0] == 0


def test_every_mode_has_one_scheme():
    from ppsd.modes import Mode
    from sim.schemes import SCHEMES
    from sim.schemes.base import Scheme

    assert set(SCHEMES) == set(Mode)
    for mode, sch in SCHEMES.items():
        assert isinstance(sch, Scheme) and sch.mode is mode and scheme(mode.value) is sch
    with pytest.raises(Exception, match="unknown mode"):
        scheme("medusa")


def test_plan_modes_parse_and_serialise():
    from ppsd.errors import UserError
    from ppsd.modes import Mode

    p = Plan("PPSD", exit_layer=4, stages=2)
    assert p.mode is Mode.PPSD and p.to_dict()["mode"] == "ppsd" and Plan.from_dict(p.to_dict()) == p
    with pytest.raises(UserError, match="unknown mode 'medusa'"):
        Plan("medusa")
