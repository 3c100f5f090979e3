"""Predictions of a served workload: one simulated run (`simulate_serving`), and a point prediction with 90%
intervals from replications (`predict_serving`), the API the real loop's validation calls.

A replication re-runs the engine on the same workload (the same arrivals and lengths: a validation measures
that very schedule) with
  * each prompt's acceptance trace drawn as `sim/intervals` draws prompts for a run on prompts the profile
    never traced (`acceptance.drawn`: its category's traced prompts resampled, the set's acceptance shifted
    together by the profile's between-group spread), and
  * every price times exp(cv · z), z ~ N(0, 1): the profile's cost doubt, systematic within a run, with
    the cv `sim/intervals/spread` gives a plan of the same scheme (a decode step's spread and the
    calibration's doubt; for PPSD at least the pipeline's pass spread). AR carries it too: here its latency
    is the answer, not the baseline.
Replication r of every policy uses the same z (`cost_draw`), so two policies' intervals are paired the way
their crossover is (`sweep.py`). The interval is the 5% and 95% quantiles of the replications, widened to
hold the point prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ppsd.exit_heads import SHARED
from ppsd.modes import Mode
from sim.intervals.bands import LEVEL
from sim.intervals.spread import step_cv
from sim.serve import acceptance as acc
from sim.serve.costs import ServeCosts, check_serving_profile
from sim.serve.engine import IterationRecord, ServeEngine
from sim.serve.metrics import ServeMetrics, Slo, summarize
from sim.serve.policies import ServePolicy, parse_policy
from sim.serve.requests import RequestTiming
from sim.serve.scheduler import SchedulerConfig
from sim.serve.workload import Workload

HEADLINE = ("ttft_p50_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_p50_ms", "e2e_p99_ms")
REPLICATIONS = 20


def headline(m: ServeMetrics) -> dict[str, float]:
    """The five figures a serving validation compares (ms)."""
    return {"ttft_p50_ms": m.ttft_ms.median, "tpot_p50_ms": m.tpot_ms.median, "tpot_p99_ms": m.tpot_ms.p99,
            "e2e_p50_ms": m.e2el_ms.median, "e2e_p99_ms": m.e2el_ms.p99}


@dataclass
class ServeRun:
    """One simulated run of a workload under a policy: each request's timing, the metrics, the iterations."""

    policy: str
    rate: float
    records: list[RequestTiming]
    metrics: ServeMetrics
    iterations: list[IterationRecord]
    acceptance: str  # which traces judged the drafts
    config: SchedulerConfig
    notes: list[str] = field(default_factory=list)

    @property
    def headline(self) -> dict[str, float]:
        return headline(self.metrics)

    def to_json_dict(self, requests: bool = False, iterations: bool = False) -> dict:
        d = {"policy": self.policy, "rate": self.rate, "acceptance": self.acceptance,
             "max_batch": self.config.max_batch, "max_tokens": self.config.max_tokens,
             "prefill": self.config.prefill.value, "iterations_n": len(self.iterations), "notes": self.notes,
             **self.headline, "metrics": self.metrics.to_json_dict()}
        if requests:
            d["requests"] = [r.to_json_dict() for r in self.records]
        if iterations:
            d["iteration_columns"] = list(ITERATION_COLUMNS)
            d["iterations"] = [_row(x) for x in self.iterations]
        return d


ITERATION_COLUMNS = ("start_s", "ms", "prefill_tokens", "decoded", "draft_len", "pipelined", "width", "committed")


def _row(x: IterationRecord) -> list:
    return [x.start_s, x.ms, x.prefill_tokens, x.decoded, x.draft_len, x.pipelined, x.width, x.committed]


@dataclass(frozen=True)
class Band:
    """A predicted figure and its interval."""

    point: float
    lo: float
    hi: float
    level: float = LEVEL


@dataclass
class ServePrediction:
    """The point prediction of a workload under a policy and, per headline figure, its interval."""

    run: ServeRun
    bands: dict[str, Band]
    draws: dict[str, list[float]]  # per headline figure, its value in each replication (paired across policies)
    replications: int
    cost_cv: float

    @property
    def policy(self) -> str:
        return self.run.policy

    @property
    def rate(self) -> float:
        return self.run.rate

    def to_json_dict(self) -> dict:
        """`predicted_X`, `predicted_X_lo`, `predicted_X_hi` for each headline X, beside the run's metrics."""
        d = {"policy": self.policy, "rate": self.rate, "interval_level": LEVEL, "replications": self.replications,
             "cost_cv": round(self.cost_cv, 5)}
        for name, b in self.bands.items():
            d.update({f"predicted_{name}": b.point, f"predicted_{name}_lo": b.lo, f"predicted_{name}_hi": b.hi})
        d["metrics"] = self.run.metrics.to_json_dict()
        d["acceptance"] = self.run.acceptance
        return d


def as_policy(policy: ServePolicy | str) -> ServePolicy:
    return parse_policy(policy) if isinstance(policy, str) else policy


def cost_cv(profile, policy: ServePolicy) -> float:
    """The relative doubt of every price of a run under `policy` (see the module doc)."""
    from sim.schemes import scheme

    step = step_cv(profile)
    if policy.pipelined:
        step = scheme(Mode.PPSD).latency_cv(profile, step)
    return float(np.hypot(step, profile.calibration_doubt()))


def cost_draw(seed: int, replication: int) -> float:
    """Replication r's z for the cost doubt: the same for every policy, so their replications pair."""
    return float(np.random.default_rng([int(seed), int(replication), 31]).standard_normal())


class _Setup:
    """What every run of one (profile, policy, config) shares: the checks, the prices, the traces."""

    def __init__(self, profile, policy, config, head, speed: float = 1.0):
        self.profile, self.policy = profile, as_policy(policy)
        self.config = config if config is not None else SchedulerConfig()
        check_serving_profile(profile, self.config.max_batch)
        self.policy.check(profile.num_layers)
        self.costs = ServeCosts(profile, head, scale=speed)
        exit_layer = getattr(self.policy, "exit_layer", None)
        self.traces = acc.load_traces(profile, exit_layer, head) if exit_layer is not None else None

    def run(self, workload: Workload, acceptance, costs: ServeCosts, slo: Slo | None, notes=()) -> ServeRun:
        records, log = ServeEngine(costs, self.policy, self.config, acceptance).run(workload.requests)
        return ServeRun(self.policy.spec(), workload.rate, records, summarize(records, slo), log,
                        acceptance.source if acceptance else "none (AR)", self.config, list(notes))


def simulate_serving(profile, workload: Workload, policy: ServePolicy | str, config: SchedulerConfig | None = None,
                     *, seed: int = 0, slo: Slo | None = None, head: str = SHARED) -> ServeRun:
    """`workload` served under `policy` on the engine `config` describes, priced from `profile` (which needs
    `latency.batch` up to `config.max_batch`); each request's drafts judged by its own prompt's trace (an
    untraced prompt: a same-category draw seeded by `seed`)."""
    setup = _Setup(profile, policy, config, head)
    return _point(setup, workload, seed, slo)


def _point(setup: _Setup, workload: Workload, seed: int, slo: Slo | None) -> ServeRun:
    own = acc.own(setup.traces, workload.requests, seed) if setup.traces is not None else None
    return setup.run(workload, own, setup.costs, slo, workload.notes)


def predict_serving(profile, workload: Workload, policy: ServePolicy | str, config: SchedulerConfig | None = None,
                    *, replications: int = REPLICATIONS, seed: int = 0, slo: Slo | None = None,
                    head: str = SHARED, speed: float = 1.0) -> ServePrediction:
    """`simulate_serving`'s point prediction and, from `replications` replications (see the module doc), a
    90% interval on each headline figure (`HEADLINE`); `speed` multiplies every price (a decode step timed
    now over the profile's: `ppsd validate --serve --retime`)."""
    setup = _Setup(profile, policy, config, head, speed)
    point = _point(setup, workload, seed, slo)
    cv = cost_cv(profile, setup.policy)
    draws: dict[str, list[float]] = {k: [] for k in HEADLINE}
    for r in range(max(int(replications), 0)):
        rng = np.random.default_rng([int(seed), r, 29])
        drawn = acc.drawn(setup.traces, workload.requests, rng) if setup.traces is not None else None
        run = setup.run(workload, drawn, setup.costs.scaled(math.exp(cv * cost_draw(seed, r))), slo)
        for k, v in run.headline.items():
            draws[k].append(v)
    return ServePrediction(point, {k: band(point.headline[k], draws[k]) for k in HEADLINE}, draws,
                           max(int(replications), 0), cv)


def band(point: float, draws: list[float], level: float = LEVEL) -> Band:
    """The (1 − level)/2 and (1 + level)/2 quantiles of `draws`, widened to hold `point` (the point alone
    without draws)."""
    vals = np.asarray([d for d in draws if d == d], dtype=float)
    if not len(vals) or point != point:
        return Band(point, point, point, level)
    q = (1.0 - level) / 2.0
    lo, hi = np.quantile(vals, [q, 1.0 - q])
    return Band(point, float(min(lo, point)), float(max(hi, point)), level)
