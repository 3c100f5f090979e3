"""An α curve a user gives (acceptance by exit layer or relative depth, in any of the forms papers
report: `sim.model.acceptance_forms`), read and interpolated (torch-free). `ppsd plan --alpha-curve`
plans with it; `ppsd profile --analytic --alpha-curve` draws an estimated profile's traces from it."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ppsd.errors import UserError
from sim.model.acceptance_forms import AcceptanceForm, to_alpha

ACCEPTANCE_COLUMNS = tuple(f.value for f in AcceptanceForm)  # alpha | acceptance_rate | mean_accepted


@dataclass(frozen=True)
class AlphaCurve:
    """An α curve as read: α per point (converted when the file gives another form) and, per point,
    the statement of how its α was obtained, both in x order."""

    kind: str  # "relative_depth" | "exit_layer"
    x: np.ndarray
    alpha: np.ndarray
    form: AcceptanceForm  # the form the file gave
    statements: tuple[str, ...]


def _curve_rows(path: Path, text: str) -> list[dict]:
    if path.suffix.lower() == ".json" or text.lstrip().startswith(("{", "[")):
        obj = json.loads(text)
        forms = [f for f in ACCEPTANCE_COLUMNS if isinstance(obj, dict) and f in obj]
        if forms:  # columns: {"exit_layer": [...], "<form>": [...], "draft_len": G or [...]}
            key = "relative_depth" if "relative_depth" in obj else "exit_layer"
            cols = {k: obj[k] for k in (key, *forms)}
            n = len(cols[key])
            if "draft_len" in obj:
                g = obj["draft_len"]
                cols["draft_len"] = g if isinstance(g, list) else [g] * n
            for k, v in cols.items():
                if not isinstance(v, list) or len(v) != n:
                    raise ValueError(f"{k!r} is not a list as long as {key!r}")
            return [dict(zip(cols, vals)) for vals in zip(*cols.values())]
        if isinstance(obj, dict):  # a plain mapping {x: α}
            keys = list(obj)
            depth = any("." in str(k) for k in keys) or all(float(k) < 1 for k in keys)
            key = "relative_depth" if depth else "exit_layer"
            return [{key: k, "alpha": v} for k, v in obj.items()]
        if isinstance(obj, list):
            return obj
        raise ValueError("not an object or a list")
    return list(csv.DictReader(text.splitlines()))


def _row_draft_len(row: dict, draft_len: int | None, where: str) -> int | None:
    """The row's γ: its draft_len column, else the caller's --draft-len; both and different is an error."""
    cell = row.get("draft_len")
    if cell is None or str(cell).strip() == "":
        return draft_len
    g = float(cell)
    if g != int(g) or g < 1:
        raise UserError(f"{where} has draft_len {cell!r}", "give draft lengths as whole numbers >= 1")
    if draft_len is not None and int(g) != draft_len:
        raise UserError(f"{where} says draft_len {int(g)} but --draft-len is {draft_len}",
                        "drop --draft-len or make the two agree")
    return int(g)


def read_alpha_curve(path: str | Path, draft_len: int | None = None) -> AlphaCurve:
    """Read an α curve in any acceptance form. CSV: a header with `relative_depth` or `exit_layer`
    and one of `alpha` (per position), `acceptance_rate` (LayerSkip's accepted / drafted) or
    `mean_accepted` (Spec-Bench's tokens per draft-and-verify round, bonus included); the last two
    need the γ they were measured at, from a `draft_len` column or `draft_len` here (--draft-len).
    JSON: {"relative_depth"|"exit_layer": [...], "<form>": [...], "draft_len": G or [...]}, a list of
    row objects, or a plain mapping {"0.25": 0.8, ...} of α (keys below 1 or with a decimal point =
    relative depth, else exit layers). Each point is converted to α by `sim.model.acceptance_forms.to_alpha`
    (independent positions)."""
    path = Path(path)
    fix = ('write a CSV with a header "exit_layer,alpha" (or relative_depth; or acceptance_rate / mean_accepted '
           'with a draft_len column) and one row per point, or JSON {"relative_depth": [...], "alpha": [...]}')
    if not path.is_file():
        raise UserError(f"alpha curve file {path} does not exist", fix)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read alpha curve {path} ({exc.__class__.__name__})", fix) from None
    try:
        rows = _curve_rows(path, text)
        kinds = {("relative_depth" if "relative_depth" in r else "exit_layer") for r in rows}
        if len(kinds) > 1:
            raise ValueError("rows mix relative_depth and exit_layer")
        forms = {f for r in rows for f in ACCEPTANCE_COLUMNS if f in r}
        if len(forms) > 1:
            raise ValueError(f"it gives {' and '.join(sorted(forms))}: give one acceptance column")
        if rows and not forms:
            raise ValueError(f"no acceptance column: name one {' | '.join(ACCEPTANCE_COLUMNS)}")
        kind = kinds.pop() if kinds else "exit_layer"
        form = AcceptanceForm(forms.pop() if forms else "alpha")
        x = np.array([float(r[kind]) for r in rows])
        values = [float(r[form.value]) for r in rows]
        gammas = [_row_draft_len(r, draft_len, f"alpha curve {path}, {kind} {r[kind]}") for r in rows]
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
        raise UserError(f"alpha curve {path} is malformed ({exc})", fix) from None
    if len(x) == 0:
        raise UserError(f"alpha curve {path} has no points", fix)
    if form is AcceptanceForm.ALPHA and not all(0.0 <= v <= 1.0 for v in values):
        raise UserError(f"alpha curve {path} has α values outside [0, 1]",
                        "give α per position between 0 and 1 (tokens per round go in a mean_accepted column, "
                        "with draft_len)")
    if form.needs_draft_len and None in gammas:
        raise UserError(f"alpha curve {path} gives {form.value} without the draft length it was measured at",
                        "add a draft_len column (or pass --draft-len G)")
    conversions = []
    for xi, v, g in zip(x, values, gammas):
        try:
            conversions.append(to_alpha(form, v, g))
        except UserError as exc:  # name the file and the point
            raise UserError(f"alpha curve {path}, {kind} {xi:g}: {exc.problem}", exc.fix) from None
    a = np.array([c.alpha for c in conversions])
    if kind == "relative_depth" and np.any((x <= 0) | (x >= 1)):
        raise UserError(f"alpha curve {path} has relative depths outside (0, 1)",
                        "give relative depths E/N strictly between 0 and 1")
    if kind == "exit_layer" and np.any(x < 1):
        raise UserError(f"alpha curve {path} has exit layers below 1", "give exit layers 1..N-1")
    order = np.argsort(x, kind="stable")
    x, a = x[order], a[order]
    if np.any(np.diff(x) == 0):
        raise UserError(f"alpha curve {path} lists the same point twice", "give each depth / exit layer once")
    return AlphaCurve(kind, x, a, form, tuple(conversions[i].statement for i in order))


def load_alpha_curve(path: str | Path, draft_len: int | None = None) -> tuple[str, np.ndarray, np.ndarray]:
    """`read_alpha_curve` as (kind, x sorted, α)."""
    curve = read_alpha_curve(path, draft_len)
    return curve.kind, curve.x, curve.alpha


def alpha_at(kind: str, x: np.ndarray, a: np.ndarray, exit_layer: int, num_layers: int) -> float:
    """Linear interpolation of the curve at an exit layer; past the ends the end value holds."""
    pos = exit_layer / num_layers if kind == "relative_depth" else float(exit_layer)
    return float(np.interp(pos, x, a))


