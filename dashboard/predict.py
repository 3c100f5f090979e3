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


def key(path: str, hop_ms: float | None = None, alpha_scale: float = 1.0, temperature: float = 0.0,
        exit_head: str = "shared") -> sweeps.Key:
    return sweeps.Key(path, mtime(path), None if hop_ms is None else float(hop_ms), float(alpha_scale),
                      float(temperature), sweeps.TOKENS, exit_head)


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
          temperature: float = 0.0, exit_head: str = "shared") -> tuple[pd.DataFrame, dict, str, pd.DataFrame]:
    """(results table, best plan row, one-line reason, closed forms) for one setting of the
    sweep-level controls; with the defaults this is exactly `ppsd plan`'s sweep and choice."""
    k = key(path, hop_ms, alpha_scale, temperature, exit_head)
    sweeps.CACHE.get(k, devices)  # computes now on a cold cache
    return _table(astuple(k), devices)


@st.cache_data(show_spinner=False, max_entries=256)
def _preview(fields: tuple, devices: int) -> tuple[pd.DataFrame, dict, str, pd.DataFrame]:
    plans, closed = sweeps.preview(sweeps.Key(*fields), devices)
    best = whatif.best_row(plans)
    reason = (f"closed-form preview (i.i.d. acceptance at the smallest context): {best['plan'].split(' [')[0]} at "
              f"{best['speedup']:.2f}× AR; the trace-driven simulation of this setting follows in a moment")
    return plans, best, reason, closed


def plans(path: str, devices: int = DEFAULT_DEVICES, hop_ms: float | None = None, alpha_scale: float = 1.0,
          temperature: float = 0.0, exit_head: str = "shared") -> tuple[pd.DataFrame, dict, str, pd.DataFrame, bool]:
    """Like `sweep`, plus a flag: when this setting has not been simulated yet, answer at once with
    the closed forms (flag True) and let the background worker run the exact sweep (the caller
    asks for it first in `warm` and reruns when `ready`). A cold sweep takes ~0.3 s here, the
    closed forms ~20 ms, and the page must answer within 0.5 s."""
    k = key(path, hop_ms, alpha_scale, temperature, exit_head)
    if sweeps.CACHE.cached(k, devices) is None and sweeps.CACHE.failures <= 5:
        pv = _preview(astuple(k), devices)
        # no speculative plan to preview (no acceptance for this head): the exact path says why
        if (pv[0]["scheme"] != "ar").any():
            return (*pv, True)
    return (*_table(astuple(k), devices), False)


def ready(path: str, devices: int, hop_ms: float | None, alpha_scale: float, temperature: float,
          exit_head: str = "shared") -> bool:
    return sweeps.CACHE.cached(key(path, hop_ms, alpha_scale, temperature, exit_head), devices) is not None


def sweep_heads(path: str, heads: list[str], devices: int = DEFAULT_DEVICES) -> dict:
    """{head: sweep(...)} at `ppsd plan`'s defaults for each head (exact, cached)."""
    return {h: sweep(path, devices, exit_head=h) for h in heads}


def best_over_heads(by_head: dict) -> tuple[str, dict, str]:
    """(head, best row, reason) of the fastest plan over all heads, as `ppsd plan` merges them:
    AR (shared head's reason) when no head's best plan beats it."""
    h = max(by_head, key=lambda name: by_head[name][1]["speedup"] if by_head[name][1]["scheme"] != "ar" else 0.0)
    table, best, reason, _ = by_head[h]
    if best["scheme"] == "ar":
        h = next(iter(by_head))
        _, best, reason, _ = by_head[h]
    return h, best, reason


def warm(path: str, hop_options, scale_options, temperature_options, hop_ms, alpha_scale, temperature,
         devices: int, measured_hop: float, exit_head: str = "shared", heads=()) -> None:
    """Ask the background worker for this setting first (when only its preview is shown), then the
    settings one control change away, nearest first: this setting at the most devices (so the
    device slider only filters), each other head, and each other hop, scale and temperature."""
    def norm(h):
        return None if h is None or abs(h - measured_hop) < 1e-9 else h

    def nearest(options, cur):
        return sorted(options, key=lambda o: abs(list(options).index(o) - list(options).index(cur)))

    cur = dict(hop_ms=norm(hop_ms), alpha_scale=alpha_scale, temperature=temperature, exit_head=exit_head)
    wanted = [(key(path, **cur), devices), (key(path, **cur), sweeps.MAX_DEVICES)]
    alternatives = [key(path, **{**cur, "exit_head": h}) for h in heads if h != exit_head]
    alternatives += [key(path, **{**cur, "temperature": t}) for t in temperature_options]
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
        alpha = whatif.alphas(profile, alpha_scale, temperature, head=plan.exit_head)
        kw = {"acceptance": "bernoulli", "alpha": alpha.get(plan.exit_layer, 0.0) if plan.exit_layer else 0.0}
    result = api.simulate(profile, plan, tokens=tokens, temperature=temperature, engine=engine, timeline=timeline,
                          **kw)
    return result.to_json_dict(timeline=timeline)


def resolve(path: str, plan: Plan) -> Plan:
    from sim import api

    return api.resolve_plan(plan, ui.load(path))
