"""The interface every speculation policy under load implements, and what an iteration decodes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Protocol

from ppsd.errors import UserError

PRIOR_WEIGHT = 64  # drafts the profile's acceptance counts for before the engine has seen its own


@dataclass(frozen=True)
class Speculation:
    """What an iteration's decode runs: an AR step (no exit layer, or γ = 0), an EESD round at exit E
    with γ drafts, or a tick of the batched PPSD pipeline cut at E (`pipelined`)."""

    exit_layer: int | None = None
    draft_len: int = 0
    pipelined: bool = False

    @property
    def speculative(self) -> bool:
        return self.exit_layer is not None and (self.pipelined or self.draft_len > 0)

    @property
    def decode_tokens(self) -> int:
        """Tokens a sequence's passes process this iteration, what the scheduler's budget is charged."""
        return self.draft_len + 1 if self.speculative and not self.pipelined else 1


AR_STEP = Speculation()


class IterationCost(Protocol):
    """What a policy may ask of the cost model (`sim.batch.costs.BatchCosts` implements it): ms of one
    iteration of `batch` sequences at a cache width `context`."""

    def ar_step(self, batch: float, context: float) -> float: ...

    def eesd_round(self, batch: float, context: float, exit_layer: int, draft_len: int) -> float: ...


@dataclass
class AcceptanceSeen:
    """Drafts judged and accepted so far in one engine, with the profile's acceptance as a prior worth
    `PRIOR_WEIGHT` drafts, so the estimate starts at the profile's and moves to the traffic's."""

    prior_alpha: float
    drafted: int = 0
    accepted: int = 0

    def record(self, drafted: int, accepted: int) -> None:
        self.drafted += int(drafted)
        self.accepted += int(accepted)

    @property
    def alpha(self) -> float:
        return (self.accepted + PRIOR_WEIGHT * self.prior_alpha) / (self.drafted + PRIOR_WEIGHT)


class ServePolicy(ABC):
    """A rule for what each iteration drafts. `spec()` round-trips through `sim.serve.policies.parse`."""

    name: ClassVar[str]
    runs_real: ClassVar[bool] = True  # whether `ppsd serve` runs it (else simulated only)

    @abstractmethod
    def decide(self, live: int, context: float, seen: AcceptanceSeen, cost: IterationCost | None) -> Speculation:
        """The speculation of the next iteration of `live` decoding sequences at cache width `context`."""

    @abstractmethod
    def spec(self) -> str: ...

    @classmethod
    @abstractmethod
    def from_args(cls, args: list[str]) -> "ServePolicy":
        """The policy from its spec's fields after the name (UserError naming the spec's form)."""

    def label(self) -> str:
        return self.spec()

    @property
    def pipelined(self) -> bool:
        return False

    def gamma_table(self, max_batch: int, context: float, alpha: float,
                    cost: IterationCost | None) -> dict[int, int]:
        """γ by live batch size 1..max_batch (0 = speculation off), vLLM's `num_speculative_tokens_per_batch_size`
        form; where the policy adapts, as it decides at the profile's acceptance."""
        seen = AcceptanceSeen(alpha)
        return {b: self.decide(b, context, seen, cost).draft_len for b in range(1, int(max_batch) + 1)}

    def check(self, num_layers: int) -> None:
        """UserError unless its exit layer lies inside the model."""
        exit_layer = getattr(self, "exit_layer", None)
        if exit_layer is not None and not 1 <= exit_layer < num_layers:
            raise UserError(f"policy {self.spec()!r}: exit layer {exit_layer} is outside 1..{num_layers - 1}",
                            f"give an exit layer between 1 and {num_layers - 1}")


def ints(spec: str, fields: list[str], form: str, count: int) -> list[int]:
    """`count` integer fields of a policy spec, or a UserError naming the spec's form."""
    if len(fields) != count:
        raise UserError(f"policy {spec!r} is not of the form {form}", f"give e.g. {form}")
    try:
        return [int(f) for f in fields]
    except ValueError:
        raise UserError(f"policy {spec!r} has a field that is not a whole number", f"give e.g. {form}") from None
