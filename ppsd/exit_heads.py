"""Exit-head names, defined once (torch-free, no project imports).

A drafting exit head is named
  "shared"     the model's own final norm + LM head applied at the exit layer (LayerSkip style)
  "trained"    a self-distilled adapter before the frozen norm + LM head (`ppsd heads train`)
  "vocab<V>"   a trained head that drafts over the V most frequent tokens only (e.g. "vocab4096")
"""

from __future__ import annotations

SHARED = "shared"
TRAINED = "trained"
VOCAB_PREFIX = "vocab"


def vocab_name(size: int) -> str:
    """The name of a reduced-vocabulary head over `size` tokens."""
    return f"{VOCAB_PREFIX}{int(size)}"


def vocab_size(name: str) -> int | None:
    """V of a "vocab<V>" head name (V > 0), else None."""
    if name.startswith(VOCAB_PREFIX) and name[len(VOCAB_PREFIX):].isdigit():
        v = int(name[len(VOCAB_PREFIX):])
        return v if v > 0 else None
    return None


def order_key(name: str) -> tuple:
    """Sort key: shared first, then trained, then vocab<V> by V, then anything else by name."""
    if name == SHARED:
        return (0, 0, name)
    if name == TRAINED:
        return (1, 0, name)
    v = vocab_size(name)
    if v is not None:
        return (2, v, name)
    return (3, 0, name)


def label(name: str) -> str:
    """How a head is shown to a user: the shared head is the "naive" early exit."""
    return "naive (shared)" if name == SHARED else name


def suffix(name: str, sep: str = "-") -> str:
    """"" for the shared head (it goes unnamed in labels and file names), else sep + name."""
    return "" if name == SHARED else f"{sep}{name}"
