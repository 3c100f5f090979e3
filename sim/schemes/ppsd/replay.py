"""Exact replay of the PPSD event model (event_model.py) without SimPy, for sweeps and long runs.

Same stream, same costs, same rules; only the bookkeeping differs: the stream splits into cycles at each restart (mismatch or new generation). A cycle starts
  with every stage free, so each is a deterministic tandem pipeline with stage 1 feeding back to
  back: D_m(i) = max(D_{m-1}(i) + hop, D_m(i-1)) + w_m(i), where stage 1 hands on its token its
  exit-head time before D_1(i) and the last stage also waits for the draft: D_k(i) ≥ D_1(i) + hop.
  Per stage this is a cumulative sum plus a running maximum, done for all cycles at once with a
  segmented scan. A cycle ends when the flush reaches stage 1 (final commit + hop), or when the
  exit head stage 1 is then running ends (it cannot be cut; with jitter, after the expected wait).
  Stale tokens (drafted behind the mismatch) are replayed too, clipped at the flush, for busy-time
  accounting and to find that head.
Tested equal to the event model (tests/test_sim_schemes_ppsd.py).
"""

from __future__ import annotations

import numpy as np

from sim.restart import TIE_MS, head_wait, jitter_sigma
from sim.schemes.base import RunStats
from sim.schemes.ppsd.costs import PPSDCosts
from sim.streams import Stream


def _seg_cumsum(w: np.ndarray, first: np.ndarray, lens: np.ndarray) -> np.ndarray:
    cs = np.cumsum(w)
    base = (cs - w)[first]
    return cs - np.repeat(base, lens)


def _seg_cummax(v: np.ndarray, cyc: np.ndarray) -> np.ndarray:
    # shift each cycle above the previous one so a plain running maximum never crosses cycles
    big = float(v.max() - v.min()) + 1.0
    off = cyc * big
    return np.maximum.accumulate(v + off) - off


def replay(stream: Stream, costs: PPSDCosts) -> RunStats:
    if costs.num_devices < costs.k:
        raise ValueError("the fast replay needs one device per stage; use the event engine")
    t, k, h = stream.tokens, costs.k, costs.hop_ms
    match, seg = stream.match, stream.seg_start
    restart = seg.copy()
    restart[1:] |= ~match[:-1]  # a mismatch at j restarts the pipeline at j+1
    starts = np.flatnonzero(restart)
    ends = np.append(starts[1:], t) - 1
    a = ends - starts
    nxt = np.minimum(ends + 1, t - 1)
    rejected = (~match[ends]) & (ends + 1 < t) & ~seg[nxt]
    ncyc = len(starts)
    # factor table per stage over the index in cycle (constant from i = k on); PPSDCosts.factor, tabulated
    busy_n = np.minimum(costs.num_devices, np.arange(k)[:, None] + 1 + np.arange(k + 1)[None, :])
    ftab = np.asarray(costs.factors, dtype=float)[np.minimum(busy_n, len(costs.factors) - 1)]
    stage_cost = [np.asarray(c, dtype=float) for c in costs.stage]
    exit_cost = costs.exit_array()

    # Stale tokens to replay per cycle: enough to cover the flush's trip from stage 1 to the last
    # stage, estimated from the costs (replaying more only adds zero busy time; the loop below
    # grows it when short). Far fewer than k + 2 when stage 1 is slow, which keeps arrays small.
    w0 = float(stage_cost[0].min() * ftab[0].min())
    trip = sum(float(c.max()) for c in stage_cost[1:]) * float(ftab.max()) + k * h
    extra = min(k + 2, int(np.ceil(trip / w0)) + 2) if w0 > 0 else k + 2
    while True:
        lens = a + 1 + extra
        cyc = np.repeat(np.arange(ncyc), lens)
        first = np.concatenate([[0], np.cumsum(lens)[:-1]])
        i = np.arange(len(cyc)) - np.repeat(first, lens)
        j = np.minimum(np.repeat(starts, lens) + i, t - 1)
        ic = np.minimum(i, k)
        w = [stage_cost[m][j] * ftab[m][ic] for m in range(k)]
        dep = [_seg_cumsum(w[0], first, lens)]  # stage 1's pass ends (after the exit head)
        sent = dep[0] - exit_cost[j] * ftab[0][ic]  # the hidden state leaves before the exit head
        for m in range(1, k):
            wcum = _seg_cumsum(w[m], first, lens)
            arrive = (sent if m == 1 else dep[m - 1]) + h
            v = arrive - (wcum - w[m])
            if m == k - 1:  # the last stage finishes a token no earlier than its draft arrives
                v = np.maximum(v, dep[0] + h - wcum)
            dep.append(wcum + _seg_cummax(v, cyc))
        last_useful = first + a
        end_rel = dep[-1][last_useful]  # the cycle's final commit, from its restart
        flush_rel = end_rel + h
        flush_rel[-1] = end_rel[-1]  # the run ends at the last commit
        # enough stale tokens replayed? the last one must leave stage 1 only after the flush
        if np.all(dep[0][first + lens - 1] >= flush_rel) or extra > 4096:
            break
        extra *= 4
    # the flush reaches stage 1 at flush_rel; if stage 1 is then inside an exit head (which cannot be
    # cut), the corrected token enters when that head ends, else at the flush (with jitter: the
    # expected wait over the heads of the passes begun before the flush, sim/restart.py)
    x = exit_cost[j] * ftab[0][ic]
    fr = np.repeat(flush_rel, lens)
    sigma = np.repeat(jitter_sigma(costs.jitter_cv, w[0][first], flush_rel), lens)
    begun = dep[0] - w[0] < fr - TIE_MS
    wait = np.where(begun, head_wait(dep[0] - x, dep[0], fr, sigma), 0.0)
    dur = flush_rel + np.add.reduceat(wait, first)
    dur[-1] = end_rel[-1]
    total = float(np.sum(dur))
    useful = i <= np.repeat(a, lens)
    busy = [total]  # stage 1 drafts without pause
    for m in range(1, k):
        f = np.repeat(end_rel if m == k - 1 else flush_rel, lens)
        start = dep[m] - w[m]  # (the last stage never starts stale work: it drops it at the commit)
        stale = np.clip(np.minimum(dep[m], f) - start, 0.0, None) if m < k - 1 else 0.0
        busy.append(float(np.sum(np.where(useful, w[m], stale))))
    dev: dict[int, float] = {}
    for m, d in enumerate(costs.placement):
        dev[d] = dev.get(d, 0.0) + busy[m]
    return RunStats(total, t, a.tolist(), rejected.tolist(), busy, dev)
