"""Which exit head drafts: the shared one (final norm + LM head), a trained adapter before it, or a
reduced-vocabulary head (`--heads DIR --exit-head trained|vocab<V>`).

Only the draft changes; the verifier (the full model) decides every token as before, so greedy
output still equals AR's. A reduced-vocabulary draft is a full-vocabulary id from the subset; when
sampling, its q is zero outside the subset, which the acceptance rule handles exactly.
"""

from __future__ import annotations

import torch

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED, TRAINED, parse_head_name, resolve_head_name, vocab_size  # noqa: F401


class Drafter:
    """Layer-E state -> (draft token, its distribution q or None when greedy)."""

    def __init__(self, model, exit_layer: int, name: str = SHARED, heads=None):
        self.model, self.exit_layer, self.name = model, exit_layer, name
        self.heads = heads
        self.vocab = None
        size = parse_head_name(name)
        if size is not None:
            self.vocab = heads.vocab_head(size)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """[..., V] (or [..., V_subset] for a reduced vocabulary)."""
        if self.vocab is not None:
            return self.vocab.logits(h, self.exit_layer)
        if self.heads is not None:
            return self.heads.logits(h, self.exit_layer)
        return self.model.head(h)

    def choose(self, sampler, h: torch.Tensor):
        """h [1, 1, H] -> (token, q) with the sampler's rule (greedy argmax or a seeded draw)."""
        return self.choose_logits(sampler, self.logits(h)[0, -1])

    def choose_logits(self, sampler, logits: torch.Tensor):
        """One position's logits from `logits()` -> (token id in the full vocabulary, q or None)."""
        if self.vocab is None:
            return sampler.choose(logits)
        subset = self.vocab.subset
        if sampler.greedy:
            return int(subset[torch.argmax(logits)]), None
        p = sampler.probs(logits)
        i = int(torch.multinomial(p, 1, generator=sampler.generator))
        return int(subset[i]), self._spread(p)

    def probs(self, sampler, h: torch.Tensor) -> torch.Tensor:
        """The draft distribution q over the full vocabulary (the PPSD verifier recomputes it at a
        rejection, for the residual)."""
        p = sampler.probs(self.logits(h)[0, -1])
        return p if self.vocab is None else self._spread(p)

    def _spread(self, p: torch.Tensor) -> torch.Tensor:
        q = torch.zeros(self.model.vocab_size, dtype=p.dtype, device=p.device)
        q[self.vocab.subset] = p
        return q


def make_drafter(model, exit_layer: int | None, heads_dir: str | None = None, name: str = SHARED) -> Drafter | None:
    """The drafter for a plan; loads only exit `exit_layer`'s adapter (UserError for heads trained
    for another model or layer count, or without that exit). None when there is no exit layer.
    An emulated model (runtime/emulate.py) hands out its own drafter: a wait of the head's profiled time."""
    emulated = getattr(model, "emulated_drafter", None)
    if emulated is not None:
        return None if exit_layer is None else emulated(exit_layer, name)
    if heads_dir and name != SHARED:
        from runtime.heads.store import load_heads

        # in the model's dtype: a bf16 model drafts with a bf16 head, as it does with the shared one
        # (fp32 heads beside a bf16 model would cost more and bias the head comparison); fp32 on fp32
        heads = load_heads(heads_dir, model, exits=[] if exit_layer is None else [exit_layer], dtype=model.dtype)
        return None if exit_layer is None else Drafter(model, exit_layer, name, heads)
    if heads_dir:  # shared drafting, but the folder is still checked: a wrong folder is a mistake
        from runtime.heads.store import check_compatible, read_meta

        check_compatible(read_meta(heads_dir), model, heads_dir)
    return None if exit_layer is None else Drafter(model, exit_layer)
