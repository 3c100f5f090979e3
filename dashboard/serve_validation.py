"""Serving validations on the Under traffic page: folders written by `ppsd validate --serve` (serve_validation.json,
validation/serve.py; docs/contracts.md) read and shown as predicted against measured per policy and load, with the
interval, the error and whether every output matched AR's. No Streamlit here, so tests read the tables and the
figure spec directly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard import data
from dashboard.charts import _fig, interval_band
from dashboard.traffic import COLOURS, FIGURES, compact_legend, policy_words, rate_axis
from ppsd.errors import UserError
from ppsd.validation_folder import SERVE_JSON_FILE
from sim.serve.predict import HEADLINE

SCHEMA_VERSION = 1
REDO = "re-run `ppsd validate --serve` with this ppsd"


@dataclass
class ServeValidation:
    """One folder: its serve_validation.json (`meta`) and its rows, one per (policy, load)."""

    path: Path
    meta: dict
    rows: pd.DataFrame

    def load_words(self, name: str) -> str:
        """A load in words: "Poisson, 0.3 req/s" or "trace, 0.2 req/s" (a window of a recorded trace)."""
        load = self.load(name)
        rate = load.get("rate")
        how = {"poisson": "Poisson", "trace": "trace"}.get(load.get("kind"), str(name))
        return how + ("" if rate is None else f", {rate:.2g} req/s")

    def load(self, name: str) -> dict:
        return next((x for x in self.meta.get("loads") or [] if x.get("name") == name), {})

    def is_trace(self, name: str) -> bool:
        return self.load(name).get("kind") == "trace"


def read(path: str | Path) -> ServeValidation:
    """A folder's serve_validation.json, checked: a one-line UserError naming the folder as the sidebar does."""
    path = Path(path)
    name = data.display_name(path)
    try:
        doc = json.loads((path / SERVE_JSON_FILE).read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {SERVE_JSON_FILE} of {name} ({exc.__class__.__name__})", REDO) from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        raise UserError(f"{name} has schema version {version!r}; this dashboard reads {SCHEMA_VERSION}", REDO)
    rows = [r for r in doc.get("rows") or [] if isinstance(r, dict)]
    need = {"policy", "load", "rate"} | {f"{k}_{x}" for x in HEADLINE for k in ("predicted", "measured")}
    if not rows or any(need - set(r) for r in rows):
        raise UserError(f"{name} lists no complete (policy, load) rows", REDO)
    table = pd.DataFrame(rows)
    for col in table.columns:
        if col.startswith(("predicted_", "measured_", "error_")) and col.endswith(("_ms", "_lo", "_hi", "_pct")):
            table[col] = pd.to_numeric(table[col], errors="coerce")
    return ServeValidation(path, doc, table.sort_values(["rate", "load"], kind="stable").reset_index(drop=True))


def order(folders: list[Path], profile_path: str | None, model_id: str | None,
          roots: list[Path] | None = None) -> list[tuple[Path, bool]]:
    """(folder, whether it validated the selected profile), the selected profile's first, then the same model's,
    newest first within each."""
    def facts(p: Path) -> tuple[bool, bool, str]:
        try:
            doc = json.loads((p / SERVE_JSON_FILE).read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        info = data.ValidationInfo(p, doc.get("profile"), str(doc.get("created") or ""), False)
        return data.belongs_to(info, profile_path, roots), bool(model_id) and doc.get("model") == model_id, info.created

    got = [(p, *facts(p)) for p in folders]
    got.sort(key=lambda x: (not x[1], not x[2], [-ord(c) for c in x[3]]))
    return [(p, mine) for p, mine, _, _ in got]


# --- what the page shows ----------------------------------------------------------------------------------
def same_output(row: dict) -> str:
    v = row.get("outputs_match_ar")
    if v is None or v != v:
        return "not checked"
    if bool(v):
        return "yes, all"
    bad = row.get("mismatched_requests") or []
    return f"NO: {len(bad)} differ" if bad else "NO: differs"


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def interval_words(row: dict, x: str) -> str:
    """The 90% interval of figure `x` and whether it holds the measurement: "74.5–92.4, holds it"."""
    lo, hi, got = (_num(row.get(k)) for k in (f"predicted_{x}_lo", f"predicted_{x}_hi", f"measured_{x}"))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "not computed"
    inside = "not measured" if not np.isfinite(got) else ("holds it" if lo <= got <= hi else "misses it")
    return f"{lo:.1f}–{hi:.1f}, {inside}"


def table(v: ServeValidation, figure: str = "tpot_p50_ms") -> tuple[pd.DataFrame, dict]:
    """Per (policy, load), for `figure` (the caption names it): predicted, measured, the error, the 90% interval
    and whether it holds the measurement, whether every output matched AR's, requests completed (the key columns
    first), and {header: (format, word for a missing value)} for `tables.worded`."""
    records = v.rows.to_dict("records")
    out = pd.DataFrame({
        "policy": [policy_words(r["policy"]) for r in records],
        "load": [v.load_words(r["load"]) for r in records],
        "predicted (ms)": [r[f"predicted_{figure}"] for r in records],
        "measured (ms)": [r[f"measured_{figure}"] for r in records],
        "error": [r.get(f"error_{figure}_pct", np.nan) for r in records],
        "90% interval (ms)": [interval_words(r, figure) for r in records],
        "same output as AR": [same_output(r) for r in records],
        "requests": [f"{r.get('completed', '?')}/{r.get('requests', '?')}" for r in records],
    })
    out["error"] = pd.to_numeric(out["error"], errors="coerce")
    formats = {"predicted (ms)": ("{:.1f}", "none finished"), "measured (ms)": ("{:.1f}", "none finished"),
               "error": ("{:+.1f}%", "not measured")}
    return out, formats


def errors_table(v: ServeValidation) -> tuple[pd.DataFrame, dict]:
    """Per (policy, load), the error of every figure (predicted against measured, %)."""
    records = v.rows.to_dict("records")
    out = {"policy": [policy_words(r["policy"]) for r in records], "load": [v.load_words(r["load"]) for r in records]}
    for x in HEADLINE:
        out[FIGURES[x]] = pd.to_numeric([r.get(f"error_{x}_pct") for r in records], errors="coerce")
    frame = pd.DataFrame(out)
    return frame, {FIGURES[x]: ("{:+.1f}%", "not measured") for x in HEADLINE}


@dataclass(frozen=True)
class Summary:
    coverage: float | None          # share of measured figures inside their predicted interval
    median_error_pct: float | None  # median |error| of `figure` over the rows
    matched: int                    # rows whose every output matched AR's
    judged: int                     # rows whose outputs were checked
    out_of_sample: bool


def summary(v: ServeValidation, figure: str = "tpot_p50_ms") -> Summary:
    cov = (v.meta.get("summary") or {}).get("coverage")
    err = pd.to_numeric(v.rows.get(f"error_{figure}_pct"), errors="coerce").abs().dropna()
    judged = [x for x in v.rows.get("outputs_match_ar", pd.Series(dtype=object)) if x is not None and x == x]
    return Summary(None if cov is None else float(cov), float(err.median()) if len(err) else None,
                   sum(bool(x) for x in judged), len(judged), bool(v.meta.get("out_of_sample")))


def chart(v: ServeValidation, figure: str = "tpot_p50_ms") -> go.Figure:
    """Per policy, the simulator's prediction of `figure` at each load measured and the measurement at each (a
    diamond of the policy's colour): the Poisson loads as a curve with its 90% interval shaded, a trace window as
    a square with its interval as a bar (another kind of workload: not on the curve)."""
    name = FIGURES[figure]
    fig = _fig(f"{name}: predicted (curves, 90% intervals) and measured on the real loop (diamonds)",
               "requests a second (log scale)", f"{name} (ms)", height=440)
    for i, (spec, part) in enumerate(v.rows.groupby("policy", sort=False)):
        colour, words = COLOURS[i % len(COLOURS)], policy_words(spec)
        part = part.sort_values("rate", kind="stable")
        trace = part["load"].map(v.is_trace).astype(bool)
        curve, windows = part[~trace], part[trace]
        interval_band(fig, curve["rate"], curve[f"predicted_{figure}_lo"], curve[f"predicted_{figure}_hi"], colour,
                      words)
        fig.add_scatter(x=curve["rate"], y=curve[f"predicted_{figure}"], mode="lines+markers", name=words,
                        line=dict(color=colour, width=2), marker=dict(size=6), legendgroup=f"band {words}",
                        text=[v.load_words(x) for x in curve["load"]],
                        hovertemplate=f"{words} predicted<br>%{{text}}: %{{y:.1f}} ms<extra></extra>")
        if len(windows):
            point = windows[f"predicted_{figure}"]
            fig.add_scatter(x=windows["rate"], y=point, mode="markers", name=f"{words}, trace window", meta="trace",
                            marker=dict(symbol="square-open", size=10, color=colour), legendgroup=f"band {words}",
                            error_y=dict(type="data", symmetric=False, color=colour,
                                         array=(windows[f"predicted_{figure}_hi"] - point).tolist(),
                                         arrayminus=(point - windows[f"predicted_{figure}_lo"]).tolist()),
                            text=[v.load_words(x) for x in windows["load"]],
                            hovertemplate=f"{words} predicted<br>%{{text}}: %{{y:.1f}} ms<extra></extra>")
        fig.add_scatter(x=part["rate"], y=part[f"measured_{figure}"], mode="markers", name=f"{words} measured",
                        marker=dict(symbol="diamond", size=12, color=colour, line=dict(width=1.5, color="#222")),
                        legendgroup=f"band {words}", meta="measured", text=[v.load_words(x) for x in part["load"]],
                        hovertemplate=f"{words} measured<br>%{{text}}: %{{y:.1f}} ms<extra></extra>")
    compact_legend(fig)
    rate_axis(fig, v.rows["rate"])
    return fig


def profile_name(recorded: str | None) -> str:
    """The profile a validation recorded, as the sidebar names folders; an absolute path outside the data roots
    by its folder name alone (this page shows no machine's paths)."""
    if not recorded:
        return "not recorded"
    path = Path(recorded)
    if not path.is_absolute():
        return recorded
    shown = data.display_name(path)
    return shown if not Path(shown).is_absolute() else path.name


def facts_line(v: ServeValidation) -> str:
    """Where and how it was measured, one line for a caption."""
    m = v.meta
    sample = ("prompts the profile never traced" if m.get("out_of_sample") else
              f"prompts of which {len(m.get('overlapping_prompt_ids') or [])} the profile traced")
    return (f"Model {m.get('model', 'not recorded')} on {m.get('device_name') or 'a device not recorded'}, "
            f"{str(m.get('created', ''))[:16].replace('T', ' ') or 'at a time not recorded'}; profile "
            f"`{profile_name(m.get('profile'))}`; max batch {m.get('max_batch', '?')}, {m.get('output_len', '?')} "
            f"tokens a request, {len(m.get('measured_prompt_ids') or [])} {sample}; intervals from "
            f"{m.get('replications', '?')} replications."
            + "".join(f" Trace window: {n}." for x in m.get("loads") or [] if x.get("kind") == "trace"
                      for n in x.get("notes") or []))
