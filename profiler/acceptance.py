"""Acceptance profile: how often each early exit agrees with the full model.

Two passes per prompt:
  1. greedy generation of up to `max_new_tokens` tokens with the full model (stopping after an
     end-of-sequence token), batched over prompts with left padding;
  2. one teacher-forced pass over prompt + generation that keeps the hidden state after every
     decoder layer at the positions that predicted the generated tokens. The shared exit head
     (final norm + LM head) on layer E's state gives the exit-E draft for every position at once:
       match_p = [argmax exit-E logits == the full model's token p]
       beta_p  = sum_v min(p_full(v), p_exit(v)) at temperature T (softmax of logits / T)
       conf_p  = max_v softmax(exit-E logits)(v), the draft's confidence (what a confidence stop reads)
     for every exit E in 1..N-1.

Left padding is exact for rotary models: attention scores depend only on relative positions, so a
sequence shifted right by its padding, with the pad keys masked out, computes the same hidden
states as the sequence alone (up to float summation order). Finished sequences leave the batch at
once so their rows stop costing time.

The trajectory is the generated token stream, so the match trace is what EESD / PPSD would see
when decoding greedily. `teacher_forced_agree` counts positions where the teacher-forced full model
picks the generated token itself: it should be all of them; a rare miss is a float near-tie.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ppsd.exit_heads import SHARED
from ppsd.profile.files import ACCEPTANCE_COLUMNS, ACCEPTANCE_OPTIONAL
from runtime.decoding import draft_confidence
from runtime.llm import ModelAdapter, causal_mask
from ppsd.prompts import Prompt


@dataclass
class PromptResult:
    """Everything measured for one prompt. match/beta/confidence: [N-1, G] for exits 1..N-1."""

    prompt_id: str
    category: str
    prompt: str
    prompt_tokens: list[int]
    token_ids: list[int]
    match: np.ndarray
    beta: np.ndarray
    teacher_forced_agree: int
    confidence: np.ndarray | None = None

    def to_json(self) -> dict:
        return {"prompt_id": self.prompt_id, "category": self.category, "prompt": self.prompt,
                "prompt_tokens": self.prompt_tokens, "token_ids": self.token_ids,
                "match": self.match.astype(int).tolist(), "beta": np.round(self.beta, 5).tolist(),
                "teacher_forced_agree": self.teacher_forced_agree,
                "confidence": None if self.confidence is None else np.round(self.confidence, 4).tolist()}

    @classmethod
    def from_json(cls, obj: dict) -> PromptResult:
        n_exits = len(obj["match"])
        g = len(obj["token_ids"])
        return cls(obj["prompt_id"], obj["category"], obj["prompt"], list(obj["prompt_tokens"]),
                   list(obj["token_ids"]), np.asarray(obj["match"], dtype=np.int8).reshape(n_exits, g),
                   np.asarray(obj["beta"], dtype=np.float32).reshape(n_exits, g), int(obj["teacher_forced_agree"]),
                   np.asarray(obj["confidence"], dtype=np.float32).reshape(n_exits, g))  # KeyError: redo an older file

    def generation_record(self) -> dict:
        return {"prompt_id": self.prompt_id, "category": self.category, "prompt": self.prompt,
                "prompt_tokens": self.prompt_tokens, "prompt_len": len(self.prompt_tokens),
                "token_ids": self.token_ids}


# --- 1. batched greedy generation ------------------------------------------------------------------

def _prefill_mask(real: torch.Tensor) -> torch.Tensor:
    """[B, 1, L, L] boolean mask (True = attend) for a left-padded prefill: causal, pad keys hidden.
    Every query also sees itself, so a pad row is never fully masked (that gives NaN in SDPA, and
    NaN survives multiplication by a zero attention weight)."""
    L = real.shape[1]
    mask = torch.ones(L, L, dtype=torch.bool).tril().unsqueeze(0) & real.unsqueeze(1)
    mask |= torch.eye(L, dtype=torch.bool).unsqueeze(0)
    return mask.unsqueeze(1)


@torch.inference_mode()
def generate_greedy(adapter: ModelAdapter, prompts: list[list[int]], max_new_tokens: int,
                    on_step: Callable[[int], None] | None = None) -> list[list[int]]:
    """Greedy continuations of a batch of tokenised prompts; each stops after its first
    end-of-sequence token or at max_new_tokens. `on_step(rows)` after every decode step."""
    dev = adapter.device
    B, L = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros(B, L, dtype=torch.long)
    real = torch.zeros(B, L, dtype=torch.bool)
    for b, p in enumerate(prompts):
        ids[b, L - len(p):] = torch.tensor(p)
        real[b, L - len(p):] = True
    eos = adapter.eos_token_ids
    cache = adapter.new_cache()
    out: list[list[int]] = [[] for _ in range(B)]
    rows = list(range(B))             # batch row -> prompt index
    x, mask, past = ids, _prefill_mask(real), 0
    for _ in range(max_new_tokens):
        h = adapter.forward_layers(adapter.embed(x), 0, adapter.num_layers, cache, past,
                                   attention_mask=mask.to(dev))
        past += x.shape[1]
        nxt = adapter.head(h[:, -1]).argmax(-1).cpu()
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
        mask = real[:, None, None, :]  # [B, 1, 1, past + 1]: the new token sees every real key
        x = nxt.unsqueeze(1)
    return out


# --- 2. the teacher-forced pass ----------------------------------------------------------------------

@torch.inference_mode()
def layer_states(adapter: ModelAdapter, prompt: list[int], generated: list[int]) -> torch.Tensor:
    """Hidden states after every decoder layer 1..N at the G positions that predicted the G
    generated tokens: [N, G, hidden]. One pass over prompt + generated[:-1]; the prompt's
    first P-1 tokens only fill the KV cache."""
    P, G = len(prompt), len(generated)
    seq = torch.tensor(prompt + generated[:-1], dtype=torch.long).unsqueeze(0)
    cache = adapter.new_cache()
    if P > 1:
        h = adapter.embed(seq[:, :P - 1])
        adapter.forward_layers(h, 0, adapter.num_layers, cache, 0)
    h = adapter.embed(seq[:, P - 1:])
    positions = torch.arange(P - 1, P - 1 + G, device=h.device).unsqueeze(0)
    cos_sin = adapter.rotary(h, position_ids=positions)
    mask = causal_mask(G, P - 1, h.device)
    states = []
    for layer in adapter.layers:
        h = layer(h, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                  position_embeddings=cos_sin)
        states.append(h[0])
    return torch.stack(states)


@torch.inference_mode()
def exit_traces(adapter: ModelAdapter, states: torch.Tensor, generated: list[int], temperature: float,
                chunk_rows: int = 384, block_rows: int = 16) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """From layer states [N, G, H]: match and beta [N-1, G] for exits 1..N-1, how many positions the
    full model (layer N) itself agrees with the generated token, and each draft's confidence [N-1, G]
    (`draft_confidence`).

    The LM-head matmuls dominate the cost. Many rows per matmul keep them compute bound (each
    call streams the whole vocab x hidden weight), then the softmax / min / sum for beta walks the
    logits a few rows at a time so those passes stay in cache."""
    N, G, H = states.shape
    target = torch.tensor(generated, device=states.device)
    full = adapter.head(states[N - 1]).float()                      # [G, V]
    full_top = full.argmax(-1)
    agree = int((full_top == target).sum())
    p_full = torch.softmax(full / temperature, dim=-1) if temperature > 0 else None
    flat = states[:N - 1].reshape(-1, H)                             # row r: exit r // G + 1, position r % G
    tgt, top_full = target.repeat(N - 1), full_top.repeat(N - 1)
    match = np.zeros((N - 1) * G, dtype=np.int8)
    beta = np.zeros((N - 1) * G, dtype=np.float32)
    conf = np.zeros((N - 1) * G, dtype=np.float32)
    for lo in range(0, flat.shape[0], chunk_rows):
        hi = min(lo + chunk_rows, flat.shape[0])
        logits = adapter.head(flat[lo:hi]).float()                   # [rows, V]
        top = logits.argmax(-1)
        conf[lo:hi] = draft_confidence(logits).cpu().numpy()
        match[lo:hi] = (top == tgt[lo:hi]).cpu().numpy()
        if p_full is None:
            # T = 0: both distributions are one-hot on their argmax (ties aside), so beta is the
            # agreement of the two argmaxes (= the match wherever the full model picked the target).
            beta[lo:hi] = (top == top_full[lo:hi]).float().cpu().numpy()
            continue
        for b in range(lo, hi, block_rows):
            e = min(b + block_rows, hi)
            p_exit = torch.softmax(logits[b - lo:e - lo].div_(temperature), dim=-1)
            torch.minimum(p_exit, p_full[torch.arange(b, e, device=p_full.device) % G], out=p_exit)
            beta[b:e] = p_exit.sum(-1).clamp_(max=1.0).cpu().numpy()
    return match.reshape(N - 1, G), beta.reshape(N - 1, G), agree, conf.reshape(N - 1, G)


# --- the whole phase -------------------------------------------------------------------------------

def batches_by_length(lengths: list[int], max_batch: int, max_tokens: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (less padding), deterministic order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches, cur = [], []
    for i in order:
        if cur and (len(cur) >= max_batch or (len(cur) + 1) * lengths[i] > max_tokens):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def profile_acceptance(adapter: ModelAdapter, prompts: list[Prompt], encoded: list[list[int]],
                       max_new_tokens: int, temperature: float, work_dir: Path | None = None,
                       max_batch: int = 32, max_batch_tokens: int = 8192,
                       on_generate: Callable[[int], None] | None = None,
                       on_prompt: Callable[[], None] | None = None) -> list[PromptResult]:
    """Generate and trace every prompt. With `work_dir`, each finished prompt is stored there
    (atomically) and prompts already there are not redone (--resume)."""
    from ppsd.paths import atomic_write_json

    done: dict[int, PromptResult] = {}
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
        for i, p in enumerate(prompts):
            f = work_dir / f"{_safe(p.prompt_id)}.json"
            if f.exists():
                try:
                    done[i] = PromptResult.from_json(json.loads(f.read_text()))
                except (json.JSONDecodeError, KeyError, ValueError):
                    f.unlink()  # a damaged leftover is simply redone
                    continue
                if on_generate:
                    on_generate(max_new_tokens)
                if on_prompt:
                    on_prompt()
    todo = [i for i in range(len(prompts)) if i not in done]
    for batch in batches_by_length([len(encoded[i]) for i in todo], max_batch, max_batch_tokens):
        idx = [todo[j] for j in batch]
        gens = generate_greedy(adapter, [encoded[i] for i in idx], max_new_tokens, on_step=on_generate)
        if on_generate:  # sequences that stopped early: let the bar catch up
            on_generate(sum(max_new_tokens - len(g) for g in gens))
        for i, gen in zip(idx, gens):
            states = layer_states(adapter, encoded[i], gen)
            match, beta, agree, conf = exit_traces(adapter, states, gen, temperature)
            p = prompts[i]
            res = PromptResult(p.prompt_id, p.category, p.text, encoded[i], gen, match, beta, agree, conf)
            if work_dir is not None:
                atomic_write_json(work_dir / f"{_safe(p.prompt_id)}.json", res.to_json())
            done[i] = res
            if on_prompt:
                on_prompt()
    return [done[i] for i in range(len(prompts))]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def acceptance_table(results: list[PromptResult]):
    """The long table of ppsd/profile/files.py: head, prompt_id, category, exit_layer, position, match,
    beta, confidence."""
    import pandas as pd

    frames = []
    for r in results:
        n_exits, g = r.match.shape
        if g == 0:
            continue
        exits = np.repeat(np.arange(1, n_exits + 1), g)
        positions = np.tile(np.arange(g), n_exits)
        conf = np.full(n_exits * g, np.nan, dtype=np.float32) if r.confidence is None else r.confidence.reshape(-1)
        frames.append(pd.DataFrame({"head": SHARED, "prompt_id": r.prompt_id, "category": r.category,
                                    "exit_layer": exits, "position": positions,
                                    "match": r.match.reshape(-1).astype(int), "beta": r.beta.reshape(-1),
                                    "confidence": conf}))
    if not frames:
        return pd.DataFrame(columns=ACCEPTANCE_COLUMNS + ACCEPTANCE_OPTIONAL)
    return pd.concat(frames, ignore_index=True)
