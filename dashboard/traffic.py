"""Under traffic: what the serving simulator says about the selected profile, as data and figures for the page
(`dashboard/views/traffic.py`). No Streamlit here, so tests read the data and the figure spec directly.

The policies drawn are AR, the best EESD plan, the best batched PPSD plan and the goodput policy at the best
EESD plan's exit (`sim/serve/planner.candidate_policies`); each is predicted at rates from light load to past
AR's capacity with 90% intervals (`sim/serve/sweep.load_sweep`), and the crossovers mark where each stops
beating AR on TPOT. The recommendation at the chosen load and SLO is `ppsd plan --rate`'s (`plan_serving`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from dashboard import theme
from dashboard.charts import _fig, interval_band
from sim.serve.metrics import Slo
from sim.serve.planner import ServePlan, candidate_policies, plan_serving
from sim.serve.scheduler import SchedulerConfig
from sim.serve.sweep import CROSSES, LoadSweep, load_sweep
from sim.serve.workload import profile_prompts

FIGURES = {"tpot_p50_ms": "median TPOT", "tpot_p99_ms": "p99 TPOT", "ttft_p50_ms": "median TTFT",
           "e2e_p50_ms": "median end-to-end", "e2e_p99_ms": "p99 end-to-end"}
COLOURS = [theme.OKABE_ITO[c] for c in ("black", "orange", "blue", "green", "purple", "vermillion", "sky")]


@dataclass
class TrafficView:
    """A load sweep of the drawn policies, the plan at the chosen rate, and their words."""

    sweep: LoadSweep
    plan: ServePlan
    rows: pd.DataFrame  # policy, rate, figure, point, lo, hi (ms)
    words: list[str]


def drawn_policies(profile, max_batch: int) -> list:
    """AR, the best EESD plan, the best PPSD plan and the goodput policy (those of the planner's candidates)."""
    picked, kinds = [], set()
    for p in candidate_policies(profile, max_batch):
        if p.name in ("ar", "eesd", "ppsd", "goodput") and p.name not in kinds:
            picked.append(p)
            kinds.add(p.name)
    return picked


def traffic_data(profile, rate: float, slo: Slo | None = None, max_batch: int | None = None, num_prompts: int = 60,
                 replications: int = 5, seed: int = 0) -> TrafficView:
    """The page's data (see the module doc); `rate` the load the recommendation is for."""
    config = SchedulerConfig(max_batch=max_batch or max(profile.batch.sizes))
    prompts = profile_prompts(profile)
    policies = drawn_policies(profile, config.max_batch)
    sweep = load_sweep(profile, policies, config, prompts=prompts, num_prompts=num_prompts,
                       replications=replications, seed=seed, slo=slo)
    plan = plan_serving(profile, prompts, rate, config, slo=slo, num_prompts=num_prompts, seed=seed)
    rows = [{"policy": spec, "rate": rate_i, "figure": fig, "point": b.point, "lo": b.lo, "hi": b.hi}
            for spec, preds in sweep.predictions.items() for rate_i, pred in zip(sweep.rates, preds)
            for fig, b in pred.bands.items()]
    return TrafficView(sweep, plan, pd.DataFrame(rows), words(sweep, plan))


def words(sweep: LoadSweep, plan: ServePlan) -> list[str]:
    """The recommendation and the crossovers in plain words."""
    chosen, ar = plan.chosen, next(r for r in plan.rows if r.policy.spec() == "ar")
    h, a = chosen.run.headline, ar.run.headline
    slo = f" under the SLO {plan.slo.spec()}" if plan.slo else ""
    if chosen.policy.spec() == "ar":
        first = (f"At {plan.rate:.3g} requests a second{slo}, serve without speculation: no policy beats plain "
                 f"decoding (AR) here (median TPOT {a['tpot_p50_ms']:.1f} ms, median end to end "
                 f"{a['e2e_p50_ms'] / 1000:.2f} s).")
    else:
        first = (f"At {plan.rate:.3g} requests a second{slo}, serve with {chosen.policy.spec()}: median TPOT "
                 f"{h['tpot_p50_ms']:.1f} ms against AR's {a['tpot_p50_ms']:.1f} ms, median end to end "
                 f"{h['e2e_p50_ms'] / 1000:.2f} s against {a['e2e_p50_ms'] / 1000:.2f} s."
                 + ("" if chosen.policy.runs_real else " (Simulated only: `ppsd serve` does not run it.)"))
    out = [first]
    for spec, figs in sweep.crossovers.items():
        out.append(figs["tpot_p50_ms"].words() + "; " + figs["tpot_p99_ms"].words().split(": ", 1)[1] + ".")
    return out


def load_chart(view: TrafficView, figure: str = "tpot_p50_ms") -> go.Figure:
    """`figure` against the request rate, per policy, with its 90% interval; each crossover on TPOT marked."""
    fig = _fig(f"{FIGURES[figure]} against load (90% intervals)", "requests a second", f"{FIGURES[figure]} (ms)")
    rows = view.rows[view.rows["figure"] == figure]
    for i, (spec, part) in enumerate(rows.groupby("policy", sort=False)):
        colour = COLOURS[i % len(COLOURS)]
        interval_band(fig, part["rate"], part["lo"], part["hi"], colour, spec)
        fig.add_scatter(x=part["rate"], y=part["point"], mode="lines+markers", name=spec, line=dict(color=colour),
                        legendgroup=f"band {spec}")
        cross = view.sweep.crossovers.get(spec, {}).get(figure if figure.startswith("tpot") else "tpot_p50_ms")
        if cross is not None and cross.status == CROSSES:
            fig.add_vline(x=cross.rate, line=dict(color=colour, dash="dash", width=1))
            fig.add_scatter(x=[cross.rate], y=[float(part["point"].min())], mode="markers", marker_symbol="x",
                            marker=dict(color=colour, size=10), name=f"{spec} stops beating AR",
                            legendgroup=f"band {spec}")
    fig.add_vline(x=view.plan.rate, line=dict(color="#888888", width=1))
    fig.update_xaxes(type="log")
    return fig
