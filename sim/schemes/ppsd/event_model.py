"""The PPSD event model: SimPy processes for the stages (the reference; `replay.py` replays it exactly).

The model in words
- Times come from the profile via `CostModel` (stage_costs.py), at each token's own context (it grows
  as tokens are generated).
- Stage m runs layers [b_m, b_{m+1}); stage 1 adds the embedding and the exit head, the last
  stage the final norm + LM head. Devices are `simpy.Resource`s, so stages placed on one device
  serialise. Stages are processes linked by stores; a hop is a delay between them. Stage 1's pass
  of token j is embed + layers [0, E), after which j's hidden state leaves for stage 2 at once, then
  the exit head, which drafts token j+1; the draft travels to the last stage on its own channel (one
  hop). Stage 1 never waits: when its exit head ends, token j+1 (fed with that draft) enters at once.
  The last stage computes its layers + LM head for j, then needs j's draft of j+1 to check it: j is
  committed at max(its pass's end, the draft's arrival), and the last stage takes its next token
  only then. So stage 1's exit head overlaps the later stages' work, and a rejected token costs
  embed + layers [0, E) + hop + later stages (+ hops), not the exit head. When token j is
  committed, if its draft did not match (or the generation ends) the
  last stage drops everything queued behind it at once, and a hop later the flush reaches the other
  stages, which abandon their current pass (its time so far stays spent) and drop stale tokens,
  and stage 1 restarts with the corrected token. Stage 1 can abandon its pass only during embed +
  layers [0, E) (between layers, or right after the last one, before sending); if the flush finds
  it in its exit head (one matmul that cannot be cut), it finishes that head (the stale draft is
  not sent) and the corrected token enters when the head ends. With timing jitter (the profile's
  pipeline probe) the entry time is the expectation over where the flush lands (sim/model/restart.py).
- A confidence stop (`PPSDCosts.draft_stop`): after a draft less confident than τ stage 1 runs
  nothing until the verdict on it, which restarts it a hop after the commit whether the draft
  matched or not (a new cycle; no stretch to leave, no stale work); the later passes of that
  cycle's last tokens find the stages before them idle.
- Co-run slowdown: stages working at the same time on one machine share memory bandwidth. The
  i-th token after a restart, at stage m, runs while min(devices, m + i) stages compute (stage 1
  always drafts ahead, so the pipeline is full from its k-th token on) and its pass is slowed by the
  profile's factor for that many processes; the first stage-1 pass after a restart runs alone.
"""

from __future__ import annotations

import numpy as np
import simpy

from sim.timeline import Event
from sim.model.restart import begun_by, board_wait, jitter_sigma
from sim.schemes.base import RunStats
from sim.schemes.ppsd.clock import decode_busy_scale, decode_time_ms
from sim.schemes.ppsd.stage_costs import PPSDCosts
from sim.model.streams import Stream


class _Pipeline:
    """PPSD as SimPy processes. Tokens travel as (epoch, position, index_in_cycle); a flush bumps
    the epoch, and a stage drops any token from an older epoch than it has heard of."""

    def __init__(self, stream: Stream, costs: PPSDCosts, record: bool):
        self.env = env = simpy.Environment()
        self.k = k = costs.k
        self.t = stream.tokens
        self.match = stream.match.tolist()
        seg = stream.seg_start.tolist()
        self.gen_start = seg  # gen_start[j]: token j is a generation's first
        self.new_gen = seg[1:] + [True]  # new_gen[j]: token j+1 starts a new generation
        # halt[j]: a confidence stop makes stage 1 wait for the verdict on token j's draft;
        # cycle_end[s]: the last token of a cycle that starts at s (its first mismatch, stop or end)
        halt = costs.halts(stream)
        self.halt = halt.tolist()
        self.cycle_end = _cycle_ends(stream.match, halt, np.asarray(self.new_gen))
        # the decode clock (clock.py): each generation's first and last commit, its first pass's start
        self.first_commits: list[float] = []
        self.last_commits: list[float] = []
        self.first_passes: list[float] = []
        self.cost = [c.tolist() for c in costs.stage_for(stream)]
        self.exit = costs.exit_array().tolist()
        self.drafts: dict = {}  # (epoch, j) -> event: j's draft of j+1 reached the last stage
        self.hop = costs.hop_ms
        self.costs = costs
        self.record = record
        shared = len(set(costs.placement)) < k
        devs = {d: simpy.Resource(env, capacity=1) for d in sorted(set(costs.placement))}
        self.device = [devs[d] for d in costs.placement] if shared else None
        self.inbox = [simpy.Store(env) for _ in range(k)]
        self.view = [0] * k  # the newest epoch each stage has heard of
        self.epoch = 0
        self.restart_to = None  # (epoch, position) waiting for stage 1
        self.procs = [env.process(self._stage1())] + [env.process(self._stage(m)) for m in range(1, k)]
        self.computing = [None] * k  # (epoch, start) of the pass in progress, or None
        self.cycle = (0.0, 0.0)  # (when the cycle's first stage-1 pass began, its duration)
        self.restart_at = 0.0  # the corrected token enters stage 1 no earlier than this
        self.commit_at = 0.0  # when the rejection that caused the pending restart was committed
        self.cap = costs.cap  # stage 1's pass i of a cycle needs the verdict on pass i - cap
        self.local = costs.launch == "local"
        if not self.local and not self.cap:
            raise ValueError("under torchrun stage 1 reads verdicts only at its in-flight cap: give one")
        self.verdicts: dict = {}  # (epoch, i) -> event: the verdict on the cycle's i-th token reached stage 1
        self.pending = None  # torchrun: (old epoch, index, new epoch, position) until stage 1 reads the verdict
        self.s1: list = []  # stage 1's passes this cycle: (start, co-run factor, token)
        self.busy = [0.0] * k
        self.done = env.event()
        self.rounds_a: list[int] = []
        self.rounds_rejected: list[bool] = []
        self.events: list[Event] = []
        self.committed = 0
        self.rows = [f"stage {m + 1} (device {costs.placement[m]})" for m in range(k)]

    def _stops_after(self, j: int, i: int) -> int | None:
        """The last token of the cycle token j (its i-th) belongs to, where a confidence stop ends that
        cycle; None where a rejection or a new generation does (stage 1 drafts on behind it)."""
        end = self.cycle_end[j - i] if j < self.t else self.t
        return end if end < self.t - 1 and self.halt[end] else None

    # a pass of one token through one stage; returns False when a flush cut it short
    def _pass(self, m: int, epoch: int, j: int, i: int):
        end = self._stops_after(j, i) if m else None
        f = self.costs.factor(i, m, None if end is None else min(m, end - j))
        dur = self.cost[m][min(j, self.t - 1)] * f
        exit_dur = self.exit[min(j, self.t - 1)] * f if m == 0 else 0.0
        env = self.env
        req = None
        try:
            if self.device is not None:
                self.computing[m] = (epoch, None)
                req = self.device[m].request()
                yield req
            start = env.now
            self.computing[m] = (epoch, start)
            if m == 0:  # embed + layers [0, E) + overhead; the hidden state leaves; then the exit head
                if i == 0:
                    self.cycle, self.s1 = (start, dur), []
                self.s1.append((start, f, min(j, self.t - 1)))
                yield env.timeout(dur - exit_dur)
                self._send(1, (epoch, j, i))
                yield env.timeout(exit_dur)
                if epoch == self.view[0]:  # (a flush at this very instant leaves the draft stale)
                    self._send_draft(epoch, j)
            else:
                yield env.timeout(dur)
        except simpy.Interrupt:
            start = self.computing[m][1]
            if start is not None:
                self.busy[m] += env.now - start
                if self.record and env.now > start:
                    self.events.append(Event("flush", self.rows[m], start / 1e3, (env.now - start) / 1e3,
                                             token=j, args={"epoch": epoch}))
            self.computing[m] = None
            if req is not None:
                if req.triggered:
                    self.device[m].release(req)
                else:
                    req.cancel()  # still queued for the device
            return False
        self.computing[m] = None
        if req is not None:
            self.device[m].release(req)
        # a generation's first pass is its prefill (stage_costs.py: stage_prefill_ms), which the runtime
        # keeps out of the stages' busy time
        prefill = i == 0 and j < self.t and self.gen_start[j]
        if not prefill:
            self.busy[m] += dur
        if self.record:
            name = "prefill" if prefill else "draft" if m == 0 else "verify"
            self.events.append(Event(name, self.rows[m], start / 1e3, dur / 1e3,
                                     token=j, args={"epoch": epoch, "index_in_cycle": i}))
        return True

    def _send(self, m: int, item):
        """Hand a token to stage m after one hop."""
        if self.hop > 0:
            if self.record:
                self.events.append(Event("hop", f"hop {m}→{m + 1}", self.env.now / 1e3, self.hop / 1e3,
                                         token=item[1]))
            ev = self.env.timeout(self.hop)
            ev.callbacks.append(lambda _e, box=self.inbox[m], it=item: box.put(it))
        else:
            self.inbox[m].put(item)

    def _draft_event(self, epoch: int, j: int):
        ev = self.drafts.get((epoch, j))
        if ev is None:
            ev = self.drafts[(epoch, j)] = self.env.event()
        return ev

    def _send_draft(self, epoch: int, j: int):
        """Stage 1's draft made from token j reaches the last stage one hop later."""
        ev = self._draft_event(epoch, j)
        if self.hop > 0:
            if self.record:
                self.events.append(Event("draft hop", f"hop 1→{self.k}", self.env.now / 1e3, self.hop / 1e3,
                                         token=j))
            t = self.env.timeout(self.hop)
            t.callbacks.append(lambda _e, ev=ev: ev.succeed())
        else:
            ev.succeed()

    def _verdict_event(self, epoch: int, i: int):
        ev = self.verdicts.get((epoch, i))
        if ev is None:
            ev = self.verdicts[(epoch, i)] = self.env.event()
        return ev

    def _stage1(self):
        epoch, j, i = 0, 0, 0
        while True:
            if self.restart_to is not None:
                (epoch, j), i = self.restart_to, 0
                self.restart_to = None
                self.view[0] = epoch
                self.verdicts = {key: ev for key, ev in self.verdicts.items() if key[0] == epoch}
                wait = self.restart_at - self.env.now
                if wait > 0.0:  # the uncuttable stretch the rejection found stage 1 in (or likely found)
                    start = self.env.now
                    yield self.env.timeout(wait)
                    stale = max(self.restart_at - (self.commit_at + self.hop), 0.0)
                    self.busy[0] += stale
                    if self.record and stale > 0.0:
                        self.events.append(Event("stale pass", self.rows[0], start / 1e3, wait / 1e3,
                                                 token=j, args={"epoch": epoch}))
            if self.cap and i >= self.cap:  # the in-flight cap: wait for the verdict on token i - cap
                try:
                    yield self._verdict_event(epoch, i - self.cap)
                except simpy.Interrupt:
                    continue  # (local) a rejection: restart
                if self.pending is not None and self.pending[:2] == (epoch, i - self.cap):
                    # (torchrun) the verdict read at the cap is the rejection: restart from it now
                    self.restart_to, self.restart_at = self.pending[2:], self.env.now
                    self.pending = None
                    continue
            ok = yield from self._pass(0, epoch, j, i)  # sends the hidden state and the draft
            if not ok:
                continue
            if self._stops_after(j, i) == j:
                # an unsure draft: stage 1 waits for its verdict (the commit restarts it from there)
                try:
                    yield self.env.event()
                except simpy.Interrupt:
                    continue
            j, i = j + 1, i + 1  # the draft of token j feeds token j+1 at once

    def _stage(self, m: int):
        last = m == self.k - 1
        while True:
            epoch, j, i = yield self.inbox[m].get()
            if epoch != self.view[m]:
                continue  # flushed while queued or in flight
            ok = yield from self._pass(m, epoch, j, i)
            if not ok:
                continue
            if not last:
                self._send(m + 1, (epoch, j, i))
                continue
            yield self._draft_event(epoch, j)  # the check needs stage 1's draft of j+1
            del self.drafts[(epoch, j)]
            self._commit(j, i)
            if self.done.triggered:
                return

    def _commit(self, j: int, i: int):
        self.committed += 1
        end_of_gen = self.new_gen[j]
        if self.gen_start[j]:  # the generation's first token: the runtime's clock starts here
            self.first_commits.append(self.env.now)
            self.first_passes.append(self.env.now - self.cycle[0])
        if end_of_gen:
            self.last_commits.append(self.env.now)
        if j == self.t - 1:
            self.rounds_a.append(i)
            self.rounds_rejected.append(False)
            self.done.succeed()
            return
        ev = self._verdict_event(self.epoch, i)  # the verdict travels back to stage 1
        if self.hop > 0:
            self.env.timeout(self.hop).callbacks.append(lambda _e, ev=ev: ev.succeed())
        else:
            ev.succeed()
        halted = self.halt[j]  # stage 1 is waiting for this verdict (a confidence stop)
        if self.match[j] and not end_of_gen and not halted:
            return  # the pass already running on token j+1 stands
        rejected = not end_of_gen and not self.match[j]
        self.rounds_a.append(i + int(halted and self.match[j] and not end_of_gen))  # a stop keeps a matching draft
        self.rounds_rejected.append(rejected)
        old = self.epoch
        self.epoch += 1
        self.drafts = {key: ev for key, ev in self.drafts.items() if key[0] == self.epoch}
        self.view[self.k - 1] = self.epoch  # the last stage drops its queue at once
        if self.record:
            self.events.append(Event("flush", self.rows[-1], self.env.now / 1e3, 0.0, token=j + 1,
                                     args={"reason": "mismatch" if rejected else "new generation" if end_of_gen
                                           else "confidence stop"}))
        now = self.env.now
        self.commit_at = now
        if self.local:
            # the epoch board: stage 1 hears of it now, drops its pass at the next place it looks,
            # and restarts when the verdict arrives (a hop) or it leaves that stretch, if later
            self.restart_to = (self.epoch, j + 1)
            self.view[0] = self.epoch
            self.restart_at = now + self.hop + (0.0 if halted else self._board_wait(now))
            self.procs[0].interrupt("flush")
        else:
            self.pending = (old, i, self.epoch, j + 1)
        ev = self.env.timeout(self.hop)
        ev.callbacks.append(lambda _e, e=self.epoch: self._flush(e))

    def _board_wait(self, commit: float) -> float:
        """Expected wait beyond commit + hop for stage 1 to leave the uncuttable stretch the commit
        finds it in (sim/model/restart.py: board_wait), over this cycle's stage-1 passes begun before it."""
        begun = [p for p in self.s1 if p[0] < begun_by(commit)]
        if not begun:
            return 0.0
        sigma = jitter_sigma(self.costs.jitter_cv, self.cycle[1], commit - self.cycle[0])
        starts = np.array([p[0] for p in begun])
        fac = np.array([p[1] for p in begun])
        off = self.costs.segments(np.array([p[2] for p in begun]))  # [S + 1][passes]
        b = starts[None, :] + fac[None, :] * off
        return float(np.sum(board_wait(b[:-1], b[1:], commit, self.hop, sigma)))

    def _flush(self, epoch: int):
        """The correction reaches the later stages a hop after the commit: they abandon stale work
        (stage 1 has its own rule: the board, or the verdict at its cap)."""
        if self.done.triggered:
            return
        for m in range(1, self.k - 1):
            self.view[m] = epoch
            cur = self.computing[m]
            if cur is not None and cur[0] != epoch:
                self.procs[m].interrupt("flush")

    def run(self) -> RunStats:
        self.env.run(until=self.done)
        end = self.env.now
        for m, cur in enumerate(self.computing):  # passes still running at the last commit
            if cur is not None and cur[1] is not None:
                self.busy[m] += end - cur[1]
        starts = [j for j, g in enumerate(self.gen_start) if g]
        lengths = np.diff(np.append(starts, self.t))
        decode = decode_time_ms(self.first_commits, self.last_commits, lengths, self.first_passes)
        scale = decode_busy_scale(lengths)
        busy = [b * scale for b in self.busy]
        dev: dict[int, float] = {}
        for m, d in enumerate(self.costs.placement):
            dev[d] = dev.get(d, 0.0) + busy[m]
        return RunStats(decode, self.committed, self.rounds_a, self.rounds_rejected, busy, dev,
                        self.events, span_ms=end)


def _cycle_ends(match: np.ndarray, halt: np.ndarray, new_gen: np.ndarray) -> list[int]:
    """For every position s, the first j >= s whose draft is rejected or stopped on, or that ends its
    generation: where a cycle that starts at s ends."""
    ends = np.flatnonzero(~np.asarray(match, dtype=bool) | halt | new_gen)
    t = len(match)
    return np.append(ends, t)[np.searchsorted(ends, np.arange(t))].tolist()


def run(stream: Stream, costs: PPSDCosts, record: bool = False) -> RunStats:
    return _Pipeline(stream, costs, record).run()
