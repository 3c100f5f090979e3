"""`ppsd heads --exits`: which exit layers, checked against a layer count (torch-free, so `ppsd heads train`
refuses a bad list before torch and the model load)."""

from __future__ import annotations

from ppsd.errors import UserError


def parse_exits(text: str, num_layers: int) -> list[int]:
    """"all" -> 1..N-1; "6,10,15" -> those; ranges "4-8" allowed."""
    if text.strip().lower() == "all":
        return list(range(1, num_layers))
    exits: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                lo, hi = (int(v) for v in part.split("-", 1))
                exits.update(range(lo, hi + 1))
            else:
                exits.add(int(part))
    except ValueError:
        raise UserError(f"--exits {text!r} is not a list of layer numbers", "give e.g. 6,10,15 or 4-8 or all") from None
    bad = sorted(e for e in exits if not 0 < e < num_layers)
    if bad or not exits:
        raise UserError(f"--exits {text!r} names layers outside 1..{num_layers - 1}" if bad else "--exits is empty",
                        f"this model has {num_layers} layers; exits run from 1 to {num_layers - 1}")
    return sorted(exits)
