"""Cached calls into the simulator (sim.api) for the pages.

The planner must answer a control change within half a second: sweeps come from
dashboard/sweeps.py (cached per setting, warmed in the background), tables and single-plan
simulations are cached here by their inputs. Exit layer, draft length and stage count only pick
rows out of a cached sweep.
"""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import sweeps, ui, whatif
from profiler.schema import PROFILE_FILE
from sim.plan import Plan

# The same defaults `ppsd plan` uses, so the Overview's recommendation is the CLI's.
DEFAULT_DEVICES = 4
DEFAULT_GAMMAS = sweeps.GAMMAS
DEFAULT_TOKENS = sweeps.TOKENS


def mtime(path: str) -> float:
    f = Path(path) / PROFILE_FILE
    return f.stat().st_mtime if f.exists() else 0.0


def key(path: str, hop_ms: float | None = None, alpha_scale: float = 1.0, temperature: float = 0.0) -> sweeps.Key:
    return sweeps.Key(path, mtime(path), None if hop_ms is None else float(hop_ms), float(alpha_scale),
                      float(temperature))


@st.cache_data(show_spinner=False, max_entries=256)
def _table(fields: tuple, devices: int) -> tuple[pd.DataFrame, dict, str, pd.DataFrame]:
    from sim import api

    k = sweeps.Key(*fields)
    entry = sweeps.CACHE.get(k, devices)
    results, closed = entry.for_devices(devices)
    best, reason = api.recommend(results)
    best_row = whatif.results_table([best]).iloc[0].to_dict()
    return whatif.results_table(results), best_row, reason, closed.reset_index(drop=True)


def sweep(path: str, devices: int = DEFAULT_DEVICES, hop_ms: float | None = None, alpha_scale: float = 1.0,
          temperature: float = 0.0) -> tuple[pd.DataFrame, dict, str, pd.DataFrame]:
    """(results table, best plan row, one-line reason, closed forms) for one setting of the
    sweep-level controls; with the defaults this is exactly `ppsd plan`'s sweep and choice."""
    k = key(path, hop_ms, alpha_scale, temperature)
    sweeps.CACHE.get(k, devices)  # computes now on a cold cache
    return _table(astuple(k), devices)


def warm(path: str, hop_options, scale_options, temperature_options, hop_ms, alpha_scale, temperature,
         devices: int, measured_hop: float) -> None:
    """Ask the background worker for the settings one control change away from this one, nearest
    first: this setting at the most devices (so the device slider only filters), then each other
    hop, scale and temperature value at the current device count."""
    def norm(h):
        return None if h is None or abs(h - measured_hop) < 1e-9 else h

    def nearest(options, cur):
        return sorted(options, key=lambda o: abs(list(options).index(o) - list(options).index(cur)))

    cur = dict(hop_ms=norm(hop_ms), alpha_scale=alpha_scale, temperature=temperature)
    wanted = [(key(path, **cur), sweeps.MAX_DEVICES)]
    alternatives = [key(path, **{**cur, "temperature": t}) for t in temperature_options]
    alternatives += [key(path, **{**cur, "alpha_scale": s}) for s in nearest(scale_options, alpha_scale)]
    alternatives += [key(path, **{**cur, "hop_ms": norm(h)}) for h in nearest(hop_options, hop_ms)]
    wanted += [(k, devices) for k in dict.fromkeys(alternatives)]
    sweeps.CACHE.warm(wanted)


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
