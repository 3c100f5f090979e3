"""Data folders for the dashboard tests: a synthetic profile, a hand-made validation folder in the
format `ppsd validate` writes (docs/contracts.md), and a malformed profile."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ppsd.paths import EXAMPLES_DIR
from ppsd.profile.synthetic import write_synthetic_profile
from sim.timeline import Event
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


def make_multihead(root: Path, name: str = "synth-heads") -> Path:
    """A synthetic profile with three exit heads, as `ppsd profile --heads DIR` writes one: the
    shared head, a "trained" adapter (higher α, costs a little more) and "vocab4096" (cheaper,
    about the trained α), each with its `latency.exit_heads` entry and acceptance rows."""
    from ppsd.profile import load_profile, save_profile
    from ppsd.profile.synthetic import bernoulli_acceptance

    out = root / name
    base = write_synthetic_profile(out, alpha_by_exit=lambda e: 0.5 * synthetic_alpha(e), num_layers=SYNTH_LAYERS,
                                   layer_ms=2.8, head_ms=12.6, hop_ms=0.2, model_id="synthetic-heads-12L")
    meta = json.loads((out / "profile.json").read_text())
    frames = [base.acceptance]
    n_values = meta["latency"]["n_values"]
    for i, (head, ms, boost) in enumerate([("trained", 12.9, 1.6), ("vocab4096", 3.1, 1.5)]):
        acc = bernoulli_acceptance(SYNTH_LAYERS, lambda e: min(0.95, boost * 0.5 * synthetic_alpha(e)), seed=11 + i)
        acc["head"] = head
        frames.append(acc)
        meta["latency"].setdefault("exit_heads", {})[head] = {
            "kind": "linear" if head == "trained" else "linear+vocab", "params": 576 * 576,
            "n_values": n_values, "median_ms": [ms * (1 + 0.1 * j) for j in range(len(n_values))],
            "p10_ms": [ms] * len(n_values), "p90_ms": [ms * 1.2] * len(n_values),
            **({"vocab": 4096} if head.startswith("vocab") else {})}
    meta["acceptance"]["heads"] = ["shared", "trained", "vocab4096"]
    save_profile(out, meta, acceptance=pd.concat(frames, ignore_index=True))
    load_profile(out)  # validates
    return out


def make_heldout(root: Path, model_id: str = "synthetic-heads-12L") -> Path:
    """A held-out head table as `ppsd heads eval` writes it, in a `<model>-heads` folder."""
    out = root / f"{model_id}-heads"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for e in (3, 6, 9):
        for head, f in (("shared", 1.0), ("trained", 1.8), ("vocab4096", 1.7)):
            for cat in ("all", "math", "writing"):
                a = min(0.9, 0.1 * e / 3 * f * (1.2 if cat == "math" else 1.0))
                rows.append({"exit_layer": e, "head": head, "category": cat, "tokens": 100, "alpha": round(a, 4),
                             "beta": round(min(1.0, a + 0.05), 4)})
    pd.DataFrame(rows).to_csv(out / "heldout.csv", index=False)
    return out


def make_estimate_pair(root: Path) -> tuple[Path, Path]:
    """A measured profile and a roofline-style estimate of the same model on the same device name,
    the estimate 10% slow on every layer and 20% fast on the head."""
    measured = make_synthetic(root, "pair-measured")
    estimated = make_synthetic(root, "pair-estimated")
    for path, kind, layer_f, head_f in ((measured, "measured", 1.0, 1.0), (estimated, "estimated", 1.1, 0.8)):
        meta = json.loads((path / "profile.json").read_text())
        meta["kind"] = kind
        meta["model"]["id"] = "pair-model-12L"
        meta["hardware"].update(device="cuda", device_name="NVIDIA TEST GPU", gpu_count=1)
        lat = meta["latency"]
        for stat in ("median_ms", "p10_ms", "p90_ms"):
            lat["layers"][stat] = (np.asarray(lat["layers"][stat]) * layer_f).tolist()
            lat["head"][stat] = (np.asarray(lat["head"][stat]) * head_f).tolist()
        if kind == "estimated":
            meta["estimate"] = {"method": "roofline", "hardware": "test-gpu"}
        (path / "profile.json").write_text(json.dumps(meta))
    return measured, estimated


def make_serve_validation(root: Path, profile_dir: Path, name: str = "serve-validation", *,
                          policies: str | None = None, mismatched: str | None = None, requests: int = 16,
                          output_len: int = 24, replications: int = 4, seed: int = 0) -> Path:
    """A folder as `ppsd validate --serve` writes it, made by validation/serve.py's own functions and types
    (`build_loads`, `ServeRow.from_prediction`, `validation_document`): two Poisson loads at its default
    fractions of AR's capacity and a window of a small trace, on prompts the profile never traced (its own,
    renamed), each (policy, load) predicted by the simulator. The real loop's measurement is stood in for by
    the simulator run again with another seed's acceptance draws on a machine a few per cent off the profile
    (each request's times stretched, `_stretched`); `mismatched`: a policy whose first two requests are recorded
    as differing from AR's output."""
    from ppsd.paths import atomic_write_json
    from ppsd.profile import load_profile
    from sim.serve.policies import parse_policies
    from sim.serve.metrics import summarize
    from sim.serve.predict import predict_serving, simulate_serving
    from sim.serve.scheduler import SchedulerConfig
    from sim.serve.workload import PromptInfo, TraceRow, profile_prompts
    from validation.serve import (JSON_FILE, ServeRow, ServeSettings, build_loads, default_policies,
                                  validation_document)

    profile = load_profile(profile_dir)
    out = root / name
    max_batch = max(profile.batch.sizes)
    specs = policies or default_policies(profile)
    settings = ServeSettings(profile=str(profile_dir), model=None, policies=specs, rates=None,
                             trace="fixture-trace.jsonl", trace_start=0.0, trace_rate=None, num_prompts=requests,
                             output_len=output_len, max_batch=max_batch, max_tokens=2048, replications=replications,
                             prompts="fixture", out=out, force=True, seed=seed, json=False)
    prompts = [PromptInfo(f"unseen-{p.prompt_id}", p.category, p.prompt_tokens, p.text)
               for p in profile_prompts(profile)]
    trace = ("fixture-trace.jsonl", [TraceRow(0.7 * i + 0.3 * (i % 3), 40 + 13 * (i % 5), 20 + 9 * (i % 4))
                                     for i in range(3 * requests)])
    loads = build_loads(settings, profile, prompts, output_len, trace)
    config = SchedulerConfig(max_batch=max_batch)
    rows = []
    for i, load in enumerate(loads):
        for j, policy in enumerate(parse_policies(specs)):
            pred = predict_serving(profile, load.workload, policy, config, replications=replications, seed=seed)
            run = simulate_serving(profile, load.workload, policy, config, seed=seed + 1)
            measured = summarize(_stretched(run.records, 1.0 + 0.03 * ((i + 2 * j) % 4 - 1)))
            bad = [0, 1] if policy.spec() == mismatched else []
            rows.append(ServeRow.from_prediction(policy.spec(), load, pred, measured, not bad, bad, {},
                                                 f"runs/{load.name}.json"))
    doc = validation_document(settings, profile, "synthetic stand-in", parse_policies(specs), loads, rows, prompts,
                              output_len, config)
    (out / "workloads").mkdir(parents=True, exist_ok=True)
    for load in loads:
        load.workload.save(out / "workloads" / f"{load.name}.json")
    atomic_write_json(out / JSON_FILE, doc)
    return out


def _stretched(records, factor: float) -> list:
    """Request timings as a machine `factor` times slower would see them (every time after arrival scaled)."""
    from dataclasses import replace

    def t(r, x):
        return None if x is None else r.arrival_s + factor * (x - r.arrival_s)

    return [replace(r, first_token_s=t(r, r.first_token_s), finish_s=t(r, r.finish_s),
                    token_times=[t(r, x) for x in r.token_times]) for r in records]
