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

from sim.batch.costs import BatchCosts


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


def replay_group(costs: BatchCosts, group: list[tuple[np.ndarray, float]], exit_layer: int | None,
                 draft_len: int, out: BatchRun) -> None:
    """One batch of generations to the end (AR when `exit_layer` is None), added to `out`."""
    length = [len(m) for m, _ in group]  # decode positions a sequence commits
    pos = [0] * len(group)
    width = max(c for _, c in group)
    clock = 0.0
    live = list(range(len(group)))
    while live:
        batch = len(live)
        if exit_layer is None:
            step, kept = costs.ar_step(batch, width), {i: 1 for i in live}
        else:
            # never draft past what the sequence furthest from its end can still commit
            g = max(0, min(draft_len, max(length[i] - pos[i] for i in live) - 1))
            step = costs.eesd_round(batch, width, exit_layer, g)
            kept = {i: accepted_run(group[i][0], pos[i], g) + 1 for i in live}
            out.accepted.extend(kept[i] - 1 for i in live)
        clock += step
        width += max(kept.values())
        out.rounds += 1
        for i in live:
            pos[i] = min(pos[i] + kept[i], length[i])
        for i in [i for i in live if pos[i] >= length[i]]:
            out.sequence_ms.append(clock)
            out.sequence_tokens.append(length[i])
        live = [i for i in live if pos[i] < length[i]]
    out.tokens += sum(length)
    out.time_ms += clock


def replay_batches(costs: BatchCosts, stream, batch: int, exit_layer: int | None, draft_len: int = 1) -> BatchRun:
    """Every generation of `stream`, `batch` at a time (the last group may be smaller)."""
    gens = generations(stream)
    out = BatchRun()
    for k in range(0, len(gens), batch):
        replay_group(costs, gens[k: k + batch], exit_layer, draft_len, out)
    return out


def closed_form_speedup(costs: BatchCosts, batch: int, context: float, exit_layer: int, draft_len: int,
                        alpha: float) -> float:
    """EESD against AR at `batch`, i.i.d. acceptance α, every sequence live: each commits
    (1 - α^(γ+1)) / (1 - α) tokens a round, a round costs the same whatever it accepts."""
    g = int(draft_len)
    per_round = g + 1 if alpha >= 1.0 else (1.0 - alpha ** (g + 1)) / (1.0 - alpha)
    return per_round * costs.ar_step(batch, context) / costs.eesd_round(batch, context, exit_layer, g)
