"""The serving core shared by the simulator and the real loop: workloads, the continuous-batching scheduler,
speculation policies and vLLM-named metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ppsd.errors import UserError
from ppsd.paths import AZURE_CONV_TRACE
from sim.serve.metrics import Slo, summarize
from sim.serve.policies import AcceptanceSeen, Speculation, parse_policies, parse_policy
from sim.serve.policies.goodput import best_gamma, expected_tokens
from sim.serve.requests import RequestTiming, ServeRequest
from sim.serve.scheduler import Iteration, PrefillPolicy, Scheduler, SchedulerConfig
from sim.serve.workload import (PromptInfo, Workload, arrival_times, read_trace, synthetic_workload,
                                trace_workload)

AZURE = AZURE_CONV_TRACE
PROMPTS = [PromptInfo(f"p{i}", "cat" + str(i % 3), 20 + 10 * i, f"text {i}", 30 + i) for i in range(12)]


def req(i, arrival=0.0, prompt=10, out=5):
    return ServeRequest(i, arrival, f"p{i}", "c", prompt, out)


# --- workloads ---------------------------------------------------------------------------------

def test_poisson_arrivals_have_the_asked_rate_and_repeat_with_the_seed():
    t = arrival_times(2.0, 1.0, 20_000, np.random.default_rng(1))
    assert t[0] == 0 and np.all(np.diff(t) >= 0)
    assert np.mean(np.diff(t)) == pytest.approx(0.5, rel=0.03)
    assert np.std(np.diff(t)) == pytest.approx(0.5, rel=0.05)  # exponential gaps: sd = mean
    bursty = np.diff(arrival_times(2.0, 0.25, 20_000, np.random.default_rng(1)))
    assert np.mean(bursty) == pytest.approx(0.5, rel=0.05) and np.std(bursty) > 1.5 * np.std(np.diff(t))
    a = synthetic_workload(PROMPTS, rate=1.0, count=30, seed=7)
    b = synthetic_workload(PROMPTS, rate=1.0, count=30, seed=7)
    assert a.requests == b.requests and a.requests != synthetic_workload(PROMPTS, rate=1.0, count=30, seed=8).requests
    assert all(r.output_tokens == next(p for p in PROMPTS if p.prompt_id == r.prompt_id).own_output_tokens
               for r in a.requests)


@pytest.mark.parametrize("rate", [0, -1, float("nan")])
def test_a_rate_that_is_not_positive_is_refused(rate):
    with pytest.raises(UserError, match="request-rate"):
        synthetic_workload(PROMPTS, rate=rate, count=3, seed=0)


def test_a_workload_round_trips_through_its_file(tmp_path):
    w = synthetic_workload(PROMPTS, rate=0.5, count=5, seed=3, output_tokens=16)
    w.save(tmp_path / "w.json")
    assert Workload.load(tmp_path / "w.json").requests == w.requests
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UserError, match="not a ppsd workload"):
        Workload.load(tmp_path / "bad.json")


def test_the_azure_trace_is_read_and_scaled_to_a_rate_with_lengths_capped():
    rows = read_trace(AZURE)
    assert len(rows) > 19_000 and rows[0].arrival_s == 0 and rows[-1].arrival_s > 3000
    w = trace_workload(PROMPTS, rows, count=200, seed=0, rate=0.5, start_s=600, output_cap=64)
    gaps = np.diff([r.arrival_s for r in w.requests])
    assert np.all(gaps >= 0) and (len(w.requests) - 1) / w.requests[-1].arrival_s == pytest.approx(0.5, rel=1e-6)
    assert max(r.output_tokens for r in w.requests) <= 64 and min(r.output_tokens for r in w.requests) >= 1
    assert np.median([r.output_tokens for r in w.requests]) == pytest.approx(32, abs=2)
    s = w.scaling
    assert s.first_row > 0 and s.rows == 200 and "capped at 64" in w.notes[0]
    # the trace's own ordering of lengths survives the scaling
    trace_out = [rows[s.first_row + i].output_tokens for i in range(200)]
    assert np.corrcoef(trace_out, [r.output_tokens for r in w.requests])[0, 1] > 0.5


def test_a_malformed_trace_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"arrival_s": 0, "input_tokens": 5, "output_tokens": 3}\n{"arrival_s": 1}\n')
    with pytest.raises(UserError, match="line 2"):
        read_trace(bad)
    csv = tmp_path / "t.csv"
    csv.write_text("TIME,IN,OUT\n1,2,3\n")
    with pytest.raises(UserError, match="Azure columns"):
        read_trace(csv)


# --- scheduler ---------------------------------------------------------------------------------

def test_prefill_first_admits_fcfs_up_to_the_batch_and_budget_then_decodes():
    s = Scheduler(SchedulerConfig(max_batch=2, max_tokens=25, prefill="prefill-first"))
    for i in range(4):
        s.arrive(req(i, prompt=10, out=3))
    it = s.next_iteration()
    assert it == Iteration(prefill=((0, 10), (1, 10)))  # the third waits: the batch holds 2
    assert s.prefilled(0, 10) and s.prefilled(1, 10)
    assert s.next_iteration() == Iteration(decode=(0, 1))
    assert s.commit(0, 5) == 2  # never past the budget of 3 (one came with the prefill)
    assert 0 not in s.running
    assert s.next_iteration() == Iteration(prefill=((2, 10),))


def test_prefill_first_never_starves_a_prompt_longer_than_the_budget():
    s = Scheduler(SchedulerConfig(max_batch=4, max_tokens=8))
    s.arrive(req(0, prompt=50))
    s.arrive(req(1, prompt=3))
    assert s.next_iteration().prefill == ((0, 50),)


def test_chunked_prefill_decodes_first_and_fills_the_budget_with_prompt_chunks():
    s = Scheduler(SchedulerConfig(max_batch=4, max_tokens=16, prefill=PrefillPolicy.CHUNKED))
    s.arrive(req(0, prompt=10, out=4))
    assert s.next_iteration() == Iteration(prefill=((0, 10),))
    s.prefilled(0, 10)
    s.arrive(req(1, prompt=30, out=4))
    it = s.next_iteration(decode_tokens=4)  # an EESD round of γ = 3 charges 4 tokens
    assert it == Iteration(prefill=((1, 12),), decode=(0,))
    assert not s.prefilled(1, 12)
    assert s.next_iteration(decode_tokens=4).prefill == ((1, 12),)


def test_a_one_token_request_ends_with_its_prefill_and_finish_drops_a_sequence():
    s = Scheduler(SchedulerConfig())
    s.arrive(req(0, out=1))
    s.arrive(req(1, out=9))
    s.next_iteration()
    assert s.prefilled(0, 10) and 0 not in s.running
    s.prefilled(1, 10)
    s.finish(1)
    assert s.idle


def test_bad_scheduler_settings_are_refused():
    with pytest.raises(UserError, match="max-batch"):
        SchedulerConfig(max_batch=0)
    with pytest.raises(UserError, match="prefill"):
        SchedulerConfig(prefill="later")


# --- policies ----------------------------------------------------------------------------------

class LinearCost:
    """An iteration costs a fixed part plus a part per token processed: speculation pays at small batches
    (the fixed part dominates) and not at large ones."""

    def ar_step(self, batch, context):
        return 10.0 + 2.0 * batch

    def eesd_round(self, batch, context, exit_layer, draft_len):
        return (draft_len + 1) * (3.0 + 0.6 * batch) + (10.0 + 2.0 * batch * (draft_len + 1)) * 0.7


@pytest.mark.parametrize("spec", ["ar", "eesd:24:3", "ppsd:20", "off-above:24:3:4", "table:24:1=4,2=3,4=2,8=0",
                                  "goodput:24:6"])
def test_policy_specs_round_trip(spec):
    assert parse_policy(spec).spec() == spec


@pytest.mark.parametrize("spec", ["", "nope", "eesd:24", "eesd:24:0", "ar:3", "table:24:", "table:24:1=x",
                                  "off-above:24:3", "goodput:24:99", "eesd:a:b"])
def test_bad_policy_specs_are_refused_in_one_line(spec):
    with pytest.raises(UserError):
        parse_policy(spec)
    with pytest.raises(UserError):
        parse_policies(";;")


def test_by_batch_policies_switch_speculation_with_the_live_batch():
    seen = AcceptanceSeen(0.7)
    off = parse_policy("off-above:24:3:4")
    assert off.decide(4, 100, seen, None) == Speculation(24, 3) and not off.decide(5, 100, seen, None).speculative
    table = parse_policy("table:24:1=4,2=3,4=2,8=0")
    assert [table.decide(b, 100, seen, None).draft_len for b in (1, 2, 3, 4, 7, 8, 16)] == [4, 3, 3, 2, 2, 0, 0]
    assert Speculation(24, 3).decode_tokens == 4 and Speculation(20, 1, pipelined=True).decode_tokens == 1


def test_goodput_policy_drafts_less_as_the_batch_grows_and_as_acceptance_falls():
    cost = LinearCost()
    gammas = [best_gamma(cost, b, 100, 24, 0.8, 8) for b in (1, 2, 4, 8, 32)]
    assert gammas == sorted(gammas, reverse=True) and gammas[0] > 0 and gammas[-1] == 0
    assert best_gamma(cost, 1, 100, 24, 0.1, 8) <= best_gamma(cost, 1, 100, 24, 0.9, 8)
    assert expected_tokens(0.5, 2) == pytest.approx(1.75) and expected_tokens(1.0, 3) == 4
    policy = parse_policy("goodput:24")
    table = policy.gamma_table(8, 100, 0.8, cost)
    assert list(table) == list(range(1, 9)) and table[1] == gammas[0]
    seen = AcceptanceSeen(0.8)
    seen.record(1000, 50)  # the traffic drafts far worse than the profile
    assert policy.decide(1, 100, seen, cost).draft_len < table[1]


# --- metrics -----------------------------------------------------------------------------------

def timing(i, arrival, deliveries, drafted=0, accepted=0, rounds=0):
    t = RequestTiming(i, arrival, 10, drafted=drafted, accepted=accepted, rounds=rounds)
    for when, n in deliveries:
        t.deliver(when, n)
    t.finish_s = deliveries[-1][0]
    return t


def test_metrics_follow_vllm_definitions():
    a = timing(0, 0.0, [(0.1, 1), (0.2, 2), (0.4, 1)], drafted=4, accepted=2, rounds=2)  # 4 tokens
    b = timing(1, 1.0, [(1.3, 1)])  # one token: no TPOT, no ITL
    m = summarize([a, b], Slo.parse("ttft:200,tpot:200"))
    assert m.completed == 2 and m.total_output_tokens == 5 and m.duration_s == pytest.approx(1.3)
    assert m.ttft_ms.median == pytest.approx(200) and m.tpot_ms.mean == pytest.approx(100)
    assert m.itl_ms.mean == pytest.approx(150)  # two gaps (0.1, 0.2): a chunk of two tokens is one gap
    assert m.e2el_ms.p99 == pytest.approx(400, rel=0.01)
    assert m.request_goodput == pytest.approx(1 / 1.3)  # b's TTFT of 300 ms misses the SLO
    assert m.acceptance_rate == 0.5 and m.mean_accepted_length == pytest.approx(1.5)
    d = m.to_json_dict()
    assert {"median_ttft_ms", "p99_tpot_ms", "mean_itl_ms", "p90_e2el_ms", "request_goodput"} <= set(d)
    json.dumps(d)


@pytest.mark.parametrize("text", ["", "ttft", "ttft:-1", "ttft:x", "latency:5", "tpot:inf"])
def test_bad_slos_are_refused(text):
    with pytest.raises(UserError, match="goodput"):
        Slo.parse(text)
