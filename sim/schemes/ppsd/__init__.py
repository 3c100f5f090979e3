"""PPSD: pipeline-parallel self-speculative decoding ("verify-while-draft").

The layers are cut into k stages, one process per device; stage 1 ends at the exit layer and holds
the exit head, so while later stages verify token t, stage 1 already runs t+1 on its own draft. A
mismatch flushes the pipeline and restarts stage 1 with the verifier's token. The whole timing
model lives here:

  stage_costs.py  each stage's time per token, the hop, placement and co-run slowdown
  event_model.py  the SimPy model of the stages (the reference; timelines)
  replay.py       the same model replayed exactly, cycle by cycle, without SimPy (sweeps)
  closed_form.py  expected time per token for i.i.d. acceptance (oracle, preview)
  partition.py    where to cut the layers into stages (balanced by profiled time)

The restart rule (when the corrected token can enter stage 1) is shared by all three:
`sim/model/restart.py`.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np

from ppsd.errors import UserError
from sim.model.cost_model import cost_model
from sim.model.stops import stop_odds
from sim.model.streams import Stream
from ppsd.modes import Mode
from sim.schemes.base import PlanLike, PlanSize, RunStats, Scheme, StagePart, exit_head_suffix
from sim.schemes.ppsd import closed_form as _closed_form
from sim.schemes.ppsd import event_model as _event_model
from sim.schemes.ppsd import replay as _replay
from sim.schemes.ppsd.partition import stage_bounds
from sim.schemes.ppsd.stage_costs import PPSDCosts, ppsd_costs, stage_parts


class PPSD(Scheme):
    mode = Mode.PPSD
    size = PlanSize("k", "k", "stages", default=2)
    curve_per_size = True
    pipelined = True

    def curve_detail(self, size: int, stage_bounds: str | None = None) -> str:
        return f"stages [{stage_bounds}]" if stage_bounds else f"k = {int(size)}"

    # --- what a PPSD plan means ---------------------------------------------------------------
    def label(self, plan: PlanLike) -> str:
        bounds = "" if plan.stage_bounds is None else " [" + ",".join(map(str, plan.stage_bounds)) + "]"
        launch = "" if plan.launch == "local" else f" ({plan.launch})"
        stop = "" if plan.draft_stop is None else f" τ={plan.draft_stop:g}"
        return f"PPSD E={plan.exit_layer} k={plan.num_stages}{bounds}{stop}{exit_head_suffix(plan.exit_head)}{launch}"

    def num_stages(self, plan: PlanLike) -> int:
        return plan.stages

    def devices(self, plan: PlanLike) -> tuple[int, ...]:
        return plan.placement if plan.placement is not None else tuple(range(plan.stages))

    def check(self, plan: PlanLike, num_layers: int, num_devices: int | None) -> None:
        super().check(plan, num_layers, num_devices)
        k = plan.num_stages
        if plan.stage_bounds is not None and k < 2:
            raise UserError(f"--stage-bounds {','.join(map(str, plan.stage_bounds))} gives fewer than 2 stages",
                            "give at least 0,E,N")
        if k < 2:
            raise UserError(f"PPSD needs at least 2 stages, got {k}", "use --stages 2 or more")
        max_k = 1 + (num_layers - plan.exit_layer)
        if k > max_k:
            raise UserError(f"{k} stages do not fit: stage 1 ends at layer {plan.exit_layer} and only "
                            f"{num_layers - plan.exit_layer} layers remain",
                            f"use --stages between 2 and {max_k}, or a smaller --exit")
        b = plan.stage_bounds
        if b is not None:
            if b[0] != 0 or b[-1] != num_layers or any(x >= y for x, y in zip(b, b[1:])):
                raise UserError(f"stage bounds {list(b)} must increase strictly from 0 to {num_layers}",
                                f"e.g. --stage-bounds 0,{plan.exit_layer},{num_layers}")
            if b[1] != plan.exit_layer:
                raise UserError(f"stage 1 must end at the exit layer {plan.exit_layer}, bounds are {list(b)}",
                                f"start the bounds with 0,{plan.exit_layer}")
        if plan.placement is not None:
            if len(plan.placement) != k:
                raise UserError(f"placement lists {len(plan.placement)} devices for {k} stages",
                                "give one device index per stage")
            if num_devices is not None and max(plan.placement) >= num_devices:
                raise UserError(f"placement uses device {max(plan.placement)} but only {num_devices} exist",
                                f"use device indices 0..{num_devices - 1}")

    def resolved(self, plan: PlanLike, profile) -> dict:
        changes: dict = {}
        if plan.stage_bounds is None:
            changes["stage_bounds"] = stage_bounds(profile, plan.exit_layer, plan.num_stages, plan.exit_head)
        if plan.hop_ms is None:
            changes["hop_ms"] = float(profile.hop_ms())
        return changes

    def tokens_per_round(self, plan: PlanLike, alpha: float) -> float:
        return 1.0 / (1.0 - alpha)  # a cycle runs until the first rejection

    def stage_parts(self, profile, plan: PlanLike, context: float | None = None) -> list[StagePart]:
        c = float(profile.context_values[0]) if context is None else float(context)
        return stage_parts(cost_model(profile, plan.exit_head), plan, c)

    def how_it_pays(self, plan: PlanLike, alpha: float) -> str:
        return (f"In a {plan.num_stages}-stage pipeline an accepted draft lets stage 1 start the next token "
                "while the later stages verify, so accepted tokens cost about one stage's time and a rejection "
                "costs a full pass plus the flush. ")

    def workers(self, plan: PlanLike, units: int) -> int:
        return max(1, units // plan.num_stages)  # the stages split the budget

    def in_words(self, plan: PlanLike) -> str:
        return f"PPSD with exit layer {plan.exit_layer}, {plan.num_stages} stages"

    def gpu_advice(self, plan: PlanLike, speed: str, tokens_per_s: float) -> str:
        k = len(set(self.devices(plan)))
        bounds = ",".join(map(str, plan.stage_bounds or ()))
        return (f"use {k} GPUs with exit layer {plan.exit_layer}: PPSD with {plan.num_stages} stages on {k} GPUs "
                f"(layers {bounds}), {speed}")

    def latency_cv(self, profile, step_cv: float) -> float:
        # with the runtime probe: the step's spread and how far the stages' co-run slowdown moved
        # between its rounds, which prices every pass of the plan at once (a pass's own jitter averages
        # out over a run's hundreds of passes); without it, at least the pipeline probe's pass spread
        drift = profile.pipeline_slowdown_cv()
        if drift is None:
            return max(step_cv, profile.pass_jitter_cv())
        return float(np.hypot(step_cv, drift))

    # --- its timing model ---------------------------------------------------------------------

    def unit_costs(self, profile, plan: PlanLike, context: np.ndarray) -> PPSDCosts:
        return ppsd_costs(profile, plan, context)

    def event_model(self, stream: Stream, costs: PPSDCosts, record: bool = False) -> RunStats:
        return _event_model.run(stream, costs, record)

    def replay(self, stream: Stream, costs: PPSDCosts) -> RunStats:
        return _replay.replay(stream, costs)

    def can_replay(self, costs: PPSDCosts) -> bool:
        return costs.num_devices == costs.k  # stages sharing a device serialise: only SimPy queues them

    def closed_form(self, profile, plan: PlanLike, alpha: float, context: float) -> float:
        return self.closed_forms(profile, plan, [alpha], context)[0]

    def closed_forms(self, profile, plan: PlanLike, alphas, context: float) -> list[float]:
        costs = self.unit_costs(profile, plan, np.array([float(context)]))
        if not self.can_replay(costs):
            raise ValueError("the closed form needs one device per stage; simulate shared placements")
        cps = None if costs.checkpoints is None else [float(c[0]) for c in costs.checkpoints]
        alphas = [float(a) for a in alphas]

        # with a confidence stop: the i.i.d. odds of the profile's (match, confidence) pairs, at each α
        odds = (None if costs.draft_stop is None else
                stop_odds(profile, plan.exit_layer, plan.exit_head, costs.draft_stop, plan.temperature))

        def at(stage, alphas):
            exit_ms = float(costs.exit_array()[0])
            if odds is not None:
                return _closed_form.stopped_times_per_token(stage, costs.hop_ms, [odds.at(a) for a in alphas],
                                                            costs.factors, costs.k, exit_ms, costs.jitter_cv,
                                                            checkpoints=cps, cap=costs.cap)
            return _closed_form.times_per_token(stage, costs.hop_ms, alphas, costs.factors, costs.k, exit_ms,
                                                costs.jitter_cv, checkpoints=cps, launch=costs.launch, cap=costs.cap)

        stage = [float(s[0]) for s in costs.stage]
        if not costs.reject_ms:  # one stage list for every α: the closed form shares its work between them
            return at(stage, alphas)
        # sampled: the verifier's pass depends on α (it recomputes q at a rejection)
        return [at(stage[:-1] + [float(costs.expected_last(a)[0])], [a])[0] for a in alphas]

    def first_token_ms(self, plan: PlanLike, whole_prefill_ms: float) -> float:
        # the prompt's hidden states go through the stages one after another (one payload per hop);
        # the verifier's first token is the first token out, the draft rides along in parallel
        return whole_prefill_ms + (plan.num_stages - 1) * float(plan.hop_ms or 0.0)

    def check_draft_stop(self, plan: PlanLike) -> None:
        if plan.launch != "local":
            raise UserError("a PPSD confidence stop runs with the local launch (stage 1 waits for a verdict the "
                            "shared epoch board brings)", "drop --draft-stop-confidence or --launch torchrun")

    # batched PPSD (runtime/batched_pipeline.py): two stages in lock step, a draft a tick (docs/model.md)
    def batch_label(self, exit_layer: int, draft_len: int | None) -> str:
        return f"PPSD E={exit_layer} k=2"

    def batch_fields(self, exit_layer: int, draft_len: int | None, num_layers: int) -> dict:
        return {"exit_layer": exit_layer, "stages": 2, "stage_bounds": (0, int(exit_layer), int(num_layers))}

    def batch_closed_forms(self, costs, batch, context, exit_layer, alpha, gammas):
        # a token costs a tick, and a rejected draft (1 − α of them) one tick more
        return [(costs.ar_step(batch, context) / ((2.0 - alpha) * costs.ppsd_tick(batch, context, exit_layer)), None)]

    def batch_holes(self, draft_len: int | None) -> int:
        return 1  # a rejection leaves one stale draft's slot a token

    def batch_acceptance(self, rounds: list[int], draft_len: int | None) -> tuple[float | None, float | None]:
        if not rounds:
            return None, None
        rate = statistics.fmean(rounds)
        return rate, 1.0 / (2.0 - rate)

    def sweep_plans(self, base, exit_layer, *, num_layers, gammas, devices, draft_stops=()):
        stops = draft_stops if base.launch == "local" else ()  # stage 1 hears its verdict on the board
        return [replace(base, mode=self.mode, exit_layer=exit_layer, stages=k, draft_stop=tau)
                for tau in (None, *stops) for k in range(2, min(int(devices), num_layers - exit_layer + 1) + 1)]
