"""What a draft costs at an exit layer against a full pass, priced as the schemes price them
(`sim.schemes.eesd.draft_ms`, `sim.schemes.ar.step_ms`): the figure the dashboard's overview explains
a verdict with."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppsd.exit_heads import SHARED
from sim.model.cost_model import cost_model
from sim.schemes.ar import step_ms
from sim.schemes.eesd import draft_ms


@dataclass(frozen=True)
class DraftCost:
    """One draft (embedding, layers [0, E), exit head) and one full pass (AR's step), in ms."""

    draft_ms: float
    head_ms: float   # the exit head's part of the draft
    full_ms: float

    @property
    def share(self) -> float:
        """The draft's cost as a share of a full pass (the c of the speculative-decoding formulas)."""
        return self.draft_ms / self.full_ms if self.full_ms else float("nan")


def draft_cost(profile, exit_layer: int, exit_head: str = SHARED, context: float | None = None) -> DraftCost:
    """A greedy draft at `exit_layer` with `exit_head` and a full pass, one token at `context`
    (default the smallest profiled)."""
    c = np.array([float(profile.context_values[0]) if context is None else float(context)])
    cm = cost_model(profile, exit_head)
    return DraftCost(float(draft_ms(cm, c, exit_layer)[0]), cm.exit_head(), float(step_ms(profile, c)[0]))
