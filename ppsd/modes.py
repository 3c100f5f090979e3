"""The decoding schemes by name: one enum instead of bare strings.

`Mode` is a `StrEnum`, so a mode reads and writes as its plain name in JSON, CSV and on the command
line ("ar", "eesd", "ppsd"), and `Mode(text)` parses one. What differs between the modes is asked
of their schemes (`plan.scheme`, `sim.schemes.scheme(mode)`), not decided by branching on the member;
where a member is named, it is the member, never a string literal.
"""

from __future__ import annotations

from enum import StrEnum

from ppsd.errors import UserError


class Mode(StrEnum):
    AR = "ar"      # one token per full pass
    EESD = "eesd"  # draft γ tokens with the exit head, then verify them in one pass
    PPSD = "ppsd"  # pipeline: stage 1 ends at the exit layer and drafts while later stages verify

    @property
    def speculative(self) -> bool:
        return self is not Mode.AR

    @classmethod
    def parse(cls, text) -> Mode:
        """Mode from its name (any case); a UserError naming the valid ones otherwise."""
        if isinstance(text, Mode):
            return text
        try:
            return cls(str(text).lower())
        except ValueError:
            raise UserError(f"unknown mode {text!r}", f"use one of: {', '.join(MODES)}") from None


MODES: tuple[str, ...] = tuple(m.value for m in Mode)
LAUNCHES: tuple[str, ...] = ("local", "torchrun")  # Plan.launch: how the PPSD stage processes are started
