"""PPSD: pipeline-parallel self-speculative decoding ("verify-while-draft").

The layers are cut into k stages, one process per device; stage 1 ends at the exit layer and holds
the exit head, so while later stages verify token t, stage 1 already runs t+1 on its own draft. A
mismatch flushes the pipeline and restarts stage 1 with the verifier's token. The whole timing
model lives here:

  costs.py        each stage's time per token, the hop, placement and co-run slowdown
  event_model.py  the SimPy model of the stages (the reference; timelines)
  replay.py       the same model replayed exactly, cycle by cycle, without SimPy (sweeps)
  closed_form.py  expected time per token for i.i.d. acceptance (oracle, preview)

The restart rule (when the corrected token can enter stage 1) is shared by all three:
`sim/restart.py`.
"""

from __future__ import annotations

import numpy as np

from sim.costs import corun_factors
from sim.modes import Mode
from sim.plan import Plan
from sim.schemes.base import RunStats, Scheme
from sim.schemes.ppsd import closed_form as _closed_form
from sim.schemes.ppsd import event_model as _event_model
from sim.schemes.ppsd import replay as _replay
from sim.schemes.ppsd.costs import PPSDCosts, ppsd_costs
from sim.streams import Stream


class PPSD(Scheme):
    mode = Mode.PPSD

    def unit_costs(self, profile, plan: Plan, context: np.ndarray) -> PPSDCosts:
        return ppsd_costs(profile, plan, context)

    def event_model(self, stream: Stream, costs: PPSDCosts, record: bool = False) -> RunStats:
        return _event_model.run(stream, costs, record)

    def replay(self, stream: Stream, costs: PPSDCosts) -> RunStats:
        return _replay.replay(stream, costs)

    def can_replay(self, costs: PPSDCosts) -> bool:
        return costs.num_devices == costs.k  # stages sharing a device serialise: only SimPy queues them

    def closed_form(self, profile, plan: Plan, alpha: float, context: float) -> float:
        return self.closed_forms(profile, plan, [alpha], context)[0]

    def closed_forms(self, profile, plan: Plan, alphas, context: float) -> list[float]:
        costs = self.unit_costs(profile, plan, np.array([float(context)]))
        if not self.can_replay(costs):
            raise ValueError("the closed form needs one device per stage; simulate shared placements")
        cps = None if costs.checkpoints is None else [float(c[0]) for c in costs.checkpoints]
        alphas = [float(a) for a in alphas]

        def at(stage, alphas):
            return _closed_form.times_per_token(stage, costs.hop_ms, alphas, corun_factors(profile, costs.k), costs.k,
                                                float(costs.exit_array()[0]), costs.jitter_cv, checkpoints=cps,
                                                launch=costs.launch, cap=costs.cap)

        stage = [float(s[0]) for s in costs.stage]
        if not costs.reject_ms:  # one stage list for every α: the closed form shares its work between them
            return at(stage, alphas)
        # sampled: the verifier's pass depends on α (it recomputes q at a rejection)
        return [at(stage[:-1] + [float(costs.expected_last(a)[0])], [a])[0] for a in alphas]

    def first_token_ms(self, plan: Plan, whole_prefill_ms: float) -> float:
        # the prompt's hidden states go through the stages one after another (one payload per hop);
        # the verifier's first token is the first token out, the draft rides along in parallel
        return whole_prefill_ms + (plan.num_stages - 1) * float(plan.hop_ms or 0.0)

    def sweep_plans(self, exit_layer, *, num_layers, gammas, devices, hop_ms, exit_head):
        return [Plan(Mode.PPSD, exit_layer=exit_layer, stages=k, hop_ms=hop_ms, exit_head=exit_head)
                for k in range(2, min(int(devices), num_layers - exit_layer + 1) + 1)]
