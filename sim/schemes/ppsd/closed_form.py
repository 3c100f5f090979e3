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
       With a confidence stop a cycle also ends at an unsure draft (`stopped_times_per_token`): it
       lasts D_stop(a) + hop, D_stop the commit of its last token when stage 1 has run nothing
       behind it (`stopped_commits`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sim.model.restart import begun_by, board_wait, jitter_sigma, window_opens
from sim.schemes.ppsd.stage_costs import corun_factor


def ideal_speedup(alpha: float, exit_layer: int, num_layers: int) -> float:
    """Balanced stages, free hops, heads ignored: S = 1 / (1 − α(1 − E/N))."""
    return 1.0 / (1.0 - alpha * (1.0 - exit_layer / num_layers))



def cycle_schedule(stage_ms: Sequence[float], hop_ms: float, count: int,
                   factors: Sequence[float] | None = None, num_devices: int | None = None,
                   exit_ms: float = 0.0, cap: int = 0) -> tuple[list[float], list[float]]:
    """(stage 1's pass ends, D(i)) for i < count: when the i-th token after a restart leaves stage 1
    and the last stage, for a pipeline that is empty at time 0 and whose stage 1 drafts back to
    back, but (cap > 0) starts its pass i only once the verdict on pass i − cap is in (D(i − cap) +
    hop: the runtime's in-flight cap). Token i's pass at stage m takes stage_ms[m] ·
    factors[min(devices, m + 1 + i)] (the co-run slowdown while the pipeline fills). exit_ms is the
    exit head's part of stage_ms[0]: the hidden state leaves stage 1 that much (slowed alike) before
    its pass ends, and the last stage's D(i) is at least stage 1's pass end + hop (the draft's arrival)."""
    sched = _Schedule(stage_ms, hop_ms, factors, num_devices, exit_ms, cap)
    prev = [0.0] * len(stage_ms)  # departure of the previous token from each stage
    ends, out = [], []
    for i in range(count):
        end1, t = sched.advance(i, prev, out)
        ends.append(end1)
        out.append(t)
    return ends, out


class _Schedule:
    """One token's departures from every stage of a cycle (`cycle_schedule`'s recurrence), with the
    co-run factor of each pass; `ahead_of(m)` (a cycle a confidence stop ends) gives how many stages
    before m are busy with the token's successors, where fewer than m."""

    def __init__(self, stage_ms, hop_ms, factors, num_devices, exit_ms, cap):
        self.stage_ms, self.hop, self.exit_ms, self.cap = list(stage_ms), float(hop_ms), float(exit_ms), int(cap)
        self.k = len(self.stage_ms)
        self.devices = self.k if num_devices is None else num_devices
        self.fac = [1.0] * (self.devices + 1) if factors is None else list(factors)

    def advance(self, i: int, prev: list[float], out: list[float], ahead_of=None) -> tuple[float, float]:
        """Token i's (stage-1 pass end, last-stage departure); `prev` (each stage's last departure) is
        updated, `out` holds the earlier tokens' last-stage departures (the in-flight cap reads them)."""
        f = lambda m: corun_factor(self.fac, self.devices, i, m, None if ahead_of is None else ahead_of(m))  # noqa: E731
        s = prev[0]
        if self.cap and i >= self.cap:
            s = max(s, out[i - self.cap] + self.hop)
        end1 = s + self.stage_ms[0] * f(0)
        prev[0] = end1
        t = end1 - self.exit_ms * f(0)  # the hidden state leaves before the exit head
        for m in range(1, self.k):
            t = max(t + self.hop, prev[m]) + self.stage_ms[m] * f(m)
            if m == self.k - 1:
                t = max(t, end1 + self.hop)  # the draft must have arrived
            prev[m] = t
        return end1, t


def stopped_commits(stage_ms: Sequence[float], hop_ms: float, count: int,
                    factors: Sequence[float] | None = None, num_devices: int | None = None,
                    exit_ms: float = 0.0, cap: int = 0) -> np.ndarray:
    """D_stop(a), a < count: when the last token of a cycle that a confidence stop ends after a + 1
    tokens leaves the last stage. Stage 1 runs no pass after that token, so its last k − 1 tokens'
    later passes find fewer stages busy before them (`corun_factor`'s `ahead`); the tokens before
    run as in `cycle_schedule`, so each a replays only its last k − 1 tokens from there."""
    sched = _Schedule(stage_ms, hop_ms, factors, num_devices, exit_ms, cap)
    k = sched.k
    prev = [0.0] * k
    states, out = [], []  # the state before each token, and the plain last-stage departures
    for i in range(count):
        states.append(list(prev))
        out.append(sched.advance(i, prev, out)[1])
    commits = np.empty(count)
    for a in range(count):
        i0 = max(0, a - k + 2)  # tokens before i0 see every stage before them busy
        p, o = list(states[i0]), out[:i0]
        for i in range(i0, a + 1):
            o.append(sched.advance(i, p, o, ahead_of=lambda m, i=i: min(m, a - i))[1])
        commits[a] = o[a]
    return commits


def pipeline_departures(stage_ms: Sequence[float], hop_ms: float, count: int,
                        factors: Sequence[float] | None = None, num_devices: int | None = None,
                        exit_ms: float = 0.0, cap: int = 0) -> list[float]:
    """D(i), i < count: when the i-th token after a restart leaves the last stage (`cycle_schedule`)."""
    return cycle_schedule(stage_ms, hop_ms, count, factors, num_devices, exit_ms, cap)[1]


def time_per_token(stage_ms: Sequence[float], hop_ms: float, alpha: float,
                   factors: Sequence[float] | None = None, num_devices: int | None = None,
                   exit_ms: float = 0.0, jitter_cv: float = 0.0, *, checkpoints: Sequence[float] | None = None,
                   launch: str = "local", cap: int | None = None) -> float:
    """Expected ms per committed token of PPSD (see module doc); exact for the engines' model.
    exit_ms: the exit head's part of stage_ms[0] (see `cycle_schedule`); jitter_cv: the relative
    spread of a pass, which softens the restart race (sim/model/restart.py); checkpoints: where stage 1
    looks at the epoch board, offsets from its pass start (`PPSDCosts.checkpoints` at one context;
    None: anywhere before the exit head); launch "local" or "torchrun"; cap: the in-flight cap
    (None: k; 0: none)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha {alpha} outside [0, 1]")
    k = len(stage_ms)
    cap = k if cap is None else int(cap)
    if launch != "local" and not cap:
        raise ValueError("under torchrun stage 1 reads verdicts only at its in-flight cap: give one")
    if alpha >= 1.0 - 1e-12:  # never flushes: the slowest (slowed-down) stage or the cap sets the pace
        d = pipeline_departures(stage_ms, hop_ms, 4 * k + 8 + 4 * cap, factors, num_devices, exit_ms, cap)
        # with the cap, tokens leave in bursts of `cap` once the verdicts' round trip binds: the pace is
        # a whole burst's time over its tokens, not the gap between the last two
        span = max(cap, 1)
        return (d[-1] - d[-1 - span]) / span
    if alpha > EXACT_UP_TO:
        kw = dict(checkpoints=checkpoints, launch=launch, cap=cap)
        ends = [time_per_token(stage_ms, hop_ms, a, factors, num_devices, exit_ms, jitter_cv, **kw)
                for a in (EXACT_UP_TO, 1.0)]
        return float(np.interp(alpha, [EXACT_UP_TO, 1.0], ends))
    count = _cycles_needed(alpha, k)
    lengths = cycle_lengths(stage_ms, hop_ms, count, factors, num_devices, exit_ms, jitter_cv,
                            checkpoints=checkpoints, launch=launch, cap=cap)
    return _expected_time(alpha, lengths, count)


# Past this acceptance the expectation is linear between its value here and at α = 1: it would sum
# ~log(1e-17) / log(α) cycles (39,000 at α = 0.999), each with a restart race whose window grows with
# the cycle, for a change of a few tenths of a percent.
EXACT_UP_TO = 0.98


def _cycles_needed(alpha: float, k: int) -> int:
    """How many cycle lengths L(a) the expectation needs at α < 1: P(a) = (1-α) α^a, cut where the
    remaining mass is below 1e-17."""
    return k + 2 if alpha <= 0.0 else min(200_000, int(math.log(1e-17) / math.log(alpha)) + k + 2)


def _expected_time(alpha: float, lengths: np.ndarray, count: int) -> float:
    """Expected ms per committed token from the first `count` cycle lengths: E[L] / E[a + 1]."""
    p = (1.0 - alpha) * alpha ** np.arange(count, dtype=float)
    return float(np.sum(p * lengths[:count])) * (1.0 - alpha)


def times_per_token(stage_ms: Sequence[float], hop_ms: float, alphas: Sequence[float],
                    factors: Sequence[float] | None = None, num_devices: int | None = None,
                    exit_ms: float = 0.0, jitter_cv: float = 0.0, *, checkpoints: Sequence[float] | None = None,
                    launch: str = "local", cap: int | None = None) -> list[float]:
    """`time_per_token` at several α at once, equal to calling it per α: a cycle's schedule does not
    depend on α, so the cycle lengths are computed once, as far as the largest α needs, and each α
    sums its own prefix of them (the planner's intervals price ~10 α per plan)."""
    kw = dict(checkpoints=checkpoints, launch=launch, cap=cap)
    high = [a for a in alphas if EXACT_UP_TO < a < 1.0 - 1e-12]
    exact = [a for a in alphas if 0.0 <= a <= EXACT_UP_TO] + ([EXACT_UP_TO] if high else [])
    counts = {a: _cycles_needed(a, len(stage_ms)) for a in exact}
    lengths = (cycle_lengths(stage_ms, hop_ms, max(counts.values()), factors, num_devices, exit_ms, jitter_cv, **kw)
               if counts else None)
    at = {a: _expected_time(a, lengths, counts[a]) for a in counts}
    if high:  # linear up to α = 1 (see EXACT_UP_TO)
        one = time_per_token(stage_ms, hop_ms, 1.0, factors, num_devices, exit_ms, jitter_cv, **kw)
        at.update({a: float(np.interp(a, [EXACT_UP_TO, 1.0], [at[EXACT_UP_TO], one])) for a in high})
    # α = 1 (and anything out of range, which it refuses) goes through the one-α form
    return [at[a] if a in at else
            time_per_token(stage_ms, hop_ms, a, factors, num_devices, exit_ms, jitter_cv, **kw) for a in alphas]


def cycle_lengths(stage_ms: Sequence[float], hop_ms: float, count: int,
                  factors: Sequence[float] | None = None, num_devices: int | None = None,
                  exit_ms: float = 0.0, jitter_cv: float = 0.0, *, checkpoints: Sequence[float] | None = None,
                  launch: str = "local", cap: int | None = None) -> np.ndarray:
    """L(a), a < count: how long a cycle that accepts a drafts lasts, from its restart to the next
    one: the commit of its (a+1)-th token D(a), then (local) the verdict's hop or stage 1's way out
    of the uncuttable stretch the commit finds it in (sim/model/restart.py: board_wait), or (torchrun)
    the verdict's arrival or the end of stage 1's pass a + cap − 1, whichever is later. Exact for
    the engines (stage 1's schedule within a cycle does not depend on a)."""
    k = len(stage_ms)
    cap = k if cap is None else int(cap)
    ends, d = cycle_schedule(stage_ms, hop_ms, count + max(cap, 1), factors, num_devices, exit_ms, cap)
    commit = np.asarray(d[:count])
    if launch == "local":
        return commit + hop_ms + _board_waits(stage_ms, ends, exit_ms, commit, hop_ms, factors, num_devices,
                                              checkpoints, jitter_cv)
    return np.maximum(commit + hop_ms, np.asarray(ends[cap - 1:cap - 1 + count]))


def _board_waits(stage_ms, ends, exit_ms, commit, hop_ms, factors, num_devices, checkpoints, jitter_cv):
    """Per cycle length a: the wait beyond commit + hop for stage 1 to leave the uncuttable stretch
    the commit finds it in (sim/model/restart.py: board_wait), over the cycle's stage-1 passes."""
    k = len(stage_ms)
    devices = k if num_devices is None else num_devices
    fac = [1.0] * (devices + 1) if factors is None else list(factors)
    n = len(ends)
    f = np.array([corun_factor(fac, devices, i, 0) for i in range(n)])
    w0 = float(stage_ms[0])
    end = np.asarray(ends)
    start = end - w0 * f
    if checkpoints is None:
        off = np.array([w0 - exit_ms, w0])
    else:
        off = np.concatenate([[0.0], np.asarray(checkpoints, dtype=float), [w0]])
    b = start[None, :] + f[None, :] * off[:, None]  # [S + 1][passes], in time order
    seg_s, seg_e = b[:-1].T.reshape(-1), b[1:].T.reshape(-1)
    if jitter_cv <= 0.0:
        # the one stretch that can hold the commit: the last one begun before it
        idx = np.searchsorted(seg_s, begun_by(commit), side="left") - 1
        ok = idx >= 0
        ii = np.maximum(idx, 0)
        return np.where(ok, board_wait(seg_s[ii], seg_e[ii], commit, hop_ms, 0.0), 0.0)
    sigma = np.asarray(jitter_sigma(jitter_cv, w0 * f[0], commit), dtype=float)
    # per cycle length a, the stretches [lo, hi) that can hold its commit: those of the passes begun
    # before it (pass-major order: S stretches a pass) that end after its jitter window opens
    hi = np.searchsorted(start, begun_by(commit), side="left") * (len(off) - 1)
    lo = np.minimum(np.searchsorted(seg_e, window_opens(commit, sigma), side="left"), hi)
    width = int(np.max(hi - lo)) if len(commit) else 0
    if width == 0:
        return np.zeros(len(commit))
    idx = lo[:, None] + np.arange(width)[None, :]  # [a][window], padded past hi
    inside = idx < hi[:, None]
    idx = np.minimum(idx, len(seg_s) - 1)
    w = board_wait(seg_s[idx], seg_e[idx], commit[:, None], hop_ms, sigma[:, None])
    return np.sum(np.where(inside, w, 0.0), axis=1)


def stopped_times_per_token(stage_ms: Sequence[float], hop_ms: float, odds: Sequence, factors=None,
                            num_devices: int | None = None, exit_ms: float = 0.0, jitter_cv: float = 0.0, *,
                            checkpoints: Sequence[float] | None = None, cap: int | None = None) -> list[float]:
    """Expected ms per committed token of PPSD with a confidence stop (local launch), one per i.i.d.
    odds (`sim.model.stops.StopOdds`: a draft is unsure with probability `low`, matches with
    `match_high` when it is not). A cycle goes on past a draft that is sure and matches (c =
    (1 − low) · match_high); it ends in a rejection of a sure draft (probability (1 − low)(1 −
    match_high)), priced as without a stop (`cycle_lengths`), or on an unsure draft (probability
    low, whether it matches or not), where stage 1 waits for the verdict: D_stop(a) + hop
    (`stopped_commits`, no stretch to leave). Time per token = E[L] · (1 − c)."""
    k = len(stage_ms)
    cap = k if cap is None else int(cap)
    conts = [(1.0 - o.low) * o.match_high for o in odds]
    count = max(_cycles_needed(min(c, 0.999), k) for c in conts) if conts else 0
    kw = dict(checkpoints=checkpoints, launch="local", cap=cap)
    rejected = cycle_lengths(stage_ms, hop_ms, count, factors, num_devices, exit_ms, jitter_cv, **kw)
    stopped = stopped_commits(stage_ms, hop_ms, count, factors, num_devices, exit_ms, cap) + hop_ms
    out = []
    for o, c in zip(odds, conts):
        if c >= 1.0 - 1e-12:  # never stops nor rejects: the fixed plan's pace at α = 1
            out.append(time_per_token(stage_ms, hop_ms, 1.0, factors, num_devices, exit_ms, jitter_cv, **kw))
            continue
        n = _cycles_needed(min(c, 0.999), k)
        go_on = c ** np.arange(n, dtype=float)
        p_rej, p_stop = go_on * (1.0 - o.low) * (1.0 - o.match_high), go_on * o.low
        out.append(float(np.sum(p_rej * rejected[:n] + p_stop * stopped[:n])) * (1.0 - c))
    return out
