"""Profiles made from a few numbers, without a model (torch-free).

Used by `ppsd simulate --synthetic-layers N --layer-ms T --head-ms H --alpha A`, by tests and by the
dashboard's what-if controls. Acceptance, when asked for, is a seeded Bernoulli(α) match table.
"""

from __future__ import annotations

import datetime as _dt
import platform
from pathlib import Path

import numpy as np

from ppsd import __version__
from ppsd.exit_heads import SHARED
from ppsd.profile import SCHEMA_VERSION, Profile, load_profile, save_profile


def synthetic_meta(
    num_layers: int = 30,
    layer_ms: float | list[float] = 2.8,
    head_ms: float = 12.6,
    embed_ms: float = 0.13,
    hop_ms: float = 0.0,
    corun_slowdown: float = 1.0,
    n_values=(1, 2, 4, 8, 16),
    context_values=(64, 256, 1024),
    per_token_fraction: float = 0.0,
    model_id: str = "synthetic",
    thread_speedup: dict[int, float] | None = None,
    vocab_size: int = 0,
    sample_ms: dict[int, float] | None = None,
    batch_free_tokens: float | None = None,
    batch_sizes=(1, 2, 4, 8),
) -> dict:
    """profile.json content for uniform (or given per-layer) costs.

    `per_token_fraction`: extra cost of each additional new token as a fraction of the one-token
    time (0 = verifying γ+1 tokens costs the same as one, the memory-bound ideal).
    `thread_speedup` {T: s}: the tables at T threads, every time divided by s (`latency.parallel`,
    what the same-budget baselines read). `sample_ms` {V: ms}: one draw at T > 0 over V logits
    (`latency.sampling`); `vocab_size` the model's vocabulary. `batch_free_tokens` F: a
    `latency.batch` block at `batch_sizes` where a pass costs as one until it holds F tokens over all
    its sequences and grows in proportion beyond (memory-bound, then compute-bound)."""
    layer = np.broadcast_to(np.asarray(layer_ms, dtype=float), (num_layers,))
    n = np.asarray(n_values, dtype=float)
    scale = 1.0 + per_token_fraction * (n - 1)
    layers = np.repeat((layer[:, None] * scale[None, :])[:, :, None], len(context_values), axis=2)
    head = head_ms * scale
    emb = embed_ms * scale

    def stat(a):
        return {"median_ms": a.tolist(), "p10_ms": a.tolist(), "p90_ms": a.tolist()}

    meta = {
        "schema_version": SCHEMA_VERSION,
        "kind": "estimated",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": {"id": model_id, "source": "synthetic", "architecture": "synthetic", "num_layers": num_layers,
                  "hidden_size": 0, "vocab_size": int(vocab_size), "dtype": "n/a", "max_context": 1 << 20},
        "hardware": {"device": "synthetic", "device_name": "synthetic", "cores": 0, "threads": 0, "gpu_count": 0},
        "versions": {"ppsd": __version__, "python": platform.python_version()},
        "timing": {"method": "synthetic", "warmup": 0, "repeats": 0},
        "latency": {
            "n_values": list(map(int, n)), "context_values": list(map(int, context_values)),
            "layers": stat(layers), "embedding": stat(emb), "head": stat(head),
            "hop": {"backend": "synthetic", "bytes": 0, "median_ms": hop_ms, "p10_ms": hop_ms, "p90_ms": hop_ms,
                    "repeats": 0},
            "corun": {"processes": [1, 2], "slowdown": [1.0, corun_slowdown], "p10": [1.0, corun_slowdown],
                      "p90": [1.0, corun_slowdown]},
            "whole_step": None,
        },
        "acceptance": None,
    }
    if sample_ms:
        sizes = sorted(sample_ms)
        ms = [float(sample_ms[v]) for v in sizes]
        meta["latency"]["sampling"] = {"vocab": sizes, "median_ms": ms, "p10_ms": ms, "p90_ms": ms,
                                       "temperature": 1.0, "threads": 0, "method": "synthetic"}
    if batch_free_tokens:
        meta["latency"]["batch"] = synthetic_batch_block(batch_free_tokens, batch_sizes, n_values, context_values,
                                                         head_ms, embed_ms)
    if thread_speedup:
        meta["latency"]["parallel"] = {
            "kind": "threads", "base": 1,
            "tables": {str(t): {"layers": stat(layers / f), "embedding": stat(emb / f), "head": stat(head / f)}
                       for t, f in thread_speedup.items()}}
    return meta


def synthetic_batch_block(free_tokens: float, sizes, n_values, context_values, head_ms: float, embed_ms: float) -> dict:
    """`latency.batch` for a pass that costs as one until it holds `free_tokens` tokens, then in proportion."""
    def load(b, n):
        return max(1.0, b * n / free_tokens)

    ratio = [[[load(b, n) / load(1, n)] * len(context_values) for n in n_values] for b in sizes]
    return {"format": "synthetic", "batch_sizes": list(sizes), "n_values": list(n_values),
            "context_values": list(context_values), "repeats": 0, "layers_ms": ratio, "layers_ratio": ratio,
            "head_ms": [[head_ms * load(b, n) for n in n_values] for b in sizes],
            "embedding_ms": [[embed_ms * b * n for n in n_values] for b in sizes]}


def bernoulli_acceptance(num_layers: int, alpha_by_exit, prompts: int = 4, tokens: int = 64, seed: int = 0,
                         categories=("writing", "math"), confidence: bool = False):
    """A seeded match table: exit E matches with probability alpha_by_exit(E) (callable or dict). With
    `confidence`, each draft's confidence too (seeded apart, so the matches stay the same): uniform on
    [0.3, 1) where the draft matches, on [0, 0.7) where it does not."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    sure = np.random.default_rng([seed, 7])
    rows = []
    for p in range(prompts):
        cat = categories[p % len(categories)]
        for e in range(1, num_layers):
            a = alpha_by_exit(e) if callable(alpha_by_exit) else alpha_by_exit[e]
            m = (rng.random(tokens) < a).astype(int)
            conf = np.where(m == 1, 0.3, 0.0) + 0.7 * sure.random(tokens)
            for pos in range(tokens):
                rows.append((SHARED, f"p{p}", cat, e, pos, int(m[pos]), float(a), float(conf[pos])))
    columns = ["head", "prompt_id", "category", "exit_layer", "position", "match", "beta", "confidence"]
    df = pd.DataFrame(rows, columns=columns)
    return df if confidence else df.drop(columns="confidence")


def sampled_beta(num_layers: int, beta_by_temperature: dict, prompts: int = 4, tokens: int = 64,
                 categories=("writing", "math"), seed: int = 0, confidence: bool = False):
    """A sampled-trajectory β table (schema.SAMPLED_COLUMNS): at temperature T every position of exit
    E has β = beta_by_temperature[T](E) (a callable or dict per T), jittered by ±0.02 (seeded). With
    `confidence`, each draft's confidence too (seeded apart): half the positions get a low β (β / 3)
    and a confidence on [0, 0.5), the rest their β and a confidence on [0.5, 1), so a stop has
    something to tell apart."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    sure = np.random.default_rng([seed, 11])
    rows = []
    for t, beta in sorted(beta_by_temperature.items()):
        for p in range(prompts):
            cat = categories[p % len(categories)]
            for e in range(1, num_layers):
                b = beta(e) if callable(beta) else beta[e]
                vals = np.clip(b + rng.uniform(-0.02, 0.02, tokens), 0.0, 1.0)
                conf = sure.random(tokens)
                if confidence:
                    vals = np.where(conf < 0.5, vals / 3.0, vals)
                rows += [(SHARED, f"p{p}", cat, float(t), e, pos, float(v), float(q))
                         for pos, (v, q) in enumerate(zip(vals, conf))]
    df = pd.DataFrame(rows, columns=["head", "prompt_id", "category", "temperature", "exit_layer", "position",
                                     "beta", "confidence"])
    return df if confidence else df.drop(columns="confidence")


def write_synthetic_profile(out_dir: str | Path, alpha_by_exit=None, seed: int = 0,
                            beta_by_temperature: dict | None = None, confidence: bool = False, **kwargs) -> Profile:
    """Write a synthetic profile folder (with acceptance when alpha_by_exit is given, and each draft's
    confidence with `confidence`; with β along sampled trajectories at each temperature of
    `beta_by_temperature` {T: β(E)}) and load it."""
    meta = synthetic_meta(**kwargs)
    acc = sampled = None
    if alpha_by_exit is not None:
        acc = bernoulli_acceptance(meta["model"]["num_layers"], alpha_by_exit, seed=seed, confidence=confidence)
        meta["acceptance"] = {"temperature": 1.0, "max_new_tokens": 64, "prompt_set": "synthetic",
                              "num_prompts": int(acc["prompt_id"].nunique()),
                              "categories": sorted(acc["category"].unique().tolist()), "heads": [SHARED]}
        if beta_by_temperature:
            sampled = sampled_beta(meta["model"]["num_layers"], beta_by_temperature, seed=seed + 1,
                                   confidence=confidence)
            meta["acceptance"]["sampled"] = {"seed": seed + 1, "max_new_tokens": 64, "heads": [SHARED],
                                             "trajectory": "synthetic"}
    save_profile(out_dir, meta, acceptance=acc, sampled=sampled)
    return load_profile(out_dir)
