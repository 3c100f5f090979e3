"""A greedy validation: AR and every plan measured on the measured prompts (in rounds, each against
the AR runs around it), each predicted from the predicting profile, with its 90% interval, and
written as the validation folder (ppsd/validation_folder.py)."""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

from ppsd import validation_folder as vf
from ppsd.paths import display_path
from runtime.measure import Job
from validation.measuring import AR_PLAN, Measurer, MeasuredRuns, MeasureFn, greedy_passes
from validation.config import ValidateConfig
from validation.forcing import run_traces
from validation.inputs import Inputs
from validation.machine import CorunCheck, Retimer
from validation.predictor import GreedyPredictor
from validation.prompts import Workload
from validation.statistics import median_round, strata_summary
from sim import intervals as iv
from sim.timeline import write_chrome_trace


class GreedyValidation:
    """One greedy validation: set up, `run()` benches and predicts, and returns the document."""

    def __init__(self, config: ValidateConfig, inputs: Inputs, out: Path, measure: MeasureFn):
        from runtime.same_budget import cores_for_budget

        self.config, self.inputs, self.out, self.measure = config, inputs, out, measure
        self.work = Workload.from_generations(inputs.sides.measured)
        self.predictor = GreedyPredictor(inputs.predict, inputs.profile, inputs.sides, self.work,
                                         draws=int(config.draws), seed=int(config.seed), traced=inputs.traced)
        model = inputs.model
        # threads do not speed up a wait: emulated runs have no same-budget baseline
        self.cores = 1 if config.emulated else cores_for_budget(config.cores, model.device.type == "cuda")
        self.budget_priced = self.cores > 1 and self.cores in inputs.predict.parallel_units()
        # the AR row is the measuring runtime's AR (transformers' plain generate with --runtime hf), priced
        # and labelled as such ("AR [hf]"); the bench's AR jobs are the same whichever plan names them
        self.ar_plan = replace(AR_PLAN, runtime=config.runtime)
        # in-sample twins (out-of-sample runs whose measured profile traced the measured prompts): what the
        # default, in-sample validation predicts for the same runs, reported beside the real prediction;
        # with --measured-traces, the predicting profile's prices at the measured prompts' own acceptance
        acc = inputs.acceptance
        self.twins = not inputs.sides.in_sample and not config.emulated and (inputs.traced is not None or (
            acc is not None and set(map(str, self.work.ids)) <= set(acc["prompt_id"].astype(str))))

    def run(self) -> dict:
        inputs, config = self.inputs, self.config
        if self.cores > 1 and self.cores not in inputs.profile.parallel_units():
            print(f"the profile has no {self.cores}-thread tables: same-budget speedups are measured, not predicted "
                  "(re-profile with `ppsd profile --thread-counts`)", file=sys.stderr)
        # co-run check: AR is one process, so its bracket cannot see how much two co-running stages slow
        # each other now; measured before the first plan and after the last, like the profiler does
        corun = None if config.emulated else CorunCheck.for_run(inputs.profile, inputs.model, inputs.plans)
        if corun is not None:
            corun.measure("before the plans")
        # --retime: the pieces timed right before AR and before every plan price it (profiler/piece_times.py)
        retimer = Retimer.for_run(config.retime, inputs.predict, inputs.model, config.heads, config.emulated, corun)
        runs = self._bench(retimer).run(inputs.plans, greedy_passes(len(inputs.plans), config.rounds, config.warmup),
                                        self._forced_traces(), self._titles())
        if corun is not None:
            corun.measure("after the plans")
        rows = self._with_intervals(self._with_same_budget(self._rows(runs), runs), runs)
        doc = self._document(rows, runs, corun, retimer)
        if config.runtime != "ppsd":  # another runtime measured every plan (additive)
            doc["runtime"] = config.runtime
        if inputs.traced is not None:  # the twins' acceptance: the measured prompts' own traces (additive)
            doc["measured_traces"] = display_path(inputs.traced.path)
        vf.write_validation(self.out, doc)
        return doc

    def _bench(self, retimer) -> Measurer:
        c = self.config
        job = Job(plan=AR_PLAN, prompts=self.work.prompts, max_new=self.work.max_new, stop_at_eos=False,
                  warmup=c.warmup, repeats=c.repeats, timeout_s=c.stage_timeout, heads_dir=c.heads,
                  warmup_tokens=int(c.warmup_tokens))
        return Measurer(self.inputs.model, job, self.measure, bracket=not c.ar_once, cores=self.cores, retimer=retimer,
                     turn_prompts=c.turns, turn_plans=int(c.turn_plans))

    def _forced_traces(self) -> list:
        """What forces each plan's acceptance in its run (None: the drafts' own)."""
        replay = self.config.force_trace or self.config.emulated  # emulated drafts have no acceptance of their own
        return [run_traces(p, a, self.predictor.forced_bits(p, a) if a is not None else None,
                           self.inputs.acceptance, self.work.ids, replay)
                for p, a in zip(self.inputs.plans, self.inputs.forced)]

    def _titles(self) -> list[str]:
        return [p.label() + (f" forced α={a:g}" if a is not None else "")
                for p, a in zip(self.inputs.plans, self.inputs.forced)]

    def _rows(self, runs: MeasuredRuns) -> list[vf.ValidationRow]:
        """AR's row, then each plan's from its median round."""
        ar = runs.ar_opening[0]
        ar_pred = self.predictor.result(self.ar_plan, timeline=True, scale=runs.ar_scale)
        rows = [vf.ValidationRow.from_results(self.ar_plan, ar_pred, ar.result, ar.result.tokens_per_s, None)]
        vf.write_plan_timelines(self.out, self.ar_plan, ar_pred, ar.result, write_chrome_trace)
        for plan, alpha, plan_runs in zip(self.inputs.plans, self.inputs.forced, runs.plan_runs):
            rows.append(self._plan_row(plan, alpha, plan_runs, ar.outputs))
        return rows

    def _plan_row(self, plan, alpha: float | None, plan_runs: list, ar_outputs) -> vf.ValidationRow:
        kept = median_round(plan_runs)
        pred = self.predictor.result(plan, alpha, timeline=True, scale=kept.scale)
        # a forced run commits the drafts it was told to accept, and so does a replay of traces drawn
        # from an α curve (not the model's own): their output is not AR's by design, so losslessness is
        # not asked of them (None, shown blank) rather than reported as False
        drawn = self.config.force_trace and self.inputs.profile.acceptance_drawn
        match = None if alpha is not None or drawn else all(x.measurement.outputs == ar_outputs for x in plan_runs)
        row = vf.ValidationRow.from_results(plan, pred, kept.measurement.result, kept.ar_reference, match,
                                            forced_alpha=alpha)
        if self.config.rounds > 1:
            row = replace(row, measured_speedup_rounds=[round(x.speedup, 4) for x in plan_runs])
        if self.twins and alpha is None:
            twin = self.predictor.result(plan, engine="fast", in_sample=True, scale=kept.scale)
            row = row.with_in_sample(twin.speedup_vs_ar, twin.acceptance_rate)
        if kept.scale is not None:  # beside it, what the profile's own prices said
            row = row.with_profile_priced(self.predictor.result(plan, alpha, engine="fast").speedup_vs_ar,
                                          kept.scale.drift_pct())
        stall = vf.host_stall(kept.measurement.result.timeline or [])
        if stall is not None:
            row = replace(row, host_stall_s=stall[0], longest_pass_s=stall[1])
        vf.write_plan_timelines(self.out, plan, pred, kept.measurement.result, write_chrome_trace, forced_alpha=alpha)
        return row

    def _with_same_budget(self, rows: list, runs: MeasuredRuns) -> list:
        """Each row against AR on every core: predicted from the profile's thread tables (when it has
        them), measured as the median of the rounds' own ratios."""
        if self.cores <= 1:
            return rows
        measured = [1.0] + [statistics.median(x.budget_speedup for x in r) for r in runs.plan_runs]
        scales = [runs.ar_scale, *(median_round(r).scale for r in runs.plan_runs)]
        alphas = [None, *self.inputs.forced]
        predicted = [self.predictor.result(p, a, budget=self.cores, engine="fast", scale=s).speedup_vs_ar_tp
                     if self.budget_priced else None
                     for p, a, s in zip([self.ar_plan, *self.inputs.plans], alphas, scales)]
        rows = [r.with_same_budget(p, m) for r, p, m in zip(rows, predicted, measured)]
        if not self.budget_priced or all(s is None for s in scales[1:]):
            return rows
        # --retime: beside it, the same-budget prediction priced from the profile alone (what `ppsd plan` says)
        profile_priced = [self.predictor.result(p, a, budget=self.cores, engine="fast").speedup_vs_ar_tp
                          for p, a in zip(self.inputs.plans, alphas[1:])]
        return rows[:1] + [r.with_same_budget_profile_priced(p) for r, p in zip(rows[1:], profile_priced)]

    def _with_intervals(self, rows: list, runs: MeasuredRuns) -> list:
        """Each interval is carried to the row's own point (the in-sample point replays each prompt's
        trace); it is meant to hold a measured speedup, so it also carries the measurement's own noise,
        which the AR runs around the plans show (0 when AR ran once)."""
        noise_cv = iv.measurement_cv(runs.ar_tokens_per_s)
        tp_cv = iv.budget_cv(self.inputs.predict, self.cores) if self.budget_priced else 0.0
        out = [rows[0].with_interval(1.0, 1.0)]
        for r, p, a, plan_runs in zip(rows[1:], self.inputs.plans, self.inputs.forced, runs.plan_runs):
            lo_hi = self.predictor.interval(p, a, r.predicted_speedup, median_round(plan_runs).scale, noise_cv)
            out.append(r.with_interval(*lo_hi, tp_cv=tp_cv))
        return out

    def _document(self, rows: list, runs: MeasuredRuns, corun, retimer) -> dict:
        inputs, config, sides = self.inputs, self.config, self.inputs.sides
        sources = vf.prompt_sources(predicted_from=display_path(inputs.predict.path),
                                    prediction_prompt_ids=sides.prediction_ids,
                                    measured_prompt_ids=[str(i) for i in self.work.ids],
                                    measured_prompts=sides.measured_prompts, split=sides.split, overlap=sides.overlap)
        return vf.make_doc(rows, profile=display_path(inputs.profile.path),
                           model=inputs.model.model_id if config.emulated else inputs.profile.model_id,
                           device_name=inputs.profile.device_name, forced_trace=bool(config.force_trace or config.emulated),
                           exit_head=inputs.head, ar_reference="turns" if config.turns else "bracketed" if not config.ar_once else "once",
                           ar_tokens_per_s_runs=runs.ar_tokens_per_s,
                           budget=f"{self.cores} cores" if self.cores > 1 else None, emulated=config.emulated,
                           sources=sources, interval=self._interval_doc(runs), rounds=config.rounds,
                           corun=corun.summary_args() if corun is not None else None,
                           retime=retimer.summary(runs.ar_scale) if retimer else None,
                           budget_reference=self._budget_reference(rows, runs),
                           chunks_measured_again=runs.chunks_measured_again)

    def _budget_reference(self, rows: list, runs: MeasuredRuns) -> dict | None:
        """validation.json's `budget_reference` (in turns, within a budget): how every core was priced
        on the measured side (thread gains, measuring.py), the gain AR showed against the profile's price
        of it, and beside it what pairing each plan with the AR turns of its own group gave."""
        if runs.ar_thread_gain is None:
            return None
        priced = None
        if self.budget_priced:  # the profile has tables at this many threads
            ar = self.predictor.result(self.ar_plan, budget=self.cores, engine="fast")
            ar_tp = ar.details.ar_tp_tokens_per_s
            priced = ar_tp / ar.tokens_per_s if ar_tp and ar.tokens_per_s else None
        plans = []
        for row, plan_runs in zip(rows[1:], runs.plan_runs):
            kept = median_round(plan_runs)
            plans.append({"plan": row.plan, "thread_gain": _round(kept.thread_gain),
                          "measured_speedup_vs_ar_tp_beside": _round(kept.budget_speedup_beside)})
        return {"method": "thread_gain", "ar_thread_gain": _round(runs.ar_thread_gain),
                "ar_thread_gain_priced": _round(priced), "ar_thread_ratios": [_round(x) for x in runs.ar_thread_ratios],
                "plans": plans}

    def _interval_doc(self, runs: MeasuredRuns) -> dict:
        """validation.json's `interval`: how the intervals were drawn, and the strata out of sample."""
        strata_from = next(((p.exit_layer, p.exit_head) for p, a in zip(self.inputs.plans, self.inputs.forced)
                            if a is None and p.exit_layer is not None), None)
        gens = self.inputs.sides.measured
        return {"level": iv.LEVEL, "prompts_n": len(gens), "draws": int(self.config.draws), "seed": int(self.config.seed),
                "method": "bootstrap over the prediction prompts (replayed; each draw resamples them, and each "
                          "measured prompt draws from its own category's where the profile traced "
                          f"at least {iv.MIN_STRATUM}) x a shift of the whole set's acceptance "
                          "(sim/intervals/shift.py) x the profile's latency spread (sim/intervals/) x the "
                          "measurement's noise (measurement_cv); forced plans: the two spreads alone",
                "measurement_cv": round(iv.measurement_cv(runs.ar_tokens_per_s), 5),
                **self._strata_doc(strata_from, gens)}

    def _strata_doc(self, strata_from, gens: list[dict]) -> dict:
        """Out of sample: per measured category, the prediction prompts that predict it (`strata`), and
        the acceptance shift the widest stratum's intervals carry (`shift`, its words)."""
        if self.inputs.sides.in_sample or strata_from is None:
            return {"strata": None}
        traces = self.predictor.prediction_traces(*strata_from)
        sources = {tuple(traces.by_category(str(g.get("category")))) for g in gens}
        shifts = [traces.shift(src) for src in sources]
        widest = max(shifts, key=lambda x: x.tau)
        return {"strata": strata_summary(gens, traces),
                "shift": f"at E={strata_from[0]} ({strata_from[1]} head), {widest.words()}",
                "shift_tau": [round(x.tau, 4) for x in shifts]}


def _round(x: float | None) -> float | None:
    return None if x is None or x != x else round(float(x), 4)
