"""runtime/transport.py under NCCL's point-to-point semantics, emulated on the CPU.

`StrictChannel` runs all traffic between two ranks in posting order on one queue, as NCCL does on
one communicator: an early receive blocks the sends queued behind it. The old single-channel
design (receives posted ahead, verdicts and hidden states on one pair) deadlocks under it on the
first token, which gloo hid; the split design (control over gloo, hidden states over per-pair
groups, a data receive posted only after its header) must finish and stay lossless at 2-4 stages,
and so must the profiler's pipeline probe.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback

import pytest
import torch

from ppsd.errors import UserError
from ppsd.net import free_port
from runtime.llm import load_model
from runtime.acceptance import Sampler
from runtime.decoding import generate_ar
from runtime.launch import run_local
from runtime.measure import records_from_logs
from runtime.pipeline import PipelineJob

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

TEXTS = ["Hello world, this is a test prompt.", "Another one: 1 2 3", "x"]


# --- the strict channel itself ------------------------------------------------------------------------

def _two_ranks(rank: int, port: int, channel: str, pattern: str, out) -> None:
    """Each rank receives from and sends to the other, in the order `pattern` says."""
    import torch.distributed as dist

    from runtime.transport import DistChannel, StrictChannel

    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        ch = StrictChannel() if channel == "strict" else DistChannel()
        peer = 1 - rank
        got, mine = torch.zeros(1), torch.full((1,), float(rank + 1))
        if pattern == "recv-first" or (pattern == "ordered" and rank == 1):
            r = ch.irecv(got, peer)  # posted before this rank's own send
            s = ch.isend(mine, peer)
        else:
            s = ch.isend(mine, peer)
            r = ch.irecv(got, peer)
        r.wait()
        s.wait()
        out.put((rank, float(got[0])))
    except BaseException:  # noqa: BLE001
        out.put((rank, traceback.format_exc()))


def _exchange(channel: str, pattern: str, timeout: float = 6.0) -> dict | None:
    """{rank: value received} or None when the two ranks did not finish within `timeout`."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_two_ranks, args=(r, port, channel, pattern, out), daemon=True) for r in (0, 1)]
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in procs:
            rank, value = out.get(timeout=timeout)
            got[rank] = value
    except Exception:  # noqa: BLE001 - queue.Empty: a deadlock
        got = None
    finally:
        for p in procs:
            p.kill()
            p.join(2)
    return got


def test_gloo_lets_both_ranks_receive_first():
    assert _exchange("gloo", "recv-first") == {0: 2.0, 1: 1.0}


def test_strict_channel_deadlocks_where_nccl_does():
    # both ranks post a receive before their send: on one NCCL communicator neither send can start
    assert _exchange("strict", "recv-first", timeout=4.0) is None


def test_strict_channel_passes_matched_orders():
    # one side sends first, the other receives first: every operation meets its match in order
    assert _exchange("strict", "ordered") == {0: 2.0, 1: 1.0}


# --- the pipeline under NCCL semantics --------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


@pytest.fixture(scope="module")
def tiny_ar(tiny):
    prompts = [tiny.encode_prompt(t) for t in TEXTS]
    return prompts, [generate_ar(tiny, p, 20, Sampler.make(0, 0)).tokens for p in prompts]


def _run(tiny, prompts, bounds, transport, timeout_s=30.0, **kw):
    job = PipelineJob("tiny-llama", bounds, prompts, [20] * len(prompts), warmup=0, repeats=1,
                      timeout_s=timeout_s, transport=transport, **kw)
    return records_from_logs(job, run_local(job, model=tiny))[0]


@pytest.mark.parametrize("transport", ["strict", "split"])
@pytest.mark.parametrize("bounds", [(0, 2, 6), (0, 1, 3, 6), (0, 1, 2, 4, 6)])
def test_split_transport_finishes_and_stays_lossless(tiny, tiny_ar, transport, bounds):
    prompts, ar = tiny_ar
    recs = _run(tiny, prompts, bounds, transport)
    assert [r.tokens for r in recs] == ar


@pytest.mark.parametrize("bounds", [(0, 2, 6), (0, 1, 3, 6), (0, 1, 2, 4, 6)])
def test_strict_transport_finishes_when_sampling(tiny, tiny_ar, bounds):
    # sampling carries the layer-E state along with the hidden state (k >= 3), a wider data message.
    # (Sampled tokens depend on which stale drafts stage 1 drew before a flush, i.e. on timing, so
    # runs are compared by distribution elsewhere: tests/test_runtime_sampling_trace.py.)
    prompts, _ = tiny_ar
    recs = _run(tiny, prompts, bounds, "strict", temperature=0.8, seed=3)
    assert [len(r.tokens) for r in recs] == [20] * len(prompts)
    assert all(0 <= t < tiny.vocab_size for r in recs for t in r.tokens)


def test_the_single_channel_design_deadlocks_under_nccl_semantics(tiny, tiny_ar):
    # what every multi-GPU PPSD plan would have hit: receives posted ahead on one NCCL pair
    prompts, _ = tiny_ar
    with pytest.raises(UserError, match="no progress"):  # the watchdog or gloo's timeout, whichever first
        _run(tiny, prompts[:1], (0, 3, 6), "strict-fused", timeout_s=5.0)


@pytest.mark.parametrize("why, is_hang", [
    ("RuntimeError: [../gloo/transport/tcp/pair.cc:534] Timed out waiting 5000ms for recv operation", True),
    ("RuntimeError: Application timeout caused pair closure", True),
    ("RuntimeError: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=RECV)", True),
    ("RuntimeError: CUDA out of memory", False),
    ("killed by signal 9 (SIGKILL: out of memory?)", False),
    ("ValueError: timeout_s must be positive", False),
])
def test_a_stage_that_gave_up_on_its_peer_is_reported_as_a_hang(why, is_hang):
    from runtime.launch import _is_transport_timeout

    assert _is_transport_timeout(why) is is_hang


def test_stages_that_failed_together_are_named_by_their_cause():
    from runtime.launch import _failure

    gone = "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:65200"
    timed_out = "RuntimeError: Application timeout caused pair closure"
    # the peer's "closed by peer" reached the launcher first; the stage that timed out is the cause
    err = _failure([(0, gone), (1, timed_out)], 2)
    assert "made no progress: stage 2 of 2 gave up" in err.problem and "fewer --stages" in err.fix
    err = _failure([(1, gone), (2, "RuntimeError: CUDA out of memory")], 3)
    assert "stage 3 of 3 died (RuntimeError: CUDA out of memory)" in err.problem
    assert "stage 1 of 2 died" in _failure([(0, gone)], 2).problem  # nothing better known


def test_fused_transport_is_refused_over_nccl():
    from runtime.transport import Links

    with pytest.MonkeyPatch.context() as m:
        m.setattr("torch.distributed.get_backend", lambda *a: "nccl")
        with pytest.raises(UserError, match="deadlocks under NCCL"):
            Links.open(0, 2, "fused", torch.device("cpu"))


# --- the profiler's pipeline probe -----------------------------------------------------------------

@pytest.mark.parametrize("transport", ["fused", "strict"])
def test_pipeline_probe_finishes_under_nccl_semantics(transport):
    from profiler.latency import LatencyConfig, WorkerPool, _measure_pipeline_probe

    cfg = LatencyConfig(n_values=(1,), context_values=(16,), warmup=0, repeats=1, threads=1,
                        pipeline_repeats=9)  # 3 rounds of 3 passes (a verdict hop needs pass i - 2 recorded)
    pool = WorkerPool(2, "tiny-llama", "cpu", "float32", 1, 16, timeout_s=60)
    try:
        probe = _measure_pipeline_probe(pool, cfg, 6, "gloo", None, transport=transport)
    finally:
        pool.close()
    assert probe["passes"] == 9 and probe["passes_per_round"] == 3 and len(probe["rounds"]) == 3
    assert all(ms > 0 for ms in probe["pass_ms_pipeline"])


class _HeldWork:
    """A send its peer has not taken yet: `wait()` is where the sender would block."""

    def __init__(self, log: list, n: int):
        self.log, self.n = log, n

    def wait(self, timeout=None) -> bool:
        self.log.append(self.n)
        return True


class _HoldingChannel:
    def __init__(self):
        self.sent, self.waited = 0, []

    def isend(self, tensor, peer, tag=0):
        self.sent += 1
        return _HeldWork(self.waited, self.sent)


@pytest.mark.parametrize("stages", [2, 3, 8])
def test_stage_1_sends_k_drafts_and_k_stale_ones_before_a_ring_slot_holds_it(stages):
    """The last stage takes drafts only as it verifies: after a rejection up to k - 1 stale drafts
    wait for it on top of the k in flight, and a ring that reuses a buffer sooner makes stage 1 wait
    on the last stage (it did at k = 8 with 8 buffers)."""
    from runtime.transport import RING, SendRing, control_ring_depth

    depth = control_ring_depth(stages)
    assert depth >= RING and depth >= 2 * stages
    ch = _HoldingChannel()
    ring = SendRing(6, torch.long, "cpu", 1, 1, ch, depth)
    for _ in range(depth):
        ring.send(ring.next())
    assert ch.waited == []  # depth sends outstanding, none waited on
    ring.send(ring.next())
    assert ch.waited == [1]  # the next one reuses the oldest buffer: only then is its send awaited


class _QueuedWork:
    """A posted receive: `wait()` lands the next message sent (in order) in its buffer."""

    def __init__(self, channel, buf):
        self.channel, self.buf = channel, buf

    def wait(self, timeout=None) -> bool:
        self.buf.copy_(torch.tensor(self.channel.messages.pop(0)))
        return True


class _QueuedChannel:
    def __init__(self, messages):
        self.messages, self.posted = list(messages), 0

    def irecv(self, buf, peer, tag=0):
        self.posted += 1
        return _QueuedWork(self, buf)


def test_the_last_stage_keeps_draft_receives_posted_ahead_and_takes_stage_1s_pads_at_shutdown():
    """After a rejection the last stage skips the stale drafts stage 1 sent for the tokens behind the
    rejected one; receives posted ahead have landed them before they are needed (one posted only
    then costs a round trip each). At shutdown stage 1's pads complete every receive still posted."""
    from runtime.pipeline import DRAFT_WIDTH, SHUTDOWN, TOKEN, Stage
    from runtime.transport import RING, RecvRing, draft_receives_ahead

    assert draft_receives_ahead(2) == 0  # 2 stages: drafts share their peer with the hidden states
    assert [draft_receives_ahead(k) for k in (3, 6, 8)] == [3, 6, RING - 1]
    k = 6
    ahead = draft_receives_ahead(k)

    def draft(pos, epoch, token):
        return [TOKEN, pos, epoch, token, 0, 0]

    stale = [draft(p, 0, 7) for p in (11, 12, 13, 14)]  # epoch 0 rejected at position 10
    msgs = stale + [draft(11, 1, 42)] + [[SHUTDOWN, 0, 0, 0, 0, 0]] * ahead  # the last, then the pads
    ch = _QueuedChannel(msgs)
    stage = Stage.__new__(Stage)
    stage.world, stage.rank, stage.hop_s, stage.drafts_ahead = k, k - 1, 0.0, ahead
    stage.d_in = RecvRing(DRAFT_WIDTH, torch.long, "cpu", 0, 1, ch)
    for _ in range(ahead):
        stage.d_in.post()
    assert stage._draft_for(11, 1) == (42, 0.0)
    assert len(stage.d_in.pending) == ahead and ch.posted == ahead + 5  # one re-posted per take
    stage._drain_drafts(SHUTDOWN)
    assert not stage.d_in.pending and not ch.messages  # every pad taken, nothing left posted
