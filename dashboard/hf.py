"""The Validation page's part for transformers' own early-exit assisted generation: what a
`ppsd validate --runtime hf` folder measured, and a `python -m bench.hf_check` comparison (hf_check.json)
kept in the same folder or beside it, ppsd's EESD and transformers' at the same exit and γ."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

HF_CHECK = "hf_check.json"


def is_hf(meta: dict) -> bool:
    return meta.get("runtime") == "hf"


HF_CHECK_DIR = "hf-check"  # a bench folder's sibling of its validation/: the layout under examples/


def find_hf_check(folder: Path) -> Path | None:
    """hf_check.json in the validation folder, in its parent (a bench folder holding both), or in an
    `hf-check/` folder beside it."""
    folder = Path(folder)
    for f in (folder / HF_CHECK, folder.parent / HF_CHECK, folder.parent / HF_CHECK_DIR / HF_CHECK):
        if f.is_file():
            return f
    return None


def check_table(doc: dict) -> pd.DataFrame:
    """One row per (exit, γ, schedule): ppsd's EESD and transformers' side by side."""
    out = []
    for row in doc.get("pairs") or []:
        p = row["ppsd_eesd"]
        for schedule, h in (row.get("hf") or {}).items():
            out.append({"exit layer": row["exit_layer"], "draft length γ": row["draft_len"], "schedule": schedule,
                        "ppsd tokens/s": p["tokens_per_s"], "transformers tokens/s": h["tokens_per_s"],
                        "ppsd ÷ transformers": h["ppsd_over_hf"],
                        "ppsd acceptance": p.get("acceptance_rate"), "transformers acceptance": h.get("acceptance_rate"),
                        "ppsd × its own AR": p["speedup_vs_own_ar"],
                        "transformers × its own AR": h["speedup_vs_own_ar"],
                        "transformers predicted ×": h.get("predicted_speedup"),
                        "same output as AR": "yes" if bool(p.get("outputs_match_ar")) and bool(h.get("outputs_match_ar"))
                        else "no"})
    return pd.DataFrame(out)


def render(st, folder: Path, meta: dict) -> None:
    """The hf runtime's note and, when there is one, the side-by-side comparison."""
    if is_hf(meta):
        st.info("Measured with **transformers' own generate** (`ppsd validate --runtime hf`): AR is its plain greedy "
                "`generate`, each EESD row `generate(assistant_early_exit=E)` with γ0 = γ under the schedule its label "
                "names (`[hf]` constant, `[hf heuristic]`); speedups are against transformers' AR, predicted with "
                "its per-round host overhead (the profile's `latency.hf`).", icon=":material/swap_horiz:")
    f = find_hf_check(folder)
    if f is None:
        return
    try:
        doc = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError):
        st.caption(f"`{f}` could not be read.")
        return
    table = check_table(doc)
    if table.empty:
        return
    st.subheader("ppsd's EESD beside transformers' assisted generation")
    ar = doc.get("ar") or {}
    st.caption(f"`{f.name}` ({str(doc.get('created', '?'))[:19]}, {doc.get('cpu', '?')}, {len(doc.get('prompts') or [])} "
               f"prompts × {doc.get('max_new_tokens')} tokens, {doc.get('rounds')} interleaved rounds): AR ppsd "
               f"{(ar.get('ppsd') or {}).get('tokens_per_s', float('nan')):.2f} tokens/s, transformers "
               f"{(ar.get('hf') or {}).get('tokens_per_s', float('nan')):.2f} tokens/s. Same exit (the model's norm + "
               "LM head after layer E), same γ, same prompts.")
    st.dataframe(table, hide_index=True, width="stretch")
