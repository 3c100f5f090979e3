"""Acceptance from prompt to prompt: the predicting profile's traces per prompt, the prompts a question
is about (`Targets`), and the streams that lay one over the other."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ppsd.exit_heads import SHARED
from ppsd.errors import UserError
from sim.intervals.shift import Shift, estimate, prompt_logits, shifted
from sim.model.streams import Stream


MIN_STRATUM = 3  # predicting prompts a category needs before its targets are predicted from it alone


@dataclass
class PromptTraces:
    """One exit layer's per-prompt acceptance on the predicting profile: `prob[i]` per position is
    1/0 (the recorded match, greedy) or β (sampled: temperature > 0)."""

    exit_layer: int
    prompt_ids: list[str]
    prob: list[np.ndarray]
    start_context: list[float]
    sampled: bool = False
    categories: list[str] | None = None  # each prompt's category (None: not known)
    order: list[int] | None = None       # each prompt's rank in the profile's prompt order (None: as listed)
    confidence: list[np.ndarray] | None = None  # each prompt's draft confidences (traces that have them)

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def stratum(self, category: str | None) -> list[int]:
        """The prompts of `category` when it has at least MIN_STRATUM of them here, else [] (two
        prompts' mean is noisier than the whole pool's bias: a category's prompts differ by up to
        0.4 in acceptance among themselves)."""
        if category is None or not self.categories:
            return []
        mine = [i for i, c in enumerate(self.categories) if c == category]
        return mine if len(mine) >= MIN_STRATUM else []

    def by_category(self, category: str | None) -> list[int]:
        """The prompts that predict a target of `category`: its stratum, else every prompt."""
        return self.stratum(category) or list(range(len(self.prompt_ids)))

    def shift(self, members: Sequence[int]) -> Shift:
        """The acceptance shift a set predicted from `members` may carry (`sim.intervals.shift`):
        between categories when they are the whole pool, else between blocks in the profile's order."""
        pooled = len(set(members)) == len(self.prompt_ids)
        return estimate(prompt_logits(self.prob), list(members), self.categories, self.order, pooled)

    @property
    def alpha(self) -> float:
        total = sum(len(p) for p in self.prob)
        return float(sum(p.sum() for p in self.prob) / total) if total else 0.0


def prompt_traces(profile, exit_layer: int, *, head: str = SHARED, prompt_ids: Sequence[str] | None = None,
                  category: str | None = None, temperature: float = 0.0) -> PromptTraces:
    """The predicting profile's traces at one exit (only `prompt_ids` / `category` when given)."""
    table = _trace_table(profile, head, temperature)
    tr = table.get(int(exit_layer))
    if tr is None:
        raise UserError(f"profile {profile.path} has no acceptance trace for exit layer {exit_layer}",
                        f"use an exit layer in {sorted(table)}")
    keep = set(map(str, prompt_ids)) if prompt_ids is not None else None
    sampled = bool(temperature and temperature > 0)
    ids, prob, ctx, cats, conf = [], [], [], [], []
    for i, pid in enumerate(tr.prompt_ids):
        if keep is not None and pid not in keep:
            continue
        if category is not None and tr.categories[i] != category:
            continue
        if not len(tr.match[i]):
            continue
        ids.append(pid)
        prob.append(tr.beta[i].astype(float) if sampled else tr.match[i].astype(float))
        ctx.append(float(tr.start_context[i]))
        cats.append(str(tr.categories[i]))
        if tr.confidence is not None:
            conf.append(tr.confidence[i])
    if not ids:
        raise UserError(f"no prompt of profile {profile.path} has acceptance positions at exit {exit_layer}"
                        + (f" among {len(keep)} prediction prompts" if keep is not None else ""),
                        "predict from prompts the profile traced")
    rank = {str(g.get("prompt_id")): i for i, g in enumerate(profile.generations())}
    order = [rank.get(pid, len(rank) + i) for i, pid in enumerate(ids)]
    # (the legacy β along the greedy trajectory at T > 0 has no confidences that belong to it)
    own = not sampled or profile.beta_trajectory == "sampled"
    confidence = conf if tr.confidence is not None and own else None
    return PromptTraces(int(exit_layer), ids, prob, ctx, sampled, cats, order, confidence)


def _trace_table(profile, head: str, temperature: float) -> dict:
    """Per exit, each prompt's trace as `sim.model.streams.trace_stream` reads it at this temperature (β
    along sampled trajectories where the profile holds them)."""
    from sim.model import streams

    if temperature and temperature > 0:
        t = profile.match_temperature(temperature)
        if profile.beta_trajectory == "sampled":
            return streams._sampled_traces(profile, head, t)
    return streams._traces(profile, head)


@dataclass(frozen=True)
class Targets:
    """The prompts a question is about: each one's prompt length (its first token's context) and
    the tokens it generates."""

    start_context: tuple[float, ...]
    lengths: tuple[int, ...]
    categories: tuple[str | None, ...] | None = None  # each target's category, when known

    @classmethod
    def from_generations(cls, gens: Sequence[dict]) -> Targets:
        def plen(g):
            pt = g.get("prompt_tokens")
            return float(len(pt) if isinstance(pt, (list, tuple)) else (pt or g.get("prompt_len") or 0))

        cats = tuple(None if g.get("category") is None else str(g["category"]) for g in gens)
        return cls(tuple(plen(g) for g in gens), tuple(max(1, len(g.get("token_ids") or [])) for g in gens),
                   cats if any(c is not None for c in cats) else None)

    def category(self, i: int) -> str | None:
        return self.categories[i] if self.categories else None

    def __len__(self) -> int:
        return len(self.lengths)


def overlay_stream(traces: PromptTraces, picks: Sequence[int], targets: Targets, rng=None,
                   deltas: Sequence[float] | None = None) -> Stream:
    """Target i decoded with prompt picks[i]'s acceptance: its trace tiled or cut to the target's
    length, at the target's contexts (one generation per target); with `deltas`, target i's acceptance
    moved by deltas[i] on the logit scale (`sim.intervals.shift.shifted`)."""
    segs, ctx, conf = [], [], []
    for i, j in enumerate(picks):
        L = int(targets.lengths[i])
        seg = np.resize(traces.prob[int(j)], L)
        if deltas is not None and deltas[i]:
            seg = shifted(seg, float(deltas[i]), rng if rng is not None else np.random.default_rng(0), traces.sampled)
        segs.append(seg)
        ctx.append(targets.start_context[i] + np.arange(L, dtype=float))
        if traces.confidence is not None:  # (a shift moves the matches, not the drafts' confidence)
            conf.append(np.resize(traces.confidence[int(j)], L))
    return _stream(segs, ctx, traces.sampled, rng, "trace-overlay", conf if traces.confidence is not None else None)


def strata(traces: PromptTraces, targets: Targets) -> list[tuple[list[int], list[int]]]:
    """(predicting prompts, targets) per stratum. Targets of a category the predicting profile traced
    with at least MIN_STRATUM prompts are predicted from that category's prompts alone: acceptance
    differs several-fold between categories (at exit 24 the shared head matches 0.11 on translation
    and 0.38 on coding), so a measured set whose mix differs from the profile's would be mispredicted
    by the mix alone. The others, and every target when categories are not known, are predicted
    from every predicting prompt."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in range(len(targets)):
        groups.setdefault(tuple(traces.by_category(targets.category(i))), []).append(i)
    return [(list(src), tgt) for src, tgt in groups.items()]


def pooled_stream(traces: PromptTraces, targets: Targets, seed: int = 0) -> Stream:
    """The point prediction for prompts the profile never saw. Per stratum (`strata`), its
    predicting prompts' traces one after another, cut into generations of its targets' lengths and
    contexts, the targets cycled until the pool is spent, so every predicting position counts once.
    (Cutting only sum(targets) positions would read the first few predicting prompts alone: 8
    targets of 64 tokens read 8 of 26 prompts, from the categories listed first.) Strata get
    R · (their targets' tokens) positions with one R for all, so each weighs as its share of the
    targets (a pool shorter than that wraps round). Position order within a trace (runs of matches)
    is kept; no measured trace is read."""
    groups = strata(traces, targets)
    pools = [np.concatenate([traces.prob[j] for j in src]) for src, _ in groups]
    sure = None if traces.confidence is None else [np.concatenate([traces.confidence[j] for j in src])
                                                   for src, _ in groups]
    want = [int(sum(targets.lengths[i] for i in tgt)) for _, tgt in groups]
    rounds = max(max(len(p) / w, 1.0) for p, w in zip(pools, want))
    segs, ctx, conf = [], [], []
    for g, (pool, w, (_, tgt)) in enumerate(zip(pools, want, groups)):
        total = max(int(round(rounds * w)), w)
        flat = np.resize(pool, total)
        flat_conf = None if sure is None else np.resize(sure[g], total)
        at, i = 0, 0
        while at < total:
            k = tgt[i % len(tgt)]
            n = min(int(targets.lengths[k]), total - at)  # the last generation may stop short: the pool is spent
            segs.append(flat[at:at + n])
            ctx.append(targets.start_context[k] + np.arange(n, dtype=float))
            if flat_conf is not None:
                conf.append(flat_conf[at:at + n])
            at, i = at + n, i + 1
    rng = np.random.default_rng([int(seed), traces.exit_layer, 11])
    return _stream(segs, ctx, traces.sampled, rng, "trace-pooled", conf if sure is not None else None)


def lengths_stream(targets: Targets) -> Stream:
    """The targets' contexts with no acceptance at all (AR reads only the contexts)."""
    segs = [np.zeros(int(L)) for L in targets.lengths]
    ctx = [targets.start_context[i] + np.arange(targets.lengths[i], dtype=float) for i in range(len(targets))]
    return _stream(segs, ctx, False, None, "none")


def _stream(segs, ctx, sampled: bool, rng, source: str, conf_segs=None) -> Stream:
    prob = np.concatenate(segs)
    if sampled:
        rng = rng if rng is not None else np.random.default_rng(0)
        match = rng.random(len(prob)) < prob
    else:
        match = prob >= 0.5
    seg = np.zeros(len(prob), dtype=bool)
    seg[np.cumsum([0, *[len(s) for s in segs[:-1]]])] = True
    conf = None if conf_segs is None or sampled else np.concatenate(conf_segs)
    return Stream(match.astype(bool), np.concatenate(ctx), seg, source if not sampled else source + "-beta", conf)
