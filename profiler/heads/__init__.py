"""Trained exit heads (issue 6): self-distilled adapters before the frozen final norm + LM head,
and a reduced-vocabulary variant.

Torch-free at import time (ppsd.cli imports `profiler.heads.cli`); the API below loads lazily:
  load_heads(dir, adapter, exits=None, dtype=None) -> ExitHeads  store.py (UserError on a mismatch;
                                                        dtype: fp32 by default, the model's for drafting)
  ExitHeads.logits(hidden, E), .vocab_head(V)           store.py / vocab.py
  train_heads(adapter, TrainConfig(...), out)           train.py
  evaluate_heads(adapter, heads, prompts, ...)          evaluate.py -> acceptance rows + latency
  heldout_prompts(heads)                                evaluate.py
"""

from __future__ import annotations

_EXPORTS = {
    "ExitHeads": "profiler.heads.store", "load_heads": "profiler.heads.store", "read_meta": "profiler.heads.store",
    "default_heads_dir": "profiler.heads.store", "VocabHead": "profiler.heads.vocab",
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
