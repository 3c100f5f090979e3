"""How far a prompt set's acceptance may sit from the predicting prompts' (torch-free).

Drawing n prompts from the profile's own (the bootstrap in `predict.py`) assumes the traffic is more
prompts like them. A workload that moved is not: its prompts may all draft better or worse together,
as one category of the profile drafts unlike another. The interval carries that as a shift of the
whole set's acceptance, δ ~ N(0, τ²) on the logit scale, with τ estimated from the predicting prompts
themselves: the spread between groups of them beyond what their prompt-to-prompt spread explains (a
method-of-moments random-effects estimate on per-prompt logits):

    τ² = max(0, var(group means) − σ²_within · mean(1 / group size))

The groups are
  * the profile's categories, for targets predicted from the whole pool of a profile that traced two
    or more categories (a workload of another kind may draft like any one of them);
  * otherwise contiguous blocks of the predicting prompts in the profile's order (MIN_BLOCK prompts
    or more each, at least MIN_BLOCKS of them): prompt files are written in an order (by source, by
    date), and a neighbourhood of it drafting alike says a later set may too. Blocks of a shuffled
    file estimate τ ≈ 0, which is right for prompts drawn alike.
Without enough prompts for either, τ = 0 and the interval says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_BLOCK = 3    # prompts a block needs
MIN_BLOCKS = 3   # blocks an estimate needs
MAX_BLOCKS = 6
CATEGORIES, BLOCKS, NONE = "categories", "blocks", "none"


@dataclass(frozen=True)
class Shift:
    """A prompt set's acceptance shift: sd `tau` on the logit scale, estimated from `groups` groups
    of the kind `source` (CATEGORIES, BLOCKS or NONE)."""

    tau: float
    source: str = NONE
    groups: int = 0

    def words(self) -> str:
        if self.source == NONE:
            return "no shift between prompt sets (too few predicting prompts to estimate one)"
        what = "categories" if self.source == CATEGORIES else "blocks of its prompts in the profile's order"
        return (f"a prompt set's acceptance may shift together by logit sd {self.tau:.2f}, the spread between "
                f"the profile's {self.groups} {what} beyond their prompts' own")

    def to_dict(self) -> dict:
        return {"tau": round(self.tau, 4), "source": self.source, "groups": self.groups}


def prompt_logits(prob: Sequence[np.ndarray]) -> np.ndarray:
    """Each prompt's acceptance on the logit scale (its rate kept half a position off 0 and 1)."""
    out = []
    for p in prob:
        n = max(len(p), 1)
        a = float(np.clip(np.mean(p) if len(p) else 0.5, 0.5 / n, 1.0 - 0.5 / n))
        out.append(np.log(a / (1.0 - a)))
    return np.asarray(out, dtype=float)


def between_groups_tau(logits: np.ndarray, groups: Sequence[Sequence[int]]) -> float:
    """τ of the module doc over `groups` (indices into `logits`); 0 with fewer than two groups."""
    groups = [list(g) for g in groups if len(g)]
    if len(groups) < 2:
        return 0.0
    means = np.array([logits[g].mean() for g in groups])
    within = sum(float(((logits[g] - logits[g].mean()) ** 2).sum()) for g in groups)
    dof = sum(len(g) for g in groups) - len(groups)
    sigma2 = within / dof if dof > 0 else 0.0
    excess = float(np.var(means, ddof=1)) - sigma2 * float(np.mean([1.0 / len(g) for g in groups]))
    return float(np.sqrt(max(excess, 0.0)))


def blocks(members: Sequence[int], order: Sequence[int] | None = None) -> list[list[int]]:
    """`members` cut into contiguous blocks in `order` (their ranks in the profile's order; default as
    given): as many as MAX_BLOCKS of at least MIN_BLOCK, [] when fewer than MIN_BLOCKS fit."""
    ranked = sorted(members, key=(lambda i: order[i]) if order is not None else None)
    count = min(MAX_BLOCKS, len(ranked) // MIN_BLOCK)
    if count < MIN_BLOCKS:
        return []
    return [list(b) for b in np.array_split(np.asarray(ranked, dtype=int), count)]


def estimate(logits: np.ndarray, members: Sequence[int], categories: Sequence[str] | None,
             order: Sequence[int] | None, pooled: bool) -> Shift:
    """The shift for targets predicted from `members` (indices of the predicting prompts): between
    categories when `pooled` (predicted from the whole pool) and two or more categories have two
    prompts or more among them, else between blocks in the profile's order (see the module doc)."""
    if pooled and categories:
        by_cat: dict[str, list[int]] = {}
        for i in members:
            by_cat.setdefault(str(categories[i]), []).append(i)
        groups = [g for g in by_cat.values() if len(g) >= 2]
        if len(groups) >= 2:
            return Shift(between_groups_tau(logits, groups), CATEGORIES, len(groups))
    cut = blocks(members, order)
    if cut:
        return Shift(between_groups_tau(logits, cut), BLOCKS, len(cut))
    return Shift(0.0)


def shifted(prob: np.ndarray, delta: float, rng, sampled: bool) -> np.ndarray:
    """Per-position acceptance moved by `delta` on the logit scale. β (sampled) moves position by
    position; a greedy 0/1 trace keeps its positions and flips just enough of them at random, mismatches
    to matches (δ > 0) or matches to mismatches (δ < 0), that its rate moves as its logit would."""
    if delta == 0.0 or not len(prob):
        return prob
    if sampled:
        p = np.clip(prob, 1e-6, 1.0 - 1e-6)
        return 1.0 / (1.0 + np.exp(-(np.log(p / (1.0 - p)) + delta)))
    a = float(np.mean(prob))
    a = min(max(a, 1e-6), 1.0 - 1e-6)
    target = 1.0 / (1.0 + np.exp(-(np.log(a / (1.0 - a)) + delta)))
    flip = rng.random(len(prob))
    if target > a:
        return np.where((prob < 0.5) & (flip < (target - a) / (1.0 - a)), 1.0, prob)
    return np.where((prob >= 0.5) & (flip < (a - target) / a), 0.0, prob)


def shift_alpha(alpha: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Pooled acceptances moved by `delta` on the logit scale (the sweep's closed-form draws)."""
    a = np.clip(alpha, 1e-6, 1.0 - 1e-6)
    return 1.0 / (1.0 + np.exp(-(np.log(a / (1.0 - a)) + delta)))
