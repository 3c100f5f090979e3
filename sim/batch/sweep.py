"""Plans ranked at a batch size, and up to which batch size speculation pays.

Every EESD plan (exit layer × γ, the shared or trained head) and every batched PPSD plan (exit layer, two
stages) is screened by its closed form at batch B, and the best of each scheme are replayed over the
profile's traces against AR replayed over the same generations at the same B (`replay.py`); the speedup is
in throughput, tokens a second over all sequences, against AR on one thread. The curve takes a scheme's
best plan at each batch size the profile measured; a scheme pays up to the largest size from which on
every smaller one pays.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ppsd.exit_heads import SHARED
from ppsd.modes import Mode
from sim.batch.costs import batch_costs, check_batch
from sim.batch.replay import replay_batches
from sim.model.streams import trace_stream
from sim.schemes import scheme as scheme_of

MAX_GAMMA = 8
REPLAY_TOP = 12  # plans of a scheme the closed form ranks highest, replayed over the traces
CURVE_TOP = 4  # the same for each point of the curve, which keeps a scheme's best plan only
SCHEMES = (Mode.EESD, Mode.PPSD)


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
    scheme: str = Mode.EESD.value
    # PPSD, where the profile timed AR on two threads: against the faster AR on the two cores its stages use
    ar_both_cores_tokens_per_s: float | None = None
    speedup_vs_ar_tp: float | None = None

    def to_json_dict(self) -> dict:
        return asdict(self)


def label(scheme: Mode, exit_layer: int, draft_len: int | None, head: str) -> str:
    """The plan's name in tables and validation rows ("EESD E=24 γ=2", "PPSD E=24 k=2")."""
    return scheme_of(scheme).batch_label(exit_layer, draft_len) + ("" if head == SHARED else f" {head}")


def predict(profile, exit_layer: int, draft_len: int | None, batch: int, head: str = SHARED, ar=None,
            scheme: Mode = Mode.EESD, ar_both=None) -> BatchPoint:
    """EESD E, γ (or batched PPSD at E) at `batch` against AR at `batch`, over the exit layer's traces (`ar`,
    `ar_both`: AR's replays on one thread and on two, reused)."""
    check_batch(profile, batch)
    costs = batch_costs(profile, head)
    stream = trace_stream(profile, exit_layer, head=head)
    ar = ar or replay_batches(costs, stream, batch, None)
    pipelined = scheme_of(scheme).pipelined
    run = replay_batches(costs, stream, batch, exit_layer, draft_len or 1, pipelined=pipelined)
    rate = scheme_of(scheme).batch_acceptance(run.accepted, draft_len)[0]
    both = tp = None
    if pipelined and costs.prices_both_cores:
        both = (ar_both or replay_batches(costs, stream, batch, None, both_cores=True)).tokens_per_s
        tp = run.tokens_per_s / max(ar.tokens_per_s, both)
    return BatchPoint(label(scheme, exit_layer, draft_len, head), exit_layer, None if pipelined else draft_len, head,
                      batch, run.tokens_per_s, ar.tokens_per_s, run.tokens_per_s / ar.tokens_per_s, run.ms_per_token,
                      ar.ms_per_token, rate, scheme.value, both, tp)


def screen(profile, batch: int, heads, gammas, exits=None, scheme: Mode = Mode.EESD
           ) -> list[tuple[float, str, int, int | None]]:
    """Every plan of `scheme` by its closed form at `batch` (i.i.d. acceptance at its exit's mean, the
    profile's mean context), best first: (speedup, head, exit layer, γ or None for PPSD)."""
    context = float(np.mean([g.get("prompt_len", 0) for g in profile.generations()] or [0])) + 32.0
    out = []
    for head in heads:
        costs = batch_costs(profile, head)
        for exit_layer, alpha in sorted(profile.alpha_by_exit(head=head).items()):
            if exits is not None and exit_layer not in exits:
                continue
            out += [(speedup, head, exit_layer, g) for speedup, g in
                    scheme_of(scheme).batch_closed_forms(costs, batch, context, exit_layer, alpha, gammas)]
    return sorted(out, key=lambda x: -x[0])


def rank(profile, batch: int, heads=(SHARED,), gammas=range(1, MAX_GAMMA + 1), exits=None,
         replay_top: int = REPLAY_TOP, schemes=SCHEMES) -> list[BatchPoint]:
    """The plans of each scheme the closed form ranks highest at `batch`, replayed over the profile's traces,
    best first."""
    check_batch(profile, batch)
    points, ars = [], {}
    for scheme in schemes:
        both = scheme_of(scheme).pipelined and batch_costs(profile).prices_both_cores
        for _, head, exit_layer, g in screen(profile, batch, heads, gammas, exits, scheme)[:replay_top]:
            if (head, exit_layer, both) not in ars:
                costs, stream = batch_costs(profile, head), trace_stream(profile, exit_layer, head=head)
                ars[(head, exit_layer, both)] = (replay_batches(costs, stream, batch, None),
                                                 replay_batches(costs, stream, batch, None, both_cores=True)
                                                 if both else None)
            ar, ar_both = ars[(head, exit_layer, both)]
            points.append(predict(profile, exit_layer, g, batch, head, ar, scheme, ar_both))
    return sorted(points, key=lambda p: -p.speedup_vs_ar)


def curve(profile, heads=(SHARED,), gammas=range(1, MAX_GAMMA + 1), exits=None, scheme: Mode = Mode.EESD
          ) -> list[BatchPoint]:
    """The best plan of `scheme` at each batch size the profile measured."""
    return [rank(profile, b, heads, gammas, exits, CURVE_TOP, (scheme,))[0] for b in profile.batch.sizes]


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
