"""The one measuring loop of `ppsd validate`: every plan measured with AR right before and right after
it, greedy and sampled alike.

A shared machine's speed drifts by a few % over minutes, so each plan's speedup is taken against the
mean of the AR runs just before and after it. A greedy validation makes one pass over the plans per
round (`--rounds`, the plans in alternating order so a steady drift favours none); a sampled one
makes one pass per seed, each opening with a whole AR run at that seed.

With `turn_prompts` (`--turns N`, greedy) AR and the plans instead take turns every N prompts
(`validation/interleave.py`): a plan against AR seconds apart rather than a plan's length.
`turn_plans` plans share one AR turn, run on either side of it (A, AR, B; the next chunk B, AR, A),
so each is still seconds from its AR while AR, on one thread and on every core, runs once for the
pair (AR's turns are a large share of a validation's time otherwise). No AR pass opens a pass in
turns: the first group's AR turns
give the AR row (its timeline and the outputs every plan must match).

Within a budget of several cores, in turns, a plan's speed on every core is its speed on one thread
times its thread gain, and AR's likewise: a thread gain is the median, over chunks, of a run on every
core against the same prompts on one thread right before it (AR's over every chunk). A multi-thread
run, whose threads wait for each other at every matmul, now and then stalls for a whole chunk where
a one-thread run rides the host's stall out (docs/design-notes.md); the median of the chunks' paired
ratios keeps the thread gain, the machine property the profile's thread tables price, and drops
the stall.

`MeasureFn` is the seam for another runtime: anything that runs a `Job` on a model and returns a
`runtime.measure.Measurement` (tokens/s, outputs, accepted lengths) can be measured here.
"""

from __future__ import annotations

from ppsd.statistics import median
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from runtime.measure import Job, Measurement
from validation.interleave import Turns, combine
from ppsd.modes import Mode
from sim.plan import Plan

MeasureFn = Callable[[object, Job], Measurement]  # runtime.measure.measure's signature
AR_PLAN = Plan(Mode.AR)


@dataclass(frozen=True)
class MeasurePass:
    """One pass over the plans: a greedy round or a sampled seed."""

    order: tuple[int, ...]      # plan indices in the order they run
    seed: int = 0               # the sampling seed of every run in the pass
    opens_with_ar: bool = True  # measure AR whole (warmup, repeats, timeline) before the plans
    warmup: int = 1
    timeline: bool = True
    prefix: str = ""            # progress: "round 2/3 ", "seed 1, " or ""


def greedy_passes(plans: int, rounds: int, warmup: int) -> list[MeasurePass]:
    """R rounds, plans in alternating order (round 2 runs them backwards); AR opens the first only."""
    forward = tuple(range(plans))
    return [MeasurePass(forward if r % 2 == 0 else forward[::-1], opens_with_ar=r == 0, warmup=warmup,
                      prefix=f"round {r + 1}/{rounds} " if rounds > 1 else "") for r in range(rounds)]


def sampled_passes(plans: int, seeds: list[int], warmup: int) -> list[MeasurePass]:
    """One pass per seed, each opening with AR at that seed; the first warms up and keeps timelines."""
    return [MeasurePass(tuple(range(plans)), seed=s, warmup=warmup if k == 0 else 0, timeline=k == 0,
                      prefix=f"seed {s}, ") for k, s in enumerate(seeds)]


@dataclass(frozen=True)
class PlanRun:
    """One plan measured once: its measurement, the AR speed around it, (with a budget of several
    cores) the plan's and AR's speed on all of them, and (`--retime`) the pieces' scale timed right
    before it."""

    measurement: Measurement
    ar_reference: float
    budget_tokens_per_s: float | None = None
    budget_ar_reference: float | None = None
    scale: object = None
    thread_gain: float | None = None            # in turns: the plan on every core / on one thread (median of chunks)
    budget_speedup_beside: float | None = None  # in turns: pooled on every core against AR's turns beside it

    @property
    def speedup(self) -> float:
        return self.measurement.result.tokens_per_s / self.ar_reference if self.ar_reference else float("nan")

    @property
    def budget_speedup(self) -> float | None:
        if self.budget_tokens_per_s is None or not self.budget_ar_reference:
            return None
        return self.budget_tokens_per_s / self.budget_ar_reference


@dataclass
class MeasuredRuns:
    """Everything a bench measured, in time order."""

    ar_opening: list[Measurement] = field(default_factory=list)  # each pass's opening AR (in turns: first group's)
    ar_tokens_per_s: list[float] = field(default_factory=list)   # every AR run (openings and brackets)
    ar_budget_tokens_per_s: list[float] = field(default_factory=list)  # AR on every core
    ar_thread_ratios: list[float] = field(default_factory=list)  # in turns: AR on every core / one thread, per chunk
    ar_thread_gain: float | None = None                          # in turns: their median
    ar_scale: object = None                                      # --retime: the pieces before AR
    plan_runs: list[list[PlanRun]] = field(default_factory=list)  # per plan, one per pass
    chunks_measured_again: list[dict] = field(default_factory=list)  # in turns: chunks a host stall sent back


@dataclass
class Measurer:
    """Measures AR and the plans on `model` with `measure`. `job` is the template every run copies
    (prompts, lengths, temperature, repeats, timeouts); `bracket` False measures AR once up front."""

    model: object
    job: Job
    measure: MeasureFn
    bracket: bool = True
    cores: int = 1        # > 1: every plan and AR also within this budget of cores (same budget)
    retimer: object = None
    turn_prompts: int = 0  # > 0 (greedy): AR and each plan take turns every this many prompts (interleave.py)
    turn_plans: int = 2    # in turns: plans that share one AR turn, run on either side of it

    @property
    def in_turns(self) -> bool:
        """AR and the plans take turns prompt by prompt: greedy runs only (a sampled run's seeds follow a
        sequence's place in its job, so a job cut into chunks would draw other tokens than a whole one)."""
        return self.turn_prompts > 0 and self.job.temperature == 0

    def run(self, plans: list[Plan], passes: list[MeasurePass], forced: list, titles: list[str]) -> MeasuredRuns:
        """Measure every pass. `forced[i]`: what forces plan i's acceptance (ForcedTraces or None);
        `titles[i]`: plan i as the progress lines name it."""
        runs = MeasuredRuns(plan_runs=[[] for _ in plans])
        for bench_pass in passes:
            if self.in_turns:
                # AR runs inside each group's turns: no AR pass of its own opens the bench
                for start in range(0, len(bench_pass.order), self.turn_plans):
                    group = bench_pass.order[start:start + self.turn_plans]
                    for step, i in enumerate(group, start=start):
                        self._progress(bench_pass, step, len(plans), titles[i], " (in turns with AR"
                                       + (f", one AR turn for {len(group)} plans)" if len(group) > 1 else ")"))
                    for i, run in zip(group, self._measure_group_in_turns([plans[i] for i in group],
                                                                         [forced[i] for i in group], bench_pass,
                                                                         runs, opens_pass=start == 0)):
                        runs.plan_runs[i].append(run)
                continue
            if bench_pass.opens_with_ar:
                self._open_with_ar(bench_pass, runs)
            for step, i in enumerate(bench_pass.order):
                self._progress(bench_pass, step, len(plans), titles[i], " (then AR again)" if self.bracket else "")
                runs.plan_runs[i].append(self._measure_plan(plans[i], forced[i], bench_pass, runs))
        if runs.ar_thread_ratios:  # only turns within a budget measure them
            _price_budget_by_thread_gain(runs)
        return runs

    @staticmethod
    def _progress(bench_pass: MeasurePass, step: int, plans: int, title: str, how: str) -> None:
        # progress goes to stderr: stdout stays the table, or JSON alone with --json
        print(f"[{bench_pass.prefix}{step + 1}/{plans}] {title} ...{how}", flush=True, file=sys.stderr)

    def _job(self, plan: Plan, bench_pass: MeasurePass, forced=None) -> Job:
        return replace(self.job, plan=plan, forced=forced, seed=bench_pass.seed, warmup=bench_pass.warmup,
                       timeline=bench_pass.timeline)

    def _open_with_ar(self, bench_pass: MeasurePass, runs: MeasuredRuns) -> None:
        from runtime.same_budget import measure_ar_in_budget

        ar_job = self._job(AR_PLAN, bench_pass)
        if self.cores > 1:
            runs.ar_budget_tokens_per_s.append(measure_ar_in_budget(self.model, ar_job, self.cores, self.measure))
        if self.retimer is not None:
            runs.ar_scale = self.retimer.now("AR")
        ar = self.measure(self.model, ar_job)
        runs.ar_opening.append(ar)
        runs.ar_tokens_per_s.append(ar.result.tokens_per_s)

    def _measure_plan(self, plan: Plan, forced, bench_pass: MeasurePass, runs: MeasuredRuns) -> PlanRun:
        """The plan, then AR again (unless AR ran once): the plan against the AR runs around it."""
        scale = self.retimer.now(plan.label(), plan.scheme.pipelined) if self.retimer is not None else None
        job = self._job(plan, bench_pass, forced)
        measured = self.measure(self.model, job)
        ar_reference = runs.ar_tokens_per_s[-1]
        if self.bracket:
            again = self.measure(self.model, replace(self._job(AR_PLAN, bench_pass), warmup=0, repeats=1,
                                                     timeline=False))
            runs.ar_tokens_per_s.append(again.result.tokens_per_s)
            ar_reference = (ar_reference + runs.ar_tokens_per_s[-1]) / 2
        if self.cores <= 1:
            return PlanRun(measured, ar_reference, scale=scale)
        return PlanRun(measured, ar_reference, *self._in_budget(job, measured, bench_pass, runs), scale=scale)

    def _in_budget(self, job: Job, measured: Measurement, bench_pass: MeasurePass, runs: MeasuredRuns):
        """The plan's tokens/s within the budget, and AR's on every core bracketing it like AR on one."""
        from runtime.same_budget import measure_ar_in_budget, measure_plan_in_budget

        plan_tps = measure_plan_in_budget(self.model, job, self.cores, measured.result.tokens_per_s, self.measure)
        ar_job = replace(self._job(AR_PLAN, bench_pass), warmup=0, repeats=1)
        runs.ar_budget_tokens_per_s.append(measure_ar_in_budget(self.model, ar_job, self.cores, self.measure))
        return plan_tps, (runs.ar_budget_tokens_per_s[-2] + runs.ar_budget_tokens_per_s[-1]) / 2

    def _measure_chunk(self, order: list, k: int, chunk: range, turns: Turns, jobs: list[Job], ar_job: Job,
                       plans: list[Plan], opens_pass: bool) -> tuple[dict, dict]:
        """One chunk of prompts, AR and the plans in `order` (None: AR) -> ({index or None: Measurement},
        {same: the job it ran}). `k`: 0 only for the pass's first chunk, which warms AR up."""
        parts, chunk_jobs = {}, {}
        for at in order:
            if at is None:
                # AR warms up once a pass (its first chunk); the process stays warm for the rest
                job = turns.job(ar_job, chunk) if k == 0 and opens_pass else replace(turns.job(ar_job, chunk), warmup=0)
            else:
                job = turns.job(jobs[at], chunk)
                if k and not plans[at].scheme.pipelined:
                    # a decoder in this process is warm after its first chunk: only a pipeline, whose stage
                    # processes start afresh every run, warms up every chunk
                    job = replace(job, warmup=0)
            parts[at] = self.measure(self.model, job)
            chunk_jobs[at] = job
        return parts, chunk_jobs

    def _measure_group_in_turns(self, plans: list[Plan], forced: list, bench_pass: MeasurePass, runs: MeasuredRuns,
                                opens_pass: bool) -> list[PlanRun]:
        """A group of plans and AR, a chunk of prompts at a time, AR between the plans (A, AR, B; the
        next chunk B, AR, A), then within the budget the same way: each plan against the AR that ran
        seconds beside it on the same prompts, one AR turn for the group. The first group of a pass
        also gives the pass its AR row (timeline and outputs)."""
        from runtime.same_budget import measure_ar_in_budget, measure_plan_in_budget

        scale = None
        if self.retimer is not None:  # one retiming right before the group prices each of its plans
            scale = self.retimer.now(" and ".join(p.label() for p in plans), any(p.scheme.pipelined for p in plans))
        jobs = [self._job(p, bench_pass, f) for p, f in zip(plans, forced)]
        # every AR turn keeps its passes' times (to spot a host stall); the first group's also give the AR row
        ar_job = replace(self._job(AR_PLAN, bench_pass), repeats=1)
        turns = Turns(len(ar_job.prompts), self.turn_prompts)
        ar_parts, budget_ar = [], []
        plan_parts, budget_plan = [[] for _ in plans], [[] for _ in plans]
        middle = len(plans) // 2  # AR's place in a chunk's order: between the plans (first, for one)
        for k, chunk in enumerate(turns.chunks):
            order = list(range(len(plans)))
            if k % 2:  # every other chunk the other way round, so no plan always runs right after AR
                order.reverse()
            order.insert(middle, None)
            parts, chunk_jobs = self._measure_chunk(order, k, chunk, turns, jobs, ar_job, plans, opens_pass)
            stalled = [("AR" if at is None else plans[at].label()) for at, m in parts.items() if _stalled(m)]
            if stalled:  # a host stall in one of the chunk's runs: the whole chunk again, once, the same way
                runs.chunks_measured_again.append({"chunk": k, "prompts": list(chunk), "stalled": stalled})
                parts, chunk_jobs = self._measure_chunk(order, 1 + k, chunk, turns, jobs, ar_job, plans, False)
            ar_parts.append(parts[None])
            for at in range(len(plans)):
                plan_parts[at].append(parts[at])
            if self.cores <= 1:
                continue
            for at in order:  # the same order within the budget
                if at is None:
                    budget_ar.append(measure_ar_in_budget(self.model, replace(chunk_jobs[None], timeline=False),
                                                          self.cores, self.measure))
                    runs.ar_thread_ratios.append(_ratio(budget_ar[-1], ar_parts[-1].result.tokens_per_s))
                else:
                    budget_plan[at].append(measure_plan_in_budget(self.model, chunk_jobs[at], self.cores,
                                                                  plan_parts[at][-1].result.tokens_per_s,
                                                                  self.measure))
        ar = combine(ar_parts)
        if opens_pass:
            runs.ar_opening.append(ar)
            runs.ar_scale = scale
        runs.ar_tokens_per_s.append(ar.result.tokens_per_s)
        ar_budget = None
        if self.cores > 1:
            # a chunk's tokens are the same on any number of threads (greedy): weigh each chunk's speed by them
            ar_budget = _pooled_speed(budget_ar, [_decode_tokens(m) for m in ar_parts])
            runs.ar_budget_tokens_per_s.append(ar_budget)
        out = []
        for plan, parts, budget in zip(plans, plan_parts, budget_plan):
            measured = combine(parts)
            if self.cores <= 1:
                out.append(PlanRun(measured, ar.result.tokens_per_s, scale=scale))
                continue
            # the plan on every core: on one thread times its own thread gain (1 for a pipeline whose stages
            # already use the budget); AR's side is priced the same way once the bench is done
            gain = _nan_if_none(median(_ratio(b, m.result.tokens_per_s) for b, m in zip(budget, parts)))
            pooled = _pooled_speed(budget, [_decode_tokens(m) for m in parts])
            out.append(PlanRun(measured, ar.result.tokens_per_s, measured.result.tokens_per_s * gain, None,
                               scale=scale, thread_gain=gain, budget_speedup_beside=_ratio(pooled, ar_budget)))
        return out


def _stalled(measured: Measurement) -> bool:
    """Whether a run's passes show a host stall (`ppsd.validation_folder.host_stall`)."""
    from ppsd.validation_folder import host_stall

    return host_stall(measured.result.timeline or []) is not None


def _price_budget_by_thread_gain(runs: MeasuredRuns) -> None:
    """Every plan run's AR on every core: its AR on one thread times the bench's AR thread gain."""
    runs.ar_thread_gain = _nan_if_none(median(runs.ar_thread_ratios))
    runs.plan_runs = [[replace(r, budget_ar_reference=r.ar_reference * runs.ar_thread_gain) for r in plan_runs]
                      for plan_runs in runs.plan_runs]


def _nan_if_none(x: float | None) -> float:
    return float("nan") if x is None else x


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a and b and a > 0 and b > 0 else float("nan")


def _decode_tokens(m: Measurement) -> int:
    """Decode tokens of a measurement's first timed repetition."""
    return sum(r.decode_tokens for r in m.records[0]) if m.records else 0


def _pooled_speed(speeds: list[float], tokens: list[int]) -> float:
    """Tokens/s of chunks run one after another: every token over every second (Σ n / Σ n / speed)."""
    seconds = sum(n / v for n, v in zip(tokens, speeds) if v > 0)
    return sum(tokens) / seconds if seconds > 0 else float("nan")
