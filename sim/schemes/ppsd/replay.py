"""Exact replay of the PPSD event model (event_model.py) without SimPy, for sweeps and long runs.

Same stream, same costs, same rules; only the bookkeeping differs: the stream splits into cycles at each restart (mismatch or new generation). A cycle starts
  with every stage free, so each is a deterministic tandem pipeline with stage 1 feeding back to
  back: D_m(i) = max(D_{m-1}(i) + hop, D_m(i-1)) + w_m(i), where stage 1 hands on its token its
  exit-head time before D_1(i) and the last stage also waits for the draft: D_k(i) ≥ D_1(i) + hop.
  Per stage this is a cumulative sum plus a running maximum, done for all cycles at once with a
  segmented scan. A cycle ends when the flush reaches stage 1 (final commit + hop), or when the
  exit head stage 1 is then running ends (it cannot be cut; with jitter, after the expected wait).
  Stale tokens (drafted behind the mismatch) are replayed too, clipped at the flush, for busy-time
  accounting and to find that head. A confidence stop ends a cycle too: stage 1 runs nothing behind
  the unsure draft, so the cycle has no stale token and ends at its commit + hop.
Tested equal to the event model (tests/test_schemes_engines.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.model.restart import begun_by, board_wait, jitter_sigma, window_closes, window_opens
from sim.schemes.base import RunStats
from sim.schemes.ppsd.clock import decode_busy_scale, decode_time_ms
from sim.schemes.ppsd.stage_costs import corun_table, PPSDCosts
from sim.model.streams import Stream


def _seg_cumsum(w: np.ndarray, first: np.ndarray, lens: np.ndarray) -> np.ndarray:
    cs = np.cumsum(w)
    base = (cs - w)[first]
    return cs - np.repeat(base, lens)


def _seg_cummax(v: np.ndarray, cyc: np.ndarray) -> np.ndarray:
    # shift each cycle above the previous one so a plain running maximum never crosses cycles
    big = float(v.max() - v.min()) + 1.0
    off = cyc * big
    return np.maximum.accumulate(v + off) - off


def _scan_departures(w, x, first, lens, cyc, h, k):
    """The tandem pipeline without the in-flight cap, every cycle at once (segmented scans)."""
    dep = [_seg_cumsum(w[0], first, lens)]  # stage 1's pass ends (after the exit head)
    sent = dep[0] - x  # the hidden state leaves before the exit head
    for m in range(1, k):
        wcum = _seg_cumsum(w[m], first, lens)
        arrive = (sent if m == 1 else dep[m - 1]) + h
        v = arrive - (wcum - w[m])
        if m == k - 1:  # the last stage finishes a token no earlier than its draft arrives
            v = np.maximum(v, dep[0] + h - wcum)
        dep.append(wcum + _seg_cummax(v, cyc))
    return dep


def _capped_departures(w, x, first, lens, h, k, cap):
    """The tandem pipeline with stage 1's in-flight cap (pass i starts no earlier than the verdict
    on pass i − cap: its departure from the last stage + hop). A loop over the index in cycle,
    every cycle still running at that index at once (cycles sorted by length)."""
    order = np.argsort(-lens, kind="stable")
    lsorted = lens[order]
    n_at = np.searchsorted(-lsorted, -np.arange(int(lsorted[0])), side="left")  # cycles longer than i
    base = first[order]
    dep = [np.empty_like(w[0]) for _ in range(k)]
    prev = [None] * k
    last_hist: list = []
    for i in range(int(lsorted[0])):
        n = int(n_at[i])
        idx = base[:n] + i
        s = prev[0][:n] if i else np.zeros(n)
        if cap and i >= cap:
            s = np.maximum(s, last_hist[i - cap][:n] + h)
        e1 = s + w[0][idx]
        dep[0][idx] = e1
        prev[0] = e1
        t = e1 - x[idx]
        for m in range(1, k):
            t = t + h if not i else np.maximum(t + h, prev[m][:n])
            t = t + w[m][idx]
            if m == k - 1:
                t = np.maximum(t, e1 + h)
            dep[m][idx] = t
            prev[m] = t
        last_hist.append(t)
    return dep


@dataclass
class _Cycles:
    """The stream cut into cycles (restart -> first rejection or confidence stop): where each starts,
    its accepted drafts `a`, whether it ended in a rejection, and whether in a stop (stage 1 waited
    for the verdict on its last draft: no stale pass follows it)."""

    starts: np.ndarray
    a: np.ndarray
    rejected: np.ndarray
    stopped: np.ndarray

    @classmethod
    def of(cls, stream: Stream, halt: np.ndarray) -> _Cycles:
        t, match, seg = stream.tokens, stream.match, stream.seg_start
        restart = seg.copy()
        restart[1:] |= ~match[:-1] | halt[:-1]  # a mismatch or a stop at j restarts the pipeline at j+1
        starts = np.flatnonzero(restart)
        ends = np.append(starts[1:], t) - 1
        nxt = np.minimum(ends + 1, t - 1)
        return cls(starts, ends - starts, (~match[ends]) & (ends + 1 < t) & ~seg[nxt], halt[ends] & (ends + 1 < t))


@dataclass
class _Passes:
    """Every pass replayed, cycle after cycle (each cycle's tokens and its stale tail): its index in
    the cycle `i`, its token `j`, each stage's (slowed) pass `w` and exit head `x`, the departures."""

    lens: np.ndarray
    first: np.ndarray
    i: np.ndarray
    j: np.ndarray
    ic: np.ndarray
    w: list
    x: np.ndarray
    dep: list


def _replayed_passes(stream: Stream, costs: PPSDCosts, cyc: _Cycles, ftab: np.ndarray) -> _Passes:
    """Each cycle's passes with enough stale ones behind its last token. With the in-flight cap,
    stage 1 starts at most cap − 1 passes after the rejected token before the verdict on it (all that
    can have begun before the commit, and all that torchrun's stage 1 runs). Without a cap: enough to
    cover the flush's trip, estimated from the costs and grown while short. A cycle a confidence stop
    ends has none (stage 1 waits), and its last tokens' later passes find the stages before them idle."""
    t, k, h, cap = stream.tokens, costs.k, costs.hop_ms, costs.cap
    stage_cost = [np.asarray(c, dtype=float) for c in costs.stage_for(stream)]
    exit_cost = costs.exit_array()
    if cap:
        extra = max(cap - 1, 0)
    else:
        w0 = float(stage_cost[0].min() * ftab[0].min())
        trip = sum(float(c.max()) for c in stage_cost[1:]) * float(ftab.max()) + k * h
        extra = min(k + 2, int(np.ceil(trip / w0)) + 2) if w0 > 0 else k + 2
    while True:
        lens = cyc.a + 1 + np.where(cyc.stopped, 0, extra)
        cycle_of = np.repeat(np.arange(len(cyc.starts)), lens)
        first = np.concatenate([[0], np.cumsum(lens)[:-1]])
        i = np.arange(len(cycle_of)) - np.repeat(first, lens)
        j = np.minimum(np.repeat(cyc.starts, lens) + i, t - 1)
        ic = np.minimum(i, k)
        w = [stage_cost[m][j] * _pass_factors(costs, cyc, lens, i, ic, m, ftab) for m in range(k)]
        x = exit_cost[j] * ftab[0][ic]
        dep = _scan_departures(w, x, first, lens, cycle_of, h, k)
        if cap:  # does the cap ever hold stage 1 back? then replay it token by token
            s1 = dep[0] - w[0]
            later = i >= cap
            if np.any(later) and np.any(s1[later] < dep[-1][np.flatnonzero(later) - cap] + h):
                dep = _capped_departures(w, x, first, lens, h, k, cap)
            break
        # (no cap) enough stale tokens replayed? the last one must leave stage 1 after the commit
        flushed = ~cyc.stopped
        if np.all(dep[0][(first + lens - 1)[flushed]] >= dep[-1][(first + cyc.a)[flushed]]) or extra > 4096:
            break
        extra *= 4
    return _Passes(lens, first, i, j, ic, w, x, dep)


def _pass_factors(costs: PPSDCosts, cyc: _Cycles, lens: np.ndarray, i: np.ndarray, ic: np.ndarray, m: int,
                  ftab: np.ndarray) -> np.ndarray:
    """Each pass's co-run factor at stage m: the table's (`corun_table`), but where a confidence stop
    ends the cycle, the passes of its last tokens at stage m find only min(m, a − i) stages before
    them busy (`corun_factor`'s `ahead`)."""
    f = ftab[m][ic]
    if m == 0 or not cyc.stopped.any():
        return f
    ahead = np.repeat(cyc.a, lens) - i
    tail = np.repeat(cyc.stopped, lens) & (ahead < m)
    if tail.any():
        f = f.copy()
        f[tail] = [costs.factor(int(x), m, int(y)) for x, y in zip(i[tail], ahead[tail])]
    return f


def _restarts(costs: PPSDCosts, cyc: _Cycles, ps: _Passes, ftab: np.ndarray, commit: np.ndarray) -> np.ndarray:
    """When each cycle's corrected token enters stage 1, from the cycle's start. Local: the board;
    stage 1 leaves the uncuttable stretch the commit finds it in, then the verdict (a hop after the
    commit) lets the corrected token in (sim/model/restart.py: board_wait). Torchrun: at the cap,
    stage 1 reads the verdict on the rejected token."""
    h = costs.hop_ms
    if costs.launch != "local":
        return np.maximum(commit + h, ps.dep[0][ps.first + cyc.a + costs.cap - 1])
    s1 = ps.dep[0] - ps.w[0]  # stage 1's pass starts
    c = np.repeat(commit, ps.lens)
    sigma = np.repeat(jitter_sigma(costs.jitter_cv, ps.w[0][ps.first], commit), ps.lens)
    # only passes begun before the commit (a later one never starts) and ending after the
    # commit's jitter window opens can hold it: price their stretches, nobody else's
    near = np.flatnonzero((s1 < begun_by(c)) & (ps.dep[0] > window_opens(c, sigma)))
    wait = np.zeros(len(s1))
    if near.size:
        b = s1[near][None, :] + ftab[0][ps.ic[near]][None, :] * costs.segments(ps.j[near])
        cn, sn = np.broadcast_to(c[near], b[1:].shape), np.broadcast_to(sigma[near], b[1:].shape)
        # and of those stretches, the ones within the window around the commit
        live = (b[1:] - h > window_opens(cn, sn)) & (b[:-1] < window_closes(cn, sn))
        per = np.zeros(b[1:].shape)
        per[live] = board_wait(b[:-1][live], b[1:][live], cn[live], h, sn[live])
        wait[near] = per.sum(axis=0)
    waits = np.add.reduceat(wait, ps.first)
    waits[cyc.stopped] = 0.0  # stage 1 waited for this verdict: no stretch to leave
    return commit + h + waits


def _busy(costs: PPSDCosts, cyc: _Cycles, ps: _Passes, commit, restart_rel, g_first, gen_lengths) -> list[float]:
    """Each stage's busy time, on the decode clock. Stage 1: its passes up to where it drops them
    (local: the commit; torchrun: they all run), plus a stretch it could not cut beyond the verdict's
    arrival. A generation's first pass is its prefill: the runtime keeps it out of the stages' busy time."""
    k, h, local = costs.k, costs.hop_ms, costs.launch == "local"
    s1 = ps.dep[0] - ps.w[0]
    useful = ps.i <= np.repeat(cyc.a, ps.lens)
    cut = commit.copy() if local else restart_rel.copy()
    cut[-1] = commit[-1]
    cutr = np.repeat(cut, ps.lens)
    s1_busy = np.where(s1 < cutr, np.minimum(ps.dep[0], cutr) - s1, 0.0)
    prefill = np.zeros(len(s1), dtype=bool)
    prefill[ps.first[g_first]] = True
    s1_busy[prefill] = 0.0
    stale1 = np.maximum(restart_rel - commit - h, 0.0) if local else np.zeros(len(cyc.starts))
    stale1[-1] = 0.0
    busy = [float(np.sum(s1_busy) + np.sum(stale1))]
    for m in range(1, k):
        f = np.repeat(commit if m == k - 1 else commit + h, ps.lens)
        f[-ps.lens[-1]:] = commit[-1]
        start = ps.dep[m] - ps.w[m]  # (the last stage never starts stale work: it drops it at the commit)
        stale = np.clip(np.minimum(ps.dep[m], f) - start, 0.0, None) if m < k - 1 else 0.0
        busy.append(float(np.sum(np.where(prefill, 0.0, np.where(useful, ps.w[m], stale)))))
    return [b * decode_busy_scale(gen_lengths) for b in busy]


def replay(stream: Stream, costs: PPSDCosts) -> RunStats:
    """The event model replayed exactly (see the module doc): cycles, their passes and departures,
    each cycle's restart, the decode clock and the stages' busy time."""
    if costs.num_devices < costs.k:
        raise ValueError("the fast replay needs one device per stage; use the event engine")
    if costs.launch != "local" and not costs.cap:
        raise ValueError("under torchrun stage 1 reads verdicts only at its in-flight cap: give one")
    t, seg = stream.tokens, stream.seg_start
    cyc = _Cycles.of(stream, costs.halts(stream))
    ftab = corun_table(costs.factors, costs.num_devices, costs.k, costs.k + 1)  # constant from i = k on
    ps = _replayed_passes(stream, costs, cyc, ftab)
    commit = ps.dep[-1][ps.first + cyc.a]  # each cycle's final commit, from its restart
    restart_rel = _restarts(costs, cyc, ps, ftab, commit)
    dur = restart_rel.copy()
    dur[-1] = commit[-1]  # the run ends at the last commit
    # the runtime's decode clock (clock.py): per generation, from its first commit to its last
    cs = np.concatenate([[0.0], np.cumsum(dur)[:-1]])  # each cycle's start, on one time axis
    g_first = np.flatnonzero(seg[cyc.starts])  # the cycle each generation starts with
    g_last = np.append(g_first[1:] - 1, len(cyc.starts) - 1)
    first_commit = ps.dep[-1][ps.first[g_first]]  # the generation's first token, from its cycle's start
    gen_lengths = np.diff(np.append(cyc.starts[g_first], t))
    total = decode_time_ms(cs[g_first] + first_commit, cs[g_last] + commit[g_last], gen_lengths, first_commit)
    busy = _busy(costs, cyc, ps, commit, restart_rel, g_first, gen_lengths)
    dev: dict[int, float] = {}
    for m, d in enumerate(costs.placement):
        dev[d] = dev.get(d, 0.0) + busy[m]
    # a cycle a stop ends on a draft that matched kept that draft too (every draft is judged, as without a stop)
    nxt = np.minimum(cyc.starts + cyc.a + 1, t - 1)
    kept = cyc.a + (cyc.stopped & stream.match[cyc.starts + cyc.a] & ~seg[nxt])
    return RunStats(total, t, kept.tolist(), cyc.rejected.tolist(), busy, dev, span_ms=float(np.sum(dur)))
