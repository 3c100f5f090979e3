"""Exit-head names, defined once (torch-free; UserError is its one project import).

A drafting exit head is named
  "shared"     the model's own final norm + LM head applied at the exit layer (LayerSkip style)
  "trained"    a self-distilled adapter before the frozen norm + LM head (`ppsd heads train`)
  "vocab<V>"   a trained head that drafts over the V most frequent tokens only (e.g. "vocab4096")
"""

from __future__ import annotations

from ppsd.errors import UserError

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


def parse_head_name(name: str) -> int | None:
    """None for shared / trained, V for vocab<V>; UserError for anything else."""
    if name in (SHARED, TRAINED):
        return None
    size = vocab_size(name)
    if size is not None:
        return size
    raise UserError(f"unknown exit head {name!r}", "use --exit-head shared, trained or vocab<V> (e.g. vocab4096)")


def resolve_head_name(heads_dir: str | None, name: str | None) -> str:
    """The head a run drafts with: --exit-head, else trained when --heads is given, else shared."""
    name = name or (TRAINED if heads_dir else SHARED)
    parse_head_name(name)
    if name != SHARED and not heads_dir:
        raise UserError(f"--exit-head {name} needs the head folder", "add --heads DIR (from `ppsd heads train`)")
    return name
