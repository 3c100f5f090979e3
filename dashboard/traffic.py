"""Under traffic: what the serving simulator says about the selected profile, as data, words and figures for the
page (`dashboard/views/traffic.py`). No Streamlit here, so tests read the data and the figure spec directly.

The recommendation at the chosen load and SLO is `ppsd plan --rate`'s own (`traffic_plan` calls `plan_serving`
with the command's defaults), printed as the command prints it (`ServePlan.chosen_lines`). The curves are AR, the
best EESD plan, the best batched PPSD plan, the goodput policy at the best EESD plan's exit
(`sim/serve/planner.candidate_policies`) and the recommendation, each predicted at rates from light load to past
AR's capacity with 90% intervals (`sim/serve/sweep.load_sweep`); the crossovers mark where each stops beating AR
on TPOT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard import theme
from dashboard.charts import _fig, _translucent, interval_band
from ppsd.errors import UserError
from sim.serve.metrics import Slo
from sim.serve.planner import PLAN_REQUESTS, ServePlan, candidate_policies, plan_serving
from sim.serve.policies import (ArPolicy, EesdPolicy, GammaTablePolicy, GoodputPolicy, OffAbovePolicy, PpsdPolicy,
                                parse_policy)
from sim.serve.scheduler import SchedulerConfig
from sim.serve.sweep import (BEYOND, CROSSES, CROSSOVER_FIGURES, NEVER, Crossover, LoadSweep, ar_capacity,
                             default_rates, load_sweep)
from sim.serve.workload import profile_prompts

FIGURES = {"tpot_p50_ms": "median TPOT", "tpot_p99_ms": "p99 TPOT", "ttft_p50_ms": "median TTFT",
           "e2e_p50_ms": "median end to end", "e2e_p99_ms": "p99 end to end"}
COLOURS = [theme.OKABE_ITO[c] for c in ("black", "orange", "blue", "green", "purple", "vermillion", "sky")]
# the curves' default simulation size (the page's expander changes it): as many requests as the plan simulates,
# so at the load asked about the curves pass through the ranking's figures
SWEEP_REQUESTS, SWEEP_REPLICATIONS = PLAN_REQUESTS, 5


def latency(ms: float | None) -> str:
    """A latency in words short enough for a metric card: "6.4 ms", "127 ms", "57.8 s"; "none finished" for a
    figure no request had."""
    if ms is None or ms != ms or math.isinf(ms):
        return "none finished"
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    return f"{ms:.2g} ms" if ms < 10 else f"{ms:.0f} ms"


def policy_words(spec: str) -> str:
    """A policy spec (`ppsd serve --policy`'s) in the words the other pages name plans with."""
    try:
        p = parse_policy(spec)
    except UserError:
        return str(spec)
    if isinstance(p, ArPolicy):
        return "AR (no speculation)"
    if isinstance(p, EesdPolicy):
        return f"EESD E={p.exit_layer} γ={p.draft_len}"
    if isinstance(p, PpsdPolicy):
        return f"PPSD E={p.exit_layer} k=2"
    if isinstance(p, OffAbovePolicy):
        return f"EESD E={p.exit_layer} γ={p.draft_len} up to {p.max_live} at once, AR above"
    if isinstance(p, GammaTablePolicy):
        sizes = [b for b, _ in p.table]
        parts = []
        for i, (b, g) in enumerate(p.table):
            span = f"{b}+" if i == len(sizes) - 1 else (f"{b}" if sizes[i + 1] == b + 1 else f"{b}–{sizes[i + 1] - 1}")
            parts.append(f"{span}: {'off' if g == 0 else f'γ {g}'}")
        return f"EESD E={p.exit_layer}, γ by batch size ({', '.join(parts)})"
    if isinstance(p, GoodputPolicy):
        return f"EESD E={p.exit_layer}, adaptive γ ≤ {p.max_gamma}"
    return p.spec()


def slo_words(slo: Slo | None) -> str:
    if slo is None:
        return "none"
    names = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "end to end"}
    return ", ".join(f"{label} ≤ {getattr(slo, key + '_ms'):g} ms" for key, label in names.items()
                     if getattr(slo, key + "_ms", None) is not None)


# --- the recommendation: ppsd plan --rate's -----------------------------------------------------------
def traffic_plan(profile, rate: float, slo: Slo | None = None, max_batch: int | None = None) -> ServePlan:
    """`ppsd plan --rate RATE [--slo ...] [--max-batch B]` on `profile`, at the command's defaults."""
    config = SchedulerConfig(max_batch=max_batch or max(profile.batch.sizes))
    return plan_serving(profile, profile_prompts(profile), rate, config, slo=slo)


def ar_row(plan: ServePlan):
    return next(r for r in plan.rows if r.policy.spec() == "ar")


def headline(plan: ServePlan) -> str:
    """Which policy to serve with at this load and SLO, and its latency against AR's (markdown, one line)."""
    chosen, ar = plan.chosen, ar_row(plan)
    h, a = chosen.run.headline, ar.run.headline
    at = f"at {plan.rate:.3g} requests a second" + (f" under the SLO {slo_words(plan.slo)}" if plan.slo else "")
    if chosen is ar or chosen.policy.spec() == "ar":
        return (f"**Serve with plain AR (no speculation)** {at}: no speculation policy beats it here (median TPOT "
                f"{latency(a['tpot_p50_ms'])}, median end to end {latency(a['e2e_p50_ms'])}).")
    ratio = h["tpot_p50_ms"] / a["tpot_p50_ms"] if a["tpot_p50_ms"] else float("nan")
    good = ""
    if plan.slo is not None:
        good = (f", {_goodput(chosen)} of requests meeting the SLO against AR's {_goodput(ar)}")
    text = (f"**Serve with {policy_words(chosen.policy.spec())}** {at}: median TPOT **{latency(h['tpot_p50_ms'])}** "
            f"against AR's {latency(a['tpot_p50_ms'])}" + (f" ({ratio:.2f}×)" if ratio == ratio else "")
            + f", median end to end {latency(h['e2e_p50_ms'])} against {latency(a['e2e_p50_ms'])}{good}.")
    return text + ("" if chosen.policy.runs_real else " Simulated only: `ppsd serve` does not run it.")


def _goodput(row) -> str:
    g = row.run.metrics.request_goodput
    return "none" if g is None or g != g else f"{g:.3g} a second"


@dataclass(frozen=True)
class Card:
    """A metric card: label, value, the AR figure beneath (None when the recommendation is AR), help."""

    label: str
    value: str
    delta: str | None
    help: str


def cards(plan: ServePlan) -> list[Card]:
    """The recommendation's figures beside AR's: goodput first under an SLO, then the latencies."""
    chosen, ar = plan.chosen, ar_row(plan)
    is_ar = chosen.policy.spec() == "ar"
    h, a = chosen.run.headline, ar.run.headline
    keys = ["tpot_p50_ms", "ttft_p50_ms", "e2e_p50_ms"] + ([] if plan.slo else ["tpot_p99_ms"])
    out = []
    if plan.slo is not None:
        g, ga = chosen.run.metrics.request_goodput, ar.run.metrics.request_goodput
        out.append(Card("goodput (req/s)", "none" if g is None else f"{g:.3g}",
                        None if is_ar or ga is None else f"AR: {ga:.3g}",
                        f"Requests a second that meet the SLO ({slo_words(plan.slo)}), as vLLM counts them."))
    for k in keys:
        out.append(Card(FIGURES[k], latency(h[k]), None if is_ar else f"AR: {latency(a[k])}",
                        f"The recommendation's {FIGURES[k]} at this load, beneath it AR's on the same requests."))
    return out


def plan_table(plan: ServePlan) -> tuple[pd.DataFrame, dict]:
    """Every candidate `ppsd plan --rate` ranked, best first, in plain headers (numbers stay numbers), and
    {header: (format, word for a missing value)} for `tables.worded`."""
    rows = []
    for r in plan.rows:
        h, m = r.run.headline, r.run.metrics
        row = {"policy": policy_words(r.policy.spec())}
        if plan.slo is not None:
            row["goodput (req/s)"] = m.request_goodput
        row.update({"median TPOT (ms)": h["tpot_p50_ms"], "p99 TPOT (ms)": h["tpot_p99_ms"],
                    "median end to end (s)": h["e2e_p50_ms"] / 1000, "median TTFT (ms)": h["ttft_p50_ms"],
                    "p99 end to end (s)": h["e2e_p99_ms"] / 1000, "drafts accepted": m.acceptance_rate})
        row["ppsd serve runs it"] = "yes" if r.policy.runs_real else "simulated only"
        row["--policy"] = r.policy.spec()
        rows.append(row)
    table = pd.DataFrame(rows)
    formats = {c: ("{:.1f}", "none finished") for c in table.columns if c.endswith("(ms)")}
    formats.update({c: ("{:.2f}", "none finished") for c in table.columns if c.endswith("(s)")})
    formats["goodput (req/s)"] = ("{:.3g}", "none")
    formats["drafts accepted"] = ("{:.0%}", "no drafts")
    return table, formats


# --- the load sweep -----------------------------------------------------------------------------------
def drawn_policies(profile, max_batch: int, also: str | None = None) -> list[str]:
    """AR, the best EESD plan, the best PPSD plan and the goodput policy (of the planner's candidates), and
    `also` (the recommendation) where it is none of them: their specs."""
    picked, kinds = [], set()
    for p in candidate_policies(profile, max_batch):
        if p.name in ("ar", "eesd", "ppsd", "goodput") and p.name not in kinds:
            picked.append(p.spec())
            kinds.add(p.name)
    if also is not None and also not in picked:
        picked.append(also)
    return picked


def traffic_sweep(profile, specs: list[str], max_batch: int, rate: float | None = None,
                  num_prompts: int = SWEEP_REQUESTS, replications: int = SWEEP_REPLICATIONS, seed: int = 0) -> LoadSweep:
    """Each policy predicted at the default rates (light load to past AR's capacity) and at `rate` (the load asked
    about), with 90% intervals."""
    config = SchedulerConfig(max_batch=max_batch)
    prompts = profile_prompts(profile)
    capacity = ar_capacity(profile, prompts, config, seed=seed)
    rates = sorted(set(default_rates(capacity)) | ({float(rate)} if rate else set()))
    sweep = load_sweep(profile, specs, config, prompts=prompts, rates=rates, num_prompts=num_prompts,
                       replications=replications, seed=seed)
    sweep.capacity = capacity
    return sweep


@dataclass
class TrafficView:
    """A load sweep, the plan at the chosen rate, the sweep's rows."""

    sweep: LoadSweep
    plan: ServePlan
    rows: pd.DataFrame  # policy (spec), rate, figure, point, lo, hi (ms)

    @property
    def chosen(self) -> str:
        return self.plan.chosen.policy.spec()


def traffic_view(sweep: LoadSweep, plan: ServePlan) -> TrafficView:
    rows = [{"policy": spec, "rate": rate_i, "figure": fig, "point": b.point, "lo": b.lo, "hi": b.hi}
            for spec, preds in sweep.predictions.items() for rate_i, pred in zip(sweep.rates, preds)
            for fig, b in pred.bands.items()]
    return TrafficView(sweep, plan, pd.DataFrame(rows))


def traffic_data(profile, rate: float, slo: Slo | None = None, max_batch: int | None = None,
                 num_prompts: int = SWEEP_REQUESTS, replications: int = SWEEP_REPLICATIONS, seed: int = 0) -> TrafficView:
    """The page's data in one call (the page caches the plan and the sweep apart)."""
    plan = traffic_plan(profile, rate, slo, max_batch)
    specs = drawn_policies(profile, plan.config.max_batch, plan.chosen.policy.spec())
    return traffic_view(traffic_sweep(profile, specs, plan.config.max_batch, rate, num_prompts, replications, seed),
                        plan)


def crossover_words(sweep: LoadSweep) -> list[str]:
    """Per speculative policy, where it stops beating AR on median and p99 TPOT, in words."""
    lo_rate, hi_rate = sweep.rates[0], sweep.rates[-1]

    def one(c: Crossover) -> str:
        what = FIGURES[c.figure]
        if c.status == NEVER:
            return f"its {what} never beats AR, not even at the lightest load drawn ({lo_rate:.3g} req/s)"
        if c.status == BEYOND:
            return f"its {what} beats AR at every load drawn (up to {hi_rate:.3g} req/s)"
        if c.lo is not None and c.hi is not None and f"{c.lo:.3g}" == f"{c.hi:.3g}":
            return f"its {what} stops beating AR at {c.rate:.3g} req/s"
        lo = "below the lightest load drawn" if c.lo is None else f"{c.lo:.3g}"
        hi = "beyond the heaviest load drawn" if c.hi is None else f"{c.hi:.3g}"
        return f"its {what} stops beating AR at {c.rate:.3g} req/s (90% interval {lo} to {hi})"

    out = []
    for spec, figs in sweep.crossovers.items():
        got = [figs[f] for f in CROSSOVER_FIGURES if f in figs]
        if len(got) == 2 and got[0].status == got[1].status == NEVER:
            text = (f"its median and p99 TPOT never beat AR, not even at the lightest load drawn "
                    f"({lo_rate:.3g} req/s)")
        elif len(got) == 2 and got[0].status == got[1].status == BEYOND:
            text = f"its median and p99 TPOT beat AR at every load drawn (up to {hi_rate:.3g} req/s)"
        else:
            text = "; ".join(one(c) for c in got)
        out.append(f"{policy_words(spec)}: {text}.")
    return out


def load_chart(view: TrafficView, figure: str = "tpot_p50_ms") -> go.Figure:
    """`figure` against the request rate, per policy, with its 90% interval; where each policy stops beating AR
    on TPOT marked (a cross on its curve, a dashed line, its interval shaded); the recommendation drawn thick,
    the chosen load as a grey line."""
    fig = _fig(f"{FIGURES[figure]} against load (90% intervals)", "requests a second (log scale)",
               f"{FIGURES[figure]} (ms)", height=460)
    rows = view.rows[view.rows["figure"] == figure]
    for i, (spec, part) in enumerate(rows.groupby("policy", sort=False)):
        colour = COLOURS[i % len(COLOURS)]
        name = policy_words(spec) + (" · recommended" if spec == view.chosen else "")
        interval_band(fig, part["rate"], part["lo"], part["hi"], colour, name)
        fig.add_scatter(x=part["rate"], y=part["point"], mode="lines+markers", name=name, legendgroup=f"band {name}",
                        line=dict(color=colour, width=4 if spec == view.chosen else 2),
                        hovertemplate=f"{name}<br>%{{x:.3g}} req/s: %{{y:.1f}} ms<extra></extra>")
        cross = view.sweep.crossovers.get(spec, {}).get(figure if figure in CROSSOVER_FIGURES else "tpot_p50_ms")
        if cross is not None and cross.status == CROSSES:
            _mark_crossover(fig, cross, part, colour, name, view.sweep.rates)
    fig.add_vline(x=view.plan.rate, line=dict(color="#888888", width=1))
    fig.add_annotation(x=math.log10(view.plan.rate), y=1.0, yref="paper", text="the load asked about", xanchor="left",
                       yanchor="top", showarrow=False, font=dict(size=11, color="#666666"))  # (log axis: x in log10)
    compact_legend(fig)
    rate_axis(fig, view.sweep.rates)
    if figure.startswith(("ttft", "e2e")):
        fig.update_yaxes(type="log")  # past capacity the queue grows without bound
    return fig


def compact_legend(fig: go.Figure) -> None:
    """One legend entry per policy (its curve): intervals, crossings and measurements go unlisted (the caption
    says how they are drawn), so the legend stays a row or two above the plot."""
    for t in fig.data:
        if t.meta in ("reference", "crossover", "measured", "trace"):
            t.showlegend = False


def rate_axis(fig: go.Figure, rates) -> None:
    """A log request-rate axis ticked at the rates drawn."""
    ticks = sorted({float(r) for r in rates})
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[f"{r:.3g}" for r in ticks])


def _mark_crossover(fig: go.Figure, cross: Crossover, part: pd.DataFrame, colour: str, name: str,
                    rates: list[float]) -> None:
    lo = cross.lo if cross.lo is not None else rates[0]
    hi = cross.hi if cross.hi is not None else rates[-1]
    if hi > lo:
        fig.add_vrect(x0=lo, x1=hi, fillcolor=_translucent(colour, 0.10), line_width=0, layer="below")
    fig.add_vline(x=cross.rate, line=dict(color=colour, dash="dash", width=1))
    y = float(np.interp(math.log(cross.rate), np.log(part["rate"].to_numpy(float)), part["point"].to_numpy(float)))
    fig.add_scatter(x=[cross.rate], y=[y], mode="markers", marker_symbol="x", marker=dict(color=colour, size=12),
                    name=f"{name} stops beating AR", legendgroup=f"band {name}", meta="crossover",
                    hovertemplate=f"{name} stops beating AR at %{{x:.3g}} req/s (90% interval {lo:.3g} to "
                                  f"{hi:.3g})<extra></extra>")
