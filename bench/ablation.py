"""Each multiplicative PPSD correction term removed in turn, over every committed validation folder.

  .venv/bin/python -m bench.ablation [--markdown]

Re-prices every folder with an `expected.json` (validation/reprice.py) once as the code stands and once
per term with that term taken out (`ABLATIONS`: of the predicting profile, or of the code that prices
it), and prints each folder's MAPE and signed mean error: the table in docs/design-notes.md ("Ablating
the PPSD correction terms"). A term is a candidate for removal only where taking it out worsens no
folder's MAPE by more than `HARMLESS_POINTS`. Nothing is measured: it is simulation, a minute or two.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from unittest import mock

HARMLESS_POINTS = 0.5


class Ablated:
    """A profile with some of its accessors replaced (the rest read through), so a term can be taken
    out without editing the profile's code or files."""

    def __init__(self, base, **overrides):
        self._base, self._over = base, overrides

    def __getattr__(self, name):
        over = self.__dict__.get("_over", {})
        return over[name] if name in over else getattr(self.__dict__["_base"], name)


def _flat_corun_shape(p):
    """Past two processes the co-run table's shape no longer scales the pipeline probe's figure."""
    two = p.corun_slowdown(2)
    return Ablated(p, corun_slowdown=lambda n: 1.0 if n <= 1 else two)


def _uncalibrated(p):
    """The main tables as timed, piece by piece (the uniform whole-step calibration undone)."""
    c = float(p.piece_calibration)
    if c == 1.0:
        return p

    @dataclass
    class Scale:
        layers: float = 1.0 / c
        head: float = 1.0 / c
        embedding: float = 1.0 / c
        exit_heads: dict = None
        corun: float = 1.0

    s = Scale()
    s.exit_heads = {}
    return p.retimed(s)


def _no_lock_step():
    """The lock step's wait at 1 (`stage_costs.lockstep_factor`)."""
    return mock.patch("sim.schemes.ppsd.stage_costs.lockstep_factor", lambda means, cv: 1.0)


def _no_sigma():
    """The restart race without noise: every PPSD plan's `jitter_cv` at 0 (the lock step keeps its jitter)."""
    from sim.schemes import ppsd

    priced = ppsd.ppsd_costs
    return mock.patch("sim.schemes.ppsd.ppsd_costs", lambda *a, **k: replace(priced(*a, **k), jitter_cv=0.0))


@dataclass(frozen=True)
class Ablation:
    """One term taken out: an edit of the predicting profile, or a patch of the code that prices it."""

    hook: Callable | None = None
    patch: Callable | None = None


ABLATIONS: dict[str, Ablation] = {
    "co-run slowdown (all of it)": Ablation(lambda p: Ablated(p, corun_slowdown=lambda n: 1.0)),
    "co-run table's shape past 2 processes": Ablation(_flat_corun_shape),
    "lock-step factor": Ablation(patch=_no_lock_step),
    "waiting-last-stage factor": Ablation(lambda p: Ablated(p, waiting_last_stage_slowdown=lambda: None)),
    "restart-race σ": Ablation(patch=_no_sigma),
    "piece calibration": Ablation(_uncalibrated),
}


def run(markdown: bool = False) -> list[tuple[str, dict]]:
    """[(term or "today's code", {folder: Repriced})], printed as a table."""
    from validation.reprice import Expected, committed, reprice

    exps = [Expected.load(p) for p in committed()]
    table = [("today's code", {e.folder: reprice(e) for e in exps})]
    for name, ab in ABLATIONS.items():
        with ab.patch() if ab.patch else contextlib.nullcontext():
            table.append((name, {e.folder: reprice(e, hooks=ab.hook) for e in exps}))
        print(f"priced without {name}", file=sys.stderr)
    _print(table, markdown)
    return table


def _short(folder) -> str:
    from ppsd.paths import PROJECT_ROOT

    parts = [x for x in folder.relative_to(PROJECT_ROOT / "examples").parts if not x.startswith("validation")]
    return "/".join(parts).replace("smollm2-135m-", "").replace("-amd-epyc", "")


def _print(table, markdown: bool) -> None:
    folders = list(table[0][1])
    base = table[0][1]
    if markdown:
        print("| term removed | " + " | ".join(_short(f) for f in folders) + " | worst change |")
        print("|---" * (len(folders) + 2) + "|")
    for name, got in table:
        cells, worst = [], 0.0
        for f in folders:
            r = got[f]
            delta = r.mape_pct - base[f].mape_pct
            worst = max(worst, delta)
            cells.append(f"{r.mape_pct:.2f} ({r.signed_mean_pct:+.2f})" + ("" if name == "today's code" or abs(delta) < 0.005
                                                                           else f" {delta:+.2f}"))
        verdict = "" if name == "today's code" else (f"{worst:+.2f}" + (" harmless" if worst <= HARMLESS_POINTS else ""))
        if markdown:
            print(f"| {name} | " + " | ".join(cells) + f" | {verdict} |")
        else:
            print(name, "|", " | ".join(cells), "|", verdict)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args(argv)
    run(args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
