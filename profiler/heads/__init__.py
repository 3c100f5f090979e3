"""Training and evaluating exit heads: self-distilled adapters before the frozen final norm + LM head,
and a reduced-vocabulary variant. What a head is and how a heads folder is stored is the runtime's
(`runtime/heads/`: it drafts with them); this package trains, evaluates and times them.

Torch-free at import time (ppsd.cli imports `profiler.heads.cli`); the API below loads lazily:
  load_heads(dir, adapter, exits=None, dtype=None) -> ExitHeads  runtime/heads/store.py (UserError on a
                                                        mismatch; dtype: fp32 by default, the model's for drafting)
  ExitHeads.logits(hidden, E), .vocab_head(V)           runtime/heads/store.py / vocab.py
  train_heads(adapter, TrainConfig(...), out)           train.py
  evaluate_heads(adapter, heads, prompts, ...)          evaluate.py -> acceptance rows + latency
  heldout_prompts(heads)                                evaluate.py
"""

from __future__ import annotations

_EXPORTS = {
    "ExitHeads": "runtime.heads.store", "load_heads": "runtime.heads.store", "read_meta": "runtime.heads.store",
    "default_heads_dir": "runtime.heads.store", "VocabHead": "runtime.heads.vocab",
    "TrainConfig": "profiler.heads.train", "train_heads": "profiler.heads.train", "fit_exit": "profiler.heads.train",
    "evaluate_heads": "profiler.heads.evaluate", "heldout_prompts": "profiler.heads.evaluate",
    "measure_latency": "profiler.heads.evaluate", "split_prompts": "profiler.heads.splits",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
