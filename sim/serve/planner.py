"""`ppsd plan --rate R`: the speculation policies ranked at one load, and the chosen one as config to paste.

Candidates: AR; the two best EESD plans and the best batched PPSD plan by the batch closed forms at one
sequence (`sim/batch/sweep.screen`); then, at the exit and γ of the EESD plan that simulates best at the
load, speculation off above the batch size up to which the closed form says it pays (vLLM's rule); the
γ-by-batch table the goodput policy would follow at the profile's acceptance; and the goodput policy
itself. Each is simulated on the same workload (Poisson or Gamma arrivals at R of the profile's prompts,
seeded) and ranked: with an SLO by goodput (requests a second that meet it), then by median end-to-end
latency; without one by median end-to-end latency.

The chosen policy is printed as `ppsd serve --policy SPEC`, as vLLM's `num_speculative_tokens_per_batch_size`
table ([[from, to, γ], ...] by live batch size, γ 0 = off) and as transformers' `generate` arguments where
they apply (an EESD plan at its batch-1 γ: transformers' assisted generation decodes one sequence at a time).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from ppsd.exit_heads import SHARED
from ppsd.modes import Mode
from sim.batch.costs import batch_costs
from sim.batch.replay import closed_form_speedup
from sim.batch.sweep import screen
from sim.serve.costs import ServeCosts
from sim.serve.metrics import Slo
from sim.serve.policies import (ArPolicy, EesdPolicy, GammaTablePolicy, GoodputPolicy, OffAbovePolicy, PpsdPolicy,
                                ServePolicy)
from sim.serve.predict import ServeRun, simulate_serving
from sim.serve.scheduler import SchedulerConfig
from sim.serve.workload import PromptInfo, synthetic_workload

PLAN_REQUESTS = 100
EESD_CANDIDATES = 2
MAX_GAMMA = 8


def _context(profile) -> float:
    """The context the closed forms screen at (as `screen` does): the mean prompt plus half a short answer."""
    return float(np.mean([g.get("prompt_len", 0) for g in profile.generations()] or [0])) + 32.0


def ranges(table: dict[int, int]) -> list[list[int]]:
    """{batch: γ} over 1..B -> vLLM's [[from, to, γ], ...] (runs of equal γ)."""
    out: list[list[int]] = []
    for b in sorted(table):
        if out and out[-1][2] == table[b] and out[-1][1] == b - 1:
            out[-1][1] = b
        else:
            out.append([b, b, table[b]])
    return out


def fixed_policies(profile, head: str = SHARED) -> list[ServePolicy]:
    """AR, the EESD_CANDIDATES best EESD plans and the best batched PPSD plan by the closed forms at one
    sequence."""
    eesd = screen(profile, 1, [head], range(1, MAX_GAMMA + 1), scheme=Mode.EESD)[:EESD_CANDIDATES]
    ppsd = screen(profile, 1, [head], (), scheme=Mode.PPSD)[:1]
    return [ArPolicy()] + [EesdPolicy(e, g) for _, _, e, g in eesd] + [PpsdPolicy(e) for _, _, e, _ in ppsd]


def adaptive_policies(profile, max_batch: int, exit_layer: int, gamma: int, head: str = SHARED) -> list[ServePolicy]:
    """At one EESD plan's exit and γ: speculation off above the batch size up to which the closed form says
    it pays (vLLM's rule), the γ-by-batch table the goodput policy follows at the profile's acceptance,
    and the goodput policy itself."""
    alpha = profile.alpha_by_exit(head=head).get(exit_layer, 0.0)
    costs, ctx = batch_costs(profile, head), _context(profile)
    sizes = [b for b in profile.batch.sizes if b <= max_batch]
    pays = [b for b in sizes if closed_form_speedup(costs, b, ctx, exit_layer, gamma, alpha) > 1.0]
    upto = max((b for b in sizes if all(x in pays for x in sizes if x <= b)), default=1)
    table = GoodputPolicy(exit_layer).gamma_table(max_batch, ctx, alpha, ServeCosts(profile, head))
    return [OffAbovePolicy(exit_layer, gamma, upto),
            GammaTablePolicy(exit_layer, tuple((lo, g) for lo, _, g in ranges(table))),
            GoodputPolicy(exit_layer)]


def candidate_policies(profile, max_batch: int, head: str = SHARED) -> list[ServePolicy]:
    """The fixed policies and the adaptive ones at the closed forms' best EESD plan, AR first (the load
    sweep's choice; `plan_serving` starts the adaptive ones from the best EESD plan it simulates)."""
    fixed = fixed_policies(profile, head)
    eesd = [p for p in fixed if p.name == "eesd"]
    return fixed + (adaptive_policies(profile, max_batch, eesd[0].exit_layer, eesd[0].draft_len, head) if eesd else [])


@dataclass
class PlanRow:
    policy: ServePolicy
    run: ServeRun

    def to_json_dict(self) -> dict:
        m = self.run.metrics
        return {"policy": self.policy.spec(), **self.run.headline, "request_goodput": m.request_goodput,
                "request_throughput": m.request_throughput, "output_throughput": m.output_throughput,
                "acceptance_rate": m.acceptance_rate, "runs_real": self.policy.runs_real}


@dataclass
class ServePlan:
    """The policies ranked at one load, best first, and the chosen one's config."""

    rate: float
    burstiness: float
    slo: Slo | None
    config: SchedulerConfig
    rows: list[PlanRow]
    table: dict[int, int]  # the chosen policy's γ by live batch size
    notes: list[str] = field(default_factory=list)

    @property
    def chosen(self) -> PlanRow:
        return self.rows[0]

    def vllm_config(self) -> dict:
        """The γ-by-batch table in vLLM's `--speculative-config` fields."""
        return {"num_speculative_tokens": max(self.table.values()),
                "num_speculative_tokens_per_batch_size": ranges(self.table)}

    def transformers_args(self) -> dict | None:
        """transformers' `generate` arguments for the chosen policy at one sequence (None: it has none)."""
        policy = self.chosen.policy
        g = self.table.get(1, 0)
        if policy.pipelined or getattr(policy, "exit_layer", None) is None or g < 1:
            return None
        return {"assistant_early_exit": policy.exit_layer, "num_assistant_tokens": g,
                "num_assistant_tokens_schedule": "constant"}

    def to_json_dict(self) -> dict:
        return {"rate": self.rate, "burstiness": self.burstiness, "slo": self.slo.spec() if self.slo else None,
                "max_batch": self.config.max_batch, "ranked_by": self.ranked_by,
                "policies": [r.to_json_dict() for r in self.rows], "chosen": self.chosen.policy.spec(),
                "gamma_by_batch": {str(b): g for b, g in self.table.items()}, "vllm": self.vllm_config(),
                "transformers": self.transformers_args(), "notes": self.notes}

    @property
    def ranked_by(self) -> str:
        return "request_goodput, then e2e_p50_ms" if self.slo else "e2e_p50_ms"

    def chosen_lines(self) -> list[str]:
        """The chosen policy, its γ by live batch size and its config, as `ppsd plan --rate` prints them."""
        return ([f"chosen: {self.chosen.policy.spec()}; γ by live batch size: "
                 + ", ".join(f"{b}→{g}" for b, g in self.table.items())]
                + ["  " + line for line in self.config_lines()])

    def config_lines(self) -> list[str]:
        """The chosen policy as a user pastes it."""
        p = self.chosen.policy
        lines = [f"ppsd serve --policy {p.spec()} --max-batch {self.config.max_batch}"
                 + ("" if p.runs_real else "   (simulated only: ppsd serve does not run it)")]
        if p.pipelined:
            lines.append("vLLM / transformers: no equivalent (PPSD's two-stage pipeline runs in ppsd's own runtime)")
            return lines
        if not any(self.table.values()):
            lines.append("vLLM: no --speculative-config; transformers: plain model.generate(**inputs) "
                         "(speculation does not pay at this load)")
            return lines
        lines.append("vLLM --speculative-config fields (γ by live batch size; vLLM has no early-exit self-draft, "
                     "so give them to your draft method): " + json.dumps(self.vllm_config()))
        hf = self.transformers_args()
        lines.append("transformers (one sequence at a time): " + (
            "model.generate(**inputs, " + ", ".join(f"{k}={v!r}" for k, v in hf.items()) + ")" if hf else
            "plain model.generate(**inputs) (no speculation at one sequence)"))
        return lines


def _score(run: ServeRun, slo: Slo | None) -> tuple:
    e2e = run.headline["e2e_p50_ms"]
    e2e = e2e if e2e == e2e else math.inf
    if slo is None:
        return (e2e,)
    good = run.metrics.request_goodput
    return (-(good if good == good and good is not None else 0.0), e2e)


def plan_serving(profile, prompts: list[PromptInfo], rate: float, config: SchedulerConfig | None = None, *,
                 burstiness: float = 1.0, slo: Slo | None = None, num_prompts: int = PLAN_REQUESTS,
                 output_len: int | None = None, seed: int = 0, head: str = SHARED) -> ServePlan:
    """The candidates (`candidate_policies`) simulated on one workload at `rate` and ranked (module doc)."""
    config = config if config is not None else SchedulerConfig()
    workload = synthetic_workload(prompts, rate=rate, count=num_prompts, seed=seed, burstiness=burstiness,
                                  output_tokens=output_len)
    def simulated(policies):
        return [PlanRow(p, simulate_serving(profile, workload, p, config, seed=seed, slo=slo, head=head))
                for p in policies]

    rows = simulated(fixed_policies(profile, head))
    # The adaptive policies start from the EESD plan that serves this load best, not the closed forms' pick
    # at one sequence (which, where no EESD plan pays, can be an exit no load would run).
    eesd = sorted((r for r in rows if r.policy.name == "eesd"), key=lambda r: _score(r.run, slo))
    if eesd:
        best = eesd[0].policy
        rows += simulated(adaptive_policies(profile, config.max_batch, best.exit_layer, best.draft_len, head))
    rows.sort(key=lambda r: _score(r.run, slo))
    chosen = rows[0].policy
    alpha = profile.alpha_by_exit(head=head).get(getattr(chosen, "exit_layer", None) or 0, 0.0)
    table = chosen.gamma_table(config.max_batch, _context(profile), alpha, ServeCosts(profile, head))
    notes = [f"{num_prompts} requests of the profile's {len(prompts)} prompts, {workload.source} arrivals at "
             f"{rate:g} req/s (seed {seed}); point predictions (intervals: ppsd simulate --serve --policy SPEC)"]
    return ServePlan(float(rate), float(burstiness), slo, config, rows, table, notes)
