"""What drawing one token costs at T > 0: softmax at T in fp32 and a seeded multinomial, as
`runtime/acceptance.py` `Sampler.choose` does, over the full vocabulary and each exit head's.

On a CPU the multinomial dominates (~0.9 ms over SmolLM2's 49 152 tokens, about a whole decoder
layer), so a sampled plan that draws once per token pays it per token and PPSD's verifier, which
also recomputes the draft's distribution, more. The simulator prices it from `latency.sampling`
(ppsd/profile/schema.py); `ppsd profile add-sampling DIR` adds it to a profile made without it.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Iterable

import numpy as np
import torch

DEFAULT_REPEATS = 200
DEFAULT_WARMUP = 20


def time_draw(vocab: int, *, temperature: float = 1.0, repeats: int = DEFAULT_REPEATS,
              warmup: int = DEFAULT_WARMUP, device: str | torch.device = "cpu", seed: int = 0) -> list[float]:
    """Wall times (ms) of `repeats` draws of one token from `vocab` random logits at `temperature`,
    the token read back to the host each time (as the runtime does: it sends the token on)."""
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(int(seed))
    logits = torch.randn(int(vocab), generator=gen, device=dev) * 3.0
    out = []
    for i in range(warmup + repeats):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        p = torch.softmax(logits.float() / temperature, dim=-1)
        int(torch.multinomial(p, 1, generator=gen))  # .item() waits for the device
        t1 = time.perf_counter()
        if i >= warmup:
            out.append((t1 - t0) * 1e3)
    return out


def measure(vocab_sizes: Iterable[int], *, temperature: float = 1.0, repeats: int = DEFAULT_REPEATS,
            warmup: int = DEFAULT_WARMUP, device: str | torch.device = "cpu", threads: int | None = None) -> dict:
    """`latency.sampling`: one draw's median and 10/90th percentiles per vocabulary size."""
    sizes = sorted({int(v) for v in vocab_sizes if v and int(v) > 0})
    if not sizes:
        raise ValueError("no vocabulary size to time a draw over")
    med, p10, p90 = [], [], []
    for v in sizes:
        t = np.asarray(time_draw(v, temperature=temperature, repeats=repeats, warmup=warmup, device=device))
        med.append(round(float(np.median(t)), 5))
        p10.append(round(float(np.percentile(t, 10)), 5))
        p90.append(round(float(np.percentile(t, 90)), 5))
    return {"vocab": sizes, "median_ms": med, "p10_ms": p10, "p90_ms": p90, "temperature": float(temperature),
            "repeats": int(repeats), "threads": int(threads if threads is not None else torch.get_num_threads()),
            "method": "softmax(logits / T) in fp32 + torch.multinomial, token read back (perf_counter)"}


def vocab_sizes(model_vocab: int | None, exit_heads: dict | None = None) -> list[int]:
    """The distributions a profile's plans draw from: the model's vocabulary and each exit head's
    (`latency.exit_heads`, whose reduced-vocabulary heads record their `vocab`)."""
    sizes = [int(model_vocab or 0)] + [int(h["vocab"]) for h in (exit_heads or {}).values() if h.get("vocab")]
    return [v for v in sizes if v > 0]


def stamp_added_later(table: dict) -> dict:
    """Mark a table measured into an existing profile (a later sitting than its other tables)."""
    return {**table, "added_later": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
