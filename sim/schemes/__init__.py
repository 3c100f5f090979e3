"""One home per decoding scheme, and the registry that dispatches on `Mode`.

Adding a scheme: write its module (a `Scheme` subclass, see base.py), add a member to `Mode`, and
add one line to `SCHEMES` below.
"""

from __future__ import annotations

from sim.modes import Mode
from sim.schemes.ar import AR
from sim.schemes.base import RunStats, Scheme
from sim.schemes.eesd import EESD
from sim.schemes.ppsd import PPSD

SCHEMES: dict[Mode, Scheme] = {
    Mode.AR: AR(),
    Mode.EESD: EESD(),
    Mode.PPSD: PPSD(),
}


def scheme(mode) -> Scheme:
    """The scheme of a mode (a `Mode` or its name)."""
    return SCHEMES[Mode.parse(mode)]


__all__ = ["SCHEMES", "RunStats", "Scheme", "scheme"]
