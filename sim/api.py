"""The simulator's public surface (torch-free), for the runtime, the benches and the dashboard.

Why this module stays: it names the few entry points other parts may rely on, so sim/'s layout
(model/, planner/, schemes/) can change without touching them. It defines nothing; each name's
documentation is at its home:
  resolve_plan  sim/planner/resolve.py   fill what a plan leaves open (the same for prediction and measurement)
  simulate      sim/run.py               one plan on a profile: a Result ("event" SimPy model or "fast" exact replay)
  sweep         sim/run.py               every plan of a `SweepSpec`, best first
  recommend     sim/planner/verdict.py   the plan to run and its one-line verdict
  closed_form   sim/planner/closed_forms.py  a plan priced by its scheme's closed form (the oracle)
Code inside sim/ imports the homes, never this module.
"""

from __future__ import annotations

from sim.planner.closed_forms import closed_form
from sim.planner.resolve import resolve_plan
from sim.planner.sweep_spec import SweepSpec
from sim.planner.verdict import recommend
from sim.run import ACCEPTANCE_SOURCES, ENGINES, simulate, sweep

__all__ = ["ACCEPTANCE_SOURCES", "ENGINES", "SweepSpec", "closed_form", "recommend", "resolve_plan", "simulate",
           "sweep"]
