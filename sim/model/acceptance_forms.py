"""Acceptance in the forms papers report, turned into ppsd's per-position α (torch-free, pure).

Three conventions circulate, and feeding one where another is meant is off by tens of percent
without any error:
  α  (ppsd)        probability that one drafted position matches the full model's token;
  R  (LayerSkip)   acceptance rate = accepted drafts / drafted tokens = E[a] / γ;
  τ  (Spec-Bench)  mean accepted tokens per verification round: tokens one round commits, the
                   verifier's bonus token included, so τ = E[a] + 1 ∈ [1, γ + 1].
R and τ belong to the EESD draft-and-verify round at draft length γ (γ drafts, then one verify
pass keeps the longest matching prefix a ∈ [0, γ] plus one token): that is how papers report them,
and what every function here means by them. With independent positions of rate α:
  τ(α, γ) = 1 + α + … + α^γ = (1 − α^(γ+1)) / (1 − α),
  R(α, γ) = (τ − 1) / γ = α(1 − α^γ) / ((1 − α)γ).
Both rise strictly with α on [0, 1], so each has one inverse (bisection here, exact to ~1e-16).

A PPSD "round" is a different thing: it runs until the first rejection, so its τ = 1 / (1 − α)
(no γ). That τ is not the one these functions take: convert it by hand, α = 1 − 1/τ, and give --alpha.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ppsd.errors import UserError

ASSUMPTION = "independent positions"
_BISECTION_STEPS = 200  # the bracket halves each step; 2^-60 < 1e-18 already, the rest stops at float resolution


class AcceptanceForm(StrEnum):
    """Which convention a given acceptance figure follows (the CLI option / CSV column name)."""

    ALPHA = "alpha"                      # per-position match probability (ppsd)
    ACCEPTANCE_RATE = "acceptance_rate"  # accepted drafts / drafted tokens at γ (LayerSkip)
    MEAN_ACCEPTED = "mean_accepted"      # tokens per draft-and-verify round at γ, bonus included (Spec-Bench)

    @property
    def needs_draft_len(self) -> bool:
        return self is not AcceptanceForm.ALPHA

    @property
    def option(self) -> str:
        return "--" + self.value.replace("_", "-")

    @property
    def words(self) -> str:
        return {AcceptanceForm.ALPHA: "α", AcceptanceForm.ACCEPTANCE_RATE: "acceptance rate",
                AcceptanceForm.MEAN_ACCEPTED: "mean accepted tokens per round"}[self]


def _check_draft_len(draft_len) -> int:
    if draft_len is None or isinstance(draft_len, bool) or int(draft_len) != draft_len or int(draft_len) < 1:
        raise UserError(f"draft length {draft_len!r} is not a positive integer",
                        "give --draft-len G: the γ (drafts per round) the figure was measured at")
    return int(draft_len)


def _check_alpha(alpha) -> float:
    a = float(alpha)
    if not 0.0 <= a <= 1.0:  # NaN fails too
        raise UserError(f"α {alpha} is outside [0, 1]", "give a per-position acceptance probability 0 <= α <= 1")
    return a


def _accepted_drafts(alpha: float, gamma: int) -> float:
    """E[a] = α + α² + … + α^γ by Horner: no cancellation near α = 1, unlike the closed form."""
    total = 0.0
    for _ in range(gamma):
        total = alpha * (1.0 + total)
    return total


def mean_accepted(alpha: float, draft_len: int) -> float:
    """τ: tokens one EESD draft-and-verify round commits (bonus token included), i.i.d. rate α."""
    return 1.0 + _accepted_drafts(_check_alpha(alpha), _check_draft_len(draft_len))


def acceptance_rate(alpha: float, draft_len: int) -> float:
    """R = E[accepted drafts] / γ for EESD rounds at draft length γ, i.i.d. rate α."""
    gamma = _check_draft_len(draft_len)
    return _accepted_drafts(_check_alpha(alpha), gamma) / gamma


def _alpha_for_accepted_drafts(target: float, gamma: int) -> float:
    """The α ∈ [0, 1] with E[a](α, γ) = target ∈ [0, γ] (strictly increasing: bisection)."""
    if target <= 0.0:
        return 0.0
    if target >= gamma:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if _accepted_drafts(mid, gamma) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def alpha_from_mean_accepted(tau: float, draft_len: int) -> float:
    """α from Spec-Bench's τ (EESD round at γ = draft_len, bonus token included); τ ∈ [1, γ+1]."""
    gamma = _check_draft_len(draft_len)
    t = float(tau)
    if not 1.0 <= t <= gamma + 1:
        hint = (" (a τ above γ+1 may be a PPSD-style τ = 1/(1−α): convert it as α = 1 − 1/τ and give --alpha)"
                if t > gamma + 1 else "")
        raise UserError(f"mean accepted tokens τ = {tau} is outside [1, {gamma + 1}], "
                        f"the range attainable at γ={gamma}",
                        "τ counts tokens per draft-and-verify round including the verifier's bonus token: give "
                        f"1 <= τ <= γ+1, or the γ it was measured at with --draft-len{hint}")
    return _alpha_for_accepted_drafts(t - 1.0, gamma)


def alpha_from_acceptance_rate(rate: float, draft_len: int) -> float:
    """α from LayerSkip's R = accepted drafts / drafted tokens at γ = draft_len; R ∈ [0, 1]."""
    gamma = _check_draft_len(draft_len)
    r = float(rate)
    if not 0.0 <= r <= 1.0:
        raise UserError(f"acceptance rate R = {rate} is outside [0, 1]",
                        "R is accepted drafts / drafted tokens: give 0 <= R <= 1 (mean accepted tokens per round "
                        "is --mean-accepted)")
    # solve E[a] = γR directly, not through τ = 1 + γR: keeps the digits of a small R
    return _alpha_for_accepted_drafts(gamma * r, gamma)


@dataclass(frozen=True)
class AlphaConversion:
    """α per position and the one-line statement of how it was obtained (for the user to check)."""

    alpha: float
    statement: str


@dataclass(frozen=True)
class AcceptanceInput:
    """An acceptance figure as the user gave it: its form, value and (for R, τ) draft length γ."""

    form: AcceptanceForm
    value: float
    draft_len: int | None = None

    def to_alpha(self) -> AlphaConversion:
        return to_alpha(self.form, self.value, self.draft_len)


def to_alpha(form: AcceptanceForm | str, value: float, draft_len: int | None = None) -> AlphaConversion:
    """A user's (form, value, γ) as α per position plus a statement like
    "acceptance rate 0.6 at γ=4 → α = 0.810 per position (independent positions)".
    R and τ need γ (UserError without it); values outside the attainable range are UserErrors."""
    form = AcceptanceForm(form)
    if form is AcceptanceForm.ALPHA:
        v = float(value)
        if not 0.0 <= v <= 1.0:
            hint = (f"; if {value} is mean accepted tokens per round (τ >= 1), give --mean-accepted {value} "
                    "--draft-len G" if v > 1 else "")
            raise UserError(f"α {value} is outside [0, 1]",
                            f"give --alpha A with 0 <= A <= 1, the per-position acceptance probability{hint}")
        return AlphaConversion(v, f"α = {v:g} per position (given)")
    if draft_len is None:
        extra = (" (for a PPSD-style τ, where a round runs until the first rejection, α = 1 − 1/τ: give --alpha)"
                 if form is AcceptanceForm.MEAN_ACCEPTED else "")
        raise UserError(f"{form.option} {value} needs the draft length it was measured at",
                        f"add --draft-len G (drafts per EESD draft-and-verify round){extra}")
    gamma = _check_draft_len(draft_len)
    if form is AcceptanceForm.ACCEPTANCE_RATE:
        alpha = alpha_from_acceptance_rate(value, gamma)
    else:
        alpha = alpha_from_mean_accepted(value, gamma)
    return AlphaConversion(alpha, f"{form.words} {float(value):g} at γ={gamma} → α = {alpha:.3f} per position "
                                  f"({ASSUMPTION})")
