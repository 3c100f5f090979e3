"""Reduced-vocabulary exit head: draft only among the V most frequent tokens.

On a small model the LM head is a large share of a decode step (SmolLM2-135M: 576 x 49152, about
as costly as 4-5 decoder layers), and a drafting exit pays it on every token. Keeping only the V
rows of the tokens the model itself generates most often cuts that cost by vocab/V. Drafts are
mapped back to full-vocabulary ids; when the full model's token lies outside the subset the draft
cannot equal it, so the position counts as a rejection and greedy output stays lossless (the
verifier always decides).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ppsd.exit_heads import vocab_name


def frequency_order(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Every token id, most frequent in `tokens` first; ties (and unseen tokens) by id, so the order
    is deterministic."""
    counts = torch.bincount(tokens.reshape(-1).to(torch.int64), minlength=vocab_size)[:vocab_size]
    ids = torch.arange(vocab_size)
    # Sort by (-count, id): a stable sort on -count over ids already in order.
    order = torch.sort(-counts, stable=True).indices
    return ids[order]


class VocabHead:
    """An exit head whose LM head keeps only the rows in `subset` (full-vocabulary ids)."""

    def __init__(self, heads, subset: torch.Tensor):
        self.heads = heads
        self.subset = subset.to(torch.int64)
        self.size = int(subset.numel())
        # Materialise the V rows once: the point is a smaller matmul at draft time.
        self.rows_weight = heads.frozen.lm_weight.index_select(0, self.subset).contiguous()
        b = heads.frozen.lm_bias
        self.rows_bias = None if b is None else b.index_select(0, self.subset).contiguous()
        # Full-vocabulary id -> position in the subset (-1 outside): for β and for membership tests.
        self.position = torch.full((heads.frozen.lm_weight.shape[0],), -1, dtype=torch.int64)
        self.position[self.subset.cpu()] = torch.arange(self.size)

    @property
    def name(self) -> str:
        return vocab_name(self.size)

    def params(self) -> int:
        return self.heads.params()

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor, exit_layer: int) -> torch.Tensor:
        """[..., V] logits over the subset (index i is token `subset[i]`)."""
        x = self.heads.frozen.normed(self.heads._adapter(exit_layer)(hidden))
        return torch.nn.functional.linear(x, self.rows_weight, self.rows_bias)

    @torch.inference_mode()
    def draft(self, hidden: torch.Tensor, exit_layer: int) -> torch.Tensor:
        """Greedy draft as full-vocabulary token ids."""
        return self.subset[self.logits(hidden, exit_layer).argmax(-1)]

    def contains(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.position[token_ids.cpu()] >= 0

    @torch.inference_mode()
    def full_probs(self, hidden: torch.Tensor, exit_layer: int) -> torch.Tensor:
        """The head's distribution spread over the full vocabulary (zero outside the subset)."""
        p = torch.softmax(self.logits(hidden, exit_layer).float(), -1)
        out = torch.zeros(*p.shape[:-1], self.position.shape[0], dtype=p.dtype, device=p.device)
        out[..., self.subset.to(p.device)] = p
        return out


def time_ms(fn, repeats: int = 30, warmup: int = 5, device=None, before=None) -> dict:
    """median / p10 / p90 time of `fn()` in ms. On a CUDA `device`: CUDA events around each call on
    the device's current stream, read after the call's own synchronise — the clock the profiler
    times the shared head with (profiler/latency.py `StepClock`), so an exit head's cost and the
    shared head's come from one clock (host-side perf_counter would add launch gaps and the sync's
    own latency to every call). On a CPU: perf_counter (ops are synchronous). `before()`, when
    given, runs untimed ahead of every timed call (`draft_path_evictor`: the caches as a decode
    leaves them)."""
    dev = None if device is None else torch.device(device)
    for _ in range(warmup):
        fn()
    if dev is not None and dev.type == "cuda":
        from profiler.latency import StepClock

        clock = StepClock(dev)
        times = []
        for _ in range(repeats):
            if before is not None:
                before()
            clock.start()
            fn()
            clock.mark()
            times.append(clock.lap_ms()[0])
    else:
        times = []
        for _ in range(repeats):
            if before is not None:
                before()
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    a = np.asarray(times)
    return {"median_ms": float(np.median(a)), "p10_ms": float(np.percentile(a, 10)),
            "p90_ms": float(np.percentile(a, 90))}


def draft_path_evictor(adapter, exit_layer: int):
    """A callable that reads every weight of decoder layers [0, exit_layer): the memory a draft
    streams through right before its exit head runs. Why: timed in a loop of its own, a small head
    (vocab4096: 9 MB in fp32) stays in a 32 MB L3 and prices at 0.33 ms on an AMD EPYC VM, where in a
    decode the layers before it have evicted it and it reads from memory (about 3-5x that); the LM
    head in the latency grid is timed inside whole steps, so this puts exit heads on the same footing.
    Reading the real weights (not a scratch buffer) evicts exactly as much as a draft would, so a
    model small enough to stay cached keeps its cached price."""
    params = [p for layer in adapter.layers[:exit_layer] for p in layer.parameters()]

    @torch.inference_mode()
    def evict() -> None:
        for p in params:
            p.sum()
    return evict
