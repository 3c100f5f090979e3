"""Held-out exit-head tables (`ppsd heads eval` output, e.g. examples/smollm2-135m-heads/heldout.csv)
for the Profile page (no Streamlit here).

A heads folder is named `<model id>-heads` and holds `heldout.csv` with columns exit_layer, head
("shared" = naive, "trained", "vocab<V>"), category ("all" or a Spec-Bench category), tokens,
alpha, beta. It names its model only through the folder name, so that is what is matched.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from dashboard import data
from ppsd.errors import UserError

HELDOUT_FILE = "heldout.csv"
COLUMNS = ["exit_layer", "head", "category", "tokens", "alpha", "beta"]


def norm_model(model_id: str | None) -> str:
    """'HuggingFaceTB/SmolLM2-135M' and 'random:smollm2-135m' both read 'smollm2-135m'."""
    s = str(model_id or "").strip().lower()
    s = s.split(":", 1)[-1] if ":" in s else s
    s = s.rsplit("/", 1)[-1]
    return re.sub(r"[^a-z0-9.]+", "-", s).strip("-")


def find_heldout(model_id: str | None, roots: list[Path] | None = None) -> list[Path]:
    """heldout.csv files of heads folders for this model under the data roots (one level deep)."""
    want = norm_model(model_id)
    if not want:
        return []
    out = []
    for root in data.data_roots() if roots is None else roots:
        if not root.is_dir():
            continue
        for f in sorted(root.glob(f"*-heads/{HELDOUT_FILE}")):
            name = norm_model(f.parent.name[: -len("-heads")])
            # exact, or the profile's id is a variant of it (smollm2-135m-instruct for smollm2-135m)
            if name == want or want.startswith(name + "-"):
                out.append(f)
    return out


def load_heldout(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path} ({exc.__class__.__name__})", "re-run `ppsd heads eval`") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise UserError(f"{path} lacks columns {', '.join(missing)}", "re-run `ppsd heads eval` with this ppsd")
    return df


def head_order(heads) -> list[str]:
    from sim.planner.heads import _order

    return sorted(set(heads), key=_order)


def pivot(df: pd.DataFrame, measure: str = "alpha", category: str = "all") -> pd.DataFrame:
    """Exit layers down, heads across (naive first), one measure for one category; plus each
    head's gain over naive in the same units."""
    sub = df[df["category"] == category]
    table = sub.pivot_table(index="exit_layer", columns="head", values=measure, aggfunc="mean")
    return table[head_order(table.columns)]


def per_category(df: pd.DataFrame, head: str, measure: str = "alpha") -> pd.DataFrame:
    """Categories down, exit layers across, for one head."""
    sub = df[(df["head"] == head) & (df["category"] != "all")]
    return sub.pivot_table(index="category", columns="exit_layer", values=measure, aggfunc="mean")
