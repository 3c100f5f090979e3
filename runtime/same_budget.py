"""Measuring a plan against AR on the same cores (the runtime side of sim/model/budget.py).

Within a budget of N cores, AR and EESD decode with N torch threads and PPSD's k stage processes
get N // k threads each (at least 1), the rule the simulator prices (`sim.model.budget.units_for`), so a
measured `speedup_vs_ar_tp` and a predicted one answer the same question.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ppsd.errors import UserError
from sim.model.budget import THREADS, Budget, units_for
from sim.plan import Plan


def threads_for(plan: Plan, cores: int) -> int:
    """Torch threads per decoding process of `plan` within `cores`."""
    return units_for(plan, Budget(int(cores), THREADS), list(range(1, int(cores) + 1)))


@dataclass
class SameBudget:
    cores: int
    plan_tokens_per_s: float  # the plan run with the whole budget
    ar_tokens_per_s: float    # AR with every core

    @property
    def speedup(self) -> float:
        return self.plan_tokens_per_s / self.ar_tokens_per_s

    def fill(self, result) -> None:
        """Record the comparison on a measured Result (its details and `speedup_vs_ar_tp`)."""
        result.speedup_vs_ar_tp = self.speedup
        result.details.budget = f"{self.cores} cores"
        result.details.budget_tokens_per_s = self.plan_tokens_per_s
        result.details.ar_tp_tokens_per_s = self.ar_tokens_per_s


def measure_ar_in_budget(model, ar_job, cores: int, measure) -> float:
    """AR's tokens/s with every core (`ar_job` is an AR Job; `measure` is runtime.measure.measure)."""
    return measure(model, replace(ar_job, threads=threads_for(ar_job.plan, cores), timeline=False)).result.tokens_per_s


def measure_plan_in_budget(model, job, cores: int, measured_tokens_per_s: float, measure) -> float:
    """The plan's tokens/s within `cores`: the measurement already taken when the budget gives it
    the same threads as that run (PPSD of k ≥ cores stages, or one core), else a new run."""
    threads = threads_for(job.plan, cores)
    if threads == job.threads:
        return measured_tokens_per_s
    if not job.plan.scheme.speculative:  # the plan is AR itself
        return measure_ar_in_budget(model, job, cores, measure)
    return measure(model, replace(job, threads=threads, timeline=False)).result.tokens_per_s


def budget_cores(args, cuda: bool) -> int:
    """`cores_for_budget` of a parsed command line's --cores."""
    return cores_for_budget(getattr(args, "cores", None), cuda)


def cores_for_budget(cores: int | None, cuda: bool) -> int:
    """Cores of the same-budget comparison: `cores` (--cores), else every core this process may use;
    1 (none) on GPUs, whose same-budget baseline (tensor parallelism) the runtime does not run."""
    from ppsd.machine import available_cores

    if cuda:
        return 1
    if cores is None:
        return available_cores()
    if cores < 1:
        raise UserError(f"--cores {cores} must be at least 1", "give --cores between 1 and the machine's cores")
    return int(cores)
