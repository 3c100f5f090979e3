"""The one interface every decoding scheme implements, and what its engines return.

A scheme (AR, EESD, PPSD: one module or subpackage each under `sim/schemes/`) holds its whole
timing model in one place, behind four methods:

  unit_costs(profile, plan, context)   the work it does, priced by `CostModel` at each position's context
  event_model(stream, costs, record)   the SimPy discrete-event model: the reference, and timelines
  replay(stream, costs)                an exact replay of the same model without SimPy (sweeps);
                                       tested equal to the event model
  closed_form(profile, plan, alpha)    expected ms per token for i.i.d. acceptance at one context
                                       (the oracle of the other two, and the planner's preview)

plus what the planner needs: which plans to sweep at an exit layer. Schemes register themselves in
`sim.schemes.SCHEMES` (enum → class, vidur style): adding a scheme is one module and one line.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from sim.modes import Mode
from sim.plan import Event, Plan
from sim.streams import Stream


@dataclass
class RunStats:
    """What an engine measured in the model (times in ms)."""

    time_ms: float
    tokens: int
    rounds_a: list[int] = field(default_factory=list)  # accepted drafts per round
    rounds_rejected: list[bool] = field(default_factory=list)  # did the round end at a mismatch
    stage_busy_ms: list[float] = field(default_factory=list)
    device_busy_ms: dict[int, float] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    # PPSD: the run on the model's own time axis, from stage 1's first pass to the last commit with
    # every restart between generations (time_ms is the runtime's decode clock: sim/schemes/ppsd/clock.py)
    span_ms: float | None = None


def seg_ends(stream: Stream) -> np.ndarray:
    """seg_end[j]: index one past the last token of j's generation."""
    t = stream.tokens
    starts = np.flatnonzero(stream.seg_start)
    ends = np.append(starts[1:], t)
    return np.repeat(ends, np.diff(np.append(starts, t)))


class Scheme(ABC):
    """One decoding scheme's timing model (see the module doc)."""

    mode: ClassVar[Mode]

    @abstractmethod
    def unit_costs(self, profile, plan: Plan, context: np.ndarray) -> Any:
        """The scheme's priced work for a resolved plan over a stream's contexts."""

    @abstractmethod
    def event_model(self, stream: Stream, costs, record: bool = False) -> RunStats:
        """Run the SimPy model; `record` keeps the timeline."""

    @abstractmethod
    def replay(self, stream: Stream, costs) -> RunStats:
        """The same model, replayed exactly without SimPy."""

    def can_replay(self, costs) -> bool:
        """Whether `replay` covers these costs (else the event model runs)."""
        return True

    @abstractmethod
    def closed_form(self, profile, plan: Plan, alpha: float, context: float) -> float:
        """Expected ms per committed token, i.i.d. acceptance α, every cost at one context."""

    def closed_forms(self, profile, plan: Plan, alphas, context: float) -> list[float]:
        """`closed_form` at each α (a scheme may share the work between them)."""
        return [self.closed_form(profile, plan, float(a), context) for a in alphas]

    def first_token_ms(self, plan: Plan, whole_prefill_ms: float) -> float:
        """Time to the first token given the whole model's prefill of the prompt (sim/prefill.py):
        one pass over the prompt, as AR does; schemes that split the model add their messages."""
        return whole_prefill_ms

    def sweep_plans(self, exit_layer: int, *, num_layers: int, gammas, devices: int, hop_ms, exit_head: str) -> list[Plan]:
        """The plans of this scheme a sweep tries at one exit layer (unresolved)."""
        return []
