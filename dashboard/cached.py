"""The simulator's answers for the pages, cached by Streamlit (tables ready to plot).

Each page asks here; this module fetches Results (sweeps from dashboard/sweep_cache.py, cached per
setting and warmed in the background; single plans through `sim.api.simulate`), lets the simulator
choose (`sim.planner.verdict` through `sim.api.recommend` and `verdict`, `sim.planner.closed_forms`, `sim.planner.heads.comparison`)
and caches the tables dashboard/tables.py makes of them. The planner must answer a control change within half a second:
exit layer, draft length and stage count only pick rows out of a cached sweep.
"""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import answer, sweep_cache, tables, ui
from ppsd.exit_heads import SHARED
from ppsd.profile import PROFILE_FILE
from sim.plan import Plan

# The same defaults `ppsd plan` uses, so the Overview's recommendation is the CLI's.
DEFAULT_GAMMAS = sweep_cache.GAMMAS
DEFAULT_TOKENS = sweep_cache.TOKENS

# (results table, best plan's row, one-line reason, closed-form curves)
Answer = tuple[pd.DataFrame, dict, str, pd.DataFrame]


def mtime(path: str) -> float:
    f = Path(path) / PROFILE_FILE
    return f.stat().st_mtime if f.exists() else 0.0


def key(path: str, hop_ms: float | None = None, alpha_scale: float = 1.0, temperature: float = 0.0,
        exit_head: str = SHARED) -> sweep_cache.Key:
    return sweep_cache.Key(path, mtime(path), None if hop_ms is None else float(hop_ms), float(alpha_scale),
                           float(temperature), sweep_cache.TOKENS, exit_head)


def default_devices(path: str) -> int:
    """`ppsd plan`'s default stage count for this profile (`sim.planner.gpus.default_devices`: an estimate's
    GPUs, a CPU profile's cores, else 4)."""
    from sim.planner import gpus

    return gpus.default_devices(sweep_cache.profile(path, mtime(path)))


def _devices(path: str, devices: int | None) -> int:
    return default_devices(path) if devices is None else int(devices)


def _previewed(k: sweep_cache.Key, devices: int) -> bool:
    """Whether this setting is answered by its closed-form preview for now (not swept yet, and the
    background worker is healthy enough to sweep it)."""
    return sweep_cache.CACHE.cached(k, devices) is None and sweep_cache.CACHE.failures <= 5


@st.cache_resource(show_spinner=False, max_entries=64)
def _preview_results(fields: tuple, devices: int) -> list:
    # shared, not copied: the main answer and the head comparison price a setting's closed forms once
    return sweep_cache.preview(sweep_cache.Key(*fields), devices)


def _results(k: sweep_cache.Key, devices: int, preview: bool):
    """(plans, closed forms) of one setting: the closed forms twice for a preview, else the sweep."""
    if preview:
        closed = _preview_results(astuple(k), devices)
        return closed, closed
    return sweep_cache.CACHE.get(k, devices).for_devices(devices)


@st.cache_data(show_spinner=False, max_entries=256)
def _answer(fields: tuple, devices: int, preview: bool) -> Answer:
    from sim import api

    k = sweep_cache.Key(*fields)
    results, closed = _results(k, devices, preview)
    best, reason = api.recommend(results, sweep_cache.profile(k.path, k.stamp))
    if preview:
        reason = (f"textbook-formula preview (every draft accepted alike, at the shortest context): "
                  f"{tables.short_label(best.plan.label())} at {best.speedup_vs_ar:.2f}× AR on one thread; the "
                  "simulation of this setting follows in a moment")
    return tables.results_table(results), tables.result_row(best), reason, tables.closed_curves(closed)


def sweep(path: str, devices: int | None = None, hop_ms: float | None = None, alpha_scale: float = 1.0,
          temperature: float = 0.0, exit_head: str = SHARED) -> Answer:
    """(results table, best plan row, one-line reason, closed forms) for one setting of the
    sweep-level controls; with the defaults this is exactly `ppsd plan`'s sweep and choice."""
    k, devices = key(path, hop_ms, alpha_scale, temperature, exit_head), _devices(path, devices)
    sweep_cache.CACHE.get(k, devices)  # computes now on a cold cache
    return _answer(astuple(k), devices, False)


def plans(path: str, devices: int | None = None, hop_ms: float | None = None, alpha_scale: float = 1.0,
          temperature: float = 0.0, exit_head: str = SHARED) -> tuple[pd.DataFrame, dict, str, pd.DataFrame, bool]:
    """Like `sweep`, plus a flag: when this setting has not been simulated yet, answer at once with
    the closed forms (flag True) and let the background worker run the exact sweep (the caller
    asks for it first in `warm` and reruns when `ready`). A cold sweep takes ~0.3 s here, the
    closed forms ~20 ms, and the page must answer within 0.5 s."""
    k, devices = key(path, hop_ms, alpha_scale, temperature, exit_head), _devices(path, devices)
    if _previewed(k, devices):
        pv = _answer(astuple(k), devices, True)
        # no speculative plan to preview (no acceptance for this head): the exact path says why
        if tables.speculative(pv[0]).any():
            return (*pv, True)
    return (*_answer(astuple(k), devices, False), False)


def ready(path: str, devices: int, hop_ms: float | None, alpha_scale: float, temperature: float,
          exit_head: str = SHARED) -> bool:
    return sweep_cache.CACHE.cached(key(path, hop_ms, alpha_scale, temperature, exit_head), devices) is not None


def _head_keys(path: str, heads, hop_ms, alpha_scale, temperature, devices: int, exact: bool) -> tuple:
    """((key fields, preview?) per head) for the cached head functions; exact=True sweeps every head."""
    out = []
    for h in heads:
        k = key(path, hop_ms, alpha_scale, temperature, h)
        if exact:
            sweep_cache.CACHE.get(k, devices)  # computes now on a cold cache
        out.append((astuple(k), not exact and _previewed(k, devices)))
    return tuple(out)


def _by_head(head_keys: tuple, devices: int) -> dict:
    """{head: its Results} (exact, or the closed-form preview where flagged)."""
    out = {}
    for fields, preview in head_keys:
        k = sweep_cache.Key(*fields)
        out[k.exit_head] = _results(k, devices, preview)[0]
    return out


@st.cache_data(show_spinner=False, max_entries=64)
def _verdict(head_keys: tuple, devices: int):
    from sim.planner.heads import decide_over_heads

    path, stamp = head_keys[0][0][:2]
    return decide_over_heads(_by_head(head_keys, devices), sweep_cache.profile(path, stamp))


def verdict(path: str, heads: list[str], devices: int | None = None, hop_ms: float | None = None,
            alpha_scale: float = 1.0, temperature: float = 0.0, exact: bool = True):
    """`sim.planner.verdict.Verdict` over these exit heads' sweeps of one setting: with the defaults, exactly
    `ppsd plan`'s verdict (same sweeps, same function). exact=False judges a head not swept at this
    setting yet by its closed-form preview."""
    devices = _devices(path, devices)
    return _verdict(_head_keys(path, heads, hop_ms, alpha_scale, temperature, devices, exact), devices)


def best_over_heads(path: str, heads: list[str], devices: int | None = None) -> tuple[str, dict, str]:
    """(head, recommended plan row, verdict text) over every head at `ppsd plan`'s defaults, as
    `ppsd plan` chooses (`sim.planner.heads.decide_over_heads`)."""
    v = verdict(path, heads, devices)
    return v.head, tables.result_row(v.recommended), v.text


@st.cache_data(show_spinner=False, max_entries=64)
def _heads_table(head_keys: tuple, devices: int):
    from sim.planner import closed_forms as planning

    v = _verdict(head_keys, devices)
    by_head = _by_head(head_keys, devices)
    path, stamp = head_keys[0][0][:2]
    b = answer.basis(v)
    table = tables.heads_by_verdict(by_head, v, b, sweep_cache.profile(path, stamp))
    table["figures"] = ["textbook formula, simulating…" if any(planning.is_closed_form(r) for r in by_head[h])
                        else "simulated" for h in table["head"]]
    return table, b


def heads_table(path: str, heads: list[str], devices: int | None = None, hop_ms: float | None = None,
                alpha_scale: float = 1.0, temperature: float = 0.0, exact: bool = True):
    """(one row per exit head: its best EESD and PPSD plan by the verdict's figure over these heads, and that
    figure's Basis). exact=False shows a head not swept at this setting yet by its textbook-formula preview
    (column `figures` says so)."""
    devices = _devices(path, devices)
    return _heads_table(_head_keys(path, heads, hop_ms, alpha_scale, temperature, devices, exact), devices)


def warm(path: str, hop_options, scale_options, temperature_options, hop_ms, alpha_scale, temperature,
         devices: int, measured_hop: float, exit_head: str = SHARED, heads=()) -> None:
    """Ask the background worker for this setting first (when only its preview is shown), then the
    settings one control change away, nearest first: this setting at the most devices (so the
    device slider only filters), each other head, and each other hop, scale and temperature."""
    def norm(h):
        return None if h is None or abs(h - measured_hop) < 1e-9 else h

    def nearest(options, cur):
        return sorted(options, key=lambda o: abs(list(options).index(o) - list(options).index(cur)))

    cur = dict(hop_ms=norm(hop_ms), alpha_scale=alpha_scale, temperature=temperature, exit_head=exit_head)
    wanted = [(key(path, **cur), devices), (key(path, **cur), sweep_cache.MAX_DEVICES)]
    alternatives = [key(path, **{**cur, "exit_head": h}) for h in heads if h != exit_head]
    alternatives += [key(path, **{**cur, "temperature": t}) for t in temperature_options]
    alternatives += [key(path, **{**cur, "alpha_scale": s}) for s in nearest(scale_options, alpha_scale)]
    alternatives += [key(path, **{**cur, "hop_ms": norm(h)}) for h in nearest(hop_options, hop_ms)]
    wanted += [(k, devices) for k in dict.fromkeys(alternatives)]
    sweep_cache.CACHE.warm(wanted)


@st.cache_data(show_spinner=False, max_entries=512)
def simulate_one(path: str, stamp: float, plan_dict: dict, alpha_scale: float = 1.0, temperature: float = 0.0,
                 tokens: int = DEFAULT_TOKENS, timeline: bool = False, engine: str = "fast") -> dict:
    """One plan through the simulator, as Result.to_json_dict(timeline=...) (cacheable)."""
    from sim import api
    from sim.planner import closed_forms as planning

    profile = ui.load(path)
    plan = Plan.from_dict(plan_dict)
    kw: dict = {}
    if alpha_scale != 1.0:
        # a scaled acceptance is a what-if: draw Bernoulli(α·scale) instead of replaying the trace
        alpha = planning.acceptance_by_exit(profile, alpha_scale, temperature, head=plan.exit_head)
        kw = {"acceptance": "bernoulli", "alpha": alpha.get(plan.exit_layer, 0.0) if plan.exit_layer else 0.0}
    result = api.simulate(profile, plan, tokens=tokens, temperature=temperature, engine=engine, timeline=timeline,
                          **kw)
    return result.to_json_dict(timeline=timeline)


@st.cache_data(show_spinner=False, max_entries=256)
def stage_breakdown(path: str, stamp: float, plan_dict: dict) -> tuple[str, pd.DataFrame]:
    """(resolved plan's label, per-stage time table) of one PPSD plan, as its scheme prices it
    (`sim.planner.breakdown.stage_breakdown`)."""
    from sim.api import resolve_plan
    from sim.planner.breakdown import stage_breakdown as breakdown

    profile = ui.load(path)
    plan = resolve_plan(Plan.from_dict(plan_dict), profile)
    return plan.label(), tables.stage_table(breakdown(profile, plan))
