"""What a validation's runs add up to: a plan's median round, its seeds' median and spread, the
acceptance errors of a sampled run, and how many prediction prompts predict each measured category."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from validation.measuring import PlanRun


def median_round(runs: list[PlanRun]) -> PlanRun:
    """The round whose speedup is the median (the lower middle one of an even count): its
    measurement stands for the plan, whole, so its tokens/s, timeline and AR reference agree."""
    ranked = sorted(runs, key=lambda x: x.speedup)
    return ranked[(len(ranked) - 1) // 2]


def strata_summary(gens: list[dict], traces) -> dict[str, int]:
    """Per measured category, how many prediction prompts of that category predict it out of
    sample (sim/intervals/traces.py: strata); 0: too few, every prediction prompt does."""
    return {c: len(traces.stratum(c)) for c in dict.fromkeys(str(g.get("category")) for g in gens)}


@dataclass(frozen=True)
class SeedSummary:
    """A plan's sampled runs over the seeds: tokens/s (median and p10/p90), the speedup against the
    AR runs around each run (median and each seed's) and the acceptance rate (mean and each seed's)."""

    tokens_per_s: float
    tokens_per_s_p10: float
    tokens_per_s_p90: float
    speedups: list[float]
    acceptance_rates: list[float]

    @classmethod
    def of(cls, tokens_per_s: list[float], runs: list[PlanRun] = ()) -> SeedSummary:
        """The summary of `tokens_per_s` (one per seed) and, for a speculative plan, its `runs`."""
        return cls(float(statistics.median(tokens_per_s)), float(np.percentile(tokens_per_s, 10)),
                   float(np.percentile(tokens_per_s, 90)), [r.speedup for r in runs],
                   [float(r.measurement.result.acceptance_rate) for r in runs
                    if r.measurement.result.acceptance_rate is not None])

    @property
    def speedup(self) -> float:
        return float(statistics.median(self.speedups))

    @property
    def acceptance_rate(self) -> float | None:
        return float(np.mean(self.acceptance_rates)) if self.acceptance_rates else None


def acceptance_errors(rows: list, key: str) -> list[float]:
    """Predicted (`key`) − measured acceptance rate of the speculative rows that have both."""
    return [getattr(r, key) - r.measured_acceptance_rate for r in rows
            if r.speculative and getattr(r, key) is not None and r.measured_acceptance_rate is not None]


def sampling_summary(rows: list, temperature: float, seeds: list[int], beta_trajectory) -> dict:
    """A sampled document's summary: temperature, seeds, where the profile's β was measured, and the
    acceptance-rate errors of the plans (and of their in-sample twins, when any)."""
    errs = acceptance_errors(rows, "predicted_acceptance_rate")
    summary = {"temperature": float(temperature), "seeds": list(seeds), "beta_trajectory": beta_trajectory,
               "acceptance_error_mean_abs": round(float(np.mean(np.abs(errs))), 4) if errs else None,
               "acceptance_error_max_abs": round(float(np.max(np.abs(errs))), 4) if errs else None}
    twin = acceptance_errors(rows, "predicted_acceptance_rate_in_sample")
    if twin:  # the same runs, predicted from the measured prompts' own β
        summary["acceptance_error_in_sample_mean_abs"] = round(float(np.mean(np.abs(twin))), 4)
        summary["acceptance_error_in_sample_max_abs"] = round(float(np.max(np.abs(twin))), 4)
    return summary
