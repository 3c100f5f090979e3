"""Reduced-vocabulary exit head: draft only among the V most frequent tokens.

On a small model the LM head is a large share of a decode step (SmolLM2-135M: 576 x 49152, about
as costly as 4-5 decoder layers), and a drafting exit pays it on every token. Keeping only the V
rows of the tokens the model itself generates most often cuts that cost by vocab/V. Drafts are
mapped back to full-vocabulary ids; when the full model's token lies outside the subset the draft
cannot equal it, so the position counts as a rejection and greedy output stays lossless (the
verifier always decides).
"""

from __future__ import annotations

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
