"""A batch of sequences replayed round by round, as the batched runtime decodes it.

The generations of a stream (one per profiled prompt) are taken B at a time in order, as `ppsd run
--batch B` takes its prompts. In a round every live sequence drafts γ tokens (AR: decodes one) and
commits its own accepted prefix plus the verifier's token, read from its own trace; the round's
passes are priced at the live count (a finished sequence leaves the batch) and at the cache's width:
the longest prompt plus, each round, the most positions any live sequence kept (the slots all of them
rejected are cropped; the others stay as holes the attention still reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ppsd.modes import Mode
from sim.batch.costs import BatchCosts
from sim.schemes import SCHEMES


@dataclass
class BatchRun:
    """What one replay produced: decode tokens over all sequences and the time they took (ms)."""

    tokens: int = 0
    time_ms: float = 0.0
    rounds: int = 0
    accepted: list[int] = field(default_factory=list)  # per sequence and round: drafts accepted
    sequence_ms: list[float] = field(default_factory=list)  # per sequence: decode time until it left
    sequence_tokens: list[int] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * self.tokens / self.time_ms if self.time_ms > 0 else 0.0

    @property
    def ms_per_token(self) -> float:
        """Per sequence: its decode time over its tokens, the median over sequences."""
        per = [ms / t for ms, t in zip(self.sequence_ms, self.sequence_tokens) if t > 0]
        return float(np.median(per)) if per else 0.0


def generations(stream) -> list[tuple[np.ndarray, float]]:
    """The stream's generations: (match array, the context at its first position)."""
    starts = list(np.flatnonzero(stream.seg_start)) + [stream.tokens]
    return [(stream.match[a:b], float(stream.context[a])) for a, b in zip(starts, starts[1:]) if b > a]


def accepted_run(match: np.ndarray, j: int, draft_len: int) -> int:
    """Drafts accepted in a round starting at position j: the leading matches, at most γ."""
    window = match[j: j + draft_len]
    misses = np.flatnonzero(~window)
    return int(misses[0]) if len(misses) else len(window)


class Sequences:
    """The sequences of one batch as the runtime advances them: each one's generation (its match trace), the
    position it has committed to, whether its next PPSD tick is stale, the live ones and the cache's width.
    The replay below and the event model (`events.py`) move them by the same rules."""

    def __init__(self, group: list[tuple[np.ndarray, float]], crop_leading: bool = False):
        self.match = [m for m, _ in group]
        self.length = [len(m) for m in self.match]  # decode positions a sequence commits
        self.pos = [0] * len(group)
        self.stale = [False] * len(group)
        self.width = max(c for _, c in group)
        self.live = [i for i in range(len(group)) if self.length[i] > 0]
        # the serving runtime's rule (`crop_leading`): a leaving row takes with it the leading columns no live
        # row attends to; `start[i]` is the column, from the rectangle's left edge, where sequence i's prompt begins
        self.crop_leading = crop_leading
        self.start = [self.width - c for _, c in group]

    def draft_len(self, draft_len: int) -> int:
        """γ this round: never past what the sequence furthest from its end can still commit."""
        return max(0, min(draft_len, max(self.length[i] - self.pos[i] for i in self.live) - 1))

    def commit_round(self, exit_layer: int | None, g: int, out: BatchRun) -> None:
        """An AR step (`exit_layer` None) or an EESD round of γ = g: each sequence keeps its accepted prefix
        and the verifier's token; the cache widens by the most any sequence kept."""
        if exit_layer is None:
            kept = {i: 1 for i in self.live}
        else:
            kept = {i: accepted_run(self.match[i], self.pos[i], g) + 1 for i in self.live}
            out.accepted.extend(kept[i] - 1 for i in self.live)
        self.width += max(kept.values())
        out.rounds += 1
        for i in self.live:
            self.pos[i] = min(self.pos[i] + kept[i], self.length[i])

    def commit_tick(self, out: BatchRun) -> None:
        """A PPSD tick: each live sequence commits stage 2's token unless its tick is stale; a draft that misses
        makes its next tick stale. The caches widen a slot unless every live sequence turned its last into a hole."""
        out.rounds += 1
        holes = 0
        for i in self.live:
            if self.stale[i]:  # this tick's stage-2 pass worked on a rejected draft: nothing to commit
                self.stale[i] = False
                continue
            hit = bool(self.match[i][self.pos[i]])
            out.accepted.append(int(hit))
            self.pos[i] += 1
            self.stale[i] = not hit and self.pos[i] < self.length[i]
            holes += self.stale[i]
        self.width += 0 if holes == len(self.live) else 1

    def leave(self, clock: float, out: BatchRun) -> None:
        """Finished sequences leave the batch (their decode time and tokens go to `out`)."""
        for i in [i for i in self.live if self.pos[i] >= self.length[i]]:
            out.sequence_ms.append(clock)
            out.sequence_tokens.append(self.length[i])
        self.live = [i for i in self.live if self.pos[i] < self.length[i]]
        if self.crop_leading and self.live:
            cropped = min(self.start[i] for i in self.live)
            self.width -= cropped
            self.start = [x - cropped for x in self.start]

    def finish(self, clock: float, out: BatchRun) -> None:
        out.tokens += sum(self.length)
        out.time_ms += clock


def replay_group(costs: BatchCosts, group: list[tuple[np.ndarray, float]], exit_layer: int | None,
                 draft_len: int, out: BatchRun, both_cores: bool = False, crop_leading: bool = False) -> None:
    """One batch of generations to the end (AR when `exit_layer` is None; `both_cores`: AR on two threads),
    added to `out`."""
    seqs = Sequences(group, crop_leading)
    clock = 0.0
    ar_step = costs.ar_step_both_cores if both_cores else costs.ar_step
    while seqs.live:
        g = 0 if exit_layer is None else seqs.draft_len(draft_len)
        clock += ar_step(len(seqs.live), seqs.width) if exit_layer is None else \
            costs.eesd_round(len(seqs.live), seqs.width, exit_layer, g)
        seqs.commit_round(exit_layer, g, out)
        seqs.leave(clock, out)
    seqs.finish(clock, out)


def replay_ppsd_group(costs: BatchCosts, group: list[tuple[np.ndarray, float]], exit_layer: int,
                      out: BatchRun, crop_leading: bool = False) -> None:
    """One batch of generations through batched PPSD (runtime/batched_pipeline.py) to the end, added to `out`.
    The first tick feeds every first token (stage 1 alone); then every tick (`BatchCosts.ppsd_tick`) moves the
    sequences by `Sequences.commit_tick`."""
    seqs = Sequences(group, crop_leading)
    clock = costs.ppsd_tick(len(group), seqs.width, exit_layer, both=False)
    seqs.width += 1
    while seqs.live:
        clock += costs.ppsd_tick(len(seqs.live), seqs.width, exit_layer)
        seqs.commit_tick(out)
        seqs.leave(clock, out)
    seqs.finish(clock, out)


def replay_batches(costs: BatchCosts, stream, batch: int, exit_layer: int | None, draft_len: int = 1,
                   pipelined: bool = False, both_cores: bool = False, crop_leading: bool = False) -> BatchRun:
    """Every generation of `stream`, `batch` at a time (the last group may be smaller); `pipelined`: batched
    PPSD at `exit_layer` (`draft_len` unused); `both_cores`: AR on two threads; `crop_leading`: the serving
    runtime's cache rule (a leaving row takes the leading columns no live row attends to)."""
    gens = generations(stream)
    out = BatchRun()
    for k in range(0, len(gens), batch):
        if pipelined:
            replay_ppsd_group(costs, gens[k: k + batch], exit_layer, out, crop_leading)
        else:
            replay_group(costs, gens[k: k + batch], exit_layer, draft_len, out, both_cores, crop_leading)
    return out


def closed_form_speedup(costs: BatchCosts, batch: int, context: float, exit_layer: int, draft_len: int,
                        alpha: float) -> float:
    """EESD against AR at `batch`, i.i.d. acceptance α, every sequence live (the scheme's `batch_closed_forms`)."""
    return SCHEMES[Mode.EESD].batch_closed_forms(costs, batch, context, exit_layer, alpha, [draft_len])[0][0]


def closed_form_ppsd_speedup(costs: BatchCosts, batch: int, context: float, exit_layer: int, alpha: float) -> float:
    """Batched PPSD against AR at `batch`, i.i.d. acceptance α, every sequence live (the scheme's)."""
    return SCHEMES[Mode.PPSD].batch_closed_forms(costs, batch, context, exit_layer, alpha, [None])[0][0]
