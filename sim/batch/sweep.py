"""Plans ranked at a batch size, and up to which batch size speculation pays.

Every EESD plan (exit layer × γ, the shared or trained head) is screened by its closed form at batch B,
and the best ones are replayed over the profile's traces against AR replayed over the same generations at
the same B (`replay.py`); the speedup is in throughput, tokens a second over all sequences. The curve
takes the best EESD plan at each batch size the profile measured; a scheme pays up to the largest size
from which on every smaller one pays.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ppsd.exit_heads import SHARED
from sim.batch.costs import batch_costs, check_batch
from sim.batch.replay import closed_form_speedup, replay_batches
from sim.model.streams import trace_stream

MAX_GAMMA = 8
REPLAY_TOP = 12  # plans the closed form ranks highest, replayed over the traces


@dataclass(frozen=True)
class BatchPoint:
    """One plan at one batch size (speeds in tokens/s over the whole batch)."""

    plan: str
    exit_layer: int | None
    draft_len: int | None
    exit_head: str
    batch: int
    tokens_per_s: float
    ar_tokens_per_s: float
    speedup_vs_ar: float  # throughput against AR at the same batch size
    ms_per_token: float  # per sequence, median
    ar_ms_per_token: float
    acceptance_rate: float | None = None

    def to_json_dict(self) -> dict:
        return asdict(self)


def _label(exit_layer: int, draft_len: int, head: str) -> str:
    return f"EESD E={exit_layer} γ={draft_len}" + ("" if head == SHARED else f" {head}")


def predict(profile, exit_layer: int, draft_len: int, batch: int, head: str = SHARED, ar=None) -> BatchPoint:
    """EESD E, γ at `batch` against AR at `batch`, over the exit layer's traces (`ar`: AR's replay, reused)."""
    check_batch(profile, batch)
    costs = batch_costs(profile, head)
    stream = trace_stream(profile, exit_layer, head=head)
    ar = ar or replay_batches(costs, stream, batch, None)
    run = replay_batches(costs, stream, batch, exit_layer, draft_len)
    rate = sum(run.accepted) / (len(run.accepted) * draft_len) if run.accepted and draft_len else None
    return BatchPoint(_label(exit_layer, draft_len, head), exit_layer, draft_len, head, batch, run.tokens_per_s,
                      ar.tokens_per_s, run.tokens_per_s / ar.tokens_per_s, run.ms_per_token, ar.ms_per_token, rate)


def screen(profile, batch: int, heads, gammas, exits=None) -> list[tuple[float, str, int, int]]:
    """Every EESD plan by its closed form at `batch` (i.i.d. acceptance at its exit's mean, the profile's
    mean context), best first: (speedup, head, exit layer, γ)."""
    context = float(np.mean([g.get("prompt_len", 0) for g in profile.generations()] or [0])) + 32.0
    out = []
    for head in heads:
        costs = batch_costs(profile, head)
        for exit_layer, alpha in sorted(profile.alpha_by_exit(head=head).items()):
            if exits is None or exit_layer in exits:
                out += [(closed_form_speedup(costs, batch, context, exit_layer, g, alpha), head, exit_layer, g)
                        for g in gammas]
    return sorted(out, key=lambda x: -x[0])


def rank(profile, batch: int, heads=(SHARED,), gammas=range(1, MAX_GAMMA + 1), exits=None,
         replay_top: int = REPLAY_TOP) -> list[BatchPoint]:
    """The EESD plans the closed form ranks highest at `batch`, replayed over the profile's traces, best first."""
    check_batch(profile, batch)
    points, ars = [], {}
    for _, head, exit_layer, g in screen(profile, batch, heads, gammas, exits)[:replay_top]:
        if (head, exit_layer) not in ars:
            ars[(head, exit_layer)] = replay_batches(batch_costs(profile, head),
                                                     trace_stream(profile, exit_layer, head=head), batch, None)
        points.append(predict(profile, exit_layer, g, batch, head, ars[(head, exit_layer)]))
    return sorted(points, key=lambda p: -p.speedup_vs_ar)


def curve(profile, heads=(SHARED,), gammas=range(1, MAX_GAMMA + 1), exits=None) -> list[BatchPoint]:
    """The best EESD plan at each batch size the profile measured."""
    return [rank(profile, b, heads, gammas, exits)[0] for b in profile.batch.sizes]


def paying_batch(speedup_by_batch: dict[int, float]) -> int | None:
    """The largest batch size up to which the speedup beats AR at every smaller size (None: not even at the first)."""
    last = None
    for batch in sorted(speedup_by_batch):
        if speedup_by_batch[batch] <= 1.0:
            break
        last = batch
    return last


def pays_up_to(points: list[BatchPoint]) -> int | None:
    """`paying_batch` of the best plan at each batch size."""
    return paying_batch({p.batch: p.speedup_vs_ar for p in points})
