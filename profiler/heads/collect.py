"""Collect the training / evaluation signal for exit heads: the model's own greedy generations.

For every generated token we keep the hidden state that produced it at each requested exit layer
(the draft's input), the last layer's hidden state before the final norm (from which the full
model's distribution is recomputed on demand, so no [tokens x vocab] logits ever sit in memory),
and the token the full model chose. Records are streamed to safetensors shards, one per batch of
prompts, so a long collection survives an interruption and only one batch is ever held in memory.

Prompts are decoded in small batches with left padding: rotary attention depends only on relative
positions, so a left-padded sequence whose pad keys are masked out computes the same hidden states
as the sequence alone (up to float summation order). Batching is what makes collection affordable
on a CPU: one decode step is memory bound, so 8-16 sequences cost little more than one.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ppsd.paths import atomic_write_json

SHARD_META = "collect.json"


@dataclass
class Records:
    """Per-token records of a collection (all tensors share the first dimension)."""

    exits: dict[int, torch.Tensor]     # exit layer -> [n, hidden] hidden state after that layer
    final: torch.Tensor                # [n, hidden] last layer's output before the final norm
    target: torch.Tensor               # [n] the full model's greedy token (int64)
    position: torch.Tensor             # [n] index of the generated token within its generation
    prompt_index: torch.Tensor         # [n] index into `prompt_ids` / `categories`
    prompt_ids: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.target.shape[0])


def _prefill_mask(valid: torch.Tensor) -> torch.Tensor:
    """[B, 1, L, L] boolean mask for a left-padded prefill: causal, pad keys hidden. A pad query
    may see itself, so its row is never all-False (SDPA would return NaN there, and NaN values
    leak through zero attention weights)."""
    L = valid.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    mask = causal.unsqueeze(0) & valid.unsqueeze(1)
    mask |= torch.eye(L, dtype=torch.bool).unsqueeze(0)
    return mask.unsqueeze(1)


def _segments(exits: list[int], num_layers: int) -> list[tuple[int, int]]:
    cuts = sorted(set(e for e in exits if 0 < e < num_layers)) + [num_layers]
    out, start = [], 0
    for c in cuts:
        out.append((start, c))
        start = c
    return out


@torch.inference_mode()
def generate_batch(adapter, prompt_tokens: list[list[int]], exits: list[int], max_new_tokens: int,
                   on_token: Callable[[int], None] | None = None) -> list[dict]:
    """Greedy-decode a batch; return per prompt {tokens, exits: {E: [n, H]}, final: [n, H]}."""
    dev = adapter.device
    B = len(prompt_tokens)
    L = max(len(t) for t in prompt_tokens)
    ids = torch.zeros(B, L, dtype=torch.long)
    valid = torch.zeros(B, L, dtype=torch.bool)
    for b, toks in enumerate(prompt_tokens):
        ids[b, L - len(toks):] = torch.tensor(toks)
        valid[b, L - len(toks):] = True
    segs = _segments(exits, adapter.num_layers)
    eos = adapter.eos_token_ids
    cache = adapter.new_cache()
    out = [{"tokens": [], "exits": {e: [] for e in exits}, "final": []} for _ in range(B)]
    alive = list(range(B))          # batch row -> prompt index
    x, mask, pos = ids, _prefill_mask(valid).to(dev), 0
    for _ in range(max_new_tokens):
        h = adapter.embed(x.to(dev))
        captured = {}
        for start, end in segs:
            h = adapter.forward_layers(h, start, end, cache, pos, attention_mask=mask)
            captured[end] = h[:, -1]
        pos += x.shape[1]
        final = captured[adapter.num_layers]
        nxt = adapter.lm_head(adapter.norm(final)).argmax(-1)
        # Records go to the CPU (they are saved to disk): one copy per tensor and step, not one per
        # row (on a GPU each `.cpu()` / `int()` is a synchronising transfer). Same values either way.
        toks = nxt.tolist()
        final_cpu = final.float().cpu()
        captured_cpu = {e: captured[e].float().cpu() for e in exits}
        keep = []
        for row, b in enumerate(alive):
            tok = int(toks[row])
            rec = out[b]
            rec["tokens"].append(tok)
            rec["final"].append(final_cpu[row])
            for e in exits:
                rec["exits"][e].append(captured_cpu[e][row])
            if tok not in eos:
                keep.append(row)
        if on_token:
            on_token(len(alive))
        if not keep:
            break
        if len(keep) < len(alive):
            # Drop finished sequences from the batch (and their cache rows): no wasted work.
            k = torch.tensor(keep, device=dev)
            for i in list(cache.keys):
                cache.keys[i] = cache.keys[i].index_select(0, k)
                cache.values[i] = cache.values[i].index_select(0, k)
            valid = valid.index_select(0, k.cpu())
            nxt = nxt.index_select(0, k)
            alive = [alive[r] for r in keep]
        valid = torch.cat([valid, torch.ones(len(alive), 1, dtype=torch.bool)], dim=1)
        mask = valid.unsqueeze(1).unsqueeze(1).to(dev)      # [B, 1, 1, past + 1]
        x = nxt.unsqueeze(1)
    for rec in out:
        rec["final"] = torch.stack(rec["final"])
        rec["exits"] = {e: torch.stack(v) for e, v in rec["exits"].items()}
    return out


def truncate_middle(tokens: list[int], limit: int | None) -> list[int]:
    """Keep the first and last limit/2 tokens of a long prompt: the chat template's header and the
    assistant turn marker survive, and prefill cost stays bounded (long Spec-Bench summarisation and
    RAG prompts would otherwise dominate collection time on a CPU)."""
    if not limit or len(tokens) <= limit:
        return tokens
    head = limit // 2
    return tokens[:head] + tokens[len(tokens) - (limit - head):]


def collect(adapter, prompts, exits: list[int], max_new_tokens: int, work_dir: Path,
            batch_size: int = 8, max_prompt_tokens: int | None = None, progress=None,
            load: bool = True) -> Records | None:
    """Generate on `prompts` and stream records into `work_dir` (resumable by batch); return them
    (all exits in memory) when `load`, else None (read them back exit by exit with load_records).

    `progress(done_tokens_estimate, total)` is called as tokens are produced."""
    from safetensors.torch import save_file

    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    encoded = [truncate_middle(adapter.encode_prompt(p.text), max_prompt_tokens) for p in prompts]
    # Similar lengths in one batch waste less on padding; the order is deterministic.
    order = sorted(range(len(prompts)), key=lambda i: (len(encoded[i]), i))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    total = len(prompts) * max_new_tokens
    done = 0
    for bi, batch in enumerate(batches):
        shard = work_dir / f"shard{bi:04d}.safetensors"
        if shard.exists():
            done += len(batch) * max_new_tokens
            if progress:
                progress(done, total)
            continue

        def tick(n):
            nonlocal done
            done += n
            if progress:
                progress(done, total)

        t0 = time.perf_counter()
        recs = generate_batch(adapter, [encoded[i] for i in batch], exits, max_new_tokens, on_token=tick)
        # Generation may stop early at EOS; the bar catches up at the end of the batch.
        done = sum(len(b) for b in batches[:bi + 1]) * max_new_tokens
        if progress:
            progress(done, total)
        tensors = {"target": torch.tensor([t for r in recs for t in r["tokens"]], dtype=torch.long),
                   "position": torch.tensor([p for r in recs for p in range(len(r["tokens"]))], dtype=torch.long),
                   "prompt_index": torch.tensor([i for i, r in zip(batch, recs) for _ in r["tokens"]],
                                                dtype=torch.long),
                   "final": torch.cat([r["final"] for r in recs]).contiguous()}
        for e in exits:
            tensors[f"exit{e}"] = torch.cat([r["exits"][e] for r in recs]).contiguous()
        tmp = shard.with_suffix(".tmp")
        save_file(tensors, str(tmp), metadata={"seconds": f"{time.perf_counter() - t0:.3f}"})
        tmp.replace(shard)
    atomic_write_json(work_dir / SHARD_META, {"prompts": len(prompts), "batches": len(batches),
                                              "exits": exits, "max_new_tokens": max_new_tokens})
    return load_records(work_dir, prompts, exits) if load else None


def load_records(work_dir: Path, prompts, exits: list[int]) -> Records:
    from safetensors import safe_open

    parts: dict[str, list[torch.Tensor]] = {}
    names = ["target", "position", "prompt_index", "final"] + [f"exit{e}" for e in exits]
    for shard in sorted(Path(work_dir).glob("shard*.safetensors")):
        with safe_open(str(shard), framework="pt") as fh:
            for n in names:
                parts.setdefault(n, []).append(fh.get_tensor(n))
    cat = {n: torch.cat(v) for n, v in parts.items()}
    return Records(exits={e: cat[f"exit{e}"] for e in exits}, final=cat["final"], target=cat["target"],
                   position=cat["position"], prompt_index=cat["prompt_index"],
                   prompt_ids=[p.prompt_id for p in prompts], categories=[p.category for p in prompts])


def collection_key(model_id: str, prompts, max_new_tokens: int, exits: list[int], extra=None) -> str:
    import hashlib

    blob = json.dumps([model_id, [p.prompt_id for p in prompts], [p.text for p in prompts],
                       max_new_tokens, sorted(exits), extra])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
