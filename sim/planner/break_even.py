"""Break-even acceptance: how far a plan's acceptance may fall before it stops paying (torch-free).

A speculative plan's speedup rises with its acceptance α (the share of drafted positions that match).
Its break-even acceptance is the α at which it ties AR: on one thread / device (`alpha`, against
`speedup_vs_ar`) and within the same budget (`alpha_tp`, against `speedup_vs_ar_tp`). A user who
profiled α = 0.54 and reads "pays while acceptance ≥ 0.41" knows how much worse their own traffic may
draft before the plan turns into a loss.

How: the plan's closed forms (its scheme's `closed_forms`) on an α grid, scaled to the replayed point
(point × s(α) / s(α_replayed), as the sweep's intervals scale their draws), and the α where that
crosses 1. The same-budget curve prices the plan on its own thread tables. 0.0: the plan pays
at any acceptance; None: it does not pay even with every draft accepted, or it has no closed form
(stages sharing a device).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.plan import Result, SimulatedDetails

# α points the curve is priced at (linear in between). Coarse near 1: a PPSD closed form at α sums
# cycles up to the α-th power's tail (~log(1e-17) / log(α) of them), and α = 1 has its own form.
GRID = np.concatenate([np.linspace(0.0, 0.9, 19), [0.95, 0.975, 1.0]])
LOW_TOP = 0.9  # the grid is priced up to here first, beyond only for a plan that pays nowhere below


NO_CLOSED_FORM = "no closed form (stages share a device): simulate it at other acceptances"


@dataclass(frozen=True)
class BreakEven:
    """A plan's break-even acceptance against AR on one unit (`alpha`) and on the whole budget
    (`alpha_tp`; None without same-budget figures), beside the acceptance it was priced at (`priced`).
    A figure is None where no acceptance up to every draft accepted makes the plan pay, or, with
    `note`, where it cannot be priced."""

    alpha: float | None
    alpha_tp: float | None
    priced: float | None
    note: str | None = None

    def words(self, same_budget: bool = False, with_priced: bool = True) -> str:
        """"pays while acceptance ≥ 0.41; profiled 0.54", or why no such figure exists."""
        alpha = self.alpha_tp if same_budget else self.alpha
        priced = "" if self.priced is None or not with_priced else f"; profiled {self.priced:.2f}"
        if self.note:
            return f"break-even acceptance: {self.note}"
        if alpha is None:
            return f"does not pay at any acceptance{priced}"
        if alpha <= 0.0:
            return f"pays at any acceptance{priced}"
        if self.priced is not None and alpha > self.priced:
            return f"needs acceptance ≥ {alpha:.2f} to pay{priced}"
        return f"pays while acceptance ≥ {alpha:.2f}{priced}"


def crossing(alphas: np.ndarray, speedups: np.ndarray) -> float | None:
    """The lowest α where `speedups` reaches 1 (linear between grid points; 0.0 when it starts
    there), None when it never does."""
    above = np.nonzero(speedups >= 1.0)[0]
    if not len(above):
        return None
    i = int(above[0])
    if i == 0:
        return 0.0
    a0, a1, s0, s1 = alphas[i - 1], alphas[i], speedups[i - 1], speedups[i]
    return float(a0 + (1.0 - s0) * (a1 - a0) / (s1 - s0))


def break_even(profile, result: Result, context: float, memo: dict | None = None) -> BreakEven | None:
    """The break-even acceptance of a simulated speculative Result (None for AR, or without a
    replayed acceptance), its curves priced at `context`. `memo` shares the plans' closed forms
    between calls (a PPSD plan within a budget of one thread a stage prices as it does alone)."""
    plan, d = result.plan, result.details
    priced = d.stream_alpha if isinstance(d, SimulatedDetails) else None
    if not plan.scheme.speculative or priced is None or not result.speedup_vs_ar:
        return None
    curves = _Curves(plan, float(context), float(min(max(priced, 0.0), 1.0)), {} if memo is None else memo)
    try:
        alpha = curves.crossing(profile, result.speedup_vs_ar)
        alpha_tp = None
        view = _budget_view(profile, plan, d)
        if result.speedup_vs_ar_tp and view is not None:
            alpha_tp = curves.crossing(view, result.speedup_vs_ar_tp)
    except (ValueError, ZeroDivisionError):
        return BreakEven(None, None, priced, NO_CLOSED_FORM)
    return BreakEven(alpha, alpha_tp, priced)


@dataclass
class _Curves:
    """One plan's speedup curves, its closed forms kept in `memo` by (tables, plan, α)."""

    plan: object
    context: float
    at: float     # the acceptance the point was replayed at
    memo: dict

    def times(self, view, alphas) -> np.ndarray:
        from sim.schemes import scheme_for

        key = (id(view), repr(self.plan), self.context)
        known = self.memo.setdefault(key, {})
        missing = [float(a) for a in alphas if float(a) not in known]
        if missing:
            known.update(zip(missing, scheme_for(self.plan).closed_forms(view, self.plan, missing, self.context)))
        return np.array([known[float(a)] for a in alphas])

    def crossing(self, view, point: float) -> float | None:
        """Where point × s(α) / s(at) reaches 1 (see the module doc; AR's time cancels out of the ratio,
        so the plan's own times on `view` price it): the grid up to LOW_TOP first, then
        α = 1, and between them only when the plan first pays there (a PPSD closed form costs most
        near α = 1, where it sums thousands of cycles)."""
        low = np.unique(np.append(GRID[GRID <= LOW_TOP], self.at))
        t_low = self.times(view, low)
        scale = point * float(np.interp(self.at, low, t_low))  # point × t(at) / t(α) is the curve
        alpha = crossing(low, scale / t_low)
        if alpha is not None or scale / float(self.times(view, [1.0])[0]) < 1.0:
            return alpha
        top = np.concatenate([low[-1:], GRID[GRID > max(LOW_TOP, self.at)]])
        return crossing(top, scale / self.times(view, top))


def _budget_view(profile, plan, details):
    """The plan's tables within its budget (`sim.model.budget`), or None without same-budget figures."""
    from sim.model.budget import default_budget, units_for

    budget = default_budget(profile, _units(details))
    if budget is None:
        return None
    return profile.at_parallel(units_for(plan, budget, profile.parallel_units()))


def _units(details) -> int | None:
    """The budget's units from its label ("2 cores", "4 GPUs")."""
    label = getattr(details, "budget", None)
    try:
        return int(str(label).split()[0]) if label else None
    except ValueError:
        return None


def attach_break_even(profile, results: Sequence[Result], context: float | None = None) -> None:
    """Write every speculative result's break-even acceptance into its details in place
    (`break_even_alpha`, `break_even_alpha_tp`, `break_even_note`), priced at `context` (default:
    the profile's `mean_decode_context`)."""
    ctx = mean_decode_context(profile) if context is None else float(context)
    memo: dict = {}
    for r in results:
        be = break_even(profile, r, ctx, memo)
        if be is not None:
            r.details.break_even_alpha, r.details.break_even_alpha_tp = be.alpha, be.alpha_tp
            r.details.break_even_note = be.note


def mean_decode_context(profile) -> float:
    """The mean context of a decoded token over the profile's generations (prompt + half the new
    tokens); the smallest profiled context without generations."""
    gens = profile.generations() if profile.has_acceptance else []
    if not gens:
        return float(profile.context_values[0])
    ctx = [len(g.get("prompt_tokens") or []) + len(g.get("token_ids") or []) / 2 for g in gens]
    return float(np.mean(ctx))
