"""The PPSD closed form: the oracle of the event model and the replay, and the planner's preview.

It assumes i.i.d. acceptance with rate α, an endless stream and costs at one context. Under those
assumptions it is exact for the model the PPSD engines implement (event_model.py):

PPSD   renewal argument over "cycles" (restart → first rejection): a cycle that accepts a drafts
       commits a+1 tokens and lasts D(a) + hop, where D(a) is the deterministic tandem-pipeline
       departure time of its (a+1)-th token from the last stage (unbalanced stages, hops between
       stages, co-run slowdown while the pipeline fills) and the hop carries the correction back to
       stage 1. Stage 1 occupies embed + layers [0, E) + exit head per token, but the hidden state
       leaves before the exit head; the last stage finishes a token no earlier than the draft's
       arrival (stage 1's pass end + hop). So an accepted token costs the slowest stage's occupancy
       and a rejected one embed + layers [0, E) + hop + Σ later stages (+ hops), or the draft's
       arrival where that binds. Stage 1 cannot cut its exit head: if the correction reaches it
       (at D(a) + hop) inside the exit head of a speculative pass, the cycle lasts until that head
       ends instead (`restart_time`; stage 1's pass ends are deterministic from the restart, so this
       stays exact for any k: every stage is still free when the next cycle starts).
       a ~ Geometric: P(a) = (1 − α) α^a. Time per token = E[L(a)] · (1 − α), L(a) the cycle's
       length (D(a) + hop, or the end of the exit head the correction finds stage 1 in).
       Balanced stages, free hops, no heads, no slowdown: D(a) = (k + a)τ, which gives
       S = 1 / (1 − α(1 − E/N)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sim.restart import TIE_MS, head_wait, jitter_sigma


def ideal_speedup(alpha: float, exit_layer: int, num_layers: int) -> float:
    """Balanced stages, free hops, heads ignored: S = 1 / (1 − α(1 − E/N))."""
    return 1.0 / (1.0 - alpha * (1.0 - exit_layer / num_layers))



def pipeline_departures(stage_ms: Sequence[float], hop_ms: float, count: int,
                        factors: Sequence[float] | None = None, num_devices: int | None = None,
                        exit_ms: float = 0.0) -> list[float]:
    """D(i), i < count: when the i-th token after a restart leaves the last stage, for a pipeline
    that is empty at time 0 and whose stage 1 drafts back to back. Token i's pass at stage m takes
    stage_ms[m] · factors[min(devices, m + 1 + i)] (the co-run slowdown while the pipeline fills).
    exit_ms is the exit head's part of stage_ms[0]: the hidden state leaves stage 1 that much
    (slowed alike) before its pass ends, and the last stage's D(i) is at least stage 1's pass end
    + hop (the draft's arrival)."""
    k = len(stage_ms)
    devices = k if num_devices is None else num_devices
    fac = [1.0] * (devices + 1) if factors is None else list(factors)

    def f(i: int, m: int) -> float:
        return fac[min(min(devices, m + 1 + i), len(fac) - 1)]

    prev = [0.0] * k  # departure of the previous token from each stage
    out = []
    for i in range(count):
        end1 = prev[0] + stage_ms[0] * f(i, 0)
        prev[0] = end1
        t = end1 - exit_ms * f(i, 0)  # the hidden state leaves before the exit head
        for m in range(1, k):
            t = max(t + hop_ms, prev[m]) + stage_ms[m] * f(i, m)
            if m == k - 1:
                t = max(t, end1 + hop_ms)  # the draft must have arrived
            prev[m] = t
        out.append(t)
    return out


def time_per_token(stage_ms: Sequence[float], hop_ms: float, alpha: float,
                        factors: Sequence[float] | None = None, num_devices: int | None = None,
                        exit_ms: float = 0.0, jitter_cv: float = 0.0) -> float:
    """Expected ms per committed token of PPSD (see module doc); exact for the engines' model.
    exit_ms: the exit head's part of stage_ms[0] (see `pipeline_departures`); jitter_cv: the
    relative spread of a pass, which softens the restart race (sim/restart.py)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha {alpha} outside [0, 1]")
    k = len(stage_ms)
    if alpha >= 1.0 - 1e-12:  # never flushes: the slowest (slowed-down) stage sets the pace
        d = pipeline_departures(stage_ms, hop_ms, 4 * k + 8, factors, num_devices, exit_ms)
        return d[-1] - d[-2]
    # P(a) = (1-α) α^a; stop where the remaining mass is below 1e-17
    count = k + 2 if alpha <= 0.0 else min(200_000, int(math.log(1e-17) / math.log(alpha)) + k + 2)
    d = pipeline_departures(stage_ms, hop_ms, count, factors, num_devices, exit_ms)
    total, p = 0.0, 1.0 - alpha
    for a in range(count):
        total += p * restart_time(d[a] + hop_ms, stage_ms[0], exit_ms, factors, num_devices, k, jitter_cv)
        p *= alpha
    return total * (1.0 - alpha)


def restart_time(flush_ms: float, stage1_ms: float, exit_ms: float, factors: Sequence[float] | None = None,
                 num_devices: int | None = None, k: int = 2, jitter_cv: float = 0.0) -> float:
    """When the corrected token enters stage 1, for a flush reaching it flush_ms after the cycle's
    restart: at the flush, unless stage 1 (drafting back to back since the restart, pass i taking
    stage1_ms · factor(i)) is then inside the exit head of a pass, which it finishes first. With
    jitter_cv > 0, the flush plus the expected wait over the heads of the passes begun before it
    (sim/restart.py)."""
    if exit_ms <= 0.0:
        return flush_ms
    devices = k if num_devices is None else num_devices
    fac = [1.0] * (devices + 1) if factors is None else list(factors)

    def f(i: int) -> float:
        return fac[min(min(devices, 1 + i), len(fac) - 1)]

    sigma = float(jitter_sigma(jitter_cv, stage1_ms * f(0), flush_ms))
    # heads ending this far before the flush add nothing (Φ and φ underflow past ~38σ)
    horizon = flush_ms - 40.0 * sigma
    wait, end = 0.0, 0.0
    for i in range(devices):  # the co-run factor settles from pass devices - 1 on
        w, x = stage1_ms * f(i), exit_ms * f(i)
        if end >= flush_ms - TIE_MS or w <= 0.0:
            return flush_ms + wait
        end += w
        if end > horizon:
            wait += float(head_wait(end - x, end, flush_ms, sigma))
    w, x = stage1_ms * f(devices), exit_ms * f(devices)
    if w <= 0.0 or end >= flush_ms - TIE_MS:
        return flush_ms + wait
    # later passes are periodic: pass n (n = 1, 2, ...) ends at end + n·w; those begun before the
    # flush (end + (n - 1)·w < flush − TIE) and ending after the horizon count
    n_last = math.ceil((flush_ms - TIE_MS - end) / w)
    while n_last > 1 and end + (n_last - 1) * w >= flush_ms - TIE_MS:
        n_last -= 1
    while end + n_last * w < flush_ms - TIE_MS:
        n_last += 1
    n_first = max(1, math.floor((horizon - end) / w))
    ends = end + np.arange(n_first, n_last + 1) * w
    return flush_ms + wait + float(np.sum(head_wait(ends - x, ends, flush_ms, sigma)))


