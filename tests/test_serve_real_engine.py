"""runtime/serve/engine.py (and pipeline.py): the continuous-batching engine over the batched runtime.
Requests arrive at ragged iterations, join a running batch (left-padded either way), leave at EOS or their
budget; every request's greedy output is AR's for its prompt alone, under AR, EESD, PPSD (its stage 1 in its
own process) and the load-following policies, and the KV-cache rectangle's width follows the rule the
simulator models."""

from __future__ import annotations

import pytest
import torch

from ppsd.errors import UserError
from runtime.acceptance import Sampler
from runtime.decoding import generate_ar
from runtime.serve.engine import FinishReason, ServeEngine, check_policy, max_draft_len, width_after
from sim.serve.policies import parse_policy
from sim.serve.scheduler import SchedulerConfig

TEXTS = ["Hello world, this is a test prompt.", "x", "Another one: 1 2 3",
         "a somewhat longer prompt, of several words, longer than the others by far", "ab", "short one",
         "the twelfth night of a long winter", "q?"]
# (iteration it arrives before, prompt index, budget, ignore_eos)
SCRIPT = [(0, 0, 14, True), (0, 1, 9, True), (2, 2, 11, True), (3, 3, 7, True), (3, 4, 1, True),
          (6, 5, 16, False), (9, 6, 5, True), (20, 7, 12, True), (21, 0, 3, False), (40, 3, 10, True)]


class LinearCost:
    """Speculation pays at small batches only: goodput drafts at 1-2 live sequences, not at more."""

    def ar_step(self, batch, context):
        return 10.0 + 2.0 * batch

    def eesd_round(self, batch, context, exit_layer, draft_len):
        return (draft_len + 1) * (1.0 + 3.0 * batch) + 10.0


def _ar_alone(tiny, prompt, budget, ignore_eos):
    eos = None if ignore_eos else tiny.eos_token_ids
    return generate_ar(tiny, prompt, budget, Sampler.make(0, 0), eos).tokens


def _replay(engine, tiny, script=SCRIPT):
    """Submit each request before its iteration; step until idle -> {script index: (tokens, finish, timing)}."""
    got, ids, tokens = {}, {}, {}

    def listen(i):
        def on_event(ev):
            tokens.setdefault(i, []).extend(ev.tokens)
            if ev.finished:
                got[i] = (tokens[i], ev.finish_reason, ev.timing)
        return on_event

    step = 0
    while step <= max(s[0] for s in script) or not engine.idle:
        for i, (at, p, budget, ignore) in enumerate(script):
            if at == step:
                ids[i] = engine.submit(tiny.encode_prompt(TEXTS[p]), budget, listen(i), ignore_eos=ignore)
        engine.step()
        step += 1
        assert step < 2000
    return got


@pytest.mark.parametrize("spec", ["ar", "eesd:3:2", "eesd:1:4", "eesd:5:3", "off-above:2:3:2",
                                  "table:3:1=4,2=2,3=0", "goodput:3:4", "ppsd:1", "ppsd:3", "ppsd:5"])
def test_every_request_gets_ar_output_alone_under_joins_and_leaves(tiny, spec):
    engine = ServeEngine(tiny, parse_policy(spec), SchedulerConfig(max_batch=4, max_tokens=256),
                         cost=LinearCost(), alpha=0.6)
    try:
        got = _replay(engine, tiny)
    finally:
        engine.close()
    assert sorted(got) == list(range(len(SCRIPT)))
    for i, (_, p, budget, ignore) in enumerate(SCRIPT):
        tokens, reason, timing = got[i]
        ar = _ar_alone(tiny, tiny.encode_prompt(TEXTS[p]), budget, ignore)
        assert tokens == ar, (spec, i)
        assert reason is (FinishReason.LENGTH if len(ar) == budget and ar[-1] not in tiny.eos_token_ids or ignore
                          else FinishReason.STOP)
        assert timing.output_tokens == len(tokens) and timing.ok
    assert engine.state is None and engine.width == 0  # the rectangle resets when the batch empties
    speculative = spec != "ar"
    assert (engine.speculative_iterations > 0) == speculative
    if speculative:
        assert any(t.drafted > 0 for _, _, t in got.values())
        assert all(t.accepted <= t.drafted for _, _, t in got.values())
    if spec.startswith("ppsd"):  # one verdict per token after the first
        assert all(t.drafted == t.output_tokens - 1 for _, _, t in got.values())
        assert not engine.pipe.stage_one.proc.is_alive()


def test_a_request_that_stops_at_eos_leaves_early_unless_it_ignores_eos(tiny):
    prompt = tiny.encode_prompt(TEXTS[5])
    eos = tiny.eos_token_ids
    ar = generate_ar(tiny, prompt, 40, Sampler.make(0, 0)).tokens
    eos_at = next((i for i, t in enumerate(ar) if t in eos), None)
    fake_eos = {ar[3]} if eos_at is None else eos  # a token the greedy output reaches, as the model's EOS
    engine = ServeEngine(tiny, parse_policy("eesd:3:3"), SchedulerConfig(max_batch=2), eos=fake_eos)
    seen = {}
    for ignore in (False, True):
        engine.submit(prompt, 12, lambda ev, k=ignore: seen.setdefault(k, []).append(ev), ignore_eos=ignore)
    engine.run_until_idle()
    stopped = [t for ev in seen[False] for t in ev.tokens]
    assert stopped == generate_ar(tiny, prompt, 12, Sampler.make(0, 0), fake_eos).tokens
    assert seen[False][-1].finish_reason is FinishReason.STOP and stopped[-1] in fake_eos
    assert [t for ev in seen[True] for t in ev.tokens] == generate_ar(tiny, prompt, 12, Sampler.make(0, 0)).tokens
    assert seen[True][-1].finish_reason is FinishReason.LENGTH


@pytest.mark.parametrize("spec", ["ar", "eesd:3:3", "goodput:2:4"])
def test_the_cache_width_follows_the_rule_the_simulator_models(tiny, spec):
    """width 0 when empty; a join makes it max(width, P); an AR step adds 1; an EESD round adds 1 + the most
    drafts any sequence accepted; a leave takes the leading columns no remaining row attends to, so the
    rectangle is the oldest live row's span (`width_after`), iteration by iteration of a replay."""
    engine = ServeEngine(tiny, parse_policy(spec), SchedulerConfig(max_batch=3), cost=LinearCost())
    kinds, croppings = set(), []
    original = engine.step

    def step():
        width = engine.width
        ran = original()
        if ran:
            rec = engine.last
            kinds.add(rec.kind)
            assert rec.width_before == width and engine.width == rec.width_after == width_after(width, rec)
            if engine.state is not None:  # from the oldest live row's first column on
                assert engine.state.valid.shape[1] == engine.width and bool(engine.state.valid[:, 0].any())
            croppings.append(rec.cropped)
            if rec.kind == "prefill" and rec.joined and width:
                assert engine.width == max(width, *rec.joined)
        return ran
    engine.step = step
    _replay(engine, tiny)
    assert "prefill" in kinds and ({"ar", "eesd"} & kinds)
    assert any(croppings)  # some leaver took the columns only it held


def test_a_longer_newcomer_widens_every_running_row_and_a_shorter_one_is_padded(tiny):
    engine = ServeEngine(tiny, parse_policy("ar"), SchedulerConfig(max_batch=3))
    short, long_ = tiny.encode_prompt(TEXTS[1]), tiny.encode_prompt(TEXTS[3])
    engine.submit(short, 6, lambda ev: None, ignore_eos=True)
    engine.step()  # prefill: width = len(short)
    engine.step()  # one AR step
    assert engine.width == len(short) + 1
    engine.submit(long_, 6, lambda ev: None, ignore_eos=True)
    engine.step()
    assert engine.width == len(long_) and engine.live == 2
    valid = engine.state.valid
    assert int(valid[0].sum()) == len(short) + 1 and not bool(valid[0, 0])  # the running row was widened
    assert bool(valid[1].all())
    engine.submit(short, 6, lambda ev: None, ignore_eos=True)
    engine.step()
    assert engine.width == len(long_) and int(engine.state.valid[2].sum()) == len(short)


def test_max_batch_holds_newcomers_back_fcfs(tiny):
    engine = ServeEngine(tiny, parse_policy("ar"), SchedulerConfig(max_batch=2))
    order = []
    for i in range(4):
        engine.submit(tiny.encode_prompt(TEXTS[i]), 3, lambda ev, i=i: ev.finished and order.append(i),
                      ignore_eos=True)
    engine.step()
    assert engine.live == 2 and len(engine.scheduler.waiting) == 2
    engine.run_until_idle()
    assert order[:2] == [0, 1] and sorted(order) == [0, 1, 2, 3]


def test_a_cancelled_request_leaves_the_batch_and_hears_abort(tiny):
    engine = ServeEngine(tiny, parse_policy("eesd:3:2"), SchedulerConfig(max_batch=4))
    events = {}
    a = engine.submit(tiny.encode_prompt(TEXTS[0]), 20, lambda ev: events.setdefault("a", []).append(ev),
                      ignore_eos=True)
    engine.submit(tiny.encode_prompt(TEXTS[2]), 8, lambda ev: events.setdefault("b", []).append(ev),
                  ignore_eos=True)
    for _ in range(3):
        engine.step()
    engine.cancel(a)
    engine.run_until_idle()
    assert events["a"][-1].finish_reason is FinishReason.ABORT
    b = [t for ev in events["b"] for t in ev.tokens]
    assert b == _ar_alone(tiny, tiny.encode_prompt(TEXTS[2]), 8, True)


def test_the_engine_thread_serves_and_stops(tiny):
    import threading

    engine = ServeEngine(tiny, parse_policy("eesd:3:2"), SchedulerConfig(max_batch=2))
    done = threading.Event()
    out = []

    def on_event(ev):
        out.extend(ev.tokens)
        if ev.finished:
            done.set()
    engine.start()
    try:
        engine.submit(tiny.encode_prompt(TEXTS[0]), 9, on_event, ignore_eos=True)
        assert done.wait(60)
    finally:
        engine.close()
    assert out == _ar_alone(tiny, tiny.encode_prompt(TEXTS[0]), 9, True)
    assert not engine._thread.is_alive()


def test_what_the_real_loop_does_not_run_is_refused(tiny):
    from sim.serve.policies.fixed import EesdPolicy

    class SimulatedOnly(EesdPolicy):
        runs_real = False

    for policy, words in ((SimulatedOnly(3, 2), "simulator only"), (parse_policy("eesd:9:2"), "outside"),
                          (parse_policy("goodput:3"), "batch cost tables")):
        with pytest.raises(UserError, match=words):
            check_policy(policy, tiny.num_layers, SchedulerConfig(), None)
    with pytest.raises(UserError, match="prefills first"):
        check_policy(parse_policy("ar"), tiny.num_layers, SchedulerConfig(prefill="chunked"), None)
    with pytest.raises(UserError, match="max-tokens 8 cannot hold"):
        check_policy(parse_policy("eesd:3:3"), tiny.num_layers, SchedulerConfig(max_batch=4, max_tokens=8), None)
    assert max_draft_len(parse_policy("table:3:1=4,4=1")) == 4 and max_draft_len(parse_policy("ar")) == 0
    engine = ServeEngine(tiny, parse_policy("ar"))
    with pytest.raises(UserError, match="context"):
        engine.submit([1] * 10, tiny.max_context, lambda ev: None)
    with pytest.raises(UserError, match="empty"):
        engine.submit([], 4, lambda ev: None)


@pytest.mark.slow
def test_smollm2_requests_joining_and_leaving_get_ar_output():
    from ppsd.prompts import load_prompts
    from runtime.llm import load_model

    torch.set_num_threads(1)
    model = load_model("smollm2-135m")
    prompts = [model.encode_prompt(p.text)[-64:] for p in load_prompts(None, limit=4)]
    budgets = [8, 5, 7, 6]
    ar = [generate_ar(model, p, n, Sampler.make(0, 0)).tokens for p, n in zip(prompts, budgets)]
    for spec in ("eesd:20:3", "ppsd:20"):
        engine = ServeEngine(model, parse_policy(spec), SchedulerConfig(max_batch=3))
        out: dict[int, list[int]] = {}
        try:
            for i in range(2):
                engine.submit(prompts[i], budgets[i], lambda ev, i=i: out.setdefault(i, []).extend(ev.tokens),
                              ignore_eos=True)
            for _ in range(3):
                engine.step()
            for i in range(2, 4):
                engine.submit(prompts[i], budgets[i], lambda ev, i=i: out.setdefault(i, []).extend(ev.tokens),
                              ignore_eos=True)
            engine.run_until_idle()
        finally:
            engine.close()
        assert [out[i] for i in range(4)] == ar, spec
