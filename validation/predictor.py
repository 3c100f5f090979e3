"""The simulator's side of a validation: what it predicts for the measured prompts.

In sample, each measured prompt replays its own trace in the predicting profile; out of sample, the
prediction prompts' traces are laid over the measured prompts' lengths (`sim.intervals.pooled_stream`).
A forced plan (`--plans ...:alpha=A`) replays the very bits its run was forced with. `--retime` prices
a prediction with the pieces timed right before its run (a retimed view of the profile).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from validation.forcing import forced_bits
from validation.prompts import Sides, Workload
from sim import intervals as iv
from sim.plan import Plan, Result

PREDICT_SEEDS = 16  # simulations averaged per predicted figure at T > 0 (Bernoulli(β) draws differ per seed)


class GreedyPredictor:
    """Greedy predictions, intervals and in-sample twins for one validation's measured prompts."""

    def __init__(self, predict, measured, sides: Sides, work: Workload, *, draws: int, seed: int, traced=None):
        self.predict = predict    # the profile that prices (and whose prediction prompts' traces replay)
        self.measured = measured  # the measured profile (its own traces make the in-sample twin)
        self.traced = traced      # --measured-traces: the measured prompts' own traces, priced by `predict`
        self.sides, self.work = sides, work
        self.draws, self.seed = draws, seed
        self._traces: dict[tuple[int, str], iv.PromptTraces] = {}
        self._views: dict[tuple[int, int], object] = {}

    def prediction_traces(self, exit_layer: int, head: str) -> iv.PromptTraces:
        """The prediction prompts' traces at one exit for one head (what predicts out of sample)."""
        if (exit_layer, head) not in self._traces:
            self._traces[(exit_layer, head)] = iv.prompt_traces(self.predict, exit_layer, head=head,
                                                                prompt_ids=self.sides.prediction_ids)
        return self._traces[(exit_layer, head)]

    def own_stream(self, plan: Plan) -> iv.Stream:
        """The measured prompts decoded with their own traces from --measured-traces, each at its own
        contexts (a trace cut short by an end-of-sequence token is tiled to the measured length, as the
        run decodes on past it)."""
        traces = iv.prompt_traces(self.traced, plan.exit_layer, head=plan.exit_head,
                                  prompt_ids=[str(i) for i in self.work.ids])
        at = {pid: j for j, pid in enumerate(traces.prompt_ids)}
        return iv.overlay_stream(traces, [at[str(i)] for i in self.work.ids], self.work.targets)

    def forced_bits(self, plan: Plan, alpha: float) -> iv.PromptTraces:
        return forced_bits(plan, alpha, self.seed, self.work.targets, self.work.ids, self.work.max_new)

    def priced(self, profile, scale):
        """`profile` priced with `scale` (`--retime`; None: its own tables), one view per pair: a view
        keeps its own caches (thread tables, beta rows), so the prediction, its twin, its interval and
        its same-budget figure share it."""
        if scale is None:
            return profile
        key = (id(profile), id(scale))
        if key not in self._views:
            self._views[key] = profile.retimed(scale)
        return self._views[key]

    def result(self, plan: Plan, forced_alpha: float | None = None, *, timeline: bool = False,
               budget: int | None = None, engine: str = "event", in_sample: bool | None = None,
               scale=None) -> Result:
        """The prediction of `plan` for the measured prompts (see the module), priced from the profile
        or, with `scale`, from the pieces as timed before the plan ran."""
        from sim.api import resolve_plan, simulate
        from sim.run import simulate_stream

        in_sample = self.sides.in_sample if in_sample is None else in_sample
        if forced_alpha is not None:
            bits = self.forced_bits(plan, forced_alpha)
            stream = iv.overlay_stream(bits, list(range(len(bits))), self.work.targets)
        elif in_sample and self.traced is not None and plan.exit_layer is not None:
            # the timing model alone: the predicting profile's prices, the measured prompts' own acceptance
            stream = self.own_stream(plan)
        elif in_sample:
            own = self.priced(self.predict if self.sides.in_sample else self.measured, scale)
            return simulate(own, resolve_plan(plan, own), acceptance="trace", prompt_ids=self.work.ids,
                            timeline=timeline, budget=budget, engine=engine)
        elif plan.exit_layer is None:
            stream = iv.lengths_stream(self.work.targets)
        else:
            stream = iv.pooled_stream(self.prediction_traces(plan.exit_layer, plan.exit_head), self.work.targets,
                                      self.seed)
        return simulate_stream(self.priced(self.predict, scale), plan, stream, engine=engine, timeline=timeline,
                               budget=budget, seed=self.seed)

    def interval(self, plan: Plan, forced_alpha: float | None, point: float, scale=None,
                 noise_cv: float = 0.0) -> tuple[float, float]:
        """The 90% interval around `point` (the row's predicted speedup) for the measured prompts:
        acceptance drawn from the prediction prompts (none when forced), the latency spread and the
        measurement's noise."""
        from sim.api import resolve_plan

        price = self.priced(self.predict, scale)
        plan = resolve_plan(plan, price)
        common = dict(targets=self.work.targets, draws=self.draws, seed=self.seed, measurement_cv=noise_cv)
        if forced_alpha is not None:  # acceptance is fixed: the latency and measurement spreads alone
            spread = iv.replay_interval(price, plan, None, **common)
            return point * spread.lo, point * spread.hi
        traces = self.prediction_traces(plan.exit_layer, plan.exit_head) if plan.exit_layer is not None else None
        return around(point, iv.replay_interval(price, plan, traces, **common))


def around(point: float, interval) -> tuple[float, float]:
    """The interval's draws describe the spread around their own centre; the row's point may sit a
    little off it (it replays another stream): the interval always contains the point."""
    return min(interval.lo, point), max(interval.hi, point)


@dataclass(frozen=True)
class SampledPrediction:
    """The simulator's expected figures at T: the mean (and range) over seeded simulations."""

    speedup: float
    speedup_min: float
    speedup_max: float
    tokens_per_s: float
    acceptance_rate: float | None


class SampledPredictor:
    """Sampled predictions at T for one validation's measured prompts: each a seeded simulation of
    the profile's β at exactly T (`sim.model.streams.trace_stream`)."""

    def __init__(self, predict, sides: Sides, work: Workload, temperature: float, head: str):
        self.predict, self.sides, self.work = predict, sides, work
        self.temperature, self.head = temperature, head
        self.ids = [str(i) for i in work.ids]

    def run(self, plan: Plan, seed: int, *, timeline: bool = False, in_sample_profile=None) -> Result:
        """One seeded simulation at T of the measured prompts: in sample (or on `in_sample_profile`),
        each prompt's own β trace; out of sample, the prediction prompts' β traces laid over the
        measured prompts' lengths."""
        from sim.api import simulate
        from sim.run import simulate_stream

        engine = "event" if timeline else "fast"
        plan = plan.at_temperature(self.temperature)  # priced as sampled: every draw, the verifier's q
        if in_sample_profile is not None or self.sides.in_sample:
            return simulate(in_sample_profile or self.predict, plan, acceptance="trace", prompt_ids=self.ids,
                            temperature=self.temperature, seed=seed, engine=engine, timeline=timeline)
        if plan.exit_layer is None:
            stream = iv.lengths_stream(self.work.targets)
        else:
            traces = iv.prompt_traces(self.predict, plan.exit_layer, head=self.head,
                                      prompt_ids=self.sides.prediction_ids, temperature=self.temperature)
            stream = iv.pooled_stream(traces, self.work.targets, seed)
        return simulate_stream(self.predict, plan, stream, engine=engine, timeline=timeline, seed=seed)

    def expected(self, plan: Plan, seeds: int = PREDICT_SEEDS, in_sample_profile=None) -> SampledPrediction:
        """The mean (and spread) over `seeds` seeded simulations."""
        res = [self.run(plan, s, in_sample_profile=in_sample_profile) for s in range(seeds)]
        speedups = [r.speedup_vs_ar or 1.0 for r in res]
        acc = [r.acceptance_rate for r in res if r.acceptance_rate is not None]
        return SampledPrediction(float(np.mean(speedups)), float(min(speedups)), float(max(speedups)),
                                 float(np.mean([r.tokens_per_s for r in res])),
                                 float(np.mean(acc)) if acc else None)
