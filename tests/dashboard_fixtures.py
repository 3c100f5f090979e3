"""Data folders for the dashboard tests: a synthetic profile, a hand-made validation folder in the
format `ppsd validate` writes (docs/contracts.md), and a malformed profile."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ppsd.paths import EXAMPLES_DIR
from profiler.synthetic import write_synthetic_profile
from sim.plan import Event
from sim.timeline import write_chrome_trace

EXAMPLE = EXAMPLES_DIR / "smollm2-135m-cpu"
SYNTH_LAYERS = 12


def synthetic_alpha(e: int) -> float:
    # rises with depth like the real model's exits, so the best exit is neither end
    return min(0.1 + 0.85 * (e / SYNTH_LAYERS) ** 1.5, 0.95)


def make_synthetic(root: Path, name: str = "synth") -> Path:
    out = root / name
    write_synthetic_profile(out, alpha_by_exit=synthetic_alpha, num_layers=SYNTH_LAYERS, layer_ms=2.8, head_ms=12.6,
                            hop_ms=0.2, model_id="synthetic-12L")
    return out


def make_validation(root: Path, name: str = "validate-synth") -> Path:
    out = root / name
    rows = []
    for plan, mode, e, g, k, pred, meas in [("AR", "ar", None, None, 1, 1.0, 1.0),
                                            ("EESD E=8 γ=3", "eesd", 8, 3, 1, 1.12, 1.05),
                                            ("PPSD E=6 k=2", "ppsd", 6, None, 2, 1.41, 1.30),
                                            ("PPSD E=4 k=3", "ppsd", 4, None, 3, 1.22, 1.31)]:
        rows.append({"plan": plan, "mode": mode, "exit_layer": e, "draft_len": g, "stages": k,
                     "stage_bounds": "0,6,12" if k == 2 else ("0,4,8,12" if k == 3 else None),
                     "predicted_tokens_per_s": 18.0 * pred, "measured_tokens_per_s": 18.0 * meas,
                     "measured_tokens_per_s_p10": 17.0 * meas, "measured_tokens_per_s_p90": 19.0 * meas,
                     "predicted_speedup": pred, "measured_speedup": meas,
                     "speedup_error_pct": 100 * (pred - meas) / meas, "tokens_per_s_error_pct": 100 * (pred - meas) / meas,
                     "outputs_match_ar": True})
    out.mkdir(parents=True, exist_ok=True)
    (out / "validation.json").write_text(json.dumps({
        "schema_version": 1, "created": "2026-01-02T03:04:05+00:00", "profile": "examples/synth",
        "model": "synthetic-12L", "device_name": "test cpu", "mape_speedup_pct": 6.1, "mape_tokens_per_s_pct": 6.1,
        "rows": rows}))
    pd.DataFrame(rows).to_csv(out / "validation.csv", index=False)
    events = []
    t = 0.0
    for tok in range(6):
        events.append(Event("draft", "stage 1", t, 0.010, tok))
        events.append(Event("hop", "stage 1", t + 0.010, 0.0002, tok))
        events.append(Event("verify", "stage 2", t + 0.0102, 0.012, tok))
        if tok == 3:
            events.append(Event("flush", "stage 1", t + 0.0222, 0.001, tok))
        t += 0.011
    write_chrome_trace(out / "timelines" / "ppsd-e6-k2.measured.json", events)
    write_chrome_trace(out / "timelines" / "ppsd-e6-k2.simulated.json", events)
    return out


def make_malformed(root: Path, name: str = "broken") -> Path:
    out = root / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.json").write_text(json.dumps({"schema_version": 99}))
    return out
