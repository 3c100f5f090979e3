"""A sampled validation (`ppsd validate --temperature T`, T > 0): sampled runs beside the simulator's
prediction at T.

A sampled run is one draw of a random process: its text, its acceptances and so its speed change
with the seed. So each plan is measured once per seed (`--seeds`, default 3; every repeat of a seed
samples afresh too), AR right before and after it with the same seed, and the row reports the median
speedup over the seeds with their spread (`measured_speedup_seeds`, `measured_acceptance_rate_seeds`).
The prediction is the mean over `PREDICT_SEEDS` simulations of the profile's β at exactly T (along the
trajectories the profiler sampled at T), each prompt's trace replayed once at its own length, the
length the runs generate (`stop_at_eos` off).

Losslessness under sampling is not checked here (outputs differ from AR's by construction): the
distribution test (tests/test_runtime_lossless.py) checks that EESD and PPSD sample AR's distribution.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from ppsd import validation_folder as vf
from ppsd.errors import UserError
from ppsd.paths import display_path
from runtime.measure import Job
from validation.measuring import AR_PLAN, Measurer, MeasuredRuns, MeasureFn, sampled_passes
from validation.config import ValidateConfig
from validation.inputs import Inputs
from validation.predictor import SampledPrediction, SampledPredictor
from validation.prompts import Workload
from validation.statistics import SeedSummary, sampling_summary
from sim.timeline import write_chrome_trace


def sampled_lengths(profile, temperature: float, head: str, gens: list[dict]) -> list[int]:
    """Tokens each prompt generates in a sampled run: the length of the profile's trajectory sampled at
    T for it (what the prediction replays), else its greedy generation's length."""
    rows = profile.beta_rows(temperature, head)
    first = rows[rows["exit_layer"] == rows["exit_layer"].min()]
    lengths = first.groupby("prompt_id")["position"].max().add(1).to_dict()
    return [int(lengths.get(str(g["prompt_id"]), len(g["token_ids"]))) for g in gens]


class SampledValidation:
    """One sampled validation: set up, `run()` benches over the seeds, predicts, and returns the document."""

    def __init__(self, config: ValidateConfig, inputs: Inputs, out: Path, measure: MeasureFn):
        self.config, self.inputs, self.out, self.measure = config, inputs, out, measure
        self.temperature, self.head = inputs.temperature, inputs.head
        inputs.predict.beta_rows(self.temperature, self.head)  # a head without sampled β fails before anything runs
        max_new, self.twins = self._lengths()
        self.work = Workload.from_generations(inputs.sides.measured, max_new)
        self.predictor = SampledPredictor(inputs.predict, inputs.sides, self.work, self.temperature, self.head)

    def _lengths(self) -> tuple[list[int], bool]:
        """Each measured prompt generates as many tokens as its trajectory sampled at T (what an
        in-sample prediction replays; prompts never sampled, their greedy generation's length); and
        whether the measured profile sampled them all (then the rows carry in-sample twins)."""
        gens, sides, t = self.inputs.sides.measured, self.inputs.sides, self.temperature
        if sides.in_sample:
            return sampled_lengths(self.inputs.predict, t, self.head, gens), False
        try:
            have = set(self.inputs.profile.beta_rows(t, self.head)["prompt_id"].astype(str))
        except UserError:
            have = set()
        if {str(g["prompt_id"]) for g in gens} <= have:  # the measured profile sampled these prompts
            return sampled_lengths(self.inputs.profile, t, self.head, gens), True
        return [max(1, len(g["token_ids"])) for g in gens], False

    def run(self) -> dict:
        c, plans = self.config, self.inputs.plans
        job = Job(plan=AR_PLAN, prompts=self.work.prompts, max_new=self.work.max_new, temperature=self.temperature,
                  stop_at_eos=False, warmup=c.warmup, repeats=c.repeats, timeout_s=c.stage_timeout, heads_dir=c.heads,
                  warmup_tokens=int(c.warmup_tokens))
        titles = [f"{p.label()} at T={self.temperature:g}" for p in plans]
        runs = Measurer(self.inputs.model, job, self.measure).run(
            plans, sampled_passes(len(plans), c.seed_list, c.warmup), [None] * len(plans), titles)
        rows = [self._row(AR_PLAN, runs, None)] + [self._row(p, runs, i) for i, p in enumerate(plans)]
        doc = self._document(rows, runs)
        vf.write_validation(self.out, doc)
        return doc

    def _row(self, plan, runs: MeasuredRuns, i: int | None) -> vf.ValidationRow:
        """AR's row (i None) or plan i's: the first seed's run with the seeds' median tokens/s, beside
        the mean prediction over the simulation seeds (its timeline: seed 0's)."""
        from sim.api import resolve_plan

        plan = resolve_plan(plan, self.inputs.predict)
        first = (runs.ar_opening if i is None else [r.measurement for r in runs.plan_runs[i]])[0].result
        tps = [m.result.tokens_per_s for m in runs.ar_opening] if i is None else \
            [r.measurement.result.tokens_per_s for r in runs.plan_runs[i]]
        seeds = SeedSummary.of(tps, [] if i is None else runs.plan_runs[i])
        measured = replace(first, tokens_per_s=seeds.tokens_per_s,
                           details=replace(first.details, tokens_per_s_p10=seeds.tokens_per_s_p10,
                                           tokens_per_s_p90=seeds.tokens_per_s_p90))
        shown = self.predictor.run(plan, 0, timeline=True)
        pred = self.predictor.expected(plan) if plan.mode.speculative else None
        shown_pred = shown if pred is None else replace(shown, speedup_vs_ar=pred.speedup,
                                                        tokens_per_s=pred.tokens_per_s,
                                                        acceptance_rate=pred.acceptance_rate)
        row = vf.ValidationRow.from_results(plan, shown_pred, measured, float(np.mean(runs.ar_tokens_per_s)), None)
        if i is not None:
            row = self._with_seeds(row, seeds, pred)
            if self.twins:
                row = self._with_twin(row, plan)
        vf.write_plan_timelines(self.out, plan, shown, first, write_chrome_trace)
        return row

    @staticmethod
    def _with_seeds(row: vf.ValidationRow, seeds: SeedSummary, pred: SampledPrediction) -> vf.ValidationRow:
        """The row's measured figures over the seeds (median speedup, mean acceptance, each seed's)."""
        ms, macc = seeds.speedup, seeds.acceptance_rate
        return replace(row, measured_speedup=round(ms, 4),
                       speedup_error_pct=round(100.0 * (pred.speedup - ms) / ms, 3) if ms else None,
                       ar_reference_tokens_per_s=round(seeds.tokens_per_s / ms, 4) if ms else None,
                       measured_acceptance_rate=None if macc is None else round(macc, 4),
                       predicted_acceptance_rate=None if pred.acceptance_rate is None
                       else round(pred.acceptance_rate, 4),
                       measured_speedup_seeds=[round(x, 4) for x in seeds.speedups],
                       measured_acceptance_rate_seeds=[round(x, 4) for x in seeds.acceptance_rates] or None,
                       predicted_speedup_seed_range=[round(pred.speedup_min, 4), round(pred.speedup_max, 4)])

    def _with_twin(self, row: vf.ValidationRow, plan) -> vf.ValidationRow:
        """What the in-sample prediction (the measured prompts' own β) says, beside the row's."""
        from sim.api import resolve_plan

        profile = self.inputs.profile
        inside = self.predictor.expected(resolve_plan(plan, profile), in_sample_profile=profile)
        row = row.with_in_sample(inside.speedup)
        if inside.acceptance_rate is not None:
            row = replace(row, predicted_acceptance_rate_in_sample=round(inside.acceptance_rate, 4))
        return row

    def _document(self, rows: list, runs: MeasuredRuns) -> dict:
        inputs, sides = self.inputs, self.inputs.sides
        sources = vf.prompt_sources(predicted_from=display_path(inputs.predict.path),
                                    prediction_prompt_ids=sides.prediction_ids, measured_prompt_ids=self.predictor.ids,
                                    measured_prompts=sides.measured_prompts, split=sides.split, overlap=sides.overlap)
        doc = vf.make_doc(rows, profile=display_path(inputs.profile.path), model=inputs.profile.model_id,
                          device_name=inputs.profile.device_name, forced_trace=False, exit_head=self.head,
                          ar_reference="bracketed", ar_tokens_per_s_runs=runs.ar_tokens_per_s, sources=sources)
        summary = sampling_summary(rows, self.temperature, self.config.seed_list, inputs.predict.beta_trajectory)
        body = {k: v for k, v in doc.items() if k != "rows"}  # the sampled summary comes before the rows
        return {**body, **summary, "rows": doc["rows"]}
