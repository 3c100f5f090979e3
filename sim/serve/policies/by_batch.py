"""Policies that follow the live batch size: speculation off above a batch size (vLLM's rule), and a table
of γ by batch size (vLLM's `num_speculative_tokens_per_batch_size`)."""

from __future__ import annotations

from dataclasses import dataclass

from ppsd.errors import UserError
from sim.serve.policies.base import AR_STEP, ServePolicy, Speculation, ints


@dataclass(frozen=True)
class OffAbovePolicy(ServePolicy):
    """EESD at (E, γ) while at most `max_live` sequences decode, AR above."""

    exit_layer: int
    draft_len: int
    max_live: int
    name = "off-above"

    def __post_init__(self):
        if self.draft_len < 1 or self.max_live < 1:
            raise UserError(f"policy {self.spec()!r}: γ and the batch size must be at least 1",
                            "give e.g. off-above:24:3:4")

    def decide(self, live, context, seen, cost) -> Speculation:
        return Speculation(self.exit_layer, self.draft_len) if live <= self.max_live else AR_STEP

    def spec(self) -> str:
        return f"off-above:{self.exit_layer}:{self.draft_len}:{self.max_live}"

    @classmethod
    def from_args(cls, args):
        return cls(*ints("off-above:" + ":".join(args), args, "off-above:E:γ:B", 3))


def parse_table(text: str) -> dict[int, int]:
    """'1=4,2=3,4=2,8=0' -> {1: 4, 2: 3, 4: 2, 8: 0} (batch size = γ, γ 0 turns speculation off)."""
    table = {}
    for item in filter(None, (x.strip() for x in str(text).split(","))):
        try:
            batch, gamma = (int(x) for x in item.split("="))
        except ValueError:
            raise UserError(f"γ table item {item!r} is not BATCH=γ", "give e.g. table:24:1=4,2=3,4=2,8=0") from None
        if batch < 1 or gamma < 0:
            raise UserError(f"γ table item {item!r}: batch sizes start at 1 and γ at 0",
                            "give e.g. table:24:1=4,2=3,4=2,8=0")
        table[batch] = gamma
    if not table:
        raise UserError("the γ table is empty", "give e.g. table:24:1=4,2=3,4=2,8=0")
    return dict(sorted(table.items()))


@dataclass(frozen=True)
class GammaTablePolicy(ServePolicy):
    """γ looked up by the live batch size: the entry of the largest batch size at or below it (below the
    smallest, the smallest's); γ 0 is an AR step."""

    exit_layer: int
    table: tuple[tuple[int, int], ...]
    name = "table"

    def gamma(self, live: int) -> int:
        got = self.table[0][1]
        for batch, gamma in self.table:
            if batch <= live:
                got = gamma
        return got

    def decide(self, live, context, seen, cost) -> Speculation:
        g = self.gamma(live)
        return Speculation(self.exit_layer, g) if g > 0 else AR_STEP

    def spec(self) -> str:
        return f"table:{self.exit_layer}:" + ",".join(f"{b}={g}" for b, g in self.table)

    @classmethod
    def from_args(cls, args):
        if len(args) != 2:
            raise UserError(f"policy 'table:{':'.join(args)}' is not of the form table:E:B=γ,...",
                            "give e.g. table:24:1=4,2=3,4=2,8=0")
        (exit_layer,) = ints("table:" + args[0], args[:1], "table:E:B=γ,...", 1)
        return cls(exit_layer, tuple(parse_table(args[1]).items()))
