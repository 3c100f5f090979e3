"""Speculation policies under load, by name (a policy is one module and one line here).

Specs: `ar`, `eesd:E:γ`, `ppsd:E`, `off-above:E:γ:B` (EESD while at most B sequences decode),
`table:E:1=4,2=3,4=2,8=0` (γ by live batch size, 0 = off), `goodput:E[:γmax]` (each iteration's γ from the
cost model and the acceptance seen so far).
"""

from __future__ import annotations

from ppsd.errors import UserError
from sim.serve.policies.base import (AR_STEP, AcceptanceSeen, IterationCost, ServePolicy,  # noqa: F401
                                     Speculation)
from sim.serve.policies.by_batch import GammaTablePolicy, OffAbovePolicy
from sim.serve.policies.fixed import ArPolicy, EesdPolicy, PpsdPolicy
from sim.serve.policies.goodput import GoodputPolicy

POLICIES: dict[str, type[ServePolicy]] = {
    ArPolicy.name: ArPolicy,
    EesdPolicy.name: EesdPolicy,
    PpsdPolicy.name: PpsdPolicy,
    OffAbovePolicy.name: OffAbovePolicy,
    GammaTablePolicy.name: GammaTablePolicy,
    GoodputPolicy.name: GoodputPolicy,
}


def parse_policy(text: str) -> ServePolicy:
    """A policy from its spec (see the module docstring); a one-line UserError for anything else."""
    parts = [p.strip() for p in str(text).strip().split(":")]
    if not parts[0]:
        raise UserError("a policy spec is empty", f"give one of: {', '.join(POLICIES)} (e.g. eesd:24:3)")
    kind = POLICIES.get(parts[0].lower())
    if kind is None:
        raise UserError(f"policy {text!r} is not one of {', '.join(POLICIES)}", "give e.g. ar, eesd:24:3 or ppsd:20")
    return kind.from_args(parts[1:])


def parse_policies(text: str) -> list[ServePolicy]:
    """';'-separated policy specs, at least one."""
    items = [x for x in (s.strip() for s in str(text).split(";")) if x]
    if not items:
        raise UserError("--policies is empty", "give e.g. --policies 'ar;eesd:24:3;goodput:24'")
    return [parse_policy(x) for x in items]
