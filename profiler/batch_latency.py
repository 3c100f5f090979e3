"""The `latency.batch` block: what a pass of B sequences costs against a pass of one.

For each batch size B, tokens per sequence n and context c, a pass of B sequences runs the way the
batched runtime runs it (`runtime/batched.py`: one rectangle of KV cache with B rows at context c,
per-sequence positions, its slot mask), timed as three pieces: the embedding, every decoder layer,
and the LM head on all B·n positions. Every cell is timed once a round in a seeded shuffled order,
batch 1 among them, so each ratio compares cells that saw the same mix of the machine's states
(`profiler/latency.py` says why). The block keeps each piece's median and the layers' ratio to batch
1 at the same (n, c); the simulator prices a layer range at batch B as its batch-1 price times that
ratio (`sim/batch/costs.py`). Exit heads other than the shared one are not timed here.

On a CPU with two cores or more, the same rounds also time a whole decode pass (n = 1) of every batch size
and context on two threads (`two_threads_ratio`: its time over the one-thread pass of the same cell, paired
round by round): the price of AR on the two cores a two-stage batched PPSD plan uses, its same-budget baseline.
"""

from __future__ import annotations

import datetime as _dt

import numpy as np
import torch

from profiler.latency import StepClock
from runtime.batched import pass_mask
from runtime.llm import KVCache

DEFAULT_BATCH_SIZES = (1, 2, 4, 8)
DEFAULT_N = (1, 2, 4, 9)  # a decode step to a verification at γ = 8
FORMAT = "batch-rounds-v1"
BUDGET_THREADS = 2  # the cores a two-stage batched PPSD plan uses: AR's same-budget baseline runs on as many


def batch_cache(adapter, batch: int, context: int, seed: int = 0) -> KVCache:
    """A KV cache of `batch` rows holding `context` random keys and values in every layer."""
    cfg = adapter.config
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or adapter.hidden_size // cfg.num_attention_heads)
    gen = torch.Generator(device=adapter.device).manual_seed(seed)  # drawn where it lives: no host copy
    cache = adapter.new_cache()
    for layer in range(adapter.num_layers):
        shape = (batch, kv_heads, context, head_dim)
        for store in (cache.keys, cache.values):
            store[layer] = torch.randn(shape, generator=gen, device=adapter.device, dtype=adapter.dtype)
    return cache


@torch.inference_mode()
def timed_batch_pass(adapter, cache: KVCache, ids: torch.Tensor, context: int, clock: StepClock) -> list[float]:
    """One pass of ids [B, n] after `context` cached positions a sequence -> [embedding, layers, head] ms."""
    batch, n = ids.shape
    valid = torch.ones((batch, context), dtype=torch.bool, device=adapter.device)
    clock.start()
    hidden = adapter.embed(ids)
    clock.mark()
    positions = torch.arange(context, context + n, device=adapter.device).unsqueeze(0).expand(batch, n)
    hidden = adapter.forward_layers(hidden, 0, adapter.num_layers, cache, 0, attention_mask=pass_mask(valid, 0, n),
                                    positions=positions)
    clock.mark()
    adapter.head(hidden)
    clock.mark()
    laps = clock.lap_ms()
    cache.crop(context)
    return laps


def budget_threads(adapter) -> int | None:
    """The threads AR's same-budget pass is timed on: `BUDGET_THREADS` on a CPU that has them, else None."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return BUDGET_THREADS if adapter.device.type == "cpu" and cores >= BUDGET_THREADS else None


def cell_list(sizes: list[int], nv: list[int], cv: list[int], two_threads: bool) -> list[tuple]:
    """Every timed cell: (batch index, n index, context index, threads) at one thread; with `two_threads`
    also each n = 1 cell on `BUDGET_THREADS` threads."""
    cells = [(bi, ni, ci, 1) for bi in range(len(sizes)) for ni in range(len(nv)) for ci in range(len(cv))]
    if two_threads and 1 in nv:
        cells += [(bi, nv.index(1), ci, BUDGET_THREADS) for bi in range(len(sizes)) for ci in range(len(cv))]
    return cells


def cell_count(adapter, batch_sizes, n_values=DEFAULT_N, context_values=(64, 256)) -> int:
    """How many cells `measure_batch_block` times a round (for a progress bar)."""
    sizes = sorted({1, *(int(b) for b in batch_sizes)})
    nv, cv = sorted({int(n) for n in n_values}), sorted({int(c) for c in context_values})
    return len(cell_list(sizes, nv, cv, budget_threads(adapter) is not None and torch.get_num_threads() == 1))


def measure_batch_block(adapter, batch_sizes=DEFAULT_BATCH_SIZES, n_values=DEFAULT_N, context_values=(64, 256),
                        warmup: int = 1, repeats: int = 5, seed: int = 0, tick=lambda: None) -> dict:
    """The `latency.batch` block (see the module doc); `tick()` once per timed cell."""
    sizes = sorted({1, *(int(b) for b in batch_sizes)})
    nv, cv = sorted({int(n) for n in n_values}), sorted({int(c) for c in context_values})
    threads = torch.get_num_threads()
    cells = cell_list(sizes, nv, cv, budget_threads(adapter) is not None and threads == 1)
    caches = {(bi, ci): batch_cache(adapter, sizes[bi], cv[ci], seed + ci) for bi in range(len(sizes))
              for ci in range(len(cv))}
    gen = torch.Generator().manual_seed(seed)
    ids = {cell[:3]: torch.randint(0, adapter.vocab_size, (sizes[cell[0]], nv[cell[1]]), generator=gen)
           .to(adapter.device) for cell in cells if cell[3] == 1}
    laps = {cell: [] for cell in cells}
    order = np.random.default_rng(seed)
    clock = StepClock(adapter.device)
    for rnd in range(warmup + repeats):
        for k in order.permutation(len(cells)):
            bi, ni, ci, on = cells[int(k)]
            torch.set_num_threads(on * threads)
            got = timed_batch_pass(adapter, caches[(bi, ci)], ids[(bi, ni, ci)], cv[ci], clock)
            if rnd >= warmup:
                laps[(bi, ni, ci, on)].append(got)
                tick()
    torch.set_num_threads(threads)
    return batch_block(laps, sizes, nv, cv, repeats)


def batch_block(laps: dict, sizes: list[int], nv: list[int], cv: list[int], repeats: int) -> dict:
    """The block from each cell's laps: medians, the layers' ratio to batch 1 round by round, and (when
    timed) a whole pass on two threads over the same pass on one, round by round."""
    shape = (len(sizes), len(nv), len(cv))
    layers, embed, head, ratio = (np.zeros(shape) for _ in range(4))
    one_thread = {cell[:3]: np.asarray(rows, dtype=float) for cell, rows in laps.items() if cell[3] == 1}
    for (bi, ni, ci), a in one_thread.items():
        embed[bi, ni, ci], layers[bi, ni, ci], head[bi, ni, ci] = np.median(a, axis=0)
        ratio[bi, ni, ci] = float(np.median(a[:, 1] / one_thread[(0, ni, ci)][:, 1]))  # paired by round
    block = {"format": FORMAT, "batch_sizes": sizes, "n_values": nv, "context_values": cv, "repeats": int(repeats),
             "layers_ms": layers.round(4).tolist(), "embedding_ms": embed.mean(axis=2).round(4).tolist(),
             "head_ms": head.mean(axis=2).round(4).tolist(), "layers_ratio": ratio.round(4).tolist(),
             "measured": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    budget = {(bi, ci): np.asarray(rows, dtype=float) for (bi, ni, ci, on), rows in laps.items() if on > 1}
    if budget:
        n1 = nv.index(1)
        two = [[float(np.median(budget[(bi, ci)].sum(axis=1) / one_thread[(bi, n1, ci)].sum(axis=1)))
                for ci in range(len(cv))] for bi in range(len(sizes))]
        block.update(budget_threads=BUDGET_THREADS, two_threads_ratio=np.round(two, 4).tolist())
    return block
