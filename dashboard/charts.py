"""Plotly figures for the dashboard pages: pure functions from data to a figure, no Streamlit, so
tests can inspect the figure spec directly.

Conventions: times in ms, throughput in tokens/s, speedup in ×; every axis has a title with its
unit; colours come from dashboard.theme (Okabe-Ito).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard import theme
from dashboard.answer import Basis, short_label
from ppsd.exit_heads import SHARED
from ppsd.modes import Mode
from sim.schemes import scheme
from sim.timeline import Event

_LAYOUT = dict(template="plotly_white", hovermode="closest")
ONE_THREAD = Basis(False, None)
# a few entries: one row between title and plot; many entries: a column on the right, so a
# wrapping legend never runs into the title
_LEGEND_TOP = dict(margin=dict(l=60, r=20, t=90, b=50),
                   legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0))
_LEGEND_RIGHT = dict(margin=dict(l=60, r=10, t=50, b=50),
                     legend=dict(orientation="v", yanchor="top", y=1.0, xanchor="left", x=1.01))
# below the plot: the plot keeps the column's whole width (the planner's chart shares its row with controls)
_LEGEND_BELOW = dict(margin=dict(l=60, r=20, t=50, b=40),
                     legend=dict(orientation="h", yanchor="top", y=-0.16, xanchor="left", x=0))
_LEGENDS = {"top": _LEGEND_TOP, "right": _LEGEND_RIGHT, "below": _LEGEND_BELOW}


def _fig(title: str, x: str, y: str, height: int = 420, legend: str = "top") -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=dict(text=title, x=0, y=0.98, yanchor="top", font=dict(size=15)), xaxis_title=x,
                      yaxis_title=y, height=height, **_LAYOUT, **_LEGENDS[legend])
    return fig


# --- Profile page -------------------------------------------------------------------------
def layer_latency(profile, n_index: int, ctx_index: int) -> go.Figure:
    """Per-layer median latency with p10–p90 whiskers, with embedding and head as extra bars so
    their cost reads against a layer's."""
    n = int(profile.n_values[n_index])
    ctx = int(profile.context_values[ctx_index])
    med = profile.layers.median_ms[:, n_index, ctx_index]
    p10 = profile.layers.p10_ms[:, n_index, ctx_index]
    p90 = profile.layers.p90_ms[:, n_index, ctx_index]
    fig = _fig(f"Per-layer latency (n = {n} new token{'s' if n > 1 else ''}, context = {ctx})",
               "component", "latency (ms)")
    labels = [f"L{i}" for i in range(len(med))]
    fig.add_bar(x=labels, y=med, name="decoder layer", marker_color=theme.OKABE_ITO["blue"],
                error_y=dict(type="data", symmetric=False, array=np.maximum(p90 - med, 0),
                             arrayminus=np.maximum(med - p10, 0), color="#444", thickness=1),
                hovertemplate="%{x}: %{y:.3f} ms (median)<extra>p10–p90 whiskers</extra>")
    for name, table, colour in (("embedding", profile.embedding, theme.OKABE_ITO["green"]),
                                ("head (norm + LM head)", profile.head, theme.OKABE_ITO["vermillion"])):
        m, lo, hi = (float(getattr(table, k)[n_index]) for k in ("median_ms", "p10_ms", "p90_ms"))
        fig.add_bar(x=[name.split(" ")[0]], y=[m], name=name, marker_color=colour,
                    error_y=dict(type="data", symmetric=False, array=[max(hi - m, 0)], arrayminus=[max(m - lo, 0)],
                                 color="#444", thickness=1),
                    hovertemplate=f"{name}: %{{y:.3f}} ms (median)<extra></extra>")
    fig.add_hline(y=float(np.median(med)), line_dash="dot", line_color="#666",
                  annotation_text="median layer", annotation_position="top left")
    fig.update_layout(bargap=0.15, xaxis=dict(categoryorder="array", categoryarray=["embedding", *labels, "head"]))
    return fig


def acceptance_curves(acc: pd.DataFrame, metric: str = "match") -> go.Figure:
    """α (metric="match") or β (metric="beta") versus exit layer: the overall mean, its p10–p90
    spread across prompts as a band, and one line per prompt category."""
    sym = "α" if metric == "match" else "β"
    what = "greedy acceptance α (draft = full token)" if metric == "match" else "sampling acceptance β"
    fig = _fig(f"{what} versus exit layer", "exit layer E", f"{sym} (fraction)", legend="right")
    per_prompt = acc.groupby(["exit_layer", "prompt_id"])[metric].mean().reset_index()
    spread = per_prompt.groupby("exit_layer")[metric].quantile([0.1, 0.9]).unstack()
    overall = acc.groupby("exit_layer")[metric].mean()
    x = overall.index.to_numpy()
    fig.add_scatter(x=np.concatenate([x, x[::-1]]),
                    y=np.concatenate([spread[0.9].reindex(x).to_numpy(), spread[0.1].reindex(x).to_numpy()[::-1]]),
                    fill="toself", fillcolor="rgba(0,114,178,0.15)", line=dict(width=0), name="p10–p90 across prompts",
                    hoverinfo="skip")
    fig.add_scatter(x=x, y=overall.to_numpy(), mode="lines+markers", name=f"all prompts ({sym})",
                    line=dict(color=theme.OKABE_ITO["blue"], width=3),
                    hovertemplate=f"E = %{{x}}: {sym} = %{{y:.3f}}<extra>all prompts</extra>")
    palette = [c for k, c in theme.OKABE_ITO.items() if k not in ("blue", "black")]
    for i, (cat, sub) in enumerate(acc.groupby("category")):
        line = sub.groupby("exit_layer")[metric].mean()
        fig.add_scatter(x=line.index, y=line.to_numpy(), mode="lines", name=str(cat),
                        line=dict(color=palette[i % len(palette)], width=1.3,
                                  dash=["solid", "dash", "dot", "dashdot"][(i // len(palette)) % 4]),
                        hovertemplate=f"E = %{{x}}: {sym} = %{{y:.3f}}<extra>{cat}</extra>")
    fig.update_yaxes(range=[0, 1.02])
    return fig


# --- What-if planner ----------------------------------------------------------------------
def speedup_vs_exit(curves: pd.DataFrame, closed: pd.DataFrame, best: dict | None, selected: list[dict] | None,
                    num_layers: int, basis: Basis = ONE_THREAD) -> go.Figure:
    """Predicted speedup versus exit layer in the verdict's figure (`basis`): the baseline as a line at 1×
    with the noise band around it, AR on one thread as a dotted line where the baseline is AR on every
    core, EESD at its best γ and PPSD for each stage count (solid, from the simulator), the textbook
    formulas (dashed, one-thread figures only), the verdict's plan (star) and the plans the controls
    select (open markers). Lines that are no plan carry `meta="reference"`.

    curves: columns mode, k, exit_layer, speedup (in the basis' figure), detail, and optionally one_thread
            (the one-thread figure, shown on hover) and speedup_lo / speedup_hi (the 90% interval: a band)
    closed: columns mode, k, exit_layer, speedup (one thread)
    best / each selected: {exit_layer, speedup, label}; best with exit_layer None is plain AR, and
            may name the plan to mark as the closest ("closest": {exit_layer, speedup, label}) and
            the note to show ("note")"""
    fig = _fig(f"Predicted speedup over {basis.baseline}, by exit layer", "exit layer E", basis.axis, height=560,
               legend="below")
    reference_lines(fig, basis)
    one = " AR on one " + basis.unit
    for (mode, k), sub in curves.groupby(["mode", "k"], sort=True):
        sub = sub.sort_values("exit_layer")
        name, colour = scheme(mode).curve_name(int(k)), theme.curve_colour(mode, int(k))
        interval_band(fig, sub["exit_layer"], sub.get("speedup_lo"), sub.get("speedup_hi"), colour, name)
        aside = sub["one_thread"] if basis.same_budget and "one_thread" in sub.columns else None
        custom = (np.column_stack([sub["detail"], aside]) if aside is not None else np.column_stack([sub["detail"]]))
        extra = f"; %{{customdata[1]:.2f}}×{one}" if aside is not None else ""
        fig.add_scatter(x=sub["exit_layer"], y=sub["speedup"], mode="lines+markers", name=name,
                        line=dict(color=colour, width=2.5), marker=dict(size=5), customdata=custom,
                        hovertemplate=f"E = %{{x}}: %{{y:.2f}}× {basis.baseline} (%{{customdata[0]}}{extra})"
                                      f"<extra>{name}</extra>")
    if not basis.same_budget:  # the formulas price one thread: drawn only on that figure
        for (mode, k), sub in closed.groupby(["mode", "k"], sort=True):
            sub = sub.sort_values("exit_layer")
            sch = scheme(mode)
            name = (sch.curve_name(int(k)) if sch.curve_per_size else sch.curve_name(int(k), short=True)) + \
                " textbook formula"
            colour = theme.curve_colour(mode, int(k))
            fig.add_scatter(x=sub["exit_layer"], y=sub["speedup"], mode="lines", name=name,
                            line=dict(color=colour, width=1.5, dash="dash"), legendgroup="formula",
                            hovertemplate="E = %{x}: %{y:.2f}× (formula)<extra>" + name + "</extra>")
    for i, sel in enumerate(selected or []):
        if i == 0:
            fig.add_vline(x=sel["exit_layer"], line_dash="dot", line_color="#777")
        fig.add_scatter(x=[sel["exit_layer"]], y=[sel["speedup"]], mode="markers",
                        name=f"selected: {short_label(sel['label'])}",
                        marker=dict(size=15, symbol=["circle-open", "diamond-open"][i % 2],
                                    color=theme.OKABE_ITO["black"], line=dict(width=3)),
                        hovertemplate=f"selected: {sel['label']}<br>%{{y:.2f}}× {basis.baseline}<extra></extra>")
    if best is not None and best.get("exit_layer") is not None:
        fig.add_scatter(x=[best["exit_layer"]], y=[best["speedup"]], mode="markers+text", name="recommended plan",
                        marker=dict(size=20, symbol="star", color=theme.OKABE_ITO["yellow"],
                                    line=dict(color=theme.OKABE_ITO["black"], width=1.5)),
                        text=[f"recommended: {best['label']}"], textposition=_text_side(best["exit_layer"], num_layers),
                        hovertemplate=f"recommended: {best['label']}<br>%{{y:.2f}}× {basis.baseline}<extra></extra>")
    elif best is not None:
        # AR stays ahead: still mark the closest speculative plan the verdict names (never one that hardly
        # drafts, sim/planner/verdict.py), the plan a user would try next
        closest = best.get("closest")
        if closest is not None:
            label = closest["label"]
            fig.add_scatter(x=[closest["exit_layer"]], y=[closest["speedup"]], mode="markers+text",
                            name="closest speculative plan", text=[f"closest: {label}"],
                            textposition=_text_side(closest["exit_layer"], num_layers).replace("top", "bottom"),
                            marker=dict(size=18, symbol="star-open", color=theme.OKABE_ITO["black"], line=dict(width=2)),
                            hovertemplate=f"closest speculative plan: {label}<br>%{{y:.2f}}× {basis.baseline}"
                                          "<extra></extra>")
        fig.add_annotation(text=best.get("note") or f"recommended: plain {basis.baseline}", xref="paper",
                           yref="paper", x=0.99, y=0.02, xanchor="right", yanchor="bottom", showarrow=False,
                           bgcolor="#FFF8DC")
    fig.update_xaxes(range=[0.5, num_layers - 0.5], dtick=max(1, num_layers // 15))
    tops = [1.0 + (basis.band or 0.0), *curves["speedup"].dropna(), *(x["speedup"] for x in selected or [])]
    if "speedup_hi" in curves.columns:
        tops += list(pd.to_numeric(curves["speedup_hi"], errors="coerce").dropna())
    fig.update_yaxes(range=[0, max(tops) * 1.15])  # room above the baseline for its labels
    return fig


def _text_side(x: float, num_layers: int) -> str:
    """A marker's label above it, leaning inwards near the chart's right edge."""
    return "top left" if x > 0.7 * num_layers else "top center"


def reference_lines(fig: go.Figure, basis: Basis) -> None:
    """The baseline at 1× (solid), the noise band around it (shaded) where a verdict judged the figures, and
    AR on one thread (dotted) where the baseline is AR on every core: shapes, not traces, so every trace of a
    figure is a plan (or, marked `meta="reference"`, a plan's interval); `layout.meta` names the baseline."""
    if basis.band:
        fig.add_hrect(y0=1.0 - basis.band, y1=1.0 + basis.band, fillcolor="rgba(0,0,0,0.08)", line_width=0)
    words = f"{basis.baseline} = 1×" + (f": the verdict's baseline (shaded: its ±{basis.band:.0%} noise band)"
                                        if basis.band else "")
    fig.add_hline(y=1.0, line_color=theme.MODE_COLOURS[Mode.AR], line_width=2, annotation_text=words,
                  annotation_position="top left", annotation_font_size=11)
    if basis.same_budget and basis.one_unit_level and abs(basis.one_unit_level - 1.0) > 1e-6:
        fig.add_hline(y=basis.one_unit_level, line_color=theme.MODE_COLOURS[Mode.AR], line_width=1.5,
                      line_dash="dot", annotation_text=f"{basis.one_unit} = {basis.one_unit_level:.2f}×",
                      annotation_position="bottom right", annotation_font_size=11)
    fig.update_layout(meta={"baseline": basis.baseline, "baseline_y": 1.0})


def interval_band(fig: go.Figure, x, lo, hi, colour: str, name: str) -> bool:
    """A translucent band between `lo` and `hi` over `x` (a curve's 90% interval), grouped with the
    curve `name` in the legend; nothing when the interval is missing. Returns whether it drew one."""
    if lo is None or hi is None:
        return False
    x, lo, hi = (np.asarray(v, dtype=float) for v in (x, lo, hi))
    ok = np.isfinite(lo) & np.isfinite(hi)
    if not ok.any():
        return False
    x, lo, hi = x[ok], lo[ok], hi[ok]
    fig.add_scatter(x=np.concatenate([x, x[::-1]]), y=np.concatenate([hi, lo[::-1]]), fill="toself",
                    fillcolor=_translucent(colour), line=dict(width=0), mode="lines", hoverinfo="skip",
                    name=f"90% interval of {name}", legendgroup=f"band {name}", showlegend=True, meta="reference")
    return True


def _translucent(colour: str, alpha: float = 0.18) -> str:
    c = colour.lstrip("#")
    if len(c) != 6:
        return colour
    r, g, b = (int(c[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def stage_times(rows: pd.DataFrame, title: str) -> go.Figure:
    """Per-stage time for one token (stacked: layers, embedding, heads, draws, per-pass overhead, hop)
    so an unbalanced stage stands out. rows: columns stage, part, ms"""
    fig = _fig(title, "stage", "time per token (ms)", height=320)
    colours = {"layers": theme.OKABE_ITO["blue"], "embedding": theme.OKABE_ITO["sky"],
               "exit head": theme.OKABE_ITO["orange"], "head": theme.OKABE_ITO["vermillion"],
               "draw": theme.OKABE_ITO["purple"], "overhead": theme.OKABE_ITO["green"],
               "hop": theme.OKABE_ITO["yellow"]}
    for part, sub in rows.groupby("part", sort=False):
        fig.add_bar(x=sub["stage"], y=sub["ms"], name=part, marker_color=colours.get(part, theme.OTHER_EVENT_COLOUR),
                    hovertemplate="%{x}: %{y:.2f} ms<extra>" + str(part) + "</extra>")
    fig.update_layout(barmode="stack")
    return fig


# --- Timeline -----------------------------------------------------------------------------
def gantt(events: list[Event], title: str, max_events: int = 4000) -> go.Figure:
    """One row per stage/device, one bar per event (times in ms), coloured by kind. Horizontal
    bars with `base` are used instead of px.timeline because the times are durations, not dates."""
    fig = _fig(title, "time since start (ms)", "", height=max(260, 90 + 55 * len({e.row for e in events})))
    events = events[:max_events]
    rows = list(dict.fromkeys(e.row for e in events))
    by_kind: dict[str, list[Event]] = {}
    for e in events:
        by_kind.setdefault(e.name, []).append(e)
    for kind, evs in by_kind.items():
        fig.add_bar(
            y=[e.row for e in evs], x=[e.dur_s * 1e3 for e in evs], base=[e.start_s * 1e3 for e in evs],
            orientation="h", name=theme.event_words(kind),
            marker=dict(color=theme.event_colour(kind), line=dict(width=0.5, color="#333")),
            customdata=[["" if e.token is None else e.token, e.start_s * 1e3, e.dur_s * 1e3] for e in evs],
            hovertemplate=theme.event_words(kind) + " token %{customdata[0]}<br>start %{customdata[1]:.2f} ms, %{customdata[2]:.2f} ms"
                          "<extra>%{y}</extra>")
    fig.update_layout(barmode="overlay", bargap=0.25)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(rows)), title="stage / device")
    return fig


def aligned(events: list[Event], label: str) -> list[Event]:
    """The events shifted to start at 0, each row renamed "<label> · <row>" (for one shared axis)."""
    if not events:
        return []
    t0 = min(e.start_s for e in events)
    return [Event(e.name, f"{label} · {e.row}", e.start_s - t0, e.dur_s, e.token, e.args) for e in events]


def first_passes_window_ms(events: list[Event], passes: int = 12) -> float:
    """A time window (ms from the first event) that holds the first `passes` events of the busiest
    row: single passes stay visible (a whole 30 s validation trace renders as solid bars)."""
    if not events:
        return 1.0
    by_row: dict[str, list[Event]] = {}
    for e in events:
        by_row.setdefault(e.row, []).append(e)
    t0 = min(e.start_s for e in events)
    busiest = max(by_row.values(), key=len)
    busiest.sort(key=lambda e: e.start_s)
    last = busiest[min(passes, len(busiest)) - 1]
    return max((last.start_s + last.dur_s - t0) * 1e3, 0.05)


def gantt_pair(measured: list[Event], simulated: list[Event], title: str,
               window_ms: float | None = None) -> go.Figure:
    """The measured and the simulated timeline of one plan on one time axis (each from its own
    start), measured rows above simulated ones, zoomed to `window_ms` (default: the first dozen
    passes; double-click shows everything)."""
    events = aligned(measured, "measured") + aligned(simulated, "simulated")
    fig = gantt(events, title)
    window = window_ms if window_ms is not None else first_passes_window_ms(events)
    fig.update_xaxes(range=[0.0, window])
    return fig


# --- Validation ---------------------------------------------------------------------------
def predicted_vs_measured(rows: pd.DataFrame, baseline: str = "AR") -> go.Figure:
    """Each plan's predicted against its measured speedup over `baseline`, with its 90% interval; y = x is a
    perfect prediction, and the dotted lines at 1× are the baseline itself."""
    fig = _fig(f"Predicted versus measured speedup over {baseline}", f"measured speedup over {baseline} (×)",
               f"predicted speedup over {baseline} (×)")
    for add in (fig.add_hline, fig.add_vline):
        add(1.0, line_dash="dot", line_color=theme.MODE_COLOURS[Mode.AR], line_width=1)
    fig.update_layout(meta={"baseline": baseline, "baseline_y": 1.0})
    tops = [rows["predicted_speedup"].max(), rows["measured_speedup"].max(), 1.0]
    if "predicted_speedup_hi" in rows.columns:
        tops.append(pd.to_numeric(rows["predicted_speedup_hi"], errors="coerce").max())
    hi = float(np.nanmax(tops)) * 1.1
    fig.add_scatter(x=[0, hi], y=[0, hi], mode="lines", name="y = x (perfect prediction)",
                    line=dict(color="#777", dash="dash"), hoverinfo="skip", meta="reference")
    modes = rows["mode"] if "mode" in rows.columns else pd.Series(["?"] * len(rows), index=rows.index)
    forced = (pd.to_numeric(rows["forced_alpha"], errors="coerce").notna() if "forced_alpha" in rows.columns
              else pd.Series(False, index=rows.index))
    for (mode, timing), sub in rows.groupby([modes, forced], sort=False):
        colour = theme.MODE_COLOURS.get(str(mode), theme.OKABE_ITO["blue"])
        labels = sub["plan"] if "plan" in sub.columns else sub.index.astype(str)
        err = None
        if {"predicted_speedup_lo", "predicted_speedup_hi"} <= set(sub.columns):
            lo = pd.to_numeric(sub["predicted_speedup_lo"], errors="coerce")
            hi_ = pd.to_numeric(sub["predicted_speedup_hi"], errors="coerce")
            if lo.notna().any():  # the 90% interval of each prediction: a vertical band through its point
                err = dict(type="data", symmetric=False, array=(hi_ - sub["predicted_speedup"]).fillna(0).tolist(),
                           arrayminus=(sub["predicted_speedup"] - lo).fillna(0).tolist(), thickness=6, width=0,
                           color=_translucent(colour, 0.45))
        # forced acceptance (`alpha=` plans) checks the timing alone: no plan a user runs at their own acceptance
        name = str(mode).upper() + (", forced acceptance (a timing check)" if timing else "")
        fig.add_scatter(x=sub["measured_speedup"], y=sub["predicted_speedup"], mode="markers", name=name,
                        marker=dict(size=11, color="white" if timing else colour, symbol="diamond" if timing else
                                    "circle", line=dict(width=2 if timing else 1, color=colour if timing else "#222")),
                        text=labels, error_y=err, meta="timing check" if timing else None,
                        hovertemplate="%{text}<br>measured %{x:.2f}×, predicted %{y:.2f}×<extra></extra>")
    fig.update_xaxes(range=[0, hi])
    fig.update_yaxes(range=[0, hi])  # same range on both axes, so y = x is the diagonal
    return fig


# --- confidence stop -----------------------------------------------------------------------
def stop_curve(points: pd.DataFrame, basis: Basis = ONE_THREAD) -> go.Figure:
    """Speedup against the confidence stop τ for the selected EESD and PPSD plans (in `basis`'s figure), each
    plan without a stop as a dashed line of its colour, the baseline's lines beneath. points: columns mode
    ("EESD"/"PPSD"), plan, tau (None: no stop), speedup."""
    fig = _fig("Confidence stop: speedup against τ", "confidence stop τ", basis.axis, height=360)
    reference_lines(fig, basis)
    colours = {"EESD": theme.MODE_COLOURS[Mode.EESD], "PPSD": theme.PPSD_COLOURS[0]}
    taus = points["tau"].dropna()
    span = [float(taus.min()), float(taus.max())] if len(taus) else [0.0, 1.0]
    for mode, sub in points.groupby("mode", sort=False):
        stops = sub[sub["tau"].notna()].sort_values("tau")
        fig.add_scatter(x=stops["tau"], y=stops["speedup"], mode="lines+markers", name=f"{mode} with a stop",
                        line=dict(color=colours.get(mode)), customdata=stops["plan"],
                        hovertemplate=f"%{{customdata}}: %{{y:.3f}}× {basis.baseline}<extra></extra>")
        plain = sub[sub["tau"].isna()]
        if len(plain):
            y = float(plain["speedup"].iloc[0])
            fig.add_scatter(x=span, y=[y, y], mode="lines", name=f"{plain['plan'].iloc[0]} (no stop)",
                            line=dict(color=colours.get(mode), dash="dash"),
                            hovertemplate=f"{plain['plan'].iloc[0]}, no stop: %{{y:.3f}}×<extra></extra>")
    return fig


# --- exit heads side by side ----------------------------------------------------------------
def heads_bars(comp: pd.DataFrame, basis: Basis = ONE_THREAD) -> go.Figure:
    """Best EESD and best PPSD plan with each exit head (tables.heads_by_verdict rows) in the verdict's
    figure, the one-thread figure on hover, with the baseline's lines."""
    fig = _fig(f"Best plan with each exit head, against {basis.baseline}", "exit head", basis.axis, height=360)
    reference_lines(fig, basis)
    for mode, colour in (("EESD", theme.MODE_COLOURS[Mode.EESD]), ("PPSD", theme.PPSD_COLOURS[0])):
        other = f"{mode} {basis.other_header}"
        aside = comp[other] if basis.other_column and other in comp.columns else None
        custom = np.column_stack([comp[f"best {mode}"], aside if aside is not None else comp[f"best {mode}"]])
        extra = f" (%{{customdata[1]:.2f}}× {basis.one_unit})" if aside is not None else ""
        fig.add_bar(x=comp["exit head"], y=comp[f"{mode} {basis.header}"], name=f"best {mode}", marker_color=colour,
                    customdata=custom,
                    hovertemplate=f"%{{x}}: %{{customdata[0]}} at %{{y:.2f}}× {basis.baseline}{extra}<extra></extra>")
    fig.update_layout(barmode="group")
    fig.update_yaxes(rangemode="tozero")
    return fig


def heldout_curves(table: pd.DataFrame, measure_label: str) -> go.Figure:
    """Held-out α or β per exit layer, one line per exit head (table: exit layers × heads)."""
    from sim.planner.heads import head_label

    fig = _fig(f"Held-out {measure_label} per exit layer, by exit head", "exit layer E", measure_label)
    colours = [theme.OKABE_ITO["black"], *theme.PPSD_COLOURS]
    for i, head in enumerate(table.columns):
        fig.add_scatter(x=table.index.astype(int).tolist(), y=table[head].tolist(), mode="lines+markers", name=head_label(head),
                        line=dict(color=colours[i % len(colours)], dash="dot" if head == SHARED else "solid"),
                        hovertemplate=f"{head_label(head)}, E = %{{x}}: %{{y:.3f}}<extra></extra>")
    fig.update_yaxes(rangemode="tozero")
    return fig


def estimate_vs_measured(table: pd.DataFrame, title: str) -> go.Figure:
    """Per-layer latency, measured beside estimated (dashboard/estimates.compare rows)."""
    fig = _fig(title, "decoder layer", "latency (ms)", height=360)
    labels = [f"L{int(l)}" for l in table["layer"]]
    fig.add_bar(x=labels, y=table["measured_ms"].tolist(), name="measured", marker_color=theme.OKABE_ITO["blue"],
                hovertemplate="%{x} measured: %{y:.4f} ms<extra></extra>")
    fig.add_bar(x=labels, y=table["estimated_ms"].tolist(), name="estimated", marker_color=theme.OKABE_ITO["orange"],
                customdata=table["rel_err_pct"].tolist(),
                hovertemplate="%{x} estimated: %{y:.4f} ms (%{customdata:+.1f}%)<extra></extra>")
    fig.update_layout(barmode="group", bargap=0.2)
    return fig


# --- under load -----------------------------------------------------------------------------
def _batch_axis(fig: go.Figure, sizes) -> None:
    sizes = sorted({int(b) for b in sizes})
    fig.update_xaxes(type="log", tickvals=sizes, ticktext=[str(b) for b in sizes])
    fig.update_yaxes(rangemode="tozero")


def batch_curves(table: pd.DataFrame, baseline: str) -> go.Figure:
    """The best EESD and best PPSD plan's speedup at each batch size (columns "batch size", "best EESD plan",
    "EESD ×", "best PPSD plan", "PPSD ×") against `baseline`, with AR = 1× as a line."""
    fig = _fig("Best plan at each batch size", "batch size (sequences decoded at once)",
               "speedup over AR at that batch size (×)", height=340)
    fig.add_hline(y=1.0, line_color=theme.MODE_COLOURS[Mode.AR], line_width=2, annotation_text="AR = 1×",
                  annotation_position="bottom right", annotation_font_size=11)
    for mode, colour in (("EESD", theme.MODE_COLOURS[Mode.EESD]), ("PPSD", theme.PPSD_COLOURS[0])):
        fig.add_scatter(x=table["batch size"], y=table[f"{mode} ×"], mode="lines+markers", name=f"best {mode}",
                        line=dict(color=colour, width=2.5), customdata=table[f"best {mode} plan"],
                        hovertemplate="batch %{x}: %{customdata} at %{y:.2f}×<extra></extra>")
    _batch_axis(fig, table["batch size"])
    fig.update_layout(meta={"baseline": baseline, "baseline_y": 1.0})
    return fig


def batch_measured(rows: pd.DataFrame, baseline: str) -> go.Figure:
    """A batched validation's measured speedup per plan at each batch size (rows: plan, batch, measured),
    with AR = 1× as a line."""
    fig = _fig("Measured speedup at each batch size", "batch size (sequences decoded at once)",
               "measured speedup over AR at that batch size (×)", height=340, legend="right")
    fig.add_hline(y=1.0, line_color=theme.MODE_COLOURS[Mode.AR], line_width=2, annotation_text="AR = 1×",
                  annotation_position="bottom right", annotation_font_size=11)
    colours = [theme.MODE_COLOURS[Mode.EESD], *theme.PPSD_COLOURS]
    for i, (plan, sub) in enumerate(rows.sort_values("batch").groupby("plan", sort=True)):
        fig.add_scatter(x=sub["batch"], y=sub["measured"], mode="lines+markers", name=str(plan),
                        line=dict(color=colours[i % len(colours)]),
                        hovertemplate=f"{plan}, batch %{{x}}: %{{y:.2f}}×<extra></extra>")
    _batch_axis(fig, rows["batch"])
    fig.update_layout(meta={"baseline": baseline, "baseline_y": 1.0})
    return fig
