"""AR: plain autoregressive decoding, one token per full pass (embed + every layer + LM head).

It is also every speedup's baseline: `speedup_vs_ar` divides AR's time on the same profile and
the same contexts by the plan's.
"""

from __future__ import annotations


import numpy as np
import simpy

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from sim.model.cost_model import cost_model
from sim.model.streams import Stream
from ppsd.modes import Mode
from sim.schemes.base import PlanLike, RunStats, Scheme
from sim.timeline import Event



def step_ms(profile, context: np.ndarray, exit_head: str = SHARED, sampled: bool = False) -> np.ndarray:
    """One full pass at each context: embed + every layer + final norm and LM head (ms); sampled
    decoding adds the draw of the token over the whole vocabulary."""
    cm = cost_model(profile, exit_head)
    t = cm.embed(1) + cm.layers(context, 0, cm.num_layers) + cm.head(1)
    return t + cm.sample_full() if sampled else t


class AR(Scheme):
    mode = Mode.AR
    speculative = False

    def label(self, plan: PlanLike) -> str:
        return "AR"

    def check(self, plan: PlanLike, num_layers: int, num_devices: int | None) -> None:
        return None  # no exit layer, nothing else to choose

    def check_draft_stop(self, plan: PlanLike) -> None:
        raise UserError("a confidence stop stops an EESD round's drafting or PPSD's stage 1",
                        "drop --draft-stop-confidence, or use --mode eesd or ppsd")

    def batch_label(self, exit_layer: int | None, draft_len: int | None) -> str:
        return "AR"

    def batch_fields(self, exit_layer: int | None, draft_len: int | None, num_layers: int) -> dict:
        return {}

    def in_words(self, plan: PlanLike) -> str:
        return "plain AR, no early exit"

    def gpu_advice(self, plan: PlanLike, speed: str, tokens_per_s: float) -> str:
        return f"use 1 GPU and no early exit: plain AR, {tokens_per_s:.1f} tokens/s (more GPUs do not pay here)"

    def unit_costs(self, profile, plan: PlanLike, context: np.ndarray) -> np.ndarray:
        return step_ms(profile, context, plan.exit_head, plan.sampled)

    def event_model(self, stream: Stream, costs: np.ndarray, record: bool = False) -> RunStats:
        env = simpy.Environment()
        events: list[Event] = []
        per_token = costs.tolist()

        def decode():
            for j, c in enumerate(per_token):
                start = env.now
                yield env.timeout(c)
                if record:
                    events.append(Event("forward", "device 0", start / 1e3, c / 1e3, token=j))

        env.process(decode())
        env.run()
        return RunStats(env.now, len(per_token), stage_busy_ms=[env.now], device_busy_ms={0: env.now}, events=events)

    def replay(self, stream: Stream, costs: np.ndarray) -> RunStats:
        total = float(np.sum(costs))
        return RunStats(total, len(costs), stage_busy_ms=[total], device_busy_ms={0: total})

    def closed_form(self, profile, plan: PlanLike, alpha: float, context: float) -> float:
        return float(step_ms(profile, np.array([float(context)]), plan.exit_head, plan.sampled)[0])
