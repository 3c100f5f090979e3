"""One home per decoding scheme, and the registry that dispatches on `Mode`.

Adding a scheme: write its module (a `Scheme` subclass, see base.py), add a member to `Mode`, and
add one line to `SCHEMES` below.
"""

from __future__ import annotations

import numpy as np

from ppsd.modes import Mode
from sim.schemes.ar import AR
from sim.schemes.base import RunStats, Scheme
from sim.schemes.eesd import EESD
from sim.schemes.hf import HFAR, HFAssisted
from sim.schemes.ppsd import PPSD

SCHEMES: dict[Mode, Scheme] = {
    Mode.AR: AR(),
    Mode.EESD: EESD(),
    Mode.PPSD: PPSD(),
}


def scheme(mode) -> Scheme:
    """The scheme of a mode (a `Mode` or its name)."""
    return SCHEMES[Mode.parse(mode)]


# Plans another runtime decodes (Plan.runtime): transformers' generate (sim/schemes/hf.py)
RUNTIME_SCHEMES: dict[tuple[str, Mode], Scheme] = {
    ("hf", Mode.AR): HFAR(),
    ("hf", Mode.EESD): HFAssisted(),
}


def runtime_decodes(runtime: str, mode) -> bool:
    """Whether `runtime` decodes plans of `mode` (ppsd's own decodes every scheme; another runtime the
    modes it has a scheme for in RUNTIME_SCHEMES)."""
    return runtime == "ppsd" or (runtime, Mode.parse(mode)) in RUNTIME_SCHEMES


def scheme_for(plan) -> Scheme:
    """The scheme that decodes `plan`: its runtime's when that is not ppsd's own, else its mode's."""
    runtime = getattr(plan, "runtime", "ppsd")
    return SCHEMES[plan.mode] if runtime == "ppsd" else RUNTIME_SCHEMES[(runtime, plan.mode)]


def speedup_curve(profile, plan, alphas, context: float) -> np.ndarray:
    """The plan's speedup over AR at each acceptance in `alphas`, by the closed forms (i.i.d.
    acceptance, every cost at one context): AR's time per token over the plan's. ValueError where the
    plan has no closed form (stages sharing a device)."""
    runtime = getattr(plan, "runtime", "ppsd")
    ar = RUNTIME_SCHEMES.get((runtime, Mode.AR), SCHEMES[Mode.AR])
    t_ar = ar.closed_form(profile, plan, 0.0, context)
    return t_ar / np.asarray(scheme_for(plan).closed_forms(profile, plan, alphas, context), dtype=float)


__all__ = ["RUNTIME_SCHEMES", "SCHEMES", "RunStats", "Scheme", "runtime_decodes", "scheme", "scheme_for",
           "speedup_curve"]
