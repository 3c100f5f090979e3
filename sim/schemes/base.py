"""The one interface every decoding scheme implements, and what its engines return.

A scheme (AR, EESD, PPSD: one module or subpackage each under `sim/schemes/`) holds everything
that differs between the ways of decoding. Its timing model, behind four methods:

  unit_costs(profile, plan, context)   the work it does, priced by `CostModel` at each position's context
  event_model(stream, costs, record)   the SimPy discrete-event model: the reference, and timelines
  replay(stream, costs)                an exact replay of the same model without SimPy (sweeps);
                                       tested equal to the event model
  closed_form(profile, plan, alpha)    expected ms per token for i.i.d. acceptance at one context
                                       (the oracle of the other two, and the planner's preview)

and what a plan of its mode means, which `Plan`, the planner and every surface reach through the
registry instead of branching on the mode: its label and its second number in a plan spec
(`size`: EESD's γ, PPSD's k), its stages and devices, its checks and what resolving it fills in,
the tokens a verification round commits, where a token's time goes per stage, the plans a sweep
tries, the workers it runs within a budget of cores or GPUs. Schemes register themselves in
`sim.schemes.SCHEMES` (enum → instance, vidur style): adding a scheme is one module and one line.

Schemes never import `sim.plan` (`Plan` imports the registry to delegate to it): they read a plan
through `PlanLike`, what a scheme needs of one, and build plans from the plan they are given
(`dataclasses.replace`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

import numpy as np

from ppsd import exit_heads
from ppsd.errors import UserError
from sim.model.streams import Stream
from ppsd.modes import Mode
from sim.timeline import Event



class PlanLike(Protocol):
    """What a scheme reads of a plan; `sim.plan.Plan` is the one implementation (its docstring says
    what each field means). A protocol, not an import: `Plan` imports this registry to delegate to it,
    so the dependency runs one way."""

    mode: Mode
    exit_layer: int | None
    draft_len: int
    stage_bounds: tuple[int, ...] | None
    stages: int
    placement: tuple[int, ...] | None
    hop_ms: float | None
    exit_head: str
    launch: str
    runtime: str
    schedule: str
    temperature: float
    draft_stop: float | None  # a confidence stop τ (None: none), which the drafting schemes read

    @property
    def sampled(self) -> bool: ...

    @property
    def num_stages(self) -> int: ...

    def devices(self) -> tuple[int, ...]: ...

    def label(self) -> str: ...


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


@dataclass(frozen=True)
class PlanSize:
    """A scheme's second number, after the exit layer, in a plan spec ("mode:E:N") and its label."""

    symbol: str   # how a label spells it: "γ", "k"
    letter: str   # how a file name spells it: "g", "k"
    field: str    # the Plan field that holds it: "draft_len", "stages"
    default: int  # what a spec that leaves it out means


@dataclass(frozen=True)
class StagePart:
    """One part of one pipeline stage's time for one token (`Scheme.stage_parts`)."""

    stage: str  # "stage 1 (L0–L9)"
    part: str   # "layers", "embedding", "exit head", "overhead", "head", "draw", "hop"
    ms: float


class Scheme(ABC):
    """One decoding scheme: its timing model and what a plan of its mode means (see the module doc)."""

    mode: ClassVar[Mode]
    speculative: ClassVar[bool] = True  # drafts with an exit head (an exit layer is part of its plans)
    pipelined: ClassVar[bool] = False  # its stages run as separate processes, one per device, passing messages
    size: ClassVar[PlanSize | None] = None  # the second number of its plan specs, if it has one
    # charts of speedup against the exit layer: one curve per value of its second number (PPSD's k:
    # each is a different machine), or one curve of the best over it (EESD's γ: a setting)
    curve_per_size: ClassVar[bool] = False

    # --- what a plan of this scheme means ---------------------------------------------------
    def label(self, plan: PlanLike) -> str:
        """A plan's short name, e.g. "EESD E=12 γ=3 vocab4096"."""
        head = exit_head_suffix(plan.exit_head)
        stop = "" if plan.draft_stop is None else f" τ={plan.draft_stop:g}"
        return f"{self.mode.name} E={plan.exit_layer} {self.size.symbol}={self.size_of(plan)}{stop}{head}"

    def has_size(self, field_name: str) -> bool:
        """Whether the scheme's second number is held in the Plan field `field_name`."""
        return self.size is not None and self.size.field == field_name

    def curve_name(self, size: int, short: bool = False) -> str:
        """The name of its speedup-by-exit curve (`size`: the curve's second number, when it has one per size)."""
        if self.curve_per_size:
            return f"{self.mode.name} {self.size.symbol}={size}" if short else f"{self.mode.name} {self.size.symbol} = {size}"
        return self.mode.name if short or self.size is None else f"{self.mode.name} (best {self.size.symbol})"

    def curve_detail(self, size: int, stage_bounds: str | None = None) -> str:
        """A curve point's hover detail: its second number (or, for pipelines, its stage bounds)."""
        return f"{self.size.symbol} = {int(size)}"

    def size_of(self, plan: PlanLike) -> int | None:
        """The plan's second number (None for a scheme without one)."""
        return None if self.size is None else int(getattr(plan, self.size.field))

    def with_size(self, plan: PlanLike, size: int | None) -> PlanLike:
        """`plan` as this scheme with its second number set (the default when None)."""
        plan = replace(plan, mode=self.mode)
        if self.size is None:
            return plan
        return replace(plan, **{self.size.field: int(self.size.default if size is None else size)})

    def num_stages(self, plan: PlanLike) -> int:
        return 1

    def devices(self, plan: PlanLike) -> tuple[int, ...]:
        return (0,)

    def check(self, plan: PlanLike, num_layers: int, num_devices: int | None) -> None:
        """UserError naming the valid range for anything of the plan out of range."""
        if plan.exit_layer is None or not 1 <= int(plan.exit_layer) <= num_layers - 1:
            raise UserError(f"exit layer {plan.exit_layer} is out of range for a {num_layers}-layer model",
                            f"choose --exit between 1 and {num_layers - 1}")

    def resolved(self, plan: PlanLike, profile) -> dict:
        """What resolving fills in (`sim.planner.resolve.resolve_plan`): the fields to replace.
        Single-device schemes send no messages: no hop."""
        return {"hop_ms": 0.0} if plan.hop_ms is None else {}

    def tokens_per_round(self, plan: PlanLike, alpha: float) -> float:
        """Expected tokens a verification round commits at i.i.d. acceptance α."""
        return 1.0

    def stage_parts(self, profile, plan: PlanLike, context: float | None = None) -> list[StagePart]:
        """Where one token's time goes in each stage of a resolved plan (pipelined schemes)."""
        raise UserError(f"{plan.label()} has no pipeline stages", "choose a PPSD plan")

    def context_slack(self, plan: PlanLike) -> int:
        """Positions past the committed tokens a plan may hold in its KV cache (drafts in flight):
        what a prompt plus its new tokens must leave free of the model's context."""
        return self.num_stages(plan) + 1

    def workers(self, plan: PlanLike, units: int) -> int:
        """Threads (GPUs) each of the plan's processes gets within a budget of `units`: all of them
        for a single-process scheme."""
        return units

    def in_words(self, plan: PlanLike) -> str:
        """The plan in a sentence's words, e.g. "EESD with exit layer 12, γ=3"."""
        return f"{self.mode.name} with exit layer {plan.exit_layer}, {self.size.symbol}={self.size_of(plan)}"

    def gpu_advice(self, plan: PlanLike, speed: str, tokens_per_s: float) -> str:
        """The planner's answer in GPU terms (`speed`: "1.20× AR, 30.1 tokens/s"); a single-device
        scheme runs on one GPU."""
        return (f"use 1 GPU with exit layer {plan.exit_layer}: {self.mode.name} {self.size.symbol}={self.size_of(plan)}, "
                f"{speed} (more GPUs do not pay here)")

    def how_it_pays(self, plan: PlanLike, alpha: float) -> str:
        """A sentence on how the scheme turns acceptance α into speed ("" when it does not draft)."""
        return ""

    def latency_cv(self, profile, step_cv: float) -> float:
        """The relative spread of the plan's time per token given one decode step's (sim/intervals/)."""
        return step_cv

    @abstractmethod
    def unit_costs(self, profile, plan: PlanLike, context: np.ndarray) -> Any:
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
    def closed_form(self, profile, plan: PlanLike, alpha: float, context: float) -> float:
        """Expected ms per committed token, i.i.d. acceptance α, every cost at one context."""

    def closed_forms(self, profile, plan: PlanLike, alphas, context: float) -> list[float]:
        """`closed_form` at each α (a scheme may share the work between them)."""
        return [self.closed_form(profile, plan, float(a), context) for a in alphas]

    def first_token_ms(self, plan: PlanLike, whole_prefill_ms: float) -> float:
        """Time to the first token given the whole model's prefill of the prompt (sim/model/prefill.py):
        one pass over the prompt, as AR does; schemes that split the model add their messages."""
        return whole_prefill_ms

    def sweep_plans(self, base: PlanLike, exit_layer: int, *, num_layers: int, gammas, devices: int,
                    draft_stops=()) -> list[PlanLike]:
        """The plans of this scheme a sweep tries at one exit layer (unresolved), built from `base`
        (its hop, exit head, temperature); `draft_stops`: the confidence stops a drafting scheme tries."""
        return []

    def check_draft_stop(self, plan: PlanLike) -> None:
        """UserError unless a plan of this scheme can carry a confidence stop (`Plan.draft_stop`)."""

    def without_stop_words(self) -> str:
        """What the verdict sets a confidence stop against: the scheme's best plan without one."""
        return f"the best {self.mode.name} plan without one"

    # --- batched decoding (sim/batch/, runtime/batched*.py): B sequences at once -------------------
    def batch_label(self, exit_layer: int, draft_len: int | None) -> str:
        """A batched plan's name in tables and validation rows, e.g. "EESD E=24 γ=2"."""
        return f"{self.mode.name} E={exit_layer} {self.size.symbol}={draft_len}"

    def batch_fields(self, exit_layer: int | None, draft_len: int | None, num_layers: int) -> dict:
        """The `Plan` fields of the batch-1 plan that does a batched plan's work (mode aside)."""
        return {"exit_layer": exit_layer, "draft_len": int(draft_len or 1)}

    def batch_closed_forms(self, costs, batch: int, context: float, exit_layer: int, alpha: float,
                           gammas) -> list[tuple[float, int | None]]:
        """(speedup against AR at `batch`, γ or None) of each batched plan at one exit, i.i.d. acceptance α
        (`sim/batch/replay.py`'s closed forms): what `sim.batch.sweep.screen` ranks."""
        return []

    def batch_holes(self, draft_len: int | None) -> int:
        """KV-cache slots a committed token may leave as holes in the batched runtime (rejected drafts)."""
        return 0

    def batch_acceptance(self, rounds: list[int], draft_len: int | None) -> tuple[float | None, float | None]:
        """(acceptance rate, tokens a round) of a batched run's per-sequence rounds (accepted drafts each)."""
        return None, None


def exit_head_suffix(head: str) -> str:
    """" vocab4096" for a named exit head; "" for the shared one, which labels leave unnamed."""
    return exit_heads.suffix(head, " ")
