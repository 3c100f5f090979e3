"""Latency against load, per policy, and the crossover: the request rate at which a policy stops beating AR.

Every policy is predicted (`predict_serving`) on the same workloads, one per rate, drawn with one seed (the
same prompts and lengths at every rate, arriving faster), so policies and rates differ only where they
should. The default rates run from a tenth of AR's capacity to past it: AR's capacity is the request rate
it completes when every request is there at once (`ar_capacity`).

A policy's crossover on a figure (p50 or p99 TPOT) is where its ratio to AR's first reaches 1 going up
the rates, linear in log rate between the two rates around it. Its interval comes from the replications:
replication r of the policy against replication r of AR (the same cost draw, `predict.cost_draw`), each
pair's crossover, their 5% and 95% quantiles. A policy that does not beat AR even at the lightest rate
swept never pays ("never"); one that beats it at every rate crosses beyond the sweep ("beyond").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from sim.intervals.bands import LEVEL
from sim.serve.metrics import Slo
from sim.serve.policies import ArPolicy, ServePolicy
from sim.serve.predict import ServePrediction, as_policy, predict_serving, simulate_serving
from sim.serve.scheduler import SchedulerConfig
from sim.serve.workload import PromptInfo, Workload, synthetic_workload

CROSSOVER_FIGURES = ("tpot_p50_ms", "tpot_p99_ms")
LOAD_FACTORS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5)  # of AR's capacity
CAPACITY_REQUESTS = 64
NEVER, CROSSES, BEYOND = "never", "crosses", "beyond"


def ar_capacity(profile, prompts: list[PromptInfo], config: SchedulerConfig, *, output_len: int | None = None,
                seed: int = 0, head: str = SHARED) -> float:
    """Requests a second AR completes on this engine when every request is already waiting (its saturation
    throughput): CAPACITY_REQUESTS of the prompt set, all at t = 0."""
    w = synthetic_workload(prompts, rate=math.inf, count=CAPACITY_REQUESTS, seed=seed, output_tokens=output_len)
    run = simulate_serving(profile, w, ArPolicy(), config, seed=seed, head=head)
    return float(run.metrics.request_throughput)


def default_rates(capacity: float, factors=LOAD_FACTORS) -> list[float]:
    """Rates from light load to past saturation (`LOAD_FACTORS` of the capacity), to 3 significant figures."""
    return [float(f"{capacity * f:.3g}") for f in factors]


@dataclass(frozen=True)
class Crossover:
    """Where a policy stops beating AR on one figure: `status` NEVER (not even at the lightest rate swept),
    CROSSES (at `rate`, interval `lo`..`hi`) or BEYOND (beats it at every rate swept). An interval end that
    falls outside the sweep is None."""

    policy: str
    figure: str
    status: str
    rate: float | None
    lo: float | None
    hi: float | None
    level: float = LEVEL

    def words(self) -> str:
        what = "p50 TPOT" if self.figure == "tpot_p50_ms" else "p99 TPOT"
        if self.status == NEVER:
            return f"{self.policy}: {what} never beats AR, not even at the lightest load swept"
        if self.status == BEYOND:
            return f"{self.policy}: {what} beats AR at every load swept"
        lo = "below the sweep" if self.lo is None else f"{self.lo:.3g}"
        hi = "beyond the sweep" if self.hi is None else f"{self.hi:.3g}"
        return f"{self.policy}: {what} stops beating AR at {self.rate:.3g} req/s (90% interval {lo}–{hi})"

    def to_json_dict(self) -> dict:
        return {"policy": self.policy, "figure": self.figure, "status": self.status, "rate": self.rate,
                "lo": self.lo, "hi": self.hi, "level": self.level}


def crossing(rates: list[float], ratio: list[float]) -> tuple[str, float | None]:
    """(status, rate) of the first rate at which `ratio` (policy over AR) reaches 1 (see the module doc)."""
    r = [x if x == x else math.inf for x in ratio]
    if r[0] >= 1.0:
        return NEVER, None
    for k in range(1, len(r)):
        if r[k] >= 1.0:
            if not math.isfinite(r[k]):
                return CROSSES, rates[k]
            t = (1.0 - r[k - 1]) / (r[k] - r[k - 1])
            return CROSSES, float(math.exp(math.log(rates[k - 1]) + t * (math.log(rates[k]) - math.log(rates[k - 1]))))
    return BEYOND, None


def crossover(policy: str, figure: str, rates: list[float], mine: list[ServePrediction],
              ar: list[ServePrediction], level: float = LEVEL) -> Crossover:
    """`policy`'s crossover on `figure` against AR's predictions at the same rates, with its interval."""
    status, rate = crossing(rates, [p.bands[figure].point / a.bands[figure].point for p, a in zip(mine, ar)])
    draws = min(len(mine[0].draws[figure]), len(ar[0].draws[figure])) if mine and ar else 0
    ends = []
    for j in range(draws):
        s, x = crossing(rates, [p.draws[figure][j] / a.draws[figure][j] for p, a in zip(mine, ar)])
        ends.append(-math.inf if s == NEVER else math.inf if s == BEYOND else x)
    lo = hi = rate
    if ends:
        q = (1.0 - level) / 2.0
        lo, hi = (float(v) for v in np.quantile(np.asarray(ends), [q, 1.0 - q], method="inverted_cdf"))
        if rate is not None:
            lo, hi = min(lo, rate), max(hi, rate)
    return Crossover(policy, figure, status, rate, _inside(lo), _inside(hi), level)


def _inside(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


@dataclass
class LoadSweep:
    """Predictions of each policy at each rate (the same workloads), and each policy's crossovers."""

    rates: list[float]
    predictions: dict[str, list[ServePrediction]]  # policy spec -> one per rate
    crossovers: dict[str, dict[str, Crossover]] = field(default_factory=dict)  # policy -> figure -> crossover
    capacity: float | None = None  # AR's, when the rates were chosen from it
    notes: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict:
        return {"rates": self.rates, "capacity": self.capacity, "notes": self.notes,
                "predictions": {k: [p.to_json_dict() for p in v] for k, v in self.predictions.items()},
                "crossovers": {k: {f: c.to_json_dict() for f, c in v.items()} for k, v in self.crossovers.items()}}


def load_sweep(profile, policies: list[ServePolicy | str], config: SchedulerConfig | None = None, *,
               prompts: list[PromptInfo], rates: list[float] | None = None, num_prompts: int = 200,
               burstiness: float = 1.0, output_len: int | None = None, replications: int = 10, seed: int = 0,
               slo: Slo | None = None, head: str = SHARED) -> LoadSweep:
    """Every policy (AR added when missing: the crossovers' baseline) predicted at every rate (default:
    `default_rates` of AR's capacity), and each speculative policy's crossovers."""
    config = config if config is not None else SchedulerConfig()
    chosen = [as_policy(p) for p in policies]
    if not any(isinstance(p, ArPolicy) for p in chosen):
        chosen.insert(0, ArPolicy())
    capacity = None
    if rates is None:
        capacity = ar_capacity(profile, prompts, config, output_len=output_len, seed=seed, head=head)
        rates = default_rates(capacity)
    rates = sorted(float(r) for r in rates)
    if not rates or rates[0] <= 0:
        raise UserError(f"load sweep rates {rates} must be positive", "give rates above 0 requests a second")
    workloads: list[Workload] = [synthetic_workload(prompts, rate=r, count=num_prompts, seed=seed,
                                                    burstiness=burstiness, output_tokens=output_len) for r in rates]
    preds = {p.spec(): [predict_serving(profile, w, p, config, replications=replications, seed=seed, slo=slo,
                                        head=head) for w in workloads] for p in chosen}
    ar = preds["ar"]
    crossovers = {spec: {f: crossover(spec, f, rates, mine, ar) for f in CROSSOVER_FIGURES}
                  for spec, mine in preds.items() if spec != "ar"}
    return LoadSweep(rates, preds, crossovers, capacity)
