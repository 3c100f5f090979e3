"""The serving engine (sim/serve/engine.py): it agrees with the batch replay when every request arrives at once,
and behaves as a continuously batched server should under load; predictions carry intervals, load sweeps find
where speculation stops paying."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from ppsd.paths import EXAMPLES_DIR
from ppsd.profile import load_profile
from serve_fixtures import EXIT, GEN_LEN, serving_prompts, write_serving_profile
from sim.batch.costs import batch_costs
from sim.batch.replay import generations, replay_batches
from sim.model.streams import trace_stream
from sim.serve import acceptance as acc
from sim.serve.costs import ServeCosts
from sim.serve.metrics import Slo
from sim.serve.policies import AcceptanceSeen, parse_policy
from sim.serve.predict import predict_serving, simulate_serving
from sim.serve.requests import ServeRequest
from sim.serve.scheduler import SchedulerConfig
from sim.serve.sweep import BEYOND, CROSSES, NEVER, crossing, load_sweep
from sim.serve.workload import Workload, profile_prompts, synthetic_workload

BATCH_EXAMPLE = EXAMPLES_DIR / "smollm2-135m-batch-amd-epyc" / "profile"


@pytest.fixture(scope="module")
def example():
    return load_profile(BATCH_EXAMPLE)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return write_serving_profile(tmp_path_factory.mktemp("serve"))


def _at_once(gens: list[dict]) -> Workload:
    """Every generation a request at t = 0 asking for its own tokens after the prefill's."""
    reqs = [ServeRequest(i, 0.0, str(g["prompt_id"]), g["category"], int(g["prompt_len"]), len(g["token_ids"]) + 1)
            for i, g in enumerate(gens)]
    return Workload(reqs, "at once", 0, math.inf)


def _decode_ms(run) -> tuple[float, list[float]]:
    """Decode time after the prefill iteration, and each request's finish after it (ms)."""
    prefill = run.iterations[0]
    assert prefill.decoded == 0 and prefill.prefill_tokens > 0
    start = prefill.start_s * 1000.0 + prefill.ms
    finish = sorted(1000.0 * r.finish_s - start for r in run.records)
    return finish[-1], finish


@pytest.mark.parametrize("policy, exit_layer, kw", [("ar", None, {}), ("eesd:29:3", 29, {"draft_len": 3}),
                                                    ("ppsd:15", 15, {"pipelined": True})])
@pytest.mark.parametrize("batch", [3, 8])
def test_the_engine_agrees_with_the_batch_replay_when_every_request_arrives_at_once(example, policy, exit_layer, kw,
                                                                                    batch):
    """B requests at t = 0 with max batch B and outputs of their generations' lengths (after the prefill's token):
    the decode time and each sequence's finish equal `replay_batches` over the same generations (under the
    serving cache rule: a leaving row takes the leading columns no live row attends to)."""
    gens = example.generations()[5: 5 + batch]
    stream = trace_stream(example, exit_layer or 29, prompt_ids=[str(g["prompt_id"]) for g in gens])
    replay = replay_batches(batch_costs(example), stream, batch, exit_layer, crop_leading=True, **kw)
    run = simulate_serving(example, _at_once(gens), policy, SchedulerConfig(max_batch=batch, max_tokens=10_000))
    total, finish = _decode_ms(run)
    assert total == pytest.approx(replay.time_ms, rel=1e-9)
    assert finish == pytest.approx(sorted(replay.sequence_ms), rel=1e-9)
    assert sum(r.output_tokens - 1 for r in run.records) == replay.tokens == sum(len(m) for m, _ in generations(stream))
    assert all(r.ok for r in run.records)


def test_ttft_grows_with_load_and_requests_are_served_first_come_first_served(synth):
    prompts = serving_prompts(synth)
    config = SchedulerConfig(max_batch=4)
    ttft = []
    for rate in (0.5, 5.0, 50.0):
        run = simulate_serving(synth, synthetic_workload(prompts, rate=rate, count=60, seed=3), "eesd:2:3", config)
        ttft.append(run.metrics.ttft_ms.median)
        firsts = [r.first_token_s for r in sorted(run.records, key=lambda r: (r.arrival_s, r.request_id))]
        assert firsts == sorted(firsts)  # FCFS: nobody's first token overtakes an earlier arrival's
    assert ttft[0] < ttft[1] < ttft[2]


def test_the_running_batch_never_exceeds_max_batch(synth):
    run = simulate_serving(synth, synthetic_workload(serving_prompts(synth), rate=100.0, count=40, seed=1), "ar",
                           SchedulerConfig(max_batch=3))
    assert max(x.decoded for x in run.iterations) == 3
    events = sorted([(r.first_token_s, 1) for r in run.records] + [(r.finish_s, -1) for r in run.records])
    live = np.cumsum([d for _, d in events])
    assert live.max() <= 3


def test_a_one_token_request_is_answered_by_its_prefill_and_never_joins_the_batch(synth):
    reqs = [ServeRequest(0, 0.0, "p0", "writing", 50, 1), ServeRequest(1, 0.0, "p1", "math", 26, 5)]
    run = simulate_serving(synth, Workload(reqs, "t", 0, math.inf), "eesd:2:3", SchedulerConfig(max_batch=2))
    one, other = run.records
    assert one.output_tokens == 1 and one.tpot_s is None and one.finish_s == one.first_token_s
    assert one.ttft_s == pytest.approx(synth.prefill_ms(50) / 1000.0)
    assert other.output_tokens == 5 and other.first_token_s > one.first_token_s
    first_decode = next(x for x in run.iterations if x.decoded)
    assert first_decode.width == 26  # the rectangle is the other's prompt: the longer one never joined it


def test_the_goodput_policy_stops_speculating_when_the_batch_is_large(synth):
    """On a profile where drafting pays for one sequence and not for eight, goodput drafts while the batch is
    small and takes AR steps while it is full."""
    reqs = [ServeRequest(i, 0.0, f"p{i % 4}", "writing", 20, 20 + 8 * i) for i in range(8)]
    run = simulate_serving(synth, Workload(reqs, "t", 0, math.inf), "goodput:2", SchedulerConfig(max_batch=8))
    decode = [x for x in run.iterations if x.decoded]
    assert all(x.draft_len == 0 for x in decode if x.decoded == 8)
    assert any(x.draft_len > 0 for x in decode if x.decoded <= 2)
    fixed = simulate_serving(synth, Workload(reqs, "t", 0, math.inf), "eesd:2:3", SchedulerConfig(max_batch=8))
    ar = simulate_serving(synth, Workload(reqs, "t", 0, math.inf), "ar", SchedulerConfig(max_batch=8))
    assert run.metrics.duration_s < min(fixed.metrics.duration_s, ar.metrics.duration_s)
    policy = parse_policy("goodput:2")
    policy.decide(1, 64.0, AcceptanceSeen(0.8), ServeCosts(synth))  # remembers a decision, and still pickles
    assert pickle.loads(pickle.dumps(policy)) == policy


def test_a_rejected_ppsd_draft_costs_its_sequence_a_tick(synth, tmp_path):
    """PPSD: a sequence whose drafts are never accepted commits a token every other tick after its first tick."""
    never = write_serving_profile(tmp_path / "never", alpha=0.0)
    reqs = [ServeRequest(0, 0.0, "p0", "writing", 20, 11)]
    run = simulate_serving(never, Workload(reqs, "t", 0, math.inf), "ppsd:2", SchedulerConfig(max_batch=1))
    ticks = [x for x in run.iterations if x.decoded]
    assert len(ticks) == 1 + 2 * 10 - 1  # the first tick commits nothing, then a token and a stale tick in turn
    assert [x.committed for x in ticks[:5]] == [0, 1, 0, 1, 0]
    assert run.records[0].accepted == 0 and run.records[0].drafted == 10


def test_untraced_prompts_draw_a_same_category_trace_and_traces_wrap_round(synth):
    traces = acc.load_traces(synth, EXIT)
    reqs = [ServeRequest(0, 0.0, "p0", "writing", 20, 5), ServeRequest(1, 0.0, "p5", "math", 50, 5)]
    own = acc.own(traces, reqs, seed=0)
    assert own.by_prompt["p0"] is traces.prob[traces.prompt_ids.index("p0")]
    drawn = [pid for pid in traces.prompt_ids if own.by_prompt["p5"] is traces.prob[traces.prompt_ids.index(pid)]]
    assert drawn and traces.categories[traces.prompt_ids.index(drawn[0])] == "math"
    match, run = own.runs("p0", GEN_LEN + 10)
    trace = list(traces.prob[traces.prompt_ids.index("p0")] >= 0.5)
    assert match == trace + trace[:10]
    assert acc.match_runs(np.array([True, True, False, True])).tolist() == [2, 1, 0, 1]


def test_chunked_prefill_keeps_every_iteration_within_its_token_budget(synth):
    config = SchedulerConfig(max_batch=4, max_tokens=24, prefill="chunked")
    run = simulate_serving(synth, synthetic_workload(profile_prompts(synth), rate=20.0, count=20, seed=2), "eesd:2:3",
                           config)
    assert all(r.ok for r in run.records)
    assert any(0 < x.prefill_tokens and x.decoded for x in run.iterations)  # decode and prompt chunks together
    assert all(x.prefill_tokens + x.decoded * (x.draft_len + 1) <= 24 or x.decoded <= 1 for x in run.iterations)


def test_predictions_carry_intervals_that_hold_the_point_and_repeat_with_the_seed(synth):
    w = synthetic_workload(serving_prompts(synth), rate=2.0, count=30, seed=0)
    config = SchedulerConfig(max_batch=4)
    a = predict_serving(synth, w, "eesd:2:3", config, replications=6, seed=1, slo=Slo.parse("ttft:100"))
    b = predict_serving(synth, w, "eesd:2:3", config, replications=6, seed=1, slo=Slo.parse("ttft:100"))
    assert a.to_json_dict() == b.to_json_dict()
    for name, band in a.bands.items():
        assert band.lo <= band.point <= band.hi
    assert a.bands["tpot_p50_ms"].hi > a.bands["tpot_p50_ms"].lo
    d = a.to_json_dict()
    assert {"predicted_ttft_p50_ms", "predicted_tpot_p99_ms_lo", "predicted_e2e_p99_ms_hi"} <= set(d)
    assert d["metrics"]["request_goodput"] is not None


def test_a_machine_running_at_a_speed_scales_every_price_of_a_prediction(synth):
    """`speed` (a decode step timed now over the profile's) multiplies every price: with requests far apart (no
    queue, one sequence at a time) every latency scales by it exactly, intervals included; under load the
    queue makes a slower machine cost more than in proportion."""
    config = SchedulerConfig(max_batch=4)
    apart = synthetic_workload(serving_prompts(synth), rate=0.01, count=4, seed=0)
    one, slow = (predict_serving(synth, apart, "eesd:2:3", config, replications=3, seed=1, speed=s) for s in (1.0, 1.5))
    for x in ("ttft_p50_ms", "tpot_p50_ms", "e2e_p99_ms"):
        assert slow.bands[x].point == pytest.approx(1.5 * one.bands[x].point, rel=1e-9)
        assert slow.bands[x].hi == pytest.approx(1.5 * one.bands[x].hi, rel=1e-9)
    busy = synthetic_workload(serving_prompts(synth), rate=40.0, count=30, seed=0)
    one, slow = (predict_serving(synth, busy, "ar", config, replications=0, seed=1, speed=s) for s in (1.0, 1.5))
    assert slow.bands["ttft_p50_ms"].point > 1.5 * one.bands["ttft_p50_ms"].point


def test_crossing_finds_where_the_ratio_to_ar_reaches_one():
    assert crossing([1, 2, 4], [0.5, 1.5, 2.0]) == (CROSSES, pytest.approx(math.exp(0.5 * math.log(2))))
    assert crossing([1, 2, 4], [1.2, 0.9, 0.8]) == (NEVER, None)
    assert crossing([1, 2, 4], [0.5, 0.9, 0.99]) == (BEYOND, None)


def test_a_load_sweep_finds_the_load_at_which_eesd_stops_beating_ar(synth):
    prompts = serving_prompts(synth)
    sweep = load_sweep(synth, ["eesd:2:3"], SchedulerConfig(max_batch=8), prompts=prompts, rates=[1, 10, 40, 100],
                       num_prompts=40, replications=4)
    assert list(sweep.predictions) == ["ar", "eesd:2:3"]
    ratio = [p.bands["tpot_p50_ms"].point / a.bands["tpot_p50_ms"].point
             for p, a in zip(sweep.predictions["eesd:2:3"], sweep.predictions["ar"])]
    assert ratio[0] < 1.0 < ratio[-1]  # pays at light load, not when the batch is full
    c = sweep.crossovers["eesd:2:3"]["tpot_p50_ms"]
    assert c.status == CROSSES and 1 < c.rate < 100
    assert c.lo is None or c.lo <= c.rate
    assert c.hi is None or c.rate <= c.hi
    assert "stops beating AR" in c.words()


@pytest.mark.parametrize("policy, columns_per_token", [("ar", 1), ("eesd:29:3", 4)])
def test_the_cache_width_stays_the_oldest_live_rows_span_under_sustained_load(example, policy, columns_per_token):
    """Traffic that never empties the batch: a leaving row takes the leading columns no live row attends to, so
    the width never exceeds a row's prompt plus the columns appended while it lived (≤ γ + 1 per token)."""
    prompts = profile_prompts(example)
    workload = synthetic_workload(prompts, rate=50.0, count=120, seed=4, output_tokens=24)
    run = simulate_serving(example, workload, policy, SchedulerConfig(max_batch=8))
    bound = max(r.prompt_tokens for r in workload.requests) + 24 * columns_per_token
    assert max(x.width for x in run.iterations) <= bound
    assert sum(1 for x in run.iterations if x.decoded) > 50  # the batch stayed busy: the bound was tested
