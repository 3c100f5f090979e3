"""Point-to-point messaging between PPSD stages that cannot deadlock under NCCL's ordering.

Why a transport of its own. NCCL runs all point-to-point traffic between two ranks of one
communicator, both directions, in posting order on one stream: a receive posted early blocks every
send queued behind it on that pair until its message arrives (pytorch/pytorch#109401,
NVIDIA/nccl#479). Gloo matches by (peer, tag) and hides this. A pipeline stage wants receives
posted ahead (a message lands while the stage computes) and, at k = 2, talks to one peer in both
directions (hidden states and drafts go one way, verdicts the other): with everything on one NCCL
communicator, stage 1's early verdict receive would block its first hidden-state send, and the
pipeline would hang on its first token.

The design (`Links.open`):
  control  headers, drafts and verdicts (a few integers each) travel over a gloo group in host
           memory, receives posted ahead freely: gloo has no cross-direction ordering.
  data     hidden states and prefill payloads travel only forward, stage i -> i+1, each adjacent
           pair over its own group, created in the same order on every rank. On a data group one
           side only sends and the other only receives, and the receiver posts a receive only after
           the header announcing that message has arrived on the control channel. So every
           operation on a data pair is matched, in order, by one its peer has already issued (or
           issues next): no receive ever waits on a stream ahead of a send.
On a CPU-only run (gloo everywhere) the header and the hidden state go as one message instead
("fused"): the CPU pipeline is latency-bound and one message per hop beats two.

`StrictChannel` enforces NCCL's semantics on top of gloo, so CPU tests can prove the above: one
ordered queue per peer, executed one operation at a time, tags ignored (matched by order). The
transport "strict" runs the split design over it (must finish); "strict-fused" runs the old single
channel design over it (hangs, which the tests show).
"""

from __future__ import annotations

import datetime
import queue
import threading
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

import torch
import torch.distributed as dist

from ppsd.errors import UserError

TAG_H, TAG_D, TAG_V, TAG_P = 0, 1, 2, 3  # hidden-state headers, drafts, verdicts, prefill payloads
RING = 8  # send/recv buffers per channel; more than the tokens that can be in flight


def control_ring_depth(stages: int) -> int:
    """Send buffers for drafts and verdicts at `stages` stages. A send completes only once its peer
    has taken it, and a buffer is reused only after that: the last stage takes stage 1's drafts
    only as it verifies, so after a rejection up to k - 1 stale drafts wait for it, on top of the
    k in flight. A ring shorter than that makes stage 1 wait on the last stage."""
    return max(RING, 2 * int(stages) + 2)


def draft_receives_ahead(stages: int) -> int:
    """Draft receives the last stage keeps posted ahead at `stages` stages (0: one at a time, as
    needed). With more than 2 stages, after a rejection the last stage takes the stale drafts stage 1
    sent for the tokens behind the rejected one before it meets the draft it needs, and a receive
    posted only then costs a gloo round trip each on the critical path; posted ahead, they have landed
    by then. At 2 stages the drafts
    share their peer with the hidden states and are received in the order sent. At shutdown stage 1
    sends `ahead - 1` padding messages after its last, so no receive stays posted."""
    return 0 if int(stages) <= 2 else min(int(stages), RING - 1)


class TransportKind(StrEnum):
    AUTO = "auto"                  # split when the data backend is NCCL, fused on gloo
    FUSED = "fused"                # one gloo channel: header + hidden state in one message
    SPLIT = "split"                # control over gloo, hidden states over per-pair data groups
    STRICT = "strict"              # split, data groups under NCCL's ordering (CPU tests)
    STRICT_FUSED = "strict-fused"  # everything on one NCCL-ordered channel: the design that deadlocks (tests)

    @classmethod
    def parse(cls, text) -> TransportKind:
        try:
            return cls(str(text))
        except ValueError:
            raise UserError(f"unknown transport {text!r}", f"use one of: {', '.join(k.value for k in cls)}") from None


# --- channels: where a message goes -------------------------------------------------------------------

class DistChannel:
    """torch.distributed point-to-point on one process group (None: the default group)."""

    def __init__(self, group=None):
        self.group = group

    def isend(self, tensor: torch.Tensor, peer: int, tag: int = 0):
        return dist.isend(tensor, peer, group=self.group, tag=tag)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int = 0):
        return dist.irecv(tensor, peer, group=self.group, tag=tag)

    def send(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> None:
        dist.send(tensor, peer, group=self.group, tag=tag)

    def recv(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> None:
        dist.recv(tensor, peer, group=self.group, tag=tag)


class _Done:
    """A strict channel operation's completion, waited on like a torch.distributed Work."""

    def __init__(self):
        self._event = threading.Event()
        self._error: BaseException | None = None

    def finish(self, error: BaseException | None = None) -> None:
        self._error = error
        self._event.set()

    def is_completed(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout=None) -> bool:
        self._event.wait()
        if self._error is not None:
            raise self._error
        return True


class StrictChannel:
    """NCCL's point-to-point semantics over a gloo group, for tests: every operation between this
    rank and one peer runs in posting order, one at a time, on one queue (NCCL's stream per pair),
    matched by order alone (NCCL has no tags). A posted receive therefore blocks every later send to
    the same peer until its message arrives, exactly what deadlocks real NCCL pipelines."""

    def __init__(self, group=None):
        self.group = group
        self._queues: dict[int, queue.SimpleQueue] = {}

    def _queue(self, peer: int) -> queue.SimpleQueue:
        q = self._queues.get(peer)
        if q is None:
            q = self._queues[peer] = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(q,), daemon=True, name=f"strict-p2p-{peer}").start()
        return q

    def _serve(self, q: queue.SimpleQueue) -> None:
        while True:
            op, tensor, peer, done = q.get()
            try:
                if op == "send":
                    dist.send(tensor, peer, group=self.group, tag=0)
                else:
                    dist.recv(tensor, peer, group=self.group, tag=0)
                done.finish()
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on it
                done.finish(exc)

    def isend(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> _Done:
        done = _Done()
        self._queue(peer).put(("send", tensor, peer, done))
        return done

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> _Done:
        done = _Done()
        self._queue(peer).put(("recv", tensor, peer, done))
        return done

    def send(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> None:
        self.isend(tensor, peer, tag).wait()

    def recv(self, tensor: torch.Tensor, peer: int, tag: int = 0) -> None:
        self.irecv(tensor, peer, tag).wait()


# --- rings of preallocated buffers ------------------------------------------------------------------

class SendRing:
    """Preallocated send buffers; a buffer is reused only after its previous send completed."""

    def __init__(self, shape: int, dtype, device, peer: int, tag: int, channel, depth: int = RING):
        self.depth = max(int(depth), 1)
        self.bufs = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.depth)]
        self.works: list = [None] * self.depth
        self.i, self.peer, self.tag, self.channel = 0, peer, tag, channel

    def next(self) -> torch.Tensor:
        self.i = (self.i + 1) % self.depth
        if self.works[self.i] is not None:
            self.works[self.i].wait()
            self.works[self.i] = None
        return self.bufs[self.i]

    def send(self, buf: torch.Tensor) -> None:
        self.works[self.i] = self.channel.isend(buf, self.peer, tag=self.tag)

    def drain(self) -> None:
        for j, w in enumerate(self.works):
            if w is not None:
                w.wait()
                self.works[j] = None


class RecvRing:
    """Receives posted ahead into a ring of buffers; `take()` waits for the oldest one."""

    def __init__(self, shape: int, dtype, device, peer: int, tag: int, channel):
        self.bufs = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(RING)]
        self.pending: deque = deque()
        self.i, self.peer, self.tag, self.channel = 0, peer, tag, channel

    def post(self) -> None:
        self.i = (self.i + 1) % RING
        buf = self.bufs[self.i]
        self.pending.append((self.channel.irecv(buf, self.peer, tag=self.tag), buf))

    def take(self) -> torch.Tensor:
        if not self.pending:
            self.post()
        work, buf = self.pending.popleft()
        work.wait()  # exactly once per work: a second wait on gloo blocks for a new message
        return buf

    def receive_now(self) -> torch.Tensor:
        """Post one receive and wait for it (a data message whose header has arrived)."""
        self.post()
        return self.take()


# --- a stage's links ------------------------------------------------------------------------------

@dataclass
class Header:
    kind: int
    pos: int = 0
    epoch: int = 0
    length: int = 0
    seq: int = 0

    def values(self) -> tuple[int, int, int, int, int]:
        return self.kind, self.pos, self.epoch, self.length, self.seq


HDR = 5  # header fields: kind, pos, epoch, length, seq


class TokenOut:
    """Stage i -> i+1: a header and, for tokens, a hidden state (+ the layer-E state that rides along
    when sampling with middle stages); prefill payloads once a sequence."""

    def __init__(self, links: Links, width: int, hidden_dtype, with_hidden_kinds: frozenset[int]):
        self.links, self.peer, self.width = links, links.rank + 1, width
        self.with_hidden = with_hidden_kinds
        if links.fused:
            # fp32 whatever the model dtype: positions in the header stay exact
            self.ring = SendRing(HDR + width, torch.float32, links.data_device, self.peer, TAG_H, links.control)
        else:
            self.headers = SendRing(HDR, torch.long, "cpu", self.peer, TAG_H, links.control)
            self.hidden = SendRing(width, hidden_dtype, links.data_device, self.peer, TAG_H,
                                   links.data_out)

    def send(self, header: Header, hidden: torch.Tensor | None = None, carry: torch.Tensor | None = None) -> None:
        h = self.width if carry is None else self.width // 2
        if self.links.fused:
            buf = self.ring.next()
            buf[:HDR] = torch.tensor(header.values(), dtype=buf.dtype)
            if hidden is not None:
                buf[HDR:HDR + h].copy_(hidden.reshape(-1))
                if carry is not None:
                    buf[HDR + h:].copy_(carry.reshape(-1))
            self.ring.send(buf)
            return
        hb = self.headers.next()
        hb.copy_(torch.tensor(header.values(), dtype=torch.long))
        self.headers.send(hb)  # the header first: the receiver posts the data receive once it has it
        if header.kind in self.with_hidden:
            buf = self.hidden.next()
            if hidden is not None:
                buf[:h].copy_(hidden.reshape(-1))
                if carry is not None:
                    buf[h:].copy_(carry.reshape(-1))
            self.hidden.send(buf)

    def send_payload(self, flat: torch.Tensor) -> None:
        """A prefill payload, after its header; blocking keeps the tensor alive until it is out."""
        (self.links.control if self.links.fused else self.links.data_out).send(flat.contiguous(), self.peer, TAG_P)

    def drain(self) -> None:
        if self.links.fused:
            self.ring.drain()
        else:
            self.headers.drain()
            self.hidden.drain()


class TokenIn:
    """The receiving end of `TokenOut` at stage i+1: headers posted ahead; in the split design a
    hidden state is received only once its header is in."""

    def __init__(self, links: Links, width: int, hidden_dtype, with_hidden_kinds: frozenset[int]):
        self.links, self.peer, self.width = links, links.rank - 1, width
        self.with_hidden = with_hidden_kinds
        self.hidden_dtype = hidden_dtype
        if links.fused:
            self.ring = RecvRing(HDR + width, torch.float32, links.data_device, self.peer, TAG_H, links.control)
        else:
            self.headers = RecvRing(HDR, torch.long, "cpu", self.peer, TAG_H, links.control)
            self.hidden = RecvRing(width, hidden_dtype, links.data_device, self.peer, TAG_H, links.data_in)

    def post(self) -> None:
        (self.ring if self.links.fused else self.headers).post()

    def take(self) -> tuple[Header, torch.Tensor | None]:
        """The next header and, for a token, its hidden state (flat, `width` values; valid until
        RING more messages have been taken)."""
        if self.links.fused:
            buf = self.ring.take()
            header = Header(*(int(v) for v in buf[:HDR].tolist()))
            return header, buf[HDR:]
        header = Header(*(int(v) for v in self.headers.take().tolist()))
        if header.kind in self.with_hidden:
            return header, self.hidden.receive_now()
        return header, None

    def recv_payload(self, n: int, dtype, device) -> torch.Tensor:
        buf = torch.empty(n, dtype=dtype, device=device)
        (self.links.control if self.links.fused else self.links.data_in).recv(buf, self.peer, TAG_P)
        return buf


class Links:
    """One stage's channels. `Links.open` is called on every rank in the same order, after
    `init_process_group`: creating groups is collective."""

    def __init__(self, rank: int, world: int, kind: TransportKind, control, data_in, data_out, data_device):
        self.rank, self.world, self.kind = rank, world, kind
        self.control, self.data_in, self.data_out = control, data_in, data_out
        self.data_device = data_device

    @property
    def fused(self) -> bool:
        return self.kind in (TransportKind.FUSED, TransportKind.STRICT_FUSED)

    @property
    def control_device(self) -> str:
        return "cpu"

    @classmethod
    def open(cls, rank: int, world: int, kind, device: torch.device, timeout_s: float | None = None) -> Links:
        kind = TransportKind.parse(kind)
        backend = dist.get_backend()
        if kind is TransportKind.AUTO:
            kind = TransportKind.SPLIT if backend == "nccl" else TransportKind.FUSED
        if kind is TransportKind.FUSED and backend == "nccl":
            raise UserError("the fused transport deadlocks under NCCL", "use the split transport (the default with NCCL)")
        if kind is TransportKind.STRICT_FUSED:
            ch = StrictChannel()
            return cls(rank, world, kind, ch, ch, ch, torch.device("cpu"))
        if kind is TransportKind.FUSED:
            ch = DistChannel()
            return cls(rank, world, kind, ch, ch, ch, torch.device("cpu"))
        # split: control over gloo (the default group when it is gloo), data over one group per
        # adjacent pair, every group created by every rank in the same order
        # the groups get the run's stage timeout (the default group has it; new ones would otherwise
        # wait for the backend's default, 10 to 30 minutes, on a hung peer under torchrun)
        wait = {} if timeout_s is None else {"timeout": datetime.timedelta(seconds=float(timeout_s))}
        control = DistChannel() if backend == "gloo" else DistChannel(dist.new_group(backend="gloo", **wait))
        data_backend = "gloo" if kind is TransportKind.STRICT or backend == "gloo" else backend
        pairs = [dist.new_group([i, i + 1], backend=data_backend, **wait) for i in range(world - 1)]
        wrap = StrictChannel if kind is TransportKind.STRICT else DistChannel
        data_in = wrap(pairs[rank - 1]) if rank > 0 else None
        data_out = wrap(pairs[rank]) if rank < world - 1 else None
        data_device = device if backend == "nccl" and kind is not TransportKind.STRICT else torch.device("cpu")
        links = cls(rank, world, kind, control, data_in, data_out, data_device)
        links._warm_up()
        return links

    def _warm_up(self) -> None:
        """One tiny message down every data pair, in a fixed order (send, then receive), so NCCL sets
        up each pair's link now, under the rendezvous timeout, not in the middle of a sequence."""
        probe = torch.zeros(1, device=self.data_device)
        if self.data_out is not None:
            self.data_out.send(probe, self.rank + 1, TAG_H)
        if self.data_in is not None:
            self.data_in.recv(probe, self.rank - 1, TAG_H)
