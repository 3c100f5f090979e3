"""Latency profile: what each piece of a decode step costs on this device.

Measured here, written into profile.json's `latency` block (its schema: ppsd/profile/schema.py):
  * every decoder layer for n new tokens at context c (the grid n_values x context_values),
    plus the embedding and the final norm + LM head for each n;
  * a whole decode step (n = 1, smallest context) timed as one piece right beside the same step
    timed piece by piece, round after round; the tables are calibrated to it (whole / parts);
  * the co-run slowdown: per-layer time while p = 1..k processes run decoder layers at once,
    as pipeline stages sharing a machine would (memory bandwidth is shared);
  * the one-way hop time of one hidden-state message between two processes over
    torch.distributed (gloo on CPU; NCCL when there are two GPUs).

Timing: on CPU `time.perf_counter` between the pieces of a step (CPU ops are synchronous, so the
marks fall exactly between layers); on CUDA, CUDA events recorded between the pieces and read
after one synchronise per step. The grid runs `warmup` untimed rounds, then `repeats` timed ones; a
round times every cell once at every thread count, in a shuffled order (`measure_grids`); the tables
hold median, p10 and p90.

A step is timed the way decoding runs it: the KV cache holds `c` earlier tokens, the step appends
its n tokens (so each layer pays the concatenation), and the cache is cropped back afterwards.
"""

from __future__ import annotations

import os
import queue
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import torch

from ppsd.errors import UserError
from ppsd.net import free_port
from ppsd.statistics import robust_cv, robust_log_sd
from runtime.llm import KVCache, ModelAdapter, causal_mask
from ppsd.profile import MEASURED_N_VALUES
from ppsd.profile.schema import MIN_PHYSICAL_SLOWDOWN, unphysical

DEFAULT_N_VALUES = MEASURED_N_VALUES  # why every n up to 9: ppsd/profile/files.py


@dataclass
class LatencyConfig:
    n_values: tuple[int, ...] = DEFAULT_N_VALUES
    context_values: tuple[int, ...] = (64, 256, 1024)
    warmup: int = 2
    repeats: int = 10
    whole_step_repeats: int = 20
    corun_max: int = 2            # largest number of concurrent processes (1 disables co-run)
    corun_seconds: float = 1.5    # how long each co-run round keeps every process busy
    hop_repeats: int = 200
    pipeline_repeats: int = 60    # passes per stage in the two-stage pipeline probe, over its rounds (0 disables it)
    threads: int = 1              # torch threads in this process and in every worker
    thread_counts: tuple[int, ...] = ()  # further thread counts to measure the tables at (same-budget baselines)
    prefill_lengths: tuple[int, ...] = (32, 128, 512)  # prompt lengths whose whole prefill is timed
    measure_hop: bool = True
    seed: int = 0
    notes: list[str] = field(default_factory=list)


def stats(samples) -> dict:
    a = np.asarray(samples, dtype=float)
    p10, med, p90 = np.percentile(a, [10, 50, 90])
    return {"median_ms": float(med), "p10_ms": float(p10), "p90_ms": float(p90)}


# --- timing one step --------------------------------------------------------------------------

class StepClock:
    """Marks between the pieces of one step; `lap_ms()` returns the gaps in ms.

    CPU: perf_counter. CUDA: events, read after a single synchronise (so marking costs no sync).
    The events are recorded on, and the synchronise waits for, the clock's own device (the model's
    GPU), not the current device: a worker whose model sits on cuda:1 while cuda:0 is current
    would otherwise time an idle stream on cuda:0 and read near-zero layer times."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.marks: list = []
        self._stream = None

    def start(self) -> None:
        self.marks = []
        if self.cuda:
            # the stream the model's kernels go to: each op runs on its tensors' device's current stream
            self._stream = torch.cuda.current_stream(self.device)
        self.mark()

    def mark(self) -> None:
        if self.cuda:
            with torch.cuda.device(self.device):  # the event belongs to the clock's GPU
                ev = torch.cuda.Event(enable_timing=True)
                ev.record(self._stream)
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    def lap_ms(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]


def filled_cache(adapter: ModelAdapter, context: int, layers: range | None = None, seed: int = 0) -> KVCache:
    """A KV cache holding `context` tokens of random keys/values in every layer: timing does not
    depend on their values, and filling it this way costs nothing compared with a prefill."""
    cfg = adapter.config
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or adapter.hidden_size // heads)
    gen = torch.Generator().manual_seed(seed)
    cache = adapter.new_cache()
    for layer in layers or range(adapter.num_layers):
        shape = (1, kv_heads, context, head_dim)
        cache.keys[layer] = torch.randn(shape, generator=gen).to(adapter.device, adapter.dtype)
        cache.values[layer] = torch.randn(shape, generator=gen).to(adapter.device, adapter.dtype)
    return cache


@torch.inference_mode()
def timed_step(adapter: ModelAdapter, cache: KVCache, ids: torch.Tensor, context: int, clock: StepClock) -> list[float]:
    """One decode step of ids.shape[1] tokens after `context` cached ones, timed piece by piece.
    Returns [embedding, position setup, layer 0, ..., layer N-1, head] in ms; crops the cache back."""
    n = ids.shape[1]
    clock.start()
    hidden = adapter.embed_tokens(ids)
    clock.mark()
    positions = torch.arange(context, context + n, device=hidden.device).unsqueeze(0)
    cos_sin = adapter.rotary(hidden, position_ids=positions)
    mask = causal_mask(n, context, hidden.device)
    clock.mark()
    for layer in adapter.layers:
        hidden = layer(hidden, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                       position_embeddings=cos_sin)
        clock.mark()
    adapter.head(hidden)
    clock.mark()
    laps = clock.lap_ms()
    cache.crop(context)
    return laps


@torch.inference_mode()
def whole_step_ms(adapter: ModelAdapter, cache: KVCache, ids: torch.Tensor, context: int) -> float:
    """One decode step timed as a single piece, through the adapter's own calls."""
    clock = StepClock(adapter.device)
    clock.start()
    hidden = adapter.embed(ids)
    hidden = adapter.forward_layers(hidden, 0, adapter.num_layers, cache, context)
    adapter.head(hidden)
    clock.mark()
    ms = clock.lap_ms()[0]
    cache.crop(context)
    return ms


# --- the grid -----------------------------------------------------------------------------------
# Why the grid is measured in interleaved rounds, with a whole step paired to its pieces:
# a shared machine's memory system changes speed over seconds to minutes (docs/design-notes.md).
# Measured a cell at a time, each
# cell of the tables (and each thread count's tables, minutes apart) holds whatever state the
# machine was in during its burst, so pieces that a plan and AR use differently (a verification at
# n = 4 against a step at n = 1, the 2-thread tables against the 1-thread ones) are priced in
# different machine states. One round here times every cell once, at every thread count, in a
# seeded shuffled order, then a step piece by piece right beside the same step timed whole: every
# cell sees the same mix of machine states, and the parts/whole ratio compares neighbours in time.

# whole steps per round beside their pieces
WHOLE_PER_ROUND = 2
CALIBRATION_FLAG = 0.10  # |parts / whole - 1| past this is worth a warning (the tables are scaled anyway)


def _tables_of(lap_lists: dict, cells: list, N: int, nv: list, cv: list) -> dict:
    """{layers, embedding, head} StatTable dicts from each cell's timed steps' laps."""
    layers = {k: np.zeros((N, len(nv), len(cv))) for k in ("median_ms", "p10_ms", "p90_ms")}
    embed = {k: np.zeros(len(nv)) for k in layers}
    head = {k: np.zeros(len(nv)) for k in layers}
    for ni in range(len(nv)):
        rows = np.concatenate([np.asarray(lap_lists[(ci, ni)]) for ci in range(len(cv))])
        for k, v in stats(rows[:, 0]).items():
            embed[k][ni] = v
        for k, v in stats(rows[:, -1]).items():
            head[k][ni] = v
        for ci in range(len(cv)):
            laps = np.asarray(lap_lists[(ci, ni)])
            for layer in range(N):
                for k, v in stats(laps[:, 2 + layer]).items():
                    layers[k][layer, ni, ci] = v
    return {"layers": layers, "embedding": embed, "head": head}


def _scaled(table: dict, factor: float) -> dict:
    return {k: (np.asarray(v) * factor).tolist() for k, v in table.items()}


def whole_step_block(whole: list[float], parts: list[float], context: int, n: int) -> dict:
    """`latency.whole_step` from paired samples (a step timed piece by piece, then the same step
    timed whole, round after round): the whole step's median and spread over the profiling window,
    the pieces' sum, their paired ratio, and the calibration the tables get (whole / parts)."""
    whole_a, parts_a = np.asarray(whole, float), np.asarray(parts, float)
    ratio = float(np.median(parts_a / whole_a)) if len(whole_a) else float("nan")
    ok = abs(ratio - 1.0) <= CALIBRATION_FLAG
    calibration = 1.0 / ratio if ratio > 0 else 1.0
    note = ("sum of parts within 10% of the whole step" if ok else
            f"sum of parts is {ratio:.2f}x the whole step, timed side by side (a step timed piece by piece "
            f"runs {'slower' if ratio > 1 else 'faster'} than whole here): the tables are scaled by "
            f"{calibration:.3f} so that they price a whole step as it runs; intervals carry the doubt")
    return {"context": int(context), "n": int(n), "median_ms": float(np.median(whole_a)),
            **{k: v for k, v in stats(whole_a).items() if k != "median_ms"}, "repeats": len(whole_a),
            "sum_of_parts_ms": float(np.median(parts_a)), "ratio": ratio, "flagged": not ok, "note": note,
            "method": "paired", "calibration": calibration, "ratio_cv": robust_log_sd(parts_a / whole_a, min_n=3),
            "samples_ms": [round(float(w), 3) for w in whole_a]}


def measure_grids(adapter: ModelAdapter, cfg: LatencyConfig, thread_counts, tick=lambda: None,
                  between_rounds=lambda timed_round: None) -> dict[int, dict]:
    """The latency tables at each of `thread_counts` torch threads, measured together in interleaved
    rounds (see above), each calibrated to its paired whole step. Returns {threads: {layers,
    embedding, head, whole_step}}; `tick()` is called once per cell and thread count, spread over
    the rounds (progress); `between_rounds(i)` after the i-th timed round, at the base thread count
    (a measurement that should see the same mix of machine states: the runtime probe). Threads are
    restored afterwards."""
    N = adapter.num_layers
    nv, cv = list(cfg.n_values), list(cfg.context_values)
    counts = list(dict.fromkeys(int(t) for t in thread_counts))
    gen = torch.Generator().manual_seed(cfg.seed)
    caches = [filled_cache(adapter, c, seed=cfg.seed + ci) for ci, c in enumerate(cv)]
    cells = [(ci, ni) for ci in range(len(cv)) for ni in range(len(nv))]
    ids = {cell: torch.randint(0, adapter.vocab_size, (1, nv[cell[1]]), generator=gen).to(adapter.device)
           for cell in cells}
    n1 = nv.index(1) if 1 in nv else 0
    laps_of = {t: {cell: [] for cell in cells} for t in counts}
    whole = {t: [] for t in counts}
    parts = {t: [] for t in counts}
    order = np.random.default_rng(cfg.seed)
    clock = StepClock(adapter.device)
    # about `whole_step_repeats` pairs over the rounds, at most WHOLE_PER_ROUND a round
    pairs = max(1, min(WHOLE_PER_ROUND, -(-int(cfg.whole_step_repeats) // max(int(cfg.repeats), 1))))
    rounds = int(cfg.warmup) + int(cfg.repeats)
    due, done = len(cells) * len(counts), 0
    before = torch.get_num_threads()
    try:
        for rnd in range(rounds):
            timed = rnd >= cfg.warmup
            for t in counts:
                torch.set_num_threads(t)
                for k in order.permutation(len(cells)):
                    cell = cells[int(k)]
                    laps = timed_step(adapter, caches[cell[0]], ids[cell], cv[cell[0]], clock)
                    if timed:
                        laps_of[t][cell].append(laps)
                for _ in range(pairs):  # a step in pieces, then the same step whole, side by side
                    laps = timed_step(adapter, caches[0], ids[(0, n1)], cv[0], clock)
                    w = whole_step_ms(adapter, caches[0], ids[(0, n1)], cv[0])
                    if timed:
                        parts[t].append(float(laps[0] + sum(laps[2:])))
                        whole[t].append(w)
            if timed:
                goal = due * (rnd - cfg.warmup + 1) // max(int(cfg.repeats), 1)
                for _ in range(goal - done):
                    tick()
                done = goal
                torch.set_num_threads(counts[0])
                between_rounds(rnd - int(cfg.warmup))
    finally:
        torch.set_num_threads(before)
    out = {}
    for t in counts:
        ws = whole_step_block(whole[t], parts[t], cv[0], nv[n1])
        raw = _tables_of(laps_of[t], cells, N, nv, cv)
        out[t] = {name: _scaled(table, ws["calibration"]) for name, table in raw.items()}
        out[t]["whole_step"] = ws
    base = counts[0]
    for t in counts[1:]:
        # AR at t threads against the base, round by round: how steady the thread speedup is
        ratio = np.asarray(whole[base]) / np.asarray(whole[t])
        out[t]["whole_step"]["speedup_vs_base"] = float(np.median(ratio))
        out[t]["whole_step"]["speedup_cv"] = robust_log_sd(ratio, min_n=3)
    return out


@torch.inference_mode()
def measure_prefill(adapter: ModelAdapter, cfg: LatencyConfig, tick=lambda: None) -> dict | None:
    """The `latency.prefill` block: a whole prefill (embed + every layer over the prompt + the head on
    its last position, an empty cache) at each of `cfg.prefill_lengths` that fits the model's context.
    Time to first token and end-to-end figures come from it; the (n, context) tables only reach n = 16."""
    lengths = [int(L) for L in cfg.prefill_lengths if 1 <= int(L) < adapter.max_context]
    if not lengths:
        return None
    gen = torch.Generator().manual_seed(cfg.seed)
    clock = StepClock(adapter.device)
    rows = []
    for L in lengths:
        ids = torch.randint(0, adapter.vocab_size, (1, L), generator=gen).to(adapter.device)
        samples = []
        for i in range(max(cfg.warmup, 1) + max(3, cfg.repeats // 2)):
            cache = adapter.new_cache()
            clock.start()
            h = adapter.forward_layers(adapter.embed(ids), 0, adapter.num_layers, cache, 0)
            adapter.head(h[:, -1:])
            clock.mark()
            if i >= max(cfg.warmup, 1):
                samples.append(clock.lap_ms()[0])
            else:
                clock.lap_ms()
        rows.append(stats(samples))
        tick()
    return {"lengths": lengths, **{k: [r[k] for r in rows] for k in ("median_ms", "p10_ms", "p90_ms")},
            "method": "embed + every layer over the whole prompt + the head on its last position, empty cache"}


def thread_tables_block(grids: dict[int, dict], base: int) -> dict:
    """The `latency.parallel` block from `measure_grids`' tables at every thread count but `base`."""
    tables = {}
    for t, g in grids.items():
        if t == int(base):
            continue
        ws = g["whole_step"]
        tables[str(int(t))] = {"layers": g["layers"], "embedding": g["embedding"], "head": g["head"],
                               "whole_step_ms": ws["median_ms"], "speedup_vs_base": ws.get("speedup_vs_base"),
                               "speedup_cv": ws.get("speedup_cv"), "calibration": ws["calibration"]}
    return {"kind": "threads", "base": int(base), "tables": tables,
            "method": "the latency grid measured in the profiling process at each thread count, in the same "
                      "interleaved rounds as the main tables, each calibrated to its own paired whole step"}


# --- co-run slowdown and hop time: worker processes -------------------------------------------------

def _worker(rank: int, model_spec: str, device: str, dtype: str, threads: int, context: int,
            commands, results) -> None:
    """A stand-in pipeline stage: loads the model, then on command runs all decoder layers
    (one decode step at a time) for a fixed wall-clock window, or ping-pongs hidden states."""
    import signal

    # Ctrl-C reaches the whole process group; the parent handles it and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        torch.set_num_threads(threads)
        from transformers.utils import logging

        logging.disable_progress_bar()
        from runtime.llm import load_model

        # one GPU per stage when there are enough (NCCL refuses two ranks on one device), made the
        # current device first thing: the model, the CUDA context, the events and every bare "cuda"
        # then all go to this rank's GPU, not to cuda:0
        dev = _worker_device(rank, device)
        if dev.startswith("cuda"):
            torch.cuda.set_device(torch.device(dev))
        adapter = load_model(model_spec, device=dev, dtype=dtype)
        N = adapter.num_layers
        cache = filled_cache(adapter, context, seed=rank)
        ids = torch.randint(0, adapter.vocab_size, (1, 1))
        clock = StepClock(adapter.device)

        def one_pass() -> float:
            laps = timed_step(adapter, cache, ids.to(adapter.device), context, clock)
            return sum(laps[2:2 + N]) / N  # mean per-layer time of this pass

        for _ in range(3):
            one_pass()
        results.put(("ready", rank, None))
        while True:
            cmd = commands.get()
            if cmd[0] == "stop":
                return
            if cmd[0] == "corun":
                _, t_start, duration = cmd
                time.sleep(max(0.0, t_start - time.time()))
                samples = []
                while time.time() < t_start + duration or len(samples) < 3:
                    samples.append(one_pass())
                results.put(("corun", rank, samples))
            elif cmd[0] == "hop":
                _, port, repeats, hidden_size, backend = cmd
                results.put(("hop", rank, _ping_pong(rank, port, repeats, hidden_size, backend, device)))
            elif cmd[0] == "stage_alone":
                _, exit_layer, repeats = cmd
                stage = _ProbeStage(adapter, cache, context, rank, exit_layer)
                passes = [stage.one_pass()[:2] for _ in range(repeats + 3)]
                results.put(("stage_alone", rank, passes[3:]))
            elif cmd[0] == "pipeline":
                _, port, exit_layer, repeats, backend, transport = cmd
                stage = _ProbeStage(adapter, cache, context, rank, exit_layer)
                results.put(("pipeline", rank, stage.pipeline(port, repeats, backend, transport)))
    except Exception:  # noqa: BLE001 - report to the parent, which decides what to do
        results.put(("error", rank, traceback.format_exc()))


def _worker_device(rank: int, device: str) -> str:
    """Worker `rank`'s device with an explicit index: on CUDA cuda:{rank} over the visible GPUs
    (all on cuda:0 with one GPU), on CPU `device`."""
    if not device.startswith("cuda"):
        return device
    return f"cuda:{rank % max(torch.cuda.device_count(), 1)}"


def _ping_pong(rank: int, port: int, repeats: int, hidden_size: int, backend: str, device: str) -> list[float]:
    """Rank 0 sends one hidden state [1, 1, hidden] and waits for it to come back; one-way time is
    half the round trip. isend/irecv as the runtime's stages use them."""
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        dev = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
        buf = torch.zeros(1, 1, hidden_size, device=dev)
        samples = []
        for i in range(repeats + 10):
            if rank == 0:
                t0 = time.perf_counter()
                dist.isend(buf, dst=1).wait()
                dist.irecv(buf, src=1).wait()
                if backend == "nccl":
                    torch.cuda.synchronize(dev)
                if i >= 10:  # the first messages set up the connection
                    samples.append((time.perf_counter() - t0) * 1e3 / 2)
            else:
                dist.irecv(buf, src=0).wait()
                dist.isend(buf, dst=0).wait()
        dist.barrier()
        return samples
    finally:
        dist.destroy_process_group()


class _ProbeStage:
    """One of two stand-in PPSD stages for the pipeline probe: rank 0 runs embed + layers [0, E),
    hands the hidden state on, then the exit head (the shared LM head); rank 1 runs layers [E, N)
    + the LM head and answers with a verdict. Each pass crops its KV cache back, as decoding does."""

    def __init__(self, adapter: ModelAdapter, cache: KVCache, context: int, rank: int, exit_layer: int):
        self.adapter, self.cache, self.context, self.rank = adapter, cache, context, rank
        self.lo, self.hi = (0, exit_layer) if rank == 0 else (exit_layer, adapter.num_layers)
        self.cuda = adapter.device.type == "cuda"
        self.ids = torch.randint(0, adapter.vocab_size, (1, 1), generator=torch.Generator().manual_seed(rank))
        self.ids = self.ids.to(adapter.device)
        self.hidden = torch.zeros(1, 1, adapter.hidden_size, device=adapter.device, dtype=adapter.dtype)

    def _now(self) -> float:
        """perf_counter once this stage's compute is done. CUDA: its compute stream only (on its own
        GPU, whatever is current), as a runtime stage's clock does (runtime/pipeline.py
        `Stage._clock`): a device-wide sync would also wait for a hidden-state send still pending on
        NCCL's stream until the peer posts its receive, and bill that wait to this stage's pass."""
        if self.cuda:
            torch.cuda.current_stream(self.adapter.device).synchronize()
        return time.perf_counter()

    @torch.inference_mode()
    def one_pass(self, send=None) -> tuple[float, float, float]:
        """(layers ms, head ms, when the hidden state left): one stage pass; `send(hidden)` is called
        between the layers and the head, where a real stage 1 hands its token on."""
        a = self._now()
        h = self.adapter.embed(self.ids) if self.rank == 0 else self.hidden
        h = self.adapter.forward_layers(h, self.lo, self.hi, self.cache, self.context)
        self.cache.crop(self.context)
        sent = self._now()
        if send is not None:
            send(h)
        int(self.adapter.head(h)[0, -1].argmax())  # the draft / verdict token, as a stage computes it
        b = self._now()
        return (sent - a) * 1e3, (b - sent) * 1e3, sent

    def pipeline(self, port: int, repeats: int, backend: str, transport: str = "auto") -> list[tuple]:
        """Both ranks at once, as a 2-stage pipeline with at most two tokens in flight (the
        runtime's rule): rank 0 hands each hidden state on and drafts; rank 1 verifies and sends a
        verdict back. Messages go through the runtime's transport (runtime/transport.py: one gloo
        message on CPUs; header over gloo and hidden state over NCCL on GPUs, never an early NCCL
        receive), so the probe sees what a stage sees. Returns per pass (index, layers ms, head ms,
        times) with perf_counter stamps (one monotonic clock for all local processes), so the
        parent can pair sends and receives."""
        import torch.distributed as dist

        from runtime.transport import TAG_V, Header, Links, RecvRing, SendRing, TokenIn, TokenOut

        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=self.rank, world_size=2)
        try:
            links = Links.open(self.rank, 2, transport, self.adapter.device)
            H, token = self.adapter.hidden_size, frozenset({1})
            out, warm = [], 3
            total = repeats + warm
            if self.rank == 0:
                tokens = TokenOut(links, H, self.adapter.dtype, token)
                verdicts = RecvRing(1, torch.long, "cpu", 1, TAG_V, links.control)
                for i in range(total):
                    waited = recv_at = None
                    if i >= 2:  # at most two tokens in flight: wait for the verdict on i - 2
                        waited = time.perf_counter()
                        verdicts.take()
                        recv_at = time.perf_counter()

                    def send(h, i=i):
                        tokens.send(Header(1, i), h)
                        verdicts.post()  # a control receive, posted ahead of its verdict

                    layers, head, sent = self.one_pass(send)
                    if i >= warm:
                        out.append((i, layers, head, sent, waited, recv_at))
                for _ in range(min(2, total)):
                    verdicts.take()
                tokens.drain()
            else:
                tokens = TokenIn(links, H, self.adapter.dtype, token)
                verdicts = SendRing(1, torch.long, "cpu", 0, TAG_V, links.control)
                tokens.post()
                for i in range(total):
                    waited = time.perf_counter()
                    header, hidden = tokens.take()
                    if i + 1 < total:  # the next header is posted ahead, as a runtime stage does
                        tokens.post()
                    assert header.pos == i, (header, i)
                    self.hidden.copy_(hidden[:H].view(1, 1, H).to(self.hidden.dtype))
                    recv_at = self._now()
                    layers, head, _ = self.one_pass()
                    acked = time.perf_counter()
                    verdicts.send(verdicts.next())
                    if i >= warm:
                        out.append((i, layers, head, acked, waited, recv_at))
                verdicts.drain()
            dist.barrier()
            return out
        finally:
            dist.destroy_process_group()


def table_pass_ms(grid: dict, exit_layer: int, num_layers: int, n_values) -> list[float]:
    """Each probe stage's pass priced from the latency tables (n = 1, smallest context), as the
    simulator prices it: embed + layers [0, E) + head, and layers [E, N) + head."""
    n1 = list(n_values).index(1)
    layer = [float(grid["layers"]["median_ms"][i][n1][0]) for i in range(num_layers)]
    embed, head = float(grid["embedding"]["median_ms"][n1]), float(grid["head"]["median_ms"][n1])
    return [embed + sum(layer[:exit_layer]) + head, sum(layer[exit_layer:]) + head]


def probe_hops_ms(piped: dict[int, list]) -> list[float]:
    """One-way message times (ms) into a stage that was already waiting for them, from one pipeline
    run's stamps: a hidden state into stage 2, a verdict into stage 1."""
    sent = {x[0]: x[3] for x in piped[0]}  # rank 0: when each hidden state left
    acked = {x[0]: x[3] for x in piped[1]}  # rank 1: when each verdict left
    hops = []
    for i, _, _, _, waited, recv_at in piped[1]:  # hidden state into a waiting stage 2
        if i in sent and waited <= sent[i]:
            hops.append((recv_at - sent[i]) * 1e3)
    for i, _, _, _, waited, recv_at in piped[0]:  # verdict on i - 2 into a waiting stage 1
        if waited is not None and (i - 2) in acked and waited <= acked[i - 2]:
            hops.append((recv_at - acked[i - 2]) * 1e3)
    return hops


PROBE_ROUNDS = 3  # the probe's passes in interleaved rounds (alone, alone, pipeline), the median kept
PROBE_ROUND_SPREAD = 0.15  # rounds further apart than this (relative): the machine was not steady
# passes alone further than this from the tables' price: the machine drifted (a stage pass alone runs
# ~5-8% over the sum of its table pieces on a quiet CPU, so a smaller bound would cry wolf)
PROBE_DRIFT = 0.20


def summarise_probe_rounds(rounds: list[tuple[dict, dict]], exit_layer: int, num_layers: int, backend: str,
                           table_ms: list[float] | None = None, against_alone: bool = False) -> dict:
    """The probe's figures from interleaved rounds of (each stage alone, both as a pipeline): the
    median round by slowdown gives the slowdown, the pieces' slowdowns and the pass spread (all
    from one sitting); the hops into a waiting stage are pooled over every round. A burst of load
    on a shared machine lands in one round, which the median leaves out; the rounds are recorded.
    `against_alone`: the slowdown is the pipeline's pass over the same pass alone in its round (the
    tables only recorded beside it; see `_measure_pipeline_probe`)."""
    per = [pipeline_summary(a, p, exit_layer, num_layers, backend, table_ms, against_alone) for a, p in rounds]
    mid = sorted(range(len(per)), key=lambda i: per[i]["slowdown"])[len(per) // 2]
    out = dict(per[mid])
    hops = [h for _, p in rounds for h in probe_hops_ms(p)]
    out["hop"] = {**stats(hops), "samples": len(hops)} if len(hops) >= 5 else None
    out["passes"] = sum(r["passes"] for r in per)  # over every round; each figure above is one round's
    out["passes_per_round"] = per[mid]["passes"]
    out["rounds"] = [{"slowdown": round(r["slowdown"], 4),
                      "alone_vs_tables": ([round(a / t, 4) for a, t in zip(r["pass_ms_alone"], table_ms)]
                                          if table_ms else None)} for r in per]
    out["round_kept"] = mid
    slow = [r["slowdown"] for r in per]
    out["round_spread"] = float((max(slow) - min(slow)) / np.median(slow)) if len(slow) > 1 else 0.0
    return out


def probe_warnings(probe: dict) -> list[str]:
    """What a user should know before trusting the probe's slowdown: rounds that disagree (the
    machine's load changed while it ran), and passes alone that the tables price differently (the
    machine drifted between the latency grid and the probe)."""
    out = []
    rounds = probe.get("rounds") or []
    if len(rounds) > 1 and probe.get("round_spread", 0.0) > PROBE_ROUND_SPREAD:
        got = ", ".join(f"{r['slowdown']:.2f}x" for r in rounds)
        out.append(f"pipeline probe: its rounds disagree ({got}; the median round is kept): the machine's load "
                   "changed while it ran, so PPSD's co-run slowdown is uncertain; re-profile on an idle machine")
    kept = rounds[probe.get("round_kept", 0)] if rounds else {}
    drift = [x for x in (kept.get("alone_vs_tables") or []) if abs(x - 1.0) > PROBE_DRIFT]
    if drift:
        got = ", ".join(f"{x:.2f}x" for x in kept["alone_vs_tables"])
        carried = ("the pipeline slowdown, taken against the passes alone, does not carry that, but every plan's "
                   "price does" if probe.get("slowdown_base") == "alone" else "and the pipeline slowdown carries that")
        out.append(f"pipeline probe: its stages' passes alone ran {got} the latency tables' price: the machine "
                   f"was not in the state the tables were measured in ({carried}); re-profile on an idle machine")
    return out


def pipeline_summary(alone: dict[int, list], piped: dict[int, list], exit_layer: int, num_layers: int,
                     backend: str, table_ms: list[float] | None = None, against_alone: bool = False) -> dict:
    """The probe's figures: per-stage pass slowdown in the pipeline against the profile's tables
    (what the simulator multiplies; against the same pass alone when no tables are given), the
    one-way hop into a stage that is waiting for it, and the passes' relative spread."""
    ratios, layer_r, head_r, cvs, alone_ms, piped_ms = [], [], [], [], [], []
    for r in (0, 1):
        a = np.asarray([x[0] + x[1] for x in alone[r]])
        p = np.asarray([x[1] + x[2] for x in piped[r]])
        ratios.append(float(np.median(p) / (table_ms[r] if table_ms and not against_alone else np.median(a))))
        alone_ms.append(float(np.median(a)))
        piped_ms.append(float(np.median(p)))
        layer_r.append(float(np.median([x[1] for x in piped[r]]) / np.median([x[0] for x in alone[r]])))
        head_r.append(float(np.median([x[2] for x in piped[r]]) / np.median([x[1] for x in alone[r]])))
        cvs.append(robust_cv(p))
    hops = probe_hops_ms(piped)
    hop = {**stats(hops), "samples": len(hops)} if len(hops) >= 5 else None
    return {"exit_layer": exit_layer, "stage_bounds": [0, exit_layer, num_layers], "backend": backend,
            "passes": len(piped[0]), "slowdown": float(np.mean(ratios)), "slowdown_per_stage": ratios,
            "slowdown_base": "tables" if table_ms and not against_alone else "alone",
            "pass_ms_tables": table_ms, "pass_ms_alone": alone_ms, "pass_ms_pipeline": piped_ms,
            "layer_slowdown": float(np.mean(layer_r)), "head_slowdown": float(np.mean(head_r)),
            "pass_cv": float(np.mean(cvs)), "hop": hop,
            "method": "two stage processes: rank 0 embed + layers [0, E) then the LM head as exit head, "
                      "rank 1 layers [E, N) + LM head, at most 2 tokens in flight; slowdown = median pass "
                      + ("time in the pipeline / the same pass alone in the same round (the tables are "
                         "calibrated to whole steps; passes alone against them are recorded as machine drift)"
                         if against_alone or not table_ms else
                         "time in the pipeline / the same pass priced from the latency tables (so it also "
                         "holds what a stage does besides its layers and head)")
                      + "; layer_slowdown and "
                      "head_slowdown are against the same pieces alone; hop = one-way time into a "
                      "waiting stage, message handling included; in interleaved rounds (each stage alone, "
                      "then both as a pipeline), the median round by slowdown kept, hops pooled"}


class WorkerPool:
    """k spawned stage-like processes, started once for both co-run and hop measurements."""

    def __init__(self, k: int, model_spec: str, device: str, dtype: str, threads: int, context: int,
                 timeout_s: float = 180.0):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.timeout_s = timeout_s
        self.results = ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(k)]
        self.procs = [ctx.Process(target=_worker, args=(r, model_spec, device, dtype, threads, context,
                                                        self.commands[r], self.results), daemon=True)
                      for r in range(k)]
        for p in self.procs:
            p.start()
        self.collect("ready", range(k))

    def collect(self, kind: str, ranks) -> dict[int, object]:
        want, got = set(ranks), {}
        deadline = time.time() + self.timeout_s
        while want - set(got):
            try:
                # short waits so a worker that died without a word is noticed at once
                msg_kind, rank, payload = self.results.get(timeout=min(1.0, max(0.1, deadline - time.time())))
            except queue.Empty:
                dead = [(r, p.exitcode) for r, p in enumerate(self.procs) if r in want - set(got) and not p.is_alive()]
                if dead:
                    raise RuntimeError(f"worker process(es) exited before answering {kind!r}: "
                                       + ", ".join(f"rank {r} (exit code {c})" for r, c in dead)) from None
                if time.time() >= deadline:
                    raise RuntimeError(f"worker processes did not answer {kind!r} within {self.timeout_s:.0f} s") from None
                continue
            if msg_kind == "error":
                raise RuntimeError(f"worker {rank} failed:\n{payload}")
            if msg_kind == kind:
                got[rank] = payload
        return got

    def send(self, ranks, cmd) -> None:
        for r in ranks:
            self.commands[r].put(cmd)

    def close(self) -> None:
        for q in self.commands:
            try:
                q.put(("stop",))
            except (OSError, ValueError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()


PHYSICAL_TRIES = 3  # a probe reading that cannot be physical is measured up to this many times in all


class UnphysicalReading(UserError):
    """A probe's slowdown under MIN_PHYSICAL_SLOWDOWN over every try (`remeasured`)."""


def remeasured(measure, path: str, first: dict | None = None, tries: int = PHYSICAL_TRIES) -> dict | None:
    """`measure()`'s block (`first` when given, as its first try), measured again while a kept reading
    cannot be physical (`ppsd.profile.schema.unphysical`: a slowdown under MIN_PHYSICAL_SLOWDOWN, two
    processes faster together than alone). A reading that persists over `tries` measurements raises
    UnphysicalReading, since load would refuse the figure: the co-run table's refuses the profile, a
    pipeline probe's drops that probe with a warning (its absence prices PPSD from the co-run table)."""
    block = first if first is not None else measure()
    for attempt in range(1, tries + 1):
        bad = unphysical(block, path)
        if not bad:
            return block
        if attempt < tries:
            block = measure()
    got = ", ".join(f"{field} = {value:.3f}" for field, value in bad)
    raise UnphysicalReading(f"{got} in {tries} measurements: under {MIN_PHYSICAL_SLOWDOWN}, faster beside another "
                            "process than alone, which is not physical (the machine changed state while it was "
                            "profiled)", "profile again on an idle machine, or without the co-run probes "
                            "(--corun-max 1 --no-hop)")


def measure_corun_and_hop(model_spec: str, adapter: ModelAdapter, cfg: LatencyConfig,
                          tick=lambda: None, grid: dict | None = None,
                          warnings: list[str] | None = None) -> tuple[dict | None, dict | None, dict | None]:
    """Co-run slowdown for p = 1..corun_max, the hop time and the two-stage pipeline probe, from
    one pool of worker processes (loading the model into workers is the slow part, so the three
    share them). `tick()` is called after each round (progress); `grid` (one thread count's tables from `measure_grids`)
    prices the probe's passes as the simulator will.
    Returns (corun, hop, pipeline); any may be None.

    With a `warnings` list (the profile's), a failed hop or pipeline probe keeps what was already
    measured: the failure is appended there as one line and the rest comes back (a failed hop also
    skips the probe, which needs the same two-process rendezvous). Without one, it raises as before.
    A failure while the workers load or co-run raises RuntimeError either way."""
    k = max(cfg.corun_max, 2 if cfg.measure_hop or cfg.pipeline_repeats else 1)
    if k < 2:
        return None, None, None
    device = adapter.device.type
    dtype = str(adapter.dtype).removeprefix("torch.")
    pool = WorkerPool(k, model_spec, device, dtype, cfg.threads, int(cfg.context_values[0]))
    corun = hop = pipeline = None
    backend = "nccl" if device == "cuda" and torch.cuda.device_count() >= 2 else "gloo"

    def optional(what: str, kept: str, fn):
        try:
            return fn(), True
        except Exception as exc:  # noqa: BLE001 - optional figure: report it, keep the others
            # a bad flag refuses the profile; an unphysical pipeline reading drops the probe, with a warning
            if warnings is None or (isinstance(exc, UserError) and not isinstance(exc, UnphysicalReading)):
                raise
            warnings.append(f"{what} failed ({_one_line(exc)}); {kept}")
            return None, False

    try:
        if cfg.corun_max >= 2:
            corun = remeasured(lambda: _measure_corun(pool, cfg, tick), "latency.corun")
        hop_ok = True
        if cfg.measure_hop:
            hop, hop_ok = optional("hop measurement", "kept the co-run slowdown; the pipeline probe was skipped",
                                   lambda: _measure_hop(pool, cfg, adapter.hidden_size, backend))
            tick()
        if cfg.pipeline_repeats and adapter.num_layers >= 2 and hop_ok:
            pipeline, _ = optional("pipeline probe", "kept the co-run slowdown and the idle hop (the simulator "
                                   "prices PPSD with them instead)",
                                   lambda: remeasured(lambda: _measure_pipeline_probe(
                                       pool, cfg, adapter.num_layers, backend, grid), "latency.pipeline"))
            if pipeline is not None and warnings is not None:
                warnings.extend(probe_warnings(pipeline))
            tick()
    finally:
        pool.close()
    return corun, hop, pipeline


def measure_corun_now(model_spec: str, adapter: ModelAdapter, threads: int = 1, context: int = 64,
                      seconds: float = 1.5, timeout_s: float = 180.0) -> dict:
    """The co-run slowdown at 2 processes, measured now as the profiler measures it (`_measure_corun`:
    per-layer time with two workers busy at once / one alone), for a check against the profile's
    figure (`ppsd validate`'s `corun_drift`). Returns the same dict as the profile's `corun`."""
    cfg = LatencyConfig(corun_max=2, corun_seconds=seconds, threads=threads, context_values=(int(context),),
                        measure_hop=False, pipeline_repeats=0)
    pool = WorkerPool(2, model_spec, adapter.device.type, str(adapter.dtype).removeprefix("torch."), threads,
                      int(context), timeout_s=timeout_s)
    try:
        return _measure_corun(pool, cfg, lambda: None)
    finally:
        pool.close()


def _one_line(exc: BaseException) -> str:
    """An exception as one line: its first line, plus the last line of a worker's traceback."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()] or [exc.__class__.__name__]
    return lines[0] if len(lines) == 1 else f"{lines[0].rstrip(':')} {lines[-1]}"


CORUN_WARMUP_S = 0.5  # the untimed round before the co-run probe's timed ones


def _corun_round(pool: WorkerPool, ranks, seconds: float) -> dict[int, list[float]]:
    """Per-layer samples of each of `ranks`, all busy at once for `seconds`."""
    pool.send(ranks, ("corun", time.time() + 0.3, seconds))
    return pool.collect("corun", ranks)


def _measure_corun(pool: WorkerPool, cfg: LatencyConfig, tick) -> dict:
    """Per-layer time while p = 1..corun_max workers run decoder layers at once, over the time
    of one alone; `tick()` after each p."""
    # Every together round is bracketed by rounds alone (worker 0 before, the last worker after, in
    # turn), and divides by the mean of its two neighbours: a drift of the machine across the probe
    # (a worker warming up, a burst of load on a shared VM) enters the ratio only as much as it differs
    # between neighbouring rounds, not as the whole drift from the first round to the last.
    # A worker's first passes are slow (weights paged in, kernels chosen): an untimed round of every
    # worker at once first, so that no timed round is a worker's first.
    _corun_round(pool, range(cfg.corun_max), min(CORUN_WARMUP_S, cfg.corun_seconds))
    alone_rounds = [np.asarray(_corun_round(pool, [0], cfg.corun_seconds)[0])]
    medians, p10s, p90s = [1.0], [], []
    together_rounds = []
    for p in range(2, cfg.corun_max + 1):
        got = _corun_round(pool, range(p), cfg.corun_seconds)
        last = p - 1 if len(alone_rounds) % 2 else 0
        alone_rounds.append(np.asarray(_corun_round(pool, [last], cfg.corun_seconds)[last]))
        base = (np.median(alone_rounds[-2]) + np.median(alone_rounds[-1])) / 2
        medians.append(float(np.mean([np.median(s) for s in got.values()]) / base))
        together_rounds.append((np.concatenate([np.asarray(s) for s in got.values()]), base))
        tick()
    alone = np.concatenate(alone_rounds)
    base_all = float(np.median(alone))
    p10s.append(float(np.percentile(alone, 10)) / base_all)
    p90s.append(float(np.percentile(alone, 90)) / base_all)
    for pooled, base in together_rounds:
        p10s.append(float(np.percentile(pooled, 10)) / base)
        p90s.append(float(np.percentile(pooled, 90)) / base)
    tick()
    return {"processes": list(range(1, cfg.corun_max + 1)), "slowdown": medians, "p10": p10s,
            "p90": p90s, "alone_layer_ms": base_all, "context": int(cfg.context_values[0]),
            "threads_per_process": cfg.threads, "seconds_per_round": cfg.corun_seconds,
            "method": "after an untimed round of all; each p processes at once between two rounds alone (worker 0, then the last, in turn); "
                      "per-process median / mean of the neighbouring alone medians"}


def _measure_hop(pool: WorkerPool, cfg: LatencyConfig, hidden_size: int, backend: str) -> dict:
    """One-way time of a hidden-state message between two idle workers (ping-pong)."""
    pool.send([0, 1], ("hop", free_port(), cfg.hop_repeats, hidden_size, backend))
    samples = pool.collect("hop", [0, 1])[0]
    nbytes = hidden_size * 4  # one float32 hidden state
    return {"backend": backend, "bytes": nbytes, **stats(samples), "repeats": len(samples),
            "method": "isend/irecv round trip / 2, two local processes"}


def _measure_pipeline_probe(pool: WorkerPool, cfg: LatencyConfig, num_layers: int, backend: str,
                            grid: dict | None, transport: str = "auto") -> dict:
    """A two-stage pipeline split at the middle layer: each stage's passes alone, then both running
    as a pipeline; summarised against the tables' price of the same passes (`grid`)."""
    # What a 2-stage pipeline really sees: both stages busy with layers *and* heads at once,
    # and messages that wake a waiting process; the idle ping-pong (`_measure_hop`) sees neither.
    # In rounds, each stage alone then both as a pipeline, so that a round's slowdown compares
    # passes of one moment and a burst of load on a shared machine spoils one round, not the probe.
    e = num_layers // 2
    per_round = max(3, -(-cfg.pipeline_repeats // PROBE_ROUNDS))  # 3: a verdict hop needs pass i - 2 recorded
    rounds = []
    for _ in range(PROBE_ROUNDS):
        alone = {}
        for r in (0, 1):
            pool.send([r], ("stage_alone", e, per_round))
            alone.update(pool.collect("stage_alone", [r]))
        pool.send([0, 1], ("pipeline", free_port(), e, per_round, backend, transport))
        rounds.append((alone, pool.collect("pipeline", [0, 1])))
    table = (table_pass_ms(grid, e, num_layers, cfg.n_values)
             if grid is not None and 1 in cfg.n_values else None)
    # Tables calibrated to paired whole steps price a stage's pass as it runs alone; what the pipeline
    # adds is then its pass over the same pass alone in the same round, which no drift of the machine
    # between the grid and the probe enters.
    calibrated = grid is not None and (grid.get("whole_step") or {}).get("method") == "paired"
    return summarise_probe_rounds(rounds, e, num_layers, backend, table, against_alone=calibrated)


def machine_info(adapter: ModelAdapter, threads: int) -> dict:
    from runtime.llm import device_name

    dev = adapter.device
    return {"device": dev.type, "device_name": device_name(dev), "cores": os.cpu_count() or 1,
            "threads": threads, "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0}
