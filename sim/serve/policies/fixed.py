"""Policies that decode the same way at every load: AR, EESD at a fixed γ, and batched PPSD (k = 2)."""

from __future__ import annotations

from dataclasses import dataclass

from ppsd.errors import UserError
from sim.serve.policies.base import AR_STEP, ServePolicy, Speculation, ints


@dataclass(frozen=True)
class ArPolicy(ServePolicy):
    name = "ar"
    exit_layer = None

    def decide(self, live, context, seen, cost) -> Speculation:
        return AR_STEP

    def spec(self) -> str:
        return "ar"

    @classmethod
    def from_args(cls, args):
        if args:
            raise UserError("policy 'ar' takes no fields", "give ar")
        return cls()


@dataclass(frozen=True)
class EesdPolicy(ServePolicy):
    """Every iteration drafts γ tokens at exit E for every sequence, then verifies."""

    exit_layer: int
    draft_len: int
    name = "eesd"

    def __post_init__(self):
        if self.draft_len < 1:
            raise UserError(f"policy {self.spec()!r}: γ must be at least 1", "give e.g. eesd:24:3")

    def decide(self, live, context, seen, cost) -> Speculation:
        return Speculation(self.exit_layer, self.draft_len)

    def spec(self) -> str:
        return f"eesd:{self.exit_layer}:{self.draft_len}"

    @classmethod
    def from_args(cls, args):
        return cls(*ints("eesd:" + ":".join(args), args, "eesd:E:γ", 2))


@dataclass(frozen=True)
class PpsdPolicy(ServePolicy):
    """The batched PPSD pipeline cut at E (two stages in lock step: a rejected draft costs its sequence a tick)."""

    exit_layer: int
    name = "ppsd"

    def decide(self, live, context, seen, cost) -> Speculation:
        return Speculation(self.exit_layer, 1, pipelined=True)

    def spec(self) -> str:
        return f"ppsd:{self.exit_layer}"

    @property
    def pipelined(self) -> bool:
        return True

    @classmethod
    def from_args(cls, args):
        return cls(*ints("ppsd:" + ":".join(args), args, "ppsd:E", 1))
