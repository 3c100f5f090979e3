"""The serving engine as SimPy processes: requests arrive open loop, an engine loop batches them.

Two processes share one `Scheduler` (`scheduler.py`, the class the real loop drives):

  arrivals  the workload's requests in arrival order: each waits for its arrival time, joins the waiting
            queue and wakes the engine when it is idle
  engine    while anything waits or runs: the policy picks the speculation for the live batch
            (`ServePolicy.decide`), the scheduler picks the iteration (`Scheduler.next_iteration`), the
            iteration is priced (`ServeCosts`) and `yield env.timeout(...)` spends that time, then the
            tokens are committed and delivered to each request's `RequestTiming`; idle, it waits for the
            next arrival

Prefill first (what the real loop runs): each admitted prompt is prefilled alone, whole, one after
another, and its first token goes out when its own prefill ends. Chunked prefill (simulated only): the
iteration's decode and its prompt chunks end together.

The cache is one rectangle, as the serving runtime keeps it (`runtime/serve/engine.py` over
`runtime/batched.py`; the batch replay's `Sequences.width` follows the same appends): a joining request is
left-padded to the rectangle's width (which widens to its prompt when that is longer), an AR step or a
PPSD tick appends a slot for every sequence (a tick none where every sequence turned its slot into a hole),
an EESD round appends γ + 1 and crops the trailing slots every sequence rejected (it widens by the most any
sequence kept), a leaving row is dropped together with the leading columns no remaining row attends to
(the columns older rows held), and the width resets when the batch empties. So the width is the span of
the oldest live row, not the history of the batch, and every decode iteration is priced at it.

Speculation, per live sequence (a request's `rounds` count the decode iterations that committed tokens to it,
AR steps included, as the real loop counts them) (`acceptance.py` says which trace judges it; a request's decode position
j reads its trace at j, wrapping round past the trace's end):
  AR      one token each
  EESD    γ drafts (never more than the sequence furthest from its budget can still use, as the runtime
          caps them; capped to none, an AR step); each keeps its accepted prefix and the verifier's token;
          the drafts judged are those up to the first rejection (what the acceptance seen counts)
  PPSD    the batched two-stage pipeline in lock step (`sim/batch/replay.py: replay_ppsd_group`): a
          sequence's first tick after it joins is stage 1 only for it (no stage-2 work, nothing
          committed); each later tick commits stage 2's token, and a rejected draft makes its next tick
          stale (nothing committed); the tick is priced with stage 2 over the sequences that have work
"""

from __future__ import annotations

from typing import NamedTuple

import simpy

from sim.batch.costs import grid_width
from sim.serve.acceptance import RequestAcceptance
from sim.serve.costs import ServeCosts
from sim.serve.policies import AR_STEP, AcceptanceSeen, ServePolicy, Speculation
from sim.serve.requests import RequestTiming, ServeRequest
from sim.serve.scheduler import Iteration, PrefillPolicy, Scheduler, SchedulerConfig


class IterationRecord(NamedTuple):
    """One engine iteration: when it started (s), what it cost (ms), the prompt tokens it prefilled, the
    sequences it decoded, their γ (0: an AR step) or a PPSD tick, the cache width and the tokens committed."""

    start_s: float
    ms: float
    prefill_tokens: int
    decoded: int
    draft_len: int
    pipelined: bool
    width: int
    committed: int


class _Seq:
    """A request in the running batch, as the engine advances it."""

    __slots__ = ("request", "timing", "match", "run", "pos", "stale", "fresh", "start")

    def __init__(self, request: ServeRequest, timing: RequestTiming, acceptance: RequestAcceptance | None):
        self.request, self.timing = request, timing
        positions = request.output_tokens - 1  # decode positions after the prefill's token
        self.match, self.run = acceptance.runs(request.prompt_id, positions) if acceptance else ((), ())
        self.pos = 0  # decode positions committed
        self.stale = False  # PPSD: its next tick works on a rejected draft
        self.fresh = True  # PPSD: its first tick (stage 1 only) is still to come
        self.start = 0  # the rectangle's column (counted from the engine's first) where its prompt begins


class ServeEngine:
    """One simulated serving engine: a policy, a scheduler configuration, the prices and the acceptance."""

    def __init__(self, costs: ServeCosts, policy: ServePolicy, config: SchedulerConfig,
                 acceptance: RequestAcceptance | None):
        self.costs, self.policy, self.config, self.acceptance = costs, policy, config, acceptance
        self.seen = AcceptanceSeen(acceptance.alpha if acceptance else 0.0)

    def run(self, requests: list[ServeRequest]) -> tuple[list[RequestTiming], list[IterationRecord]]:
        """Serve `requests` (arrival order) to the end -> each request's timing and the iteration log."""
        env = simpy.Environment()
        self.env, self.sched = env, Scheduler(self.config)
        self.timings = {r.request_id: RequestTiming(r.request_id, r.arrival_s, r.prompt_tokens) for r in requests}
        self.seqs: dict[int, _Seq] = {}  # the rectangle's rows, by request id
        self.width = 0
        self.right = 0  # the rectangle's right edge, in columns counted from the engine's first
        self.log: list[IterationRecord] = []
        self.wake: simpy.Event | None = None
        self.arrived = 0
        ordered = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
        env.process(self._arrivals(ordered))
        env.process(self._engine(len(ordered)))
        env.run()
        return [self.timings[r.request_id] for r in requests], self.log

    # --- processes ---------------------------------------------------------------------------------
    def _arrivals(self, requests: list[ServeRequest]):
        env = self.env
        for r in requests:
            if r.arrival_s > env.now:
                yield env.timeout(r.arrival_s - env.now)
            self.sched.arrive(r)
            self.arrived += 1
            if self.wake is not None and not self.wake.triggered:
                self.wake.succeed()

    def _engine(self, total: int):
        env, sched = self.env, self.sched
        while True:
            if sched.idle:
                if self.arrived >= total:
                    return
                self.wake = env.event()
                yield self.wake
                continue
            live = len(self.seqs)  # the rectangle's rows: the running sequences whose prompt is in
            # (the width as the prices read it: on the batch cost model's grid)
            spec = self.policy.decide(live, grid_width(self.width), self.seen, self.costs) if live else AR_STEP
            it = sched.next_iteration(spec.decode_tokens)
            if it.empty:  # nothing can run until something arrives (cannot happen with a budget ≥ 1)
                self.wake = env.event()
                yield self.wake
                continue
            if self.config.prefill is PrefillPolicy.FIRST and it.prefill:
                yield from self._prefill_each(it)
            else:
                yield from self._iteration(it, spec)

    # --- iterations --------------------------------------------------------------------------------
    def _prefill_each(self, it: Iteration):
        """Prefill first: each prompt alone, one after another; its first token when its prefill ends."""
        start, committed = self.env.now, 0
        for rid, n in it.prefill:
            yield self.env.timeout(self.costs.prefill(n) / 1000.0)
            committed += self._prefilled(rid, n)
        self.log.append(IterationRecord(start, 1000.0 * (self.env.now - start), it.prefill_tokens, 0, 0, False,
                                        self.width, committed))

    def _iteration(self, it: Iteration, spec: Speculation):
        """The iteration's decode (and, chunked, its prompt chunks after it), ending together."""
        start = self.env.now
        decoded = [self.seqs[rid] for rid in it.decode]
        spec = self._capped(spec, decoded)
        ms = self._decode_ms(spec, decoded) if decoded else 0.0
        running = self.sched.running
        for rid, n in it.prefill:
            seq = running[rid]
            ms += self.costs.chunk(n, seq.prefilled, seq.prefilled + n >= seq.request.prompt_tokens)
        yield self.env.timeout(ms / 1000.0)
        width = self.width
        committed = self._commit(spec, decoded) if decoded else 0
        for rid, n in it.prefill:
            committed += self._prefilled(rid, n)
        self.log.append(IterationRecord(start, ms, it.prefill_tokens, len(decoded),
                                        spec.draft_len if spec.exit_layer is not None else 0, spec.pipelined,
                                        width, committed))

    @staticmethod
    def _capped(spec: Speculation, decoded: list[_Seq]) -> Speculation:
        """EESD never drafts past what the sequence furthest from its budget can still commit; a round capped
        to no draft is an AR step (as the real loop runs it)."""
        if spec.exit_layer is None or spec.pipelined or not decoded:
            return spec
        most = max(s.request.output_tokens - 1 - s.pos for s in decoded)
        g = max(0, min(spec.draft_len, most - 1))
        return spec if g == spec.draft_len else Speculation(spec.exit_layer, g) if g else AR_STEP

    def _decode_ms(self, spec: Speculation, decoded: list[_Seq]) -> float:
        n = len(decoded)
        if spec.pipelined:
            working = sum(1 for s in decoded if not s.fresh)
            return self.costs.decode(spec, n, self.width, None if working == n else working)
        return self.costs.decode(spec, n, self.width)

    # --- commits -----------------------------------------------------------------------------------
    def _prefilled(self, rid: int, n: int) -> int:
        """`n` more prompt tokens of `rid` are in; a completed prompt yields its first token and, unless that
        ended it, joins the rectangle."""
        if not self.sched.prefilled(rid, n):
            return 0
        now = self.env.now
        timing = self.timings[rid]
        timing.deliver(now, 1)
        if rid not in self.sched.running:  # a one-token request: done with its prefill
            timing.finish_s = now
            return 1
        request = self.sched.running[rid].request
        seq = self.seqs[rid] = _Seq(request, timing, self.acceptance)
        self.width = max(self.width, request.prompt_tokens)  # left-padded to the rectangle, or widening it
        seq.start = self.right - request.prompt_tokens
        return 1

    def _leave(self, seq: _Seq, now: float) -> None:
        seq.timing.finish_s = now
        del self.seqs[seq.request.request_id]
        if not self.seqs:
            self.width = 0  # the rectangle resets when the batch empties
        else:  # the leading columns no remaining row attends to are cropped
            self.width = self.right - min(s.start for s in self.seqs.values())

    def _commit(self, spec: Speculation, decoded: list[_Seq]) -> int:
        if spec.pipelined:
            return self._commit_tick(decoded)
        now, sched = self.env.now, self.sched
        g = spec.draft_len if spec.exit_layer is not None else 0
        widest = committed = accepted_all = judged_all = 0
        for seq in decoded:
            accepted = min(seq.run[seq.pos], g) if g else 0
            judged = accepted + (accepted < g)  # the drafts up to the first rejection
            kept = accepted + 1
            widest = max(widest, kept)
            rid = seq.request.request_id
            got = sched.commit(rid, kept)
            seq.pos += got
            committed += got
            timing = seq.timing
            timing.deliver(now, got)
            timing.rounds += 1
            timing.drafted += judged
            timing.accepted += accepted
            accepted_all += accepted
            judged_all += judged
            if rid not in sched.running:
                self._leave(seq, now)
        if g:
            self.seen.record(judged_all, accepted_all)
        if self.seqs:
            self._append(widest)
        return committed

    def _append(self, columns: int) -> None:
        """Every row gains `columns` slots at the right edge."""
        self.width += columns
        self.right += columns

    def _commit_tick(self, decoded: list[_Seq]) -> int:
        now, sched = self.env.now, self.sched
        holes = committed = judged = hits = 0
        for seq in decoded:
            if seq.fresh:  # its first tick: stage 1 fed its first token, stage 2 had nothing of it
                seq.fresh = False
                continue
            if seq.stale:  # stage 2 worked on a rejected draft: nothing to commit
                seq.stale = False
                continue
            hit = seq.match[seq.pos]
            rid = seq.request.request_id
            got = sched.commit(rid, 1)
            seq.pos += got
            committed += got
            judged += 1
            hits += hit
            timing = seq.timing
            timing.deliver(now, got)
            timing.drafted += 1
            timing.accepted += hit
            timing.rounds += 1
            if rid in sched.running:
                seq.stale = not hit
                holes += seq.stale
            else:
                self._leave(seq, now)
        self.seen.record(judged, hits)
        if self.seqs and holes < len(decoded):
            self._append(1)
        return committed
