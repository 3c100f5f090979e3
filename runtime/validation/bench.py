"""The one bench loop of `ppsd validate`: every plan measured with AR right before and right after
it, greedy and sampled alike.

A shared machine's speed drifts by a few % over minutes, so each plan's speedup is taken against the
mean of the AR runs just before and after it. A greedy validation makes one pass over the plans per
round (`--rounds`, the plans in alternating order so a steady drift favours none); a sampled one
makes one pass per seed, each opening with a whole AR run at that seed.

With `turn_prompts` (`--turns N`, greedy) AR and each plan instead take turns every N prompts
(`runtime/validation/interleave.py`): the plan against AR seconds apart rather than a plan's length.

`MeasureFn` is the seam for another runtime: anything that runs a `Job` on a model and returns a
`runtime.measure.Measurement` (tokens/s, outputs, accepted lengths) can be benched here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from runtime.measure import Job, Measurement
from runtime.validation.interleave import Turns, combine
from sim.modes import Mode
from sim.plan import Plan

MeasureFn = Callable[[object, Job], Measurement]  # runtime.measure.measure's signature
AR_PLAN = Plan(Mode.AR)


@dataclass(frozen=True)
class BenchPass:
    """One pass over the plans: a greedy round or a sampled seed."""

    order: tuple[int, ...]      # plan indices in the order they run
    seed: int = 0               # the sampling seed of every run in the pass
    opens_with_ar: bool = True  # measure AR whole (warmup, repeats, timeline) before the plans
    warmup: int = 1
    timeline: bool = True
    prefix: str = ""            # progress: "round 2/3 ", "seed 1, " or ""


def greedy_passes(plans: int, rounds: int, warmup: int) -> list[BenchPass]:
    """R rounds, plans in alternating order (round 2 runs them backwards); AR opens the first only."""
    forward = tuple(range(plans))
    return [BenchPass(forward if r % 2 == 0 else forward[::-1], opens_with_ar=r == 0, warmup=warmup,
                      prefix=f"round {r + 1}/{rounds} " if rounds > 1 else "") for r in range(rounds)]


def sampled_passes(plans: int, seeds: list[int], warmup: int) -> list[BenchPass]:
    """One pass per seed, each opening with AR at that seed; the first warms up and keeps timelines."""
    return [BenchPass(tuple(range(plans)), seed=s, warmup=warmup if k == 0 else 0, timeline=k == 0,
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

    @property
    def speedup(self) -> float:
        return self.measurement.result.tokens_per_s / self.ar_reference if self.ar_reference else float("nan")

    @property
    def budget_speedup(self) -> float | None:
        if self.budget_tokens_per_s is None or not self.budget_ar_reference:
            return None
        return self.budget_tokens_per_s / self.budget_ar_reference


@dataclass
class BenchRuns:
    """Everything a bench measured, in time order."""

    ar_opening: list[Measurement] = field(default_factory=list)  # each pass's opening AR run
    ar_tokens_per_s: list[float] = field(default_factory=list)   # every AR run (openings and brackets)
    ar_budget_tokens_per_s: list[float] = field(default_factory=list)  # AR on every core
    ar_scale: object = None                                      # --retime: the pieces before AR
    plan_runs: list[list[PlanRun]] = field(default_factory=list)  # per plan, one per pass


@dataclass
class Bench:
    """Measures AR and the plans on `model` with `measure`. `job` is the template every run copies
    (prompts, lengths, temperature, repeats, timeouts); `bracket` False measures AR once up front."""

    model: object
    job: Job
    measure: MeasureFn
    bracket: bool = True
    cores: int = 1        # > 1: every plan and AR also within this budget of cores (same budget)
    retimer: object = None
    turn_prompts: int = 0  # > 0 (greedy): AR and each plan take turns every this many prompts (interleave.py)

    @property
    def in_turns(self) -> bool:
        """AR and the plans take turns prompt by prompt: greedy runs only (a sampled run's seeds follow a
        sequence's place in its job, so a job cut into chunks would draw other tokens than a whole one)."""
        return self.turn_prompts > 0 and self.job.temperature == 0

    def run(self, plans: list[Plan], passes: list[BenchPass], forced: list, titles: list[str]) -> BenchRuns:
        """Measure every pass. `forced[i]`: what forces plan i's acceptance (ForcedTraces or None);
        `titles[i]`: plan i as the progress lines name it."""
        runs = BenchRuns(plan_runs=[[] for _ in plans])
        for bench_pass in passes:
            if bench_pass.opens_with_ar:
                self._open_with_ar(bench_pass, runs)
            for step, i in enumerate(bench_pass.order):
                print(f"[{bench_pass.prefix}{step + 1}/{len(plans)}] {titles[i]} ..."
                      + (" (in turns with AR)" if self.in_turns else " (then AR again)" if self.bracket else ""),
                      flush=True, file=sys.stderr)  # progress: stdout stays the table, or JSON alone with --json
                measure_plan = self._measure_in_turns if self.in_turns else self._measure_plan
                runs.plan_runs[i].append(measure_plan(plans[i], forced[i], bench_pass, runs))
        return runs

    def _job(self, plan: Plan, bench_pass: BenchPass, forced=None) -> Job:
        return replace(self.job, plan=plan, forced=forced, seed=bench_pass.seed, warmup=bench_pass.warmup,
                       timeline=bench_pass.timeline)

    def _open_with_ar(self, bench_pass: BenchPass, runs: BenchRuns) -> None:
        from runtime.same_budget import measure_ar_in_budget

        ar_job = self._job(AR_PLAN, bench_pass)
        if self.cores > 1:
            runs.ar_budget_tokens_per_s.append(measure_ar_in_budget(self.model, ar_job, self.cores, self.measure))
        if self.retimer is not None:
            runs.ar_scale = self.retimer.now("AR")
        ar = self.measure(self.model, ar_job)
        runs.ar_opening.append(ar)
        runs.ar_tokens_per_s.append(ar.result.tokens_per_s)

    def _measure_plan(self, plan: Plan, forced, bench_pass: BenchPass, runs: BenchRuns) -> PlanRun:
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

    def _in_budget(self, job: Job, measured: Measurement, bench_pass: BenchPass, runs: BenchRuns):
        """The plan's tokens/s within the budget, and AR's on every core bracketing it like AR on one."""
        from runtime.same_budget import measure_ar_in_budget, measure_plan_in_budget

        plan_tps = measure_plan_in_budget(self.model, job, self.cores, measured.result.tokens_per_s, self.measure)
        ar_job = replace(self._job(AR_PLAN, bench_pass), warmup=0, repeats=1)
        runs.ar_budget_tokens_per_s.append(measure_ar_in_budget(self.model, ar_job, self.cores, self.measure))
        return plan_tps, (runs.ar_budget_tokens_per_s[-2] + runs.ar_budget_tokens_per_s[-1]) / 2

    def _measure_in_turns(self, plan: Plan, forced, bench_pass: BenchPass, runs: BenchRuns) -> PlanRun:
        """AR, then the plan, a chunk of prompts at a time (and within the budget, AR on every core and
        the plan on it, the same way): the plan against the AR that ran seconds before each chunk."""
        from runtime.same_budget import measure_ar_in_budget, measure_plan_in_budget

        scale = self.retimer.now(plan.label(), plan.scheme.pipelined) if self.retimer is not None else None
        job = self._job(plan, bench_pass, forced)
        ar_job = replace(self._job(AR_PLAN, bench_pass), warmup=0, repeats=1, timeline=False)
        turns = Turns(len(job.prompts), self.turn_prompts)
        ar_parts, plan_parts, budget_ar, budget_plan = [], [], [], []
        for k, chunk in enumerate(turns.chunks):
            plan_job = turns.job(job, chunk)
            if k and not plan.scheme.pipelined:
                # a decoder in this process is warm after its first chunk (and AR decoded just before it):
                # only a pipeline, whose stage processes start afresh every run, warms up every chunk
                plan_job = replace(plan_job, warmup=0)
            ar_parts.append(self.measure(self.model, turns.job(ar_job, chunk)))
            plan_parts.append(self.measure(self.model, plan_job))
            if self.cores > 1:
                budget_ar.append(measure_ar_in_budget(self.model, turns.job(ar_job, chunk), self.cores, self.measure))
                budget_plan.append(measure_plan_in_budget(self.model, plan_job, self.cores,
                                                          plan_parts[-1].result.tokens_per_s, self.measure))
        measured, ar = combine(plan_parts), combine(ar_parts)
        runs.ar_tokens_per_s.append(ar.result.tokens_per_s)
        if self.cores <= 1:
            return PlanRun(measured, ar.result.tokens_per_s, scale=scale)
        # a chunk's tokens are the same on any number of threads (greedy): weigh each chunk's speed by them
        ar_budget = _pooled_speed(budget_ar, [_decode_tokens(m) for m in ar_parts])
        plan_budget = _pooled_speed(budget_plan, [_decode_tokens(m) for m in plan_parts])
        runs.ar_budget_tokens_per_s.append(ar_budget)
        return PlanRun(measured, ar.result.tokens_per_s, plan_budget, ar_budget, scale=scale)


def _decode_tokens(m: Measurement) -> int:
    """Decode tokens of a measurement's first timed repetition."""
    return sum(r.decode_tokens for r in m.records[0]) if m.records else 0


def _pooled_speed(speeds: list[float], tokens: list[int]) -> float:
    """Tokens/s of chunks run one after another: every token over every second (Σ n / Σ n / speed)."""
    seconds = sum(n / v for n, v in zip(tokens, speeds) if v > 0)
    return sum(tokens) / seconds if seconds > 0 else float("nan")
