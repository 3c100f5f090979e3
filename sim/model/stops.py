"""Confidence stops: what a draft-stop policy τ reads from the traces (each draft's confidence, the
exit head's top-1 probability) and the rules every scheme that stops on it shares.

EESD stops a round's drafting after its first draft less confident than τ; PPSD's stage 1 waits
for the verdict on such a draft instead of running it; transformers' assisted generation does what
EESD does at its `assistant_confidence_threshold`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppsd.errors import UserError
from sim.model.streams import Stream


@dataclass(frozen=True)
class StopOdds:
    """What a confidence stop τ sees at one exit, as i.i.d. odds per draft: how often a draft is less
    confident than τ, and how often a draft matches when it is (not) (`stop_odds`)."""

    low: float        # P(confidence < τ)
    match_high: float  # P(match | confidence >= τ)
    match_low: float   # P(match | confidence < τ)

    @property
    def alpha(self) -> float:
        return (1.0 - self.low) * self.match_high + self.low * self.match_low

    def at(self, alpha: float) -> StopOdds:
        """The same odds at acceptance α: both conditional match rates scaled by α over this α
        (the planner's what-if and break-even), each capped at 1."""
        base = self.alpha
        f = float(alpha) / base if base > 0 else 0.0
        return StopOdds(self.low, min(1.0, self.match_high * f), min(1.0, self.match_low * f))


def drafts_before_stop(conf, start: int, cap: int, draft_stop: float) -> int:
    """How many drafts a round from `start` makes under a confidence stop: up to `cap`, stopping after
    the first whose confidence (`conf[start + q]`) is below τ. The event models' rule, one round at a
    time (`stopped_rounds` is the same rule for every position at once)."""
    return next((q + 1 for q in range(cap) if conf[start + q] < draft_stop), cap)


def require_confidence(stream: Stream) -> np.ndarray:
    """The stream's confidences, or a UserError: a confidence stop is priced from recorded traces."""
    if stream.confidence is None:
        raise UserError(f"a confidence stop needs each draft's confidence, which a {stream.source!r} acceptance "
                        "stream does not carry",
                        "simulate with --acceptance trace on a profile traced with confidences (greedy, or "
                        "sampled trajectories at the temperature)")
    return np.asarray(stream.confidence, dtype=float)


def stop_odds(profile, exit_layer: int, head: str, draft_stop: float, temperature: float = 0.0) -> StopOdds:
    """The i.i.d. odds of a confidence stop τ at an exit, over every traced position of the profile:
    greedy, its matches; at T > 0, the acceptance probability β along the trajectories sampled at T."""
    profile.require_confidence(head, temperature)
    sampled = bool(temperature and temperature > 0)
    df = profile.beta_rows(temperature, head) if sampled else profile.acceptance
    df = df[(df["head"] == head) & (df["exit_layer"] == int(exit_layer))]
    if df.empty:
        raise UserError(f"profile {profile.path} has no acceptance trace for exit layer {exit_layer}",
                        "choose a traced exit layer")
    low = df["confidence"].to_numpy(dtype=float) < draft_stop
    match = df["beta"].to_numpy(dtype=float) if sampled else df["match"].to_numpy().astype(float)
    rate = lambda sel: float(match[sel].mean()) if sel.any() else 0.0  # noqa: E731
    return StopOdds(float(low.mean()), rate(~low), rate(low))
