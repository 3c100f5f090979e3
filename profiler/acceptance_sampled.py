"""Acceptance under sampling: beta along trajectories the full model SAMPLES at each temperature.

Under sampled speculative decoding a draft d ~ q (exit head) stands with probability
min(1, p(d)/q(d)), so a position is accepted with probability beta_p = sum_v min(p_full(v), p_exit(v))
at the decoding temperature, given its prefix. Which prefixes a sampled generation visits depends on
the temperature: at T = 1 it wanders into text where the exit head agrees less than on the greedy
path, so beta along the greedy trajectory over-predicts (docs/design-notes.md). Here, for every
temperature T and prompt:
  1. the full model samples a continuation at T (batched like the greedy generation, seeded: one
     generator per (seed, T, batch)), stopping after an end-of-sequence token;
  2. one teacher-forced pass over prompt + continuation keeps every layer's hidden state
     (`profiler.acceptance.layer_states`), and the shared exit head on each gives
     beta_p at T for every exit 1..N-1 at once (`profiler.acceptance.exit_traces`).
So the cost is one sampled generation plus one teacher-forced pass per (prompt, temperature): the
greedy phase's cost times the number of temperatures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ppsd.exit_heads import SHARED
from profiler.acceptance import PromptResult, _prefill_mask, _safe, batches_by_length, exit_traces, layer_states
from runtime.llm import ModelAdapter
from ppsd.prompts import Prompt


def sample_seed(seed: int, temperature: float, batch: int) -> int:
    return int(seed) * 1_000_003 + int(round(temperature * 1000)) * 7919 + batch


@torch.inference_mode()
def generate_sampled(adapter: ModelAdapter, prompts: list[list[int]], max_new_tokens: int, temperature: float,
                     seed: int, on_step: Callable[[int], None] | None = None) -> list[list[int]]:
    """Continuations of a batch of tokenised prompts sampled from the full model at `temperature`
    (softmax of logits / T, one seeded generator); each stops after its first end-of-sequence token
    or at max_new_tokens. Left padding as in `profiler.acceptance.generate_greedy`."""
    dev = adapter.device
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed))
    B, L = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros(B, L, dtype=torch.long)
    real = torch.zeros(B, L, dtype=torch.bool)
    for b, p in enumerate(prompts):
        ids[b, L - len(p):] = torch.tensor(p)
        real[b, L - len(p):] = True
    eos = adapter.eos_token_ids
    cache = adapter.new_cache()
    out: list[list[int]] = [[] for _ in range(B)]
    rows = list(range(B))
    x, mask, past = ids, _prefill_mask(real), 0
    for _ in range(max_new_tokens):
        h = adapter.forward_layers(adapter.embed(x), 0, adapter.num_layers, cache, past,
                                   attention_mask=mask.to(dev))
        past += x.shape[1]
        probs = torch.softmax(adapter.head(h[:, -1]).float().cpu() / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=gen).squeeze(1)
        keep = []
        for row, b in enumerate(rows):
            tok = int(nxt[row])
            out[b].append(tok)
            if tok not in eos:
                keep.append(row)
        if on_step:
            on_step(len(rows))
        if not keep:
            break
        if len(keep) < len(rows):
            sel = torch.tensor(keep)
            for layer in list(cache.keys):
                cache.keys[layer] = cache.keys[layer].index_select(0, sel.to(dev))
                cache.values[layer] = cache.values[layer].index_select(0, sel.to(dev))
            real, nxt = real.index_select(0, sel), nxt.index_select(0, sel)
            rows = [rows[r] for r in keep]
        real = torch.cat([real, torch.ones(len(rows), 1, dtype=torch.bool)], dim=1)
        mask = real[:, None, None, :]
        x = nxt.unsqueeze(1)
    return out


def profile_sampled(adapter: ModelAdapter, prompts: list[Prompt], encoded: list[list[int]], max_new_tokens: int,
                    temperatures: list[float], seed: int = 0, work_dir: Path | None = None, max_batch: int = 32,
                    max_batch_tokens: int = 8192, on_generate: Callable[[int], None] | None = None,
                    on_prompt: Callable[[], None] | None = None) -> dict[float, list[PromptResult]]:
    """{T: one PromptResult per prompt} with beta at T along a trajectory sampled at T (its `match`
    is the exit's argmax against the sampled token: kept, not used). With `work_dir`, each finished
    (prompt, T) is stored there and reused by --resume."""
    from ppsd.paths import atomic_write_json

    out: dict[float, list[PromptResult]] = {}
    for t in temperatures:
        done: dict[int, PromptResult] = {}
        sub = None
        if work_dir is not None:
            sub = work_dir / f"T{t:g}"
            sub.mkdir(parents=True, exist_ok=True)
            for i, p in enumerate(prompts):
                f = sub / f"{_safe(p.prompt_id)}.json"
                if f.exists():
                    try:
                        done[i] = PromptResult.from_json(json.loads(f.read_text()))
                    except (json.JSONDecodeError, KeyError, ValueError):
                        f.unlink()
                        continue
                    if on_generate:
                        on_generate(max_new_tokens)
                    if on_prompt:
                        on_prompt()
        todo = [i for i in range(len(prompts)) if i not in done]
        batches = batches_by_length([len(encoded[i]) for i in todo], max_batch, max_batch_tokens)
        for b, batch in enumerate(batches):
            idx = [todo[j] for j in batch]
            # the seed names the batch by its first prompt, so a resumed run samples what it would have
            gens = generate_sampled(adapter, [encoded[i] for i in idx], max_new_tokens, t,
                                    sample_seed(seed, t, idx[0]), on_step=on_generate)
            if on_generate:
                on_generate(sum(max_new_tokens - len(g) for g in gens))
            for i, gen in zip(idx, gens):
                states = layer_states(adapter, encoded[i], gen)
                match, beta, agree, conf = exit_traces(adapter, states, gen, t)
                p = prompts[i]
                res = PromptResult(p.prompt_id, p.category, p.text, encoded[i], gen, match, beta, agree, conf)
                if sub is not None:
                    atomic_write_json(sub / f"{_safe(p.prompt_id)}.json", res.to_json())
                done[i] = res
                if on_prompt:
                    on_prompt()
        out[t] = [done[i] for i in range(len(prompts))]
    return out


Sampled = "dict[float, list[PromptResult]] | list[dict[float, list[PromptResult]]]"


def _trajectories(sampled) -> list[dict[float, list[PromptResult]]]:
    """`profile_sampled`'s result, or a list of them (one per trajectory, in seed order)."""
    return list(sampled) if isinstance(sampled, list) else [sampled]


def sampled_table(sampled, head: str = SHARED):
    """The long table of schema.SAMPLED_COLUMNS + `trajectory` (+ `confidence`): head, prompt_id,
    category, temperature, exit_layer, position, beta, trajectory (0, 1, ...: the index in `sampled`
    when it is a list of `profile_sampled` results, one per seed), and where every result has them,
    each draft's confidence along the sampled trajectory (the top-1 probability of the exit head's
    distribution at T = 1, what a confidence stop reads at any temperature)."""
    import pandas as pd

    from ppsd.profile import SAMPLED_COLUMNS, SAMPLED_OPTIONAL

    runs = _trajectories(sampled)
    confident = all(r.confidence is not None for by_t in runs for rs in by_t.values() for r in rs)
    columns = SAMPLED_COLUMNS + [c for c in SAMPLED_OPTIONAL if confident or c != "confidence"]
    frames = []
    for j, by_temperature in enumerate(runs):
        for t, results in sorted(by_temperature.items()):
            for r in results:
                n_exits, g = r.beta.shape
                if g == 0:
                    continue
                frames.append(pd.DataFrame({
                    "head": head, "prompt_id": r.prompt_id, "category": r.category, "temperature": float(t),
                    "exit_layer": np.repeat(np.arange(1, n_exits + 1), g),
                    "position": np.tile(np.arange(g), n_exits), "beta": r.beta.reshape(-1), "trajectory": j,
                    **({"confidence": r.confidence.reshape(-1)} if confident else {})}))
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]


def sampled_meta(sampled, seed: int, max_new_tokens: int) -> dict:
    """profile.json's `acceptance.sampled` block (the file name and temperatures come from save_profile)."""
    runs = _trajectories(sampled)
    temps = sorted({t for by_t in runs for t in by_t})
    return {"seed": int(seed), "max_new_tokens": int(max_new_tokens), "heads": [SHARED],
            "trajectories": len(runs),
            "tokens": {f"{t:g}": int(sum(len(r.token_ids) for by_t in runs for r in by_t.get(t, []))) for t in temps},
            "trajectory": "sampled from the full model at each temperature (batched, left padding, stops after an "
                          "end-of-sequence token), `trajectories` per prompt (seeds seed, seed + 1, ...); beta = "
                          "sum_v min(p_full, p_exit) at that temperature, one teacher-forced pass per trajectory; "
                          "a prediction takes each position's mean beta over a prompt's trajectories"}
