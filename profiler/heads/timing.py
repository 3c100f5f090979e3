"""Timing an exit head as a decode leaves the caches: `time_ms` (one clock for exit heads and the shared
head) and `draft_path_evictor` (the draft's layers read before every timed call)."""

from __future__ import annotations

import time

import numpy as np
import torch


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
    (vocab4096: 9 MB in fp32) stays in a large L3, where in a decode the layers before it have
    evicted it and it reads from memory (3-5x as long: docs/design-notes.md); the LM
    head in the latency grid is timed inside whole steps, so this puts exit heads on the same footing.
    Reading the real weights (not a scratch buffer) evicts exactly as much as a draft would, so a
    model small enough to stay cached keeps its cached price."""
    params = [p for layer in adapter.layers[:exit_layer] for p in layer.parameters()]

    @torch.inference_mode()
    def evict() -> None:
        for p in params:
            p.sum()
    return evict
