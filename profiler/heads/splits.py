"""Deterministic, disjoint training and held-out prompt splits (torch-free).

Within each category, in file order, the held-out prompts are the last `heldout_per_category` and
the training prompts the first `train_per_category` of what remains, so the two never overlap
whatever K is, and prompts between them belong to neither split (the "outside both splits" slice
that an independent check can use).
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsd.errors import UserError

DEFAULT_PROMPTS = "spec-bench"
DEFAULT_TRAIN_PER_CATEGORY = 8
DEFAULT_HELDOUT_PER_CATEGORY = 3


@dataclass(frozen=True)
class Splits:
    train: list          # list[Prompt]
    heldout: list        # list[Prompt]
    source: str


def read_all(source: str | None):
    """Every prompt of a source in file order: "spec-bench", a JSONL path, or "builtin"."""
    from ppsd.prompts import load_prompts

    return load_prompts(None if source in (None, "builtin") else source)


def split_prompts(prompts, train_per_category: int = DEFAULT_TRAIN_PER_CATEGORY,
                  heldout_per_category: int = DEFAULT_HELDOUT_PER_CATEGORY, source: str = "") -> Splits:
    if train_per_category < 1:
        raise UserError(f"--per-category must be at least 1 (got {train_per_category})", "give a positive number")
    if heldout_per_category < 0:
        raise UserError(f"--heldout-per-category must be 0 or more (got {heldout_per_category})",
                        "give a non-negative number")
    by_cat: dict[str, list] = {}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(p)
    train, held = [], []
    for ps in by_cat.values():
        # A category too small for both keeps at least one training prompt when it can.
        n_held = min(heldout_per_category, max(len(ps) - 1, 0))
        cut = len(ps) - n_held
        train.extend(ps[:min(train_per_category, cut)])
        held.extend(ps[cut:])
    if not train:
        raise UserError("the prompt set yields no training prompts", "give a larger prompt file")
    return Splits(train, held, source)


def default_splits(source: str | None = DEFAULT_PROMPTS, train_per_category: int = DEFAULT_TRAIN_PER_CATEGORY,
                   heldout_per_category: int = DEFAULT_HELDOUT_PER_CATEGORY) -> Splits:
    return split_prompts(read_all(source), train_per_category, heldout_per_category, source or "builtin")
