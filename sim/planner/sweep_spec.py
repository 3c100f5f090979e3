"""What a plan sweep tries and how it prices each plan: one spec whose defaults `ppsd plan`, the
simulator's API and the dashboard's planner share.

The plans themselves come from the schemes (`Scheme.sweep_plans`: EESD one per γ, PPSD one per
stage count that fits after the exit), so a new scheme joins every sweep by registering.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from typing import TYPE_CHECKING

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from ppsd.modes import Mode

if TYPE_CHECKING:
    from sim.plan import Plan

DEFAULT_DEVICES = 4  # the most PPSD stages when the profile sets no GPU count and no CPU cores (`sim.planner.gpus`)
MAX_DEVICES = 8  # the most stages a CPU profile's default sweep goes to (the dashboard's slider)
DEFAULT_TOKENS = 2000  # trace-driven tokens per plan
MAX_DRAFT_LEN = 8  # EESD γ from 1 to this


@dataclass(frozen=True)
class SweepSpec:
    """One sweep's settings (see `sim.run.sweep`), each field's meaning beside it."""

    devices: int = DEFAULT_DEVICES  # the most PPSD stages (k = 2..devices, as far as they fit after the exit)
    gammas: tuple[int, ...] = tuple(range(1, MAX_DRAFT_LEN + 1))  # the EESD draft lengths γ tried
    tokens: int = DEFAULT_TOKENS  # trace-driven tokens replayed per plan
    hop_ms: float | None = None  # stage-to-stage hop; None: the profile's
    alpha_scale: float = 1.0  # what-if: every position's acceptance scaled (seeded)
    temperature: float = 0.0  # 0: greedy; T > 0 prices sampled decoding with the profile's β at T
    category: str | None = None  # replay only this prompt category's traces
    exit_head: str = SHARED  # which exit head drafts
    seed: int = 0  # of every seeded stream
    budget: int | None = None  # same-budget comparison within this many cores / GPUs (None: the profile's most)
    prompt_len: int | None = None  # prompt tokens before each generation (None: the profile's prompts)
    # {exit layer: α}: seeded Bernoulli(α) streams at exactly these exits instead of the traces
    alpha_by_exit: Mapping[int, float] | None = field(default=None, hash=False)
    # confidence stops τ tried beside every plan (`Plan.draft_stop`: EESD at γ >= 2, PPSD with the local launch,
    # transformers' threshold with --runtime hf; traces with confidences, greedy or sampled at T); (): no stop
    draft_stops: tuple[float, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "gammas", tuple(sorted({int(g) for g in self.gammas})))
        object.__setattr__(self, "draft_stops", tuple(sorted({float(t) for t in self.draft_stops})))
        object.__setattr__(self, "temperature", float(self.temperature or 0.0))

    def with_(self, **changes) -> SweepSpec:
        """This spec with `changes` (None values leave a field as it is)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def check(self, num_layers: int) -> SweepSpec:
        """UserError for a setting out of range; self otherwise."""
        g = self.gammas
        if not g or g[0] < 1 or g[-1] > 64:
            raise UserError(f"draft lengths {list(g)} are out of range", "use draft lengths between 1 and 64")
        if int(self.devices) < 1:
            raise UserError(f"--devices {self.devices} must be at least 1", f"use --devices between 1 and {num_layers}")
        if self.hop_ms is not None and self.hop_ms < 0:
            raise UserError(f"hop latency {self.hop_ms} ms is negative", "give a hop latency >= 0")
        if self.alpha_scale < 0:
            raise UserError(f"alpha scale {self.alpha_scale} is negative", "give --alpha-scale F with F >= 0")
        if self.draft_stops:
            from sim.plan import check_draft_stop

            for tau in self.draft_stops:
                check_draft_stop(tau, "--draft-stops")
            if self.alpha_by_exit is not None:
                raise UserError("confidence stops are priced from the traces' confidences",
                                "drop --draft-stops, or the given acceptance")
        return self

    def base_plan(self) -> Plan:
        """AR with the spec's hop, exit head and temperature: the baseline, and what every plan copies."""
        from sim.plan import Plan  # here, so the spec's defaults load without the schemes (`ppsd --help`)

        return Plan(Mode.AR, hop_ms=self.hop_ms, exit_head=self.exit_head, temperature=self.temperature)

    def plans_at(self, exit_layer: int, num_layers: int) -> list[Plan]:
        """Every speculative scheme's plans at one exit layer, in registry order (unresolved)."""
        from sim.schemes import SCHEMES

        base = self.base_plan()
        return [p for sch in SCHEMES.values() if sch.speculative
                for p in sch.sweep_plans(base, exit_layer, num_layers=num_layers, gammas=self.gammas,
                                         devices=int(self.devices), draft_stops=self.draft_stops)]
