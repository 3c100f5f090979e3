"""A load-adaptive policy: each iteration, the γ (0 = an AR step) that commits the most tokens a second for
the live batch, from the cost model and the acceptance seen so far (TurboSpec's and SmartSpec's idea,
here over an early-exit self-draft whose cost the batch cost model prices)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from ppsd.errors import UserError
from sim.serve.policies.base import AR_STEP, ServePolicy, Speculation, ints

MAX_GAMMA = 8
ALPHA_DIGITS = 3  # the acceptance seen is read to this many decimals (decisions repeat, and are remembered)


def expected_tokens(alpha: float, draft_len: int) -> float:
    """Tokens a sequence commits in an EESD round of γ drafts under i.i.d. acceptance α (the accepted
    prefix and the verifier's token): (1 − α^(γ+1)) / (1 − α)."""
    if draft_len <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(draft_len + 1)
    return (1.0 - alpha ** (draft_len + 1)) / (1.0 - alpha)


def best_gamma(cost, live: int, context: float, exit_layer: int, alpha: float, max_gamma: int) -> int:
    """The γ in 0..max_gamma with the most tokens per ms for `live` sequences (ties go to the smaller γ)."""
    best, best_rate = 0, 1.0 / cost.ar_step(live, context)
    for g in range(1, max_gamma + 1):
        rate = expected_tokens(alpha, g) / cost.eesd_round(live, context, exit_layer, g)
        if rate > best_rate * (1.0 + 1e-9):
            best, best_rate = g, rate
    return best


@dataclass(frozen=True)
class GoodputPolicy(ServePolicy):
    """γ each iteration by `best_gamma` at the acceptance seen so far (to `ALPHA_DIGITS` decimals); decisions
    are remembered per cost model, live count and width, as a served run asks the same ones often."""

    exit_layer: int
    max_gamma: int = MAX_GAMMA
    _seen: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary, init=False, repr=False,
                                             compare=False, hash=False)
    name = "goodput"

    def __post_init__(self):
        if not 1 <= self.max_gamma <= 16:
            raise UserError(f"policy {self.spec()!r}: the largest γ must be 1..16", "give e.g. goodput:24:8")

    def decide(self, live, context, seen, cost) -> Speculation:
        if cost is None:
            raise UserError("the goodput policy needs the profile's batch cost tables",
                            "give a profile with latency.batch (ppsd profile add-batch)")
        alpha = round(seen.alpha, ALPHA_DIGITS)
        try:
            memo = self._seen.setdefault(cost, {})
        except TypeError:  # a cost model that cannot be hashed or weakly referenced: decide afresh each time
            memo = {}
        key = (live, context, alpha)
        got = memo.get(key)
        if got is None:
            g = best_gamma(cost, live, context, self.exit_layer, alpha, self.max_gamma)
            got = memo[key] = Speculation(self.exit_layer, g) if g > 0 else AR_STEP
        return got

    def spec(self) -> str:
        return f"goodput:{self.exit_layer}:{self.max_gamma}"

    def __reduce__(self):  # pickled without its remembered decisions (weak references do not pickle)
        return type(self), (self.exit_layer, self.max_gamma)

    @classmethod
    def from_args(cls, args):
        if len(args) == 1:
            args = args + [str(MAX_GAMMA)]
        return cls(*ints("goodput:" + ":".join(args), args, "goodput:E[:γmax]", 2))
