"""Cached calls into the simulator (sim.api) for the pages.

The planner must answer a control change within half a second, so everything a slider can ask
for is cached by its inputs: the sweep (by profile file, devices, hop, acceptance scale,
temperature), the closed forms, and single-plan simulations. Exit layer, draft length and stage
count only pick rows out of a cached sweep.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import ui, whatif
from profiler.schema import PROFILE_FILE
from sim.plan import Plan

# The same defaults `ppsd plan` uses, so the Overview's recommendation is the CLI's.
DEFAULT_DEVICES = 4
DEFAULT_GAMMAS = tuple(range(1, 9))
DEFAULT_TOKENS = 2000


def mtime(path: str) -> float:
    f = Path(path) / PROFILE_FILE
    return f.stat().st_mtime if f.exists() else 0.0


@st.cache_data(show_spinner=False, max_entries=256)
def sweep(path: str, stamp: float, devices: int = DEFAULT_DEVICES, hop_ms: float | None = None,
          alpha_scale: float = 1.0, temperature: float = 0.0, tokens: int = DEFAULT_TOKENS,
          gammas: tuple[int, ...] = DEFAULT_GAMMAS) -> tuple[pd.DataFrame, dict, str]:
    """(results table, best plan row as a dict, one-line reason) for one setting of the
    simulator-level controls. `stamp` (profile.json's mtime) is part of the cache key, so a
    rewritten profile is swept again."""
    from sim import api

    profile = ui.load(path)
    results = api.sweep(profile, devices=devices, gammas=range(min(gammas), max(gammas) + 1), hop_ms=hop_ms,
                        alpha_scale=alpha_scale, temperature=temperature, tokens=tokens)
    best, reason = api.recommend(results)
    table = whatif.results_table(results)
    best_row = whatif.results_table([best]).iloc[0].to_dict()
    best_row["tokens"] = best.tokens
    return table, best_row, reason


def sweep_key(path: str, **kw):
    return sweep(path, mtime(path), **kw)


@st.cache_data(show_spinner=False, max_entries=256)
def closed_forms(path: str, stamp: float, devices: int, hop_ms: float, alpha_scale: float,
                 temperature: float) -> pd.DataFrame:
    profile = ui.load(path)
    alpha = whatif.alphas(profile, alpha_scale, temperature)
    return whatif.closed_forms(profile, alpha, DEFAULT_GAMMAS, range(2, max(devices, 2) + 1), hop_ms)


@st.cache_data(show_spinner=False, max_entries=512)
def simulate_one(path: str, stamp: float, plan_dict: dict, alpha_scale: float = 1.0, temperature: float = 0.0,
                 tokens: int = DEFAULT_TOKENS, timeline: bool = False, engine: str = "fast") -> dict:
    """One plan through the simulator, as Result.to_json_dict(timeline=...) (cacheable)."""
    from sim import api

    profile = ui.load(path)
    plan = Plan.from_dict(plan_dict)
    kw: dict = {}
    if alpha_scale != 1.0:
        # a scaled acceptance is a what-if: draw Bernoulli(α·scale) instead of replaying the trace
        alpha = whatif.alphas(profile, alpha_scale, temperature)
        kw = {"acceptance": "bernoulli", "alpha": alpha.get(plan.exit_layer, 0.0) if plan.exit_layer else 0.0}
    result = api.simulate(profile, plan, tokens=tokens, temperature=temperature, engine=engine, timeline=timeline,
                          **kw)
    return result.to_json_dict(timeline=timeline)


def resolve(path: str, plan: Plan) -> Plan:
    from sim import api

    return api.resolve_plan(plan, ui.load(path))
