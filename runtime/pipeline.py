"""PPSD stage processes: the message loop of each pipeline stage.

Stage i (rank i) holds decoder layers [b_i, b_{i+1}) and its own KV cache; stage 1 also holds the
embedding and the exit head (it drafts), the last stage the final norm + LM head (it verifies).

Channels (torch.distributed point-to-point, isend/irecv, preallocated buffers; runtime/transport.py
carries them so that NCCL's per-pair ordering cannot deadlock them):
  H  stage i -> i+1   header [kind, pos, epoch, length, seq] + hidden state (+ the layer-E state
                      when sampling with k >= 3, so the verifier can recompute the draft's q at a
                      rejection)
  P  stage i -> i+1   prefill payload (the prompt's hidden states; variable size, once a sequence)
  D  stage 1 -> last  the draft proposed for pos + 1 [kind, pos, epoch, token, q(token)] (q(token): its
                      probability under the exit head, float64 bits; 0 when greedy)
  V  last -> stage 1  the verdict on that draft [kind, pos, epoch, accepted, token, done]
Headers, drafts and verdicts are control messages (gloo, host memory); hidden states and payloads
are data (one message with the header on CPU runs; over per-pair NCCL groups on GPUs).

Flow: stage 1 sends token s on as soon as its layers are done, then drafts s+1 with the exit head
and starts on it, keeping at most k tokens in flight. The last stage verifies: a rejection bumps
the epoch and carries the corrected token back to stage 1, which crops its cache and restarts from
it; with a confidence stop τ (`PipelineJob.draft_stop`), a draft less confident than τ is not run
on: stage 1 waits for its verdict, then runs the verdict's token (the draft, or the correction). Every
message carries its epoch, so the last stage drops stale work, middle stages drop it when
the shared epoch board says so, and any stage crops its cache lazily to the position of the next
message it processes. Control receives are posted ahead (double buffering; the last stage's draft
receives `draft_receives_ahead(k)` deep) so a message can land while the stage computes; a data
receive is posted once its header is in (runtime/transport.py).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field

import torch

from ppsd.exit_heads import SHARED
from runtime.acceptance import ForcedTrace, Sampler
from runtime.decoding import draft_confidence
from runtime.emulate import stamp_sent, wait_due, wait_until
from runtime.transport import (TAG_D, TAG_V, Header, Links, RecvRing, SendRing, TokenIn, TokenOut, control_ring_depth,
                               draft_receives_ahead)
from runtime.warmup import warmup_view
from sim.timeline import Event

TOKEN, PREFILL, END, SHUTDOWN = 1, 2, 3, 4
DRAFT_WIDTH = 6  # kind, pos, epoch, token, q(token) as float64 bits, send stamp (last: `_arrive`)


def _float_bits(x: float) -> int:
    """A float64 as the int64 with its bits (the draft message is int64); plain struct, no tensor on
    the per-token path."""
    return struct.unpack("<q", struct.pack("<d", float(x)))[0]


def _bits_float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", int(bits)))[0]


def _q_of(q: torch.Tensor | None, token: int) -> float:
    """q(token) for the draft message (greedy drafts carry no distribution: 0)."""
    return 0.0 if q is None else float(q[token])


def _stamp() -> int:
    """Send time of a control message, µs on perf_counter (one clock for the processes of one
    machine): an emulated hop delivers it no earlier than this + the hop (`PipelineJob.hop_ms`)."""
    return int(time.perf_counter() * 1e6)


@dataclass
class PipelineJob:
    """Everything a stage needs; identical on every rank (picklable)."""

    model_spec: str
    bounds: tuple[int, ...]
    prompts: list[list[int]]
    max_new: list[int]
    temperature: float = 0.0
    seed: int = 0
    forced: list[ForcedTrace | None] | None = None
    eos: tuple[int, ...] = ()
    warmup: int = 1
    repeats: int = 3
    timeline_rep: int = 0  # measured repetition whose events are kept
    timeout_s: float = 60.0
    device: str = "cpu"
    dtype: str = "float32"
    model_seed: int = 0
    threads: int = 1
    heads_dir: str | None = None  # exit-head folder (runtime/heads/store.py) when exit_head is not "shared"
    exit_head: str = SHARED
    transport: str = "auto"  # runtime/transport.py: split over NCCL, fused on gloo; strict* in tests
    # "local": stages read a shared-memory epoch board between layers (stage 1 and middle stages
    # abandon stale passes); "torchrun": as under torchrun (the board is a network store), stage 1
    # finishes every pass and middle stages drop stale work only when a pass starts. None: by the board.
    launch: str | None = None
    hop_ms: float = 0.0  # emulated devices: every message delivered no earlier than its send + this
    warmup_tokens: int = 0  # > 0: a warm-up sequence is its prompt's start and this many new tokens (runtime/warmup.py)
    draft_stop: float | None = None  # τ: after a draft less confident than this, stage 1 waits for its verdict

    @property
    def schedule(self) -> list[tuple[int, int]]:
        """(repetition, prompt index) in order; repetitions < 0 are warm-up."""
        return [(r, i) for r in range(-self.warmup, self.repeats) for i in range(len(self.prompts))]

    def prompt_of(self, seq: int) -> list[int]:
        """The prompt sequence `seq` of the schedule prefills (cut short in a short warm-up)."""
        return self._sequence(seq)[0]

    def max_new_of(self, seq: int) -> int:
        """The tokens sequence `seq` of the schedule generates."""
        return self._sequence(seq)[1]

    def _sequence(self, seq: int) -> tuple[list[int], int]:
        rep, i = divmod(seq, len(self.prompts))  # the schedule's order, without building it per token
        rep -= self.warmup
        if rep < 0:
            return warmup_view(self.prompts[i], self.max_new[i], self.warmup_tokens)
        return self.prompts[i], self.max_new[i]


@dataclass
class StageLog:
    """Per-rank record of a whole pipeline session (sent back to the launcher)."""

    rank: int
    seq_start: dict[int, float] = field(default_factory=dict)  # stage 1: when each sequence began
    busy: dict[int, float] = field(default_factory=dict)  # decode-phase compute seconds per sequence
    cpu: dict[int, float] = field(default_factory=dict)  # this process's CPU seconds per sequence (all threads)
    seqs: dict[int, dict] = field(default_factory=dict)  # last stage: tokens, times, rounds
    events: list[Event] = field(default_factory=list)
    flushes: int = 0
    dropped: int = 0


class EpochBoard:
    """The latest epoch, readable by every stage without a message (middle stages use it to drop
    stale work early): shared memory when spawned locally, the rendezvous store under torchrun."""

    def __init__(self, shared=None, store=None):
        self.shared, self.store = shared, store

    @property
    def local(self) -> bool:
        """Shared memory: cheap enough to read between layers (a store read is a network round trip)."""
        return self.shared is not None

    @staticmethod
    def key(seq: int, epoch: int) -> int:
        """One monotonic number for (sequence, epoch), so a new sequence needs no reset."""
        return seq * (1 << 24) + epoch

    def get(self) -> int:
        if self.shared is not None:
            return int(self.shared.value)
        if self.store is not None:
            return int(self.store.add("ppsd_epoch", 0))
        return 0

    def set(self, epoch: int) -> None:
        if self.shared is not None:
            self.shared.value = epoch
        elif self.store is not None:
            self.store.add("ppsd_epoch", epoch - int(self.store.add("ppsd_epoch", 0)))


@dataclass
class _FirstState:
    """Stage 1's state within one sequence: the epoch it drafts in, the tokens in flight, the next
    token x and its position s, whether its last pass was abandoned, whether its last draft was unsure
    (a confidence stop: wait for its verdict), and its busy time so far."""

    seq: int
    cache: object
    sampler: object
    step: torch.Tensor
    x: int
    s: int
    epoch: int = 0
    inflight: int = 1
    aborted: bool = False
    unsure: bool = False
    busy: float = 0.0


class Stage:
    def __init__(self, rank: int, world: int, job: PipelineJob, model, board: EpochBoard, heartbeat=None):
        self.rank, self.world, self.job, self.model, self.board = rank, world, job, model, board
        self.heartbeat = heartbeat
        self.first, self.last = rank == 0, rank == world - 1
        self.start, self.end = job.bounds[rank], job.bounds[rank + 1]
        self.exit_layer = job.bounds[1]
        self.dev = model.device
        self.H = model.hidden_size
        # sampling with middle stages: the verifier needs the layer-E state to recompute q
        self.carry = job.temperature > 0 and world > 2
        self.width = self.H * (2 if self.carry else 1)
        self.log = StageLog(rank)
        # the exit head: stage 1 drafts with it; the verifier recomputes q with it only when sampling,
        # and then only to reject a draft.
        # Only exit E's adapter is loaded, and no other stage loads anything.
        self.drafter = None
        if self.first or (self.last and job.temperature > 0):
            from runtime.heads import make_drafter

            self.drafter = make_drafter(model, self.exit_layer, job.heads_dir, job.exit_head)
        self.row = f"stage {rank + 1}"
        # the board is cheap enough to read between layers only in shared memory (local launch)
        self.live_board = board.local and (job.launch or "local") == "local"
        self.hop_s = float(job.hop_ms) / 1e3
        # an emulated hop: hidden states carry their send time (runtime/emulate.py: stamp_sent)
        self.stamp_hidden = self.hop_s > 0.0 and getattr(model, "emulated", False)
        self.origin = 0.0  # events keep absolute perf_counter times (one clock for all local processes)
        self.record = False
        self.eos = set(job.eos)

    def connect(self) -> None:
        """Open this stage's channels (collective: every rank, after init_process_group)."""
        # the groups' own timeout backs up the stage watchdog (`timeout_s` without progress), twice
        # as long so that a hang is reported by the watchdog, in its words, not as a gloo/NCCL error
        links = Links.open(self.rank, self.world, self.job.transport, self.dev, timeout_s=2 * self.job.timeout_s)
        i64, mdt, carried = torch.long, self.model.dtype, frozenset({TOKEN})
        if not self.first:
            self.h_in = TokenIn(links, self.width, mdt, carried)
        if not self.last:
            self.h_out = TokenOut(links, self.width, mdt, carried)
        # drafts and verdicts are a few integers: control messages, host memory
        depth = control_ring_depth(self.world)
        if self.first:
            self.d_out = SendRing(DRAFT_WIDTH, i64, "cpu", self.world - 1, TAG_D, links.control, depth)
            self.v_in = RecvRing(7, i64, "cpu", self.world - 1, TAG_V, links.control)
        if self.last:
            self.d_in = RecvRing(DRAFT_WIDTH, i64, "cpu", 0, TAG_D, links.control)
            self.v_out = SendRing(7, i64, "cpu", 0, TAG_V, links.control, depth)

    # --- helpers ----------------------------------------------------------------------------------
    def _clock(self) -> float:
        """perf_counter once this stage's compute is done (kernels run asynchronously: without the
        sync a busy time would count launches only); plain perf_counter on a CPU. Only the compute
        stream: a device-wide sync would also wait for an NCCL send still waiting for its peer's
        receive, and bill that wait as this stage's work."""
        if self.dev.type == "cuda":
            torch.cuda.current_stream(self.dev).synchronize()
        return time.perf_counter()

    def _beat(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.value += 1

    def _event(self, name: str, start: float, end: float, token=None, **args) -> None:
        if self.record:
            self.log.events.append(Event(name, self.row, start - self.origin, end - start, token, args))

    def _send_header(self, kind: int, pos: int = 0, epoch: int = 0, length: int = 0, seq: int = 0,
                     hidden: torch.Tensor | None = None, carry: torch.Tensor | None = None) -> None:
        if hidden is not None and self.stamp_hidden:
            stamp_sent(hidden)
        self.h_out.send(Header(kind, pos, epoch, length, seq), hidden, carry)

    def _send_payload(self, hidden: torch.Tensor, carry: torch.Tensor | None) -> None:
        if self.stamp_hidden:
            stamp_sent(hidden)
        flat = hidden.reshape(-1)
        if carry is not None:
            flat = torch.cat([flat, carry.reshape(-1)])
        self.h_out.send_payload(flat)  # once a sequence

    def _recv_payload(self, length: int) -> torch.Tensor:
        n = length * self.H + (self.H if self.carry else 0)
        return self.h_in.recv_payload(n, self.model.dtype, self.dev)

    def _send_draft(self, kind: int, pos: int = 0, epoch: int = 0, token: int = 0, q_token: float = 0.0) -> None:
        buf = self.d_out.next()
        buf.copy_(torch.tensor((kind, pos, epoch, token, _float_bits(q_token), _stamp())))
        self.d_out.send(buf)

    def _arrive(self, msg: list) -> list:
        """A draft or verdict (its send time in µs last): with an emulated hop, wait until it is due."""
        if self.hop_s > 0.0:
            wait_until(msg[-1] / 1e6 + self.hop_s)
        return msg

    def _arrive_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """A hidden state ([..., H] rows, stamped at its send): with an emulated hop, wait until it is due."""
        if self.stamp_hidden:
            wait_due(hidden, self.hop_s)
        return hidden

    # --- stage 1: embed, layers [0, E), exit head (drafts) ------------------------------------------
    def run_first(self) -> None:
        """Stage 1: per sequence, the prefill, then one speculative pass after another, each waiting
        for verdicts only at the in-flight cap or after an abandoned pass."""
        self.v_in.post()
        for seq, (rep, _) in enumerate(self.job.schedule):
            self.record = rep == self.job.timeline_rep
            c0 = time.process_time()
            st = self._prefill_first(seq)
            while self._await_verdicts(st):
                self._draft_pass(st)
            self.log.busy[seq] = st.busy
            self.log.cpu[seq] = time.process_time() - c0
            self._send_header(END, seq=seq)
            self._send_draft(END)
        self._shutdown_first()

    def _prefill_first(self, seq: int) -> _FirstState:
        """The prompt through layers [0, E) in one pass: its layer-E states go to the next stage and its
        last one drafts the first token."""
        job, model = self.job, self.model
        sampler = Sampler.make(job.temperature, job.seed * 1_000_003 + seq * 2 + 1, self.dev)
        prompt = job.prompt_of(seq)
        L = len(prompt)
        cache = model.new_cache()
        t0 = time.perf_counter()
        self.log.seq_start[seq] = t0
        ids = torch.tensor([prompt], dtype=torch.long, device=self.dev)
        h_exit = model.forward_layers(model.embed(ids), 0, self.exit_layer, cache, 0)
        last_exit = h_exit[:, -1:]
        self._send_header(PREFILL, L - 1, 0, L, seq)
        self._send_payload(h_exit, last_exit if self.carry else None)
        d, q, unsure = self._draft(sampler, last_exit)
        self._send_draft(TOKEN, L - 1, 0, d, _q_of(q, d))
        self._event("prefill", t0, time.perf_counter(), d, length=L)
        return _FirstState(seq, cache, sampler, torch.empty((1, 1), dtype=torch.long, device=self.dev), x=d, s=L,
                           unsure=unsure)

    def _draft(self, sampler, h_exit: torch.Tensor) -> tuple[int, torch.Tensor | None, bool]:
        """The exit head's draft from a layer-E state: (token, q or None, whether it is unsure: its
        confidence, the top-1 probability, below the job's stop τ)."""
        if self.job.draft_stop is None:
            return (*self.drafter.choose(sampler, h_exit), False)
        logits = self.drafter.logits(h_exit)[0, -1]
        d, q = self.drafter.choose_logits(sampler, logits)
        return d, q, float(draft_confidence(logits)) < self.job.draft_stop

    def _await_verdicts(self, st: _FirstState) -> bool:
        """Keep at most k tokens in flight: wait for the oldest verdict; after an abandoned pass, wait
        until the rejection that caused it has arrived; after an unsure draft (a confidence stop), wait
        for every verdict up to the one on that draft, which decides the next pass either way. False
        when the sequence is over."""
        while st.inflight >= self.world or ((st.aborted or st.unsure) and st.inflight > 0):
            v = self._arrive(self.v_in.take().tolist())
            self.v_in.post()
            st.inflight -= 1
            if v[5]:
                return False
            if not v[3]:  # rejected: drop in-flight work, restart from the corrected token
                st.epoch, st.x, st.s = int(v[2]), int(v[4]), int(v[1]) + 1
                st.cache.crop(st.s)
                st.inflight = 0
                st.aborted = False
                self.log.flushes += 1
        st.unsure = False  # nothing in flight: the verdict on the unsure draft is in
        return True

    def _draft_pass(self, st: _FirstState) -> None:
        """One pass of token x at position s: layers [0, E), its hidden state sent on, then the exit head
        drafts x's successor. A pass on a token whose predecessor is still being verified is
        speculative: when the last stage rejects that predecessor (it posts the new epoch on the shared
        board), the pass is abandoned between layers instead of running to its useless end."""
        model = self.model
        a = time.perf_counter()
        st.step[0, 0] = st.x
        stale_key = EpochBoard.key(st.seq, st.epoch)
        should_stop = (lambda: self.board.get() > stale_key) if self.live_board and st.inflight else None
        if should_stop is not None and should_stop():
            st.aborted = True  # rejected before the pass began: no embedding, wait for the verdict
            return
        h_exit = model.forward_layers(model.embed(st.step), 0, self.exit_layer, st.cache, st.s, should_stop=should_stop)
        if h_exit is not None and should_stop is not None and should_stop():
            h_exit = None  # rejected while the last layer ran: send nothing, skip the exit head
        if h_exit is None:
            st.aborted = True
            b = self._clock()
            st.busy += b - a
            self._event("flush", a, b, st.x, pos=st.s, epoch=st.epoch)
            return
        sent = self._clock()
        self._send_header(TOKEN, st.s, st.epoch, 1, st.seq, h_exit, h_exit if self.carry else None)
        d, q, st.unsure = self._draft(st.sampler, h_exit)
        self._send_draft(TOKEN, st.s, st.epoch, d, _q_of(q, d))
        b = time.perf_counter()
        st.busy += b - a
        # where the pass handed its hidden state on: splits layers from the exit head
        self._event("draft", a, b, st.x, pos=st.s, epoch=st.epoch, layers_ms=round((sent - a) * 1e3, 3),
                    **({"unsure": True} if st.unsure else {}))
        self._beat()
        st.inflight += 1
        st.x, st.s = d, st.s + 1

    def _shutdown_first(self) -> None:
        self._send_header(SHUTDOWN)
        self._send_draft(SHUTDOWN)
        for _ in range(max(draft_receives_ahead(self.world) - 1, 0)):
            self._send_draft(SHUTDOWN)  # pads: every receive the last stage posted ahead completes
        v = self.v_in.take()  # the last stage's goodbye matches the receive posted ahead
        assert int(v[0]) == SHUTDOWN, v
        self.h_out.drain()
        self.d_out.drain()

    # --- middle stages: layers only -----------------------------------------------------------------
    def run_middle(self) -> None:
        model, mdt = self.model, self.model.dtype
        cache, busy, seq, t_prefill_end, c0 = model.new_cache(), 0.0, -1, 0.0, 0.0
        self.h_in.post()
        while True:
            hdr, hidden = self.h_in.take()
            kind, pos, epoch, length, seq_m = hdr.values()
            if kind == PREFILL:
                payload = self._recv_payload(length)
            if kind != SHUTDOWN:
                self.h_in.post()
            if kind == SHUTDOWN:
                self._send_header(SHUTDOWN)
                break
            if kind == END:
                self.log.busy[seq] = busy
                self.log.cpu[seq] = time.process_time() - c0
                self._send_header(END, seq=seq_m)
                continue
            if kind == PREFILL:
                seq, busy, c0 = seq_m, 0.0, time.process_time()
                self.record = self._is_timeline_seq(seq)
                cache = model.new_cache()
                self._arrive_hidden(payload)
                a = time.perf_counter()
                h = payload[:length * self.H].view(1, length, self.H)
                out = model.forward_layers(h, self.start, self.end, cache, 0)
                b = self._clock()  # done before the next stage hears of it (as stage 1 does)
                self._send_header(PREFILL, pos, epoch, length, seq)
                self._send_payload(out, payload[length * self.H:] if self.carry else None)
                self._event("prefill", a, b, length=length)
                continue
            self._arrive_hidden(hidden)
            key = EpochBoard.key(seq_m, epoch)
            if self.world > 2 and key < self.board.get():
                self.log.dropped += 1  # stale: a correction has already been issued
                continue
            a = time.perf_counter()
            cache.crop(pos)
            h = hidden[:self.H].view(1, 1, self.H).to(mdt)
            # a correction issued while the pass runs abandons it between layers (shared board only)
            should_stop = (lambda: self.board.get() > key) if self.live_board else None
            out = model.forward_layers(h, self.start, self.end, cache, pos, should_stop=should_stop)
            if out is None:
                b = self._clock()
                busy += b - a
                self.log.dropped += 1
                self._event("flush", a, b, pos=pos, epoch=epoch)
                continue
            b = self._clock()  # the pass's compute is done before the next stage is told (as stage 1 does)
            self._send_header(TOKEN, pos, epoch, 1, seq, out, hidden[self.H:] if self.carry else None)
            busy += b - a
            self._event("forward", a, b, pos=pos, epoch=epoch)
            self._beat()
        self.h_out.drain()

    def _is_timeline_seq(self, seq: int) -> bool:
        rep, _ = self.job.schedule[seq]
        return rep == self.job.timeline_rep

    # --- last stage: layers [b_{k-1}, N), final norm + LM head (verifies) ---------------------------
    def _draft_for(self, pos: int, epoch: int) -> tuple[int, float]:
        """The draft stage 1 proposed after token `pos` in `epoch` and its q(draft) (older, stale
        drafts are skipped)."""
        while True:
            d = self._arrive(self._take_draft())
            if d[0] == TOKEN and d[1] == pos and d[2] == epoch:
                return int(d[3]), _bits_float(int(d[4]))
            if d[0] != TOKEN:
                raise RuntimeError(f"stage {self.rank + 1}: draft channel out of step (got kind {d[0]})")

    def _take_draft(self) -> list:
        """The next message on the draft channel (keeping `draft_receives_ahead` receives posted)."""
        msg = self.d_in.take().tolist()
        if self.drafts_ahead and msg[0] != SHUTDOWN:
            self.d_in.post()
        return msg

    def _drain_drafts(self, kind: int) -> None:
        while int(self._take_draft()[0]) != kind:
            pass
        if kind == SHUTDOWN:
            while self.d_in.pending:  # stage 1's pads
                self.d_in.take()

    def _post_stale(self, seq: int, epoch: int) -> None:
        """Work of `seq` older than `epoch` is stale: middle stages drop it, stage 1 abandons its pass
        (where anyone reads the board: more than 2 stages, or a local launch's shared memory)."""
        if self.world > 2 or self.live_board:
            self.board.set(EpochBoard.key(seq, epoch))

    def run_last(self) -> None:
        job, model = self.job, self.model
        same_peer = self.world == 2  # hidden states and drafts both come from stage 1
        self.drafts_ahead = draft_receives_ahead(self.world)
        for _ in range(self.drafts_ahead):
            self.d_in.post()
        self.h_in.post()
        while True:
            hdr, hidden = self.h_in.take()
            kind, pos, epoch_m, length, seq_m = hdr.values()
            if kind == PREFILL:
                payload = self._recv_payload(length)
            if same_peer:
                self.d_in.post()  # in the order stage 1 sent them (NCCL matches by order)
            if kind != SHUTDOWN:
                self.h_in.post()
            if kind == SHUTDOWN:
                self._drain_drafts(SHUTDOWN)
                vb = self.v_out.next()
                vb.copy_(torch.tensor((SHUTDOWN, 0, 0, 0, 0, 0, _stamp())))
                self.v_out.send(vb)
                break
            if kind == END:
                self._drain_drafts(END)
                st = self.state
                self.log.busy[seq_m] = st["busy"]
                self.log.cpu[seq_m] = time.process_time() - st["cpu0"]
                continue
            if kind == PREFILL:
                self._begin_sequence(seq_m, length)
                self._arrive_hidden(payload)
                a = time.perf_counter()
                h = payload[:length * self.H].view(1, length, self.H)
                out = model.forward_layers(h, self.start, self.end, self.cache, 0)
                if self.carry:
                    carry = payload[length * self.H:].view(1, 1, self.H)
                else:  # k = 2: the input is the prompt's layer-E states; the last one made the draft
                    carry = h[:, -1:] if job.temperature > 0 else None
                self._verify(pos, 0, out[:, -1:], carry, a, prefill=True)
                continue
            st = self.state
            self._arrive_hidden(hidden)
            if st["done"] or epoch_m < st["epoch"]:
                self.log.dropped += 1
                continue
            a = time.perf_counter()
            self.cache.crop(pos)
            h = hidden[:self.H].view(1, 1, self.H).to(model.dtype)
            out = model.forward_layers(h, self.start, self.end, self.cache, pos)
            if self.carry:
                carry = hidden[self.H:].view(1, 1, self.H).to(model.dtype)
            else:
                carry = h if job.temperature > 0 else None  # k = 2: the input is the layer-E state
            self._verify(pos, epoch_m, out, carry, a)
        self.v_out.drain()

    def _begin_sequence(self, seq: int, length: int) -> None:
        self.record = self._is_timeline_seq(seq)
        self.cache = self.model.new_cache()
        self.state = {"seq": seq, "L": length, "epoch": 0, "tokens": [], "rounds": [], "run": 0,
                      "verified": 0, "done": False, "busy": 0.0, "t_first": None, "t_last": None,
                      "cpu0": time.process_time(),
                      "sampler": Sampler.make(self.job.temperature, self.job.seed * 1_000_003 + seq * 2 + 2,
                                              self.dev)}

    def _verify(self, pos: int, epoch: int, out: torch.Tensor, exit_state, a: float, prefill: bool = False) -> None:
        st, job, model = self.state, self.job, self.model
        t_layers = self._clock() if self.record else 0.0
        logits = model.head(out)[0, -1]
        t_head = self._clock() if self.record else 0.0
        sampler: Sampler = st["sampler"]
        d, q_d = self._draft_for(pos, epoch)
        t_draft = time.perf_counter() if self.record else 0.0
        # sampling: the acceptance test needs only q(d), which came with the draft; all of q (the
        # exit head again, on the layer-E state) only for the residual of a rejection
        q_full = None
        if exit_state is not None and not sampler.greedy:
            def q_full():
                return self.drafter.probs(sampler, exit_state)
        gen = pos + 1 - st["L"]  # generated index of the token being decided
        seq = st["seq"]
        forced = job.forced[job.schedule[seq][1]] if job.forced else None
        ok, tok = sampler.verify(d, None, logits, None if forced is None else forced.accept(gen), q_draft=q_d,
                                 q_full=q_full)
        st["tokens"].append(tok)
        st["verified"] += 1
        if ok:
            st["run"] += 1
        else:
            st["rounds"].append(st["run"])
            st["run"] = 0
            st["epoch"] += 1
            self._post_stale(seq, st["epoch"])
        max_new = job.max_new_of(seq)
        done = len(st["tokens"]) >= max_new or tok in self.eos
        if done and ok:
            st["rounds"].append(st["run"])  # the last, unfinished round
        if done:
            # the sequence is over: every token still in flight behind this one is stale. Without
            # this, middle stages ran that tail to its end and stage 1's next sequence waited for
            # it: its first draft send reuses a ring slot whose draft the last stage takes only at
            # the old sequence's END, after the tail (a stall at every sequence start).
            self._post_stale(seq, st["epoch"] + 1)
        vb = self.v_out.next()
        vb.copy_(torch.tensor((TOKEN, pos, st["epoch"], int(ok), tok, int(done), _stamp())))
        self.v_out.send(vb)
        b = time.perf_counter()
        if prefill:
            st["t_first"] = b
            self._event("prefill", a, b, tok)
        else:
            st["busy"] += b - a
            # where the pass went: its layers, the LM head, the wait for the draft, then the verdict's send
            self._event("verify", a, b, tok, pos=pos, accepted=bool(ok), layers_ms=round((t_layers - a) * 1e3, 3),
                        head_ms=round((t_head - t_layers) * 1e3, 3), draft_wait_ms=round((t_draft - t_head) * 1e3, 3))
        st["t_last"] = b
        self._beat()
        if done:
            st["done"] = True
            self.log.seqs[seq] = {"tokens": st["tokens"], "t_first": st["t_first"], "t_last": b,
                                  "rounds": st["rounds"], "verified": st["verified"]}

    def run(self) -> StageLog:
        self.connect()
        if self.first:
            self.run_first()
        elif self.last:
            self.run_last()
        else:
            self.run_middle()
        return self.log
