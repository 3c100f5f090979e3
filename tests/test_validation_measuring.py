"""validation/measuring.py: the one bench loop, with a fake runtime plugged in (no model): AR
around every plan, greedy rounds in alternating order, sampled seeds each opening with AR."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from runtime.measure import Job, Measurement
from validation.measuring import AR_PLAN, Measurer, greedy_passes, sampled_passes
from validation.statistics import SeedSummary, median_round
from ppsd.modes import Mode
from sim.plan import Plan

EESD, PPSD = Plan(Mode.EESD, 2, draft_len=3), Plan(Mode.PPSD, 3, stages=2)


class FakeRuntime:
    """A MeasureFn: AR runs at 10, 11, 12, ... tokens/s in turn; a plan at 20 (EESD) or 30 (PPSD)."""

    def __init__(self):
        self.jobs: list[Job] = []

    def __call__(self, model, job: Job) -> Measurement:
        self.jobs.append(job)
        ar_runs = sum(j.plan.mode is Mode.AR for j in self.jobs)
        tps = {Mode.AR: 9.0 + ar_runs, Mode.EESD: 20.0, Mode.PPSD: 30.0}[job.plan.mode]
        acc = None if job.plan.mode is Mode.AR else 0.5
        return Measurement(SimpleNamespace(tokens_per_s=tps, acceptance_rate=acc), [[1, 2]])


def _bench(runtime, **kw) -> Measurer:
    return Measurer(model=None, job=Job(plan=AR_PLAN, prompts=[[1]], max_new=[4], warmup=1, repeats=2), measure=runtime,
                 **kw)


def test_greedy_rounds_bracket_every_plan_with_ar_in_alternating_order(capsys):
    runtime = FakeRuntime()
    runs = _bench(runtime).run([EESD, PPSD], greedy_passes(2, 2, warmup=1), [None, None], ["eesd", "ppsd"])
    modes = [j.plan.mode.value for j in runtime.jobs]
    # AR once up front, then each plan followed by AR; round 2 runs the plans backwards
    assert modes == ["ar", "eesd", "ar", "ppsd", "ar", "ppsd", "ar", "eesd", "ar"]
    assert runs.ar_tokens_per_s == [10.0, 11.0, 12.0, 13.0, 14.0]
    eesd_runs = runs.plan_runs[0]
    assert [r.ar_reference for r in eesd_runs] == [10.5, 13.5]  # the AR runs just before and after
    assert eesd_runs[0].speedup == pytest.approx(20 / 10.5)
    assert median_round(eesd_runs) is eesd_runs[1]  # the lower middle of two: the slower speedup
    again = runtime.jobs[2]
    assert (again.warmup, again.repeats, again.timeline) == (0, 1, False)  # a bracket is one quick run
    err = capsys.readouterr().err
    assert "[round 2/2 1/2] ppsd ... (then AR again)" in err


def test_ar_once_measures_ar_up_front_only():
    runtime = FakeRuntime()
    runs = _bench(runtime, bracket=False).run([EESD], greedy_passes(1, 1, warmup=1), [None], ["eesd"])
    assert [j.plan.mode.value for j in runtime.jobs] == ["ar", "eesd"]
    assert runs.plan_runs[0][0].ar_reference == 10.0


def test_sampled_seeds_each_open_with_ar_at_their_seed():
    runtime = FakeRuntime()
    runs = _bench(runtime).run([EESD, PPSD], sampled_passes(2, [0, 1], warmup=1), [None, None], ["e", "p"])
    assert [(j.plan.mode.value, j.seed) for j in runtime.jobs] == [
        ("ar", 0), ("eesd", 0), ("ar", 0), ("ppsd", 0), ("ar", 0),
        ("ar", 1), ("eesd", 1), ("ar", 1), ("ppsd", 1), ("ar", 1)]
    assert len(runs.ar_opening) == 2 and len(runs.ar_tokens_per_s) == 2 * 3
    first, second = runtime.jobs[1], runtime.jobs[6]
    assert (first.warmup, first.timeline) == (1, True) and (second.warmup, second.timeline) == (0, False)
    seeds = SeedSummary.of([20.0, 20.0], runs.plan_runs[0])
    assert seeds.speedups == [pytest.approx(20 / 10.5), pytest.approx(20 / 13.5)]
    assert seeds.acceptance_rate == 0.5


class DriftingMachine:
    """A MeasureFn on a machine that halves its speed from the `slow_from`-th run on: AR decodes 10
    tokens/s per thread, EESD and PPSD 20, every prompt 8 tokens, records as runtime.measure makes them."""

    def __init__(self, slow_from: int):
        self.jobs: list[Job] = []
        self.slow_from = slow_from

    def __call__(self, model, job: Job) -> Measurement:
        from runtime.decoding import SeqRecord
        from runtime.measure import summarize

        self.jobs.append(job)
        speed = {Mode.AR: 10.0, Mode.EESD: 20.0, Mode.PPSD: 20.0}[job.plan.mode] * job.threads
        if len(self.jobs) >= self.slow_from:
            speed /= 2
        recs = [SeqRecord(tokens=list(range(9)), prefill_s=0.1, decode_s=8 / speed, rounds=[1] * 4, verified=8,
                          busy_s=[8 / speed]) for _ in job.prompts]
        return summarize(job.plan, [recs] * job.repeats)


def test_turns_pair_each_chunk_of_prompts_with_the_ar_run_right_before_it(capsys):
    # runs: AR p1, EESD p1, AR p2 (slow from here), EESD p2; no AR pass opens a bench in turns
    machine = DriftingMachine(slow_from=3)
    bench = Measurer(model=None, job=Job(plan=AR_PLAN, prompts=[[1], [2]], max_new=[8, 8], warmup=1, repeats=1),
                  measure=machine, turn_prompts=1)
    runs = bench.run([EESD], greedy_passes(1, 1, warmup=1), [None], ["eesd"])
    assert [(j.plan.mode.value, len(j.prompts)) for j in machine.jobs] == [
        ("ar", 1), ("eesd", 1), ("ar", 1), ("eesd", 1)]
    # AR warms up on the pass's first chunk and keeps that chunk's timeline (the AR row's); then quick runs
    assert [(j.warmup, j.repeats, j.timeline) for j in machine.jobs[::2]] == [(1, 1, True), (0, 1, True)]
    # an in-process plan warms up on its first chunk only: the decoder is warm after it
    assert (machine.jobs[1].warmup, machine.jobs[3].warmup) == (1, 0)
    (run,) = runs.plan_runs[0]
    # the slowdown hit AR and EESD alike on prompt 2: the speedup is the machine-free 2.0 (against AR
    # measured up front, fast, it would have said (16 / 1.2) / 10 = 1.33)
    assert run.speedup == pytest.approx(2.0)
    assert run.measurement.result.tokens_per_s == pytest.approx(16 / (0.4 + 0.8))
    assert runs.ar_tokens_per_s == [pytest.approx(16 / (0.8 + 1.6))]
    (ar_row,) = runs.ar_opening  # the AR row: AR's turns over every prompt, put back together
    assert ar_row.result.tokens_per_s == pytest.approx(runs.ar_tokens_per_s[0]) and len(ar_row.outputs) == 2
    assert "(in turns with AR)" in capsys.readouterr().err


def test_turns_share_one_ar_turn_between_two_plans_on_either_side_of_it(capsys):
    """Plan A, AR, plan B on a chunk, then B, AR, A: each plan seconds from the AR it is taken
    against, AR run once for the two; a burst that slows the machine on a chunk slows all three."""
    machine = DriftingMachine(slow_from=4)  # the second chunk's runs are at half speed
    bench = Measurer(model=None, job=Job(plan=AR_PLAN, prompts=[[1], [2]], max_new=[8, 8], warmup=1, repeats=1),
                  measure=machine, turn_prompts=1)
    third = Plan(Mode.EESD, 3, draft_len=2)
    runs = bench.run([EESD, PPSD, third], greedy_passes(3, 1, warmup=1), [None] * 3, ["a", "b", "c"])
    order = [(j.plan.label(), j.prompts[0][0]) for j in machine.jobs]
    a, b, c, ar = EESD.label(), PPSD.label(), third.label(), AR_PLAN.label()
    assert order == [(a, 1), (ar, 1), (b, 1), (b, 2), (ar, 2), (a, 2),  # the pair, one AR turn
                     (ar, 1), (c, 1), (ar, 2), (c, 2)]                  # the odd plan out: AR beside it
    eesd, ppsd, lone = (r[0] for r in runs.plan_runs)
    assert eesd.ar_reference == ppsd.ar_reference == pytest.approx(16 / (0.8 + 1.6))
    assert eesd.speedup == pytest.approx(2.0) and ppsd.speedup == pytest.approx(2.0)
    assert len(runs.ar_tokens_per_s) == 2 and len(runs.ar_opening) == 1  # one per group; the row from the first
    assert "(in turns with AR, one AR turn for 2 plans)" in capsys.readouterr().err
    machine = DriftingMachine(slow_from=10 ** 6)
    alone = Measurer(model=None, job=Job(plan=AR_PLAN, prompts=[[1]], max_new=[8], warmup=1, repeats=1),
                  measure=machine, turn_prompts=1, turn_plans=1)
    alone.run([EESD, PPSD], greedy_passes(2, 1, warmup=1), [None] * 2, ["a", "b"])
    assert [j.plan.mode.value for j in machine.jobs] == ["ar", "eesd", "ar", "ppsd"]  # --turn-plans 1


def test_turns_within_a_budget_pool_every_chunk_on_all_cores():
    machine = DriftingMachine(slow_from=10 ** 6)
    bench = Measurer(model=None, job=Job(plan=AR_PLAN, prompts=[[1], [2], [3]], max_new=[8] * 3, warmup=0, repeats=1),
                  measure=machine, turn_prompts=2, cores=2)
    runs = bench.run([EESD], greedy_passes(1, 1, warmup=0), [None], ["eesd"])
    (run,) = runs.plan_runs[0]
    assert run.budget_tokens_per_s == pytest.approx(40.0) and run.budget_ar_reference == pytest.approx(20.0)
    assert run.budget_speedup == pytest.approx(2.0)
    # per chunk (prompts 1-2, then 3): AR, EESD, AR on 2 threads, EESD on 2 threads
    per_chunk = [(j.plan.mode.value, j.threads, len(j.prompts)) for j in machine.jobs]
    assert per_chunk == [("ar", 1, 2), ("eesd", 1, 2), ("ar", 2, 2), ("eesd", 2, 2),
                         ("ar", 1, 1), ("eesd", 1, 1), ("ar", 2, 1), ("eesd", 2, 1)]
    assert runs.ar_budget_tokens_per_s == [pytest.approx(20.0)]


class StallingMachine(DriftingMachine):
    """A DriftingMachine whose `stalled`-th run (1-based) decodes 3x slower: a host stall in one run."""

    def __init__(self, stalled: int):
        super().__init__(slow_from=10 ** 6)
        self.stalled = stalled

    def __call__(self, model, job: Job) -> Measurement:
        m = super().__call__(model, job)
        if len(self.jobs) == self.stalled:
            for rep in m.records:
                for r in rep:
                    r.decode_s *= 3
            from runtime.measure import summarize
            m = summarize(job.plan, m.records)
        return m


def test_turns_price_every_core_by_thread_gains_that_drop_a_stalled_chunk():
    """On every core = on one thread x a thread gain (the median of the chunks' paired ratios): a stall in
    one chunk's two-thread AR run moves the pairing with the group's own AR turns, not the thread gain."""
    prompts = [[1], [2], [3], [4], [5], [6]]
    job = Job(plan=AR_PLAN, prompts=prompts, max_new=[8] * 6, warmup=0, repeats=1)
    # per chunk: EESD, AR, PPSD on one thread, then EESD and AR on 2 threads (PPSD's stages already use both
    # cores); the 5th run is the first chunk's AR on 2 threads
    machine = StallingMachine(stalled=5)
    runs = Measurer(model=None, job=job, measure=machine, turn_prompts=2, cores=2).run(
        [EESD, PPSD], greedy_passes(2, 1, warmup=0), [None, None], ["eesd", "ppsd"])
    assert (machine.jobs[4].plan.mode, machine.jobs[4].threads) == (Mode.AR, 2)
    assert runs.ar_thread_ratios == [pytest.approx(2 / 3), pytest.approx(2.0), pytest.approx(2.0)]
    assert runs.ar_thread_gain == pytest.approx(2.0)
    eesd, ppsd = (r[0] for r in runs.plan_runs)
    assert eesd.thread_gain == pytest.approx(2.0) and ppsd.thread_gain == pytest.approx(1.0)  # stages: the budget
    assert eesd.budget_speedup == pytest.approx(2.0) and ppsd.budget_speedup == pytest.approx(1.0)
    # the stalled chunk's AR pooled into the group's turns would have flattered both plans
    assert eesd.budget_speedup_beside > 2.2 and ppsd.budget_speedup_beside > 1.1
    # with no stall the two pricings agree
    calm = Measurer(model=None, job=job, measure=DriftingMachine(slow_from=10 ** 6), turn_prompts=2, cores=2).run(
        [EESD, PPSD], greedy_passes(2, 1, warmup=0), [None, None], ["eesd", "ppsd"])
    for r in (x[0] for x in calm.plan_runs):
        assert r.budget_speedup == pytest.approx(r.budget_speedup_beside)


def test_turns_leave_sampled_runs_bracketed():
    runtime = FakeRuntime()
    bench = Measurer(model=None, job=Job(plan=AR_PLAN, prompts=[[1], [2]], max_new=[4, 4], temperature=0.7),
                  measure=runtime, turn_prompts=1)
    assert not bench.in_turns  # a sampled sequence's seed follows its place in the job


def test_turns_warm_a_pipeline_up_on_every_chunk():
    """A pipelined plan's stage processes start afresh every run, so each chunk warms up again."""
    runtime = FakeRuntime()
    bench = Measurer(model=None, job=Job(plan=AR_PLAN, prompts=[[1], [2], [3]], max_new=[4] * 3, warmup=1, repeats=1),
                  measure=_combinable(runtime), turn_prompts=1)
    bench.run([PPSD, EESD], greedy_passes(2, 1, warmup=1), [None, None], ["ppsd", "eesd"])
    warm = {m: [j.warmup for j in runtime.jobs if j.plan.mode.value == m] for m in ("ppsd", "eesd", "ar")}
    # AR (the pair's one turn) warms up with the pass's first chunk, in this process for good
    assert warm == {"ppsd": [1, 1, 1], "eesd": [1, 0, 0], "ar": [1, 0, 0]}


def _combinable(runtime):
    """`runtime` returning measurements `combine` can sum (records as runtime.measure makes them)."""
    from runtime.decoding import SeqRecord
    from runtime.measure import summarize

    def measure(model, job):
        runtime(model, job)
        recs = [SeqRecord(tokens=list(range(5)), prefill_s=0.1, decode_s=0.4, rounds=[1] * 2, verified=4,
                          busy_s=[0.4]) for _ in job.prompts]
        return summarize(job.plan, [recs] * job.repeats)

    return measure


class HostStallMachine:
    """A MeasureFn whose `stalled`-th run (1-based) holds one decode step for 1 s, as a host stall does: AR
    decodes 10 tokens/s, EESD 20, every prompt 8 steps, each step an event on the run's timeline."""

    def __init__(self, stalled: int):
        self.jobs: list[Job] = []
        self.stalled = stalled

    def __call__(self, model, job: Job) -> Measurement:
        from runtime.decoding import SeqRecord
        from runtime.measure import summarize
        from sim.timeline import Event

        self.jobs.append(job)
        step = 1.0 / {Mode.AR: 10.0, Mode.EESD: 20.0}[job.plan.mode]
        hold = 1.0 if len(self.jobs) == self.stalled else 0.0
        recs = []
        for _ in job.prompts:
            steps = [step] * 8
            steps[3] += hold
            events = [Event("step", "model", sum(steps[:i]), d, i, {}) for i, d in enumerate(steps)]
            recs.append(SeqRecord(tokens=list(range(9)), prefill_s=0.1, decode_s=sum(steps), rounds=[1] * 4, verified=8,
                                  busy_s=[sum(steps)], events=events))
        return summarize(job.plan, [recs] * job.repeats)


def test_turns_measure_a_chunk_again_when_a_host_stall_holds_one_of_its_runs():
    """The second chunk's EESD run stalls for a second: that chunk (AR and the plan) runs again, the stalled
    run counts for nothing, and the run says which chunk went back and why."""
    job = Job(plan=AR_PLAN, prompts=[[1], [2], [3]], max_new=[8] * 3, warmup=0, repeats=1)
    machine = HostStallMachine(stalled=4)  # runs: AR p1, EESD p1, AR p2, EESD p2 (stalled), ...
    runs = Measurer(model=None, job=job, measure=machine, turn_prompts=1).run(
        [EESD], greedy_passes(1, 1, warmup=0), [None], ["eesd"])
    assert [(j.plan.mode.value, j.prompts) for j in machine.jobs] == [
        ("ar", [[1]]), ("eesd", [[1]]), ("ar", [[2]]), ("eesd", [[2]]), ("ar", [[2]]), ("eesd", [[2]]),
        ("ar", [[3]]), ("eesd", [[3]])]
    assert runs.chunks_measured_again == [{"chunk": 1, "prompts": [1], "stalled": [EESD.label()]}]
    (run,) = runs.plan_runs[0]
    assert run.speedup == pytest.approx(2.0)  # without the measure-again the stall would have cost it 0.8 s of 1.2
    calm = Measurer(model=None, job=job, measure=HostStallMachine(stalled=0), turn_prompts=1).run(
        [EESD], greedy_passes(1, 1, warmup=0), [None], ["eesd"])
    assert calm.chunks_measured_again == [] and len(calm.plan_runs[0]) == 1
