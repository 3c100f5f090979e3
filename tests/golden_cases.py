"""The cases behind tests/golden_sim.json: profiles, sweeps, simulations and closed forms whose
figures a refactor must leave unchanged (to 1e-9).

First recorded before the simulator was reorganised into one home per scheme (issue 11; AR and
EESD figures are still those). Re-recorded once on purpose when the PPSD engines were made to
follow the runtime's protocol (issue 13: stage 1's in-flight cap, the epoch board read between
layers, the per-pass control-plane cost): PPSD figures moved by −2.3% … +12% (mean +0.1 … +1.3%
per sweep), the largest where the epoch board tells stage 1 of a rejection at the commit, a hop
before the verdict arrives, so it skips an exit head it used to run. Re-recorded a second time
for two intended changes: the PPSD decode clock (a generation's time runs from its first commit to
its last, scaled by L/(L-1), as the runtime's clock does, instead of including the pipeline fill),
and the committed example profile, which was re-measured with trained and reduced-vocabulary heads
on held-out prompts (issue 12). And a third time for sampled decoding's own work (issue 14: at T > 0
every drawn token pays a measured draw, `latency.sampling`, and the PPSD verifier runs the exit head
again for the draft's distribution, as the runtime does): only the two sampled cases moved. And a
fourth time for two PPSD changes that follow the runtime (issue 13): a generation's first pass is its
prefill (stage 1 drafts on while later stages are still in the prompt), and at T > 0 the verifier
recomputes the draft's distribution only to reject (q(draft) now comes with the draft): PPSD sweep
figures moved by −0.4% … +2.3% (mean +0.2%), AR and EESD not at all. And a fifth time for the
committed example profile alone, re-measured on 2026-12-02 with every n of an EESD verification
(1–9, 16; the old one held 1, 2, 4, 8, 16) and the pipeline probe in rounds: no model code changed.
And a sixth time (2026-12-03) for the committed example profile alone, re-measured on the Intel
machine: no model code changed.

`python tests/golden_cases.py --write` re-records them (only when a model change is intended and
reviewed)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOLDEN = Path(__file__).with_name("golden_sim.json")
EXAMPLE = ROOT / "examples" / "smollm2-135m-cpu"


def make_profiles(tmp: Path) -> dict:
    """name -> Profile. Deterministic: synthetic profiles are seeded."""
    from ppsd.profile import load_profile, save_profile
    from ppsd.profile.synthetic import bernoulli_acceptance, synthetic_meta, write_synthetic_profile

    out = {"example": load_profile(EXAMPLE)}
    # non-uniform layers, per-token cost, co-run slowdown and a hop: every cost term moves
    out["synth"] = write_synthetic_profile(tmp / "synth", alpha_by_exit=lambda e: 0.15 + 0.06 * e, num_layers=14,
                                           layer_ms=list(np.linspace(2.0, 3.5, 14)), head_ms=9.0, hop_ms=0.3,
                                           corun_slowdown=1.2, per_token_fraction=0.07, model_id="synth-14L")
    # a pipeline probe (hop, slowdown, pass jitter) and a second, cheap exit head with its own traces
    meta = synthetic_meta(num_layers=12, layer_ms=list(np.linspace(1.0, 1.6, 12)), head_ms=6.0, hop_ms=0.1,
                          corun_slowdown=1.15, per_token_fraction=0.05, model_id="synth-12L-heads")
    meta["latency"]["pipeline"] = {"exit_layer": 6, "stage_bounds": [0, 6, 12], "backend": "synthetic",
                                   "passes": 0, "slowdown": 1.08, "pass_cv": 0.03,
                                   "hop": {"median_ms": 0.25, "p10_ms": 0.2, "p90_ms": 0.3, "samples": 0}}
    meta["latency"]["exit_heads"] = {"vocab512": {"kind": "vocab", "params": 1000, "vocab": 512,
                                                  "n_values": meta["latency"]["n_values"],
                                                  "median_ms": [0.3, 0.32, 0.35, 0.4, 0.5],
                                                  "p10_ms": [0.3, 0.32, 0.35, 0.4, 0.5],
                                                  "p90_ms": [0.3, 0.32, 0.35, 0.4, 0.5]}}
    shared = bernoulli_acceptance(12, lambda e: 0.2 + 0.06 * e, seed=1)
    vocab = bernoulli_acceptance(12, lambda e: 0.1 + 0.05 * e, seed=2)
    vocab["head"] = "vocab512"
    import pandas as pd

    acc = pd.concat([shared, vocab], ignore_index=True)
    meta["acceptance"] = {"temperature": 1.0, "max_new_tokens": 64, "prompt_set": "synthetic",
                          "num_prompts": int(acc["prompt_id"].nunique()),
                          "categories": sorted(acc["category"].unique().tolist()), "heads": ["shared", "vocab512"]}
    save_profile(tmp / "heads", meta, acceptance=acc)
    out["heads"] = load_profile(tmp / "heads")
    return out


SWEEPS = [
    ("example", dict(devices=8)),
    ("example", dict(devices=4, hop_ms=1.0, alpha_scale=1.5)),
    ("example", dict(devices=3, alpha_scale=0.5, temperature=1.0, tokens=700)),
    ("example", dict(devices=2, category="math", tokens=500)),
    ("synth", dict(devices=6)),
    ("synth", dict(devices=5, hop_ms=2.0, alpha_scale=1.25, tokens=900)),
    ("heads", dict(devices=4, exit_head="vocab512")),
    ("heads", dict(devices=4, hop_ms=0.0, gammas=[1, 2, 3])),
]

# (profile, plan fields, simulate keyword arguments)
SIMULATIONS = [
    ("example", dict(mode="ar"), {}),
    ("example", dict(mode="eesd", exit_layer=20, draft_len=3), {}),
    ("example", dict(mode="eesd", exit_layer=10, draft_len=1), dict(engine="fast")),
    ("example", dict(mode="ppsd", exit_layer=15, stages=2), {}),
    ("example", dict(mode="ppsd", exit_layer=15, stages=2), dict(engine="fast")),
    ("example", dict(mode="ppsd", exit_layer=10, stages=4), {}),
    ("example", dict(mode="ppsd", exit_layer=15, stage_bounds=[0, 15, 22, 30]), {}),
    ("example", dict(mode="ppsd", exit_layer=12, stages=3, placement=[0, 0, 1]), {}),
    ("example", dict(mode="ppsd", exit_layer=20, stages=2), dict(acceptance="bernoulli", alpha=0.7, tokens=3000, seed=3)),
    ("example", dict(mode="eesd", exit_layer=24, draft_len=4), dict(acceptance="bernoulli", alpha=0.6, tokens=1500, seed=1)),
    ("example", dict(mode="ppsd", exit_layer=20, stages=2), dict(temperature=1.0, seed=5)),
    ("example", dict(mode="ppsd", exit_layer=24, stages=3, hop_ms=0.5), dict(tokens=2500)),
    ("example", dict(mode="ppsd", exit_layer=15, stages=2), dict(timeline=True, tokens=300)),
    ("example", dict(mode="eesd", exit_layer=20, draft_len=2), dict(timeline=True, tokens=300)),
    ("synth", dict(mode="ppsd", exit_layer=5, stages=3), {}),
    ("synth", dict(mode="eesd", exit_layer=9, draft_len=5), dict(category="math")),
    ("heads", dict(mode="ppsd", exit_layer=6, stages=3, exit_head="vocab512"), {}),
    ("heads", dict(mode="ppsd", exit_layer=4, stages=2), dict(engine="fast", tokens=5000)),
    ("heads", dict(mode="eesd", exit_layer=8, draft_len=3, exit_head="vocab512"), {}),
]

# (profile, plan fields, alpha): closed-form time per token at the smallest profiled context
CLOSED_FORMS = [
    ("example", dict(mode="ar"), 0.5),
    ("example", dict(mode="eesd", exit_layer=20, draft_len=4), 0.6),
    ("example", dict(mode="ppsd", exit_layer=15, stages=2), 0.8),
    ("example", dict(mode="ppsd", exit_layer=10, stages=3), 0.5),
    ("example", dict(mode="ppsd", exit_layer=24, stages=2), 1.0),
    ("example", dict(mode="ppsd", exit_layer=24, stages=4), 0.0),
    ("heads", dict(mode="ppsd", exit_layer=6, stages=3, exit_head="vocab512"), 0.7),
    ("synth", dict(mode="ppsd", exit_layer=7, stages=4, hop_ms=0.5), 0.9),
]


def _plain(v):
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, str):
        return str(v)
    return v


def result_figures(r) -> dict:
    """The figures a Result carries that a refactor must not change."""
    d = r.to_json_dict()
    keep = ("mode", "exit_layer", "draft_len", "stages", "stage_bounds", "placement", "hop_ms", "exit_head",
            "tokens", "time_s", "tokens_per_s", "speedup_vs_ar", "mean_accepted", "accepted_hist",
            "acceptance_rate", "stage_busy", "device_busy", "stream_alpha", "ar_tokens_per_s", "rounds",
            "generations", "acceptance_source", "label")
    out = {k: _plain(d.get(k)) for k in keep}
    out["timeline_events"] = len(r.timeline)
    return out


def columns(rows: list[dict]) -> dict:
    """Rows of one shape as {"columns": [...], "rows": [[...], ...]} (a third of the size)."""
    cols = list(rows[0]) if rows else []
    return {"columns": cols, "rows": [[r[c] for c in cols] for r in rows]}


def rows(table: dict) -> list[dict]:
    return [dict(zip(table["columns"], r)) for r in table["rows"]]


def close(a, b, rel: float = 1e-9) -> bool:
    """Recursive equality, floats to `rel` relative."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)
    return a == b


def record(tmp: Path) -> dict:
    """Compute every case with the simulator as it is now."""
    from sim import api
    from sim.planner import heads as hd
    from sim.plan import Plan

    profiles = make_profiles(tmp)
    out = {"sweeps": [], "heads": [], "simulations": [], "closed_forms": []}
    for name, kw in SWEEPS:
        rs = api.sweep(profiles[name], **kw)
        out["sweeps"].append({"profile": name, "kwargs": _plain(kw), "results": columns([result_figures(r) for r in rs])})
    by_head = hd.sweep_heads(profiles["heads"], devices=3, tokens=800)
    merged = hd.merge(by_head)
    out["heads"] = {"merged": columns([result_figures(r) | {"head_rank": r.details.head_rank} for r in merged]),
                    "comparison": _plain(hd.comparison(profiles["heads"], by_head))}
    for name, fields, kw in SIMULATIONS:
        r = api.simulate(profiles[name], Plan(**{k: (tuple(v) if isinstance(v, list) else v)
                                                 for k, v in fields.items()}), **kw)
        out["simulations"].append({"profile": name, "plan": fields, "kwargs": _plain(kw), "result": result_figures(r)})
    for name, fields, alpha in CLOSED_FORMS:
        plan = api.resolve_plan(Plan(**fields), profiles[name])
        cf = api.closed_form(profiles[name], plan, alpha)
        out["closed_forms"].append({"profile": name, "plan": fields, "alpha": alpha, "figures": _plain(cf)})
    return out


if __name__ == "__main__":
    import tempfile

    if "--write" not in sys.argv:
        sys.exit("usage: python tests/golden_cases.py --write   (re-records tests/golden_sim.json)")
    with tempfile.TemporaryDirectory() as tmp:
        data = record(Path(tmp))
    GOLDEN.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size // 1024} KB)")
