"""bench/machine_check.py: the measured prompt sets and the report (the chain itself is a bench)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import machine_check as mc


def _spec_bench_file(path, per_category: int = 4, categories: int = 9) -> Path:
    """A small Spec-Bench-format prompt file: `categories` categories of `per_category` prompts."""
    rows = [{"question_id": 1000 + 10 * c + i, "category": f"cat{c}", "turns": [f"prompt {c}-{i}: say something"]}
            for c in range(categories) for i in range(per_category)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prompt_sets_are_unseen_and_disjoint(tmp_path):
    from ppsd.profile.synthetic import write_synthetic_profile

    source = _spec_bench_file(tmp_path / "prompts.jsonl")
    prof = write_synthetic_profile(tmp_path / "prof", alpha_by_exit=lambda e: 0.5, num_layers=4)
    # the profile traced 1000 and 1010 (by id) and one prompt by its text alone
    gens = [{"prompt_id": "1000", "category": "cat0", "prompt": "x", "prompt_tokens": [1], "token_ids": [2]},
            {"prompt_id": "1010", "category": "cat1", "prompt": "y", "prompt_tokens": [1], "token_ids": [2]},
            {"prompt_id": "p9", "category": "cat2", "prompt": "prompt 2-0: say something", "prompt_tokens": [1],
             "token_ids": [2]}]
    (tmp_path / "prof" / "generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gens))
    profiled = {"1000", "1010", "1020"}
    a = mc.measured_prompt_file(prof.path, None, 0, 8, tmp_path / "a.jsonl", str(source))
    b = mc.measured_prompt_file(prof.path, None, 1, 8, tmp_path / "b.jsonl", str(source))
    assert len(a) == len(b) == 8 and not set(a) & set(b)
    assert not (set(a) | set(b)) & profiled
    rows = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [str(r["question_id"]) for r in rows] == a and all(r["turns"] and r["category"] for r in rows)
    assert len({r["category"] for r in rows}) == 8  # round-robin over categories
    with pytest.raises(SystemExit, match="prompt-set 1000"):
        mc.measured_prompt_file(prof.path, None, 1000, 8, tmp_path / "c.jsonl", str(source))


def _row(plan, mode, pred, meas, lo, hi, profile=None, match=True):
    return {"plan": plan, "mode": mode, "predicted_speedup": pred, "measured_speedup": meas,
            "speedup_error_pct": (pred / meas - 1) * 100, "predicted_speedup_lo": lo, "predicted_speedup_hi": hi,
            "predicted_speedup_profile": profile, "outputs_match_ar": match,
            "predicted_speedup_vs_ar_tp": pred * 0.9, "measured_speedup_vs_ar_tp": meas * 0.9}


def test_headline_and_note_report_both_pricings():
    doc = {"mape_speedup_pct": 5.0, "mape_speedup_vs_ar_tp_pct": 4.0, "coverage": 0.5, "coverage_plans": 2,
           "rows": [{"plan": "AR", "mode": "ar", "predicted_speedup": 1.0, "measured_speedup": 1.0,
                     "speedup_error_pct": 0.0},
                    _row("EESD E=24 γ=3", "eesd", 0.95, 1.0, 0.9, 1.0, profile=0.9),
                    _row("PPSD E=24 k=2", "ppsd", 1.1, 1.0, 1.05, 1.2, profile=1.05, match=False)]}
    h = mc.headline(doc)
    assert h["plans"] == 2 and h["eesd_plans"] == 1 and h["lossless"] is False and h["lossless_plans"] == 2
    assert h["mape_speedup_profile_pct"] == pytest.approx(7.5)  # |0.9/1 - 1| and |1.05/1 - 1|
    # the intervals moved to the profile-priced point: [0.853, 0.947] misses 1.0, [1.002, 1.145] too
    assert h["coverage_profile"] == 0.0
    assert h["signed_mean_error_pct"] == pytest.approx(2.5)
    report = {"headline": h, "machine": {"cpu": "Test CPU", "cores": 2}, "started": "2026-12-04 05:00",
              "finished": "05:40", "minutes": 40.0, "prompt_set": 1, "measured_prompt_ids": ["1", "2"],
              "rows": doc["rows"], "step_minutes": {"profile": 6.0, "validate": 34.0}}
    text = mc.note(report)
    assert text.startswith("# Machine check: Test CPU (2 cores)")
    assert "| speedup MAPE, priced from the profile alone | 7.5% | ≤ 5% |" in text
    assert "| greedy outputs identical to AR | False (2 plans) | all |" in text
    assert "| PPSD E=24 k=2 | 1.100 | 1.000 | +10.0% | 1.050-1.200 | 1.050 | 0.990 / 0.900 |" in text
    # how AR was paired with the plans: in turns, and (two plans an AR turn) on either side of it
    paired = mc.note({**report, "ar_reference": "turns", "protocol": {"turns": 2, "turn_plans": 2}})
    assert "taking turns, a chunk of prompts at a time (`--turns`), 2 plans sharing each AR turn" in paired
    alone = mc.note({**report, "ar_reference": "turns", "protocol": {"turns": 2, "turn_plans": 1}})
    assert "taking turns" in alone and "sharing" not in alone
    # with a budget priced both ways, the profile-priced same-budget MAPE sits under the profile-priced one
    budget_rows = [doc["rows"][0], {**doc["rows"][1], "speedup_vs_ar_tp_error_profile_pct": -3.0},
                   {**doc["rows"][2], "speedup_vs_ar_tp_error_profile_pct": 5.0}]
    hb = mc.headline({**doc, "rows": budget_rows})
    assert hb["mape_speedup_vs_ar_tp_profile_pct"] == pytest.approx(4.0)
    assert "|   its same-budget MAPE | 4.0% | ≤ 5% |" in mc.note({**report, "headline": hb, "rows": budget_rows})
    assert h["mape_speedup_vs_ar_tp_profile_pct"] is None and "its same-budget" not in text
    # how every core was priced: AR's thread gain, and the MAPE had each plan met its own group's AR turns
    assert "ar_thread_gain" not in h and "thread gain" not in text
    ref = {"method": "thread_gain", "ar_thread_gain": 1.02, "ar_thread_gain_priced": 1.03,
           "ar_thread_ratios": [1.0, 1.02, 0.4, 1.05],
           "plans": [{"plan": "EESD E=24 γ=3", "thread_gain": 1.1, "measured_speedup_vs_ar_tp_beside": 1.0},
                     {"plan": "PPSD E=24 k=2", "thread_gain": 1.0, "measured_speedup_vs_ar_tp_beside": 1.1}]}
    hr = mc.headline({**doc, "rows": budget_rows, "budget_reference": ref})
    assert (hr["ar_thread_gain"], hr["ar_thread_gain_priced"], hr["ar_thread_chunks"]) == (1.02, 1.03, 4)
    # against the profile-priced same-budget predictions where there are some
    pred = [r.get("predicted_speedup_vs_ar_tp_profile") or r["predicted_speedup_vs_ar_tp"] for r in budget_rows[1:]]
    assert hr["mape_speedup_vs_ar_tp_beside_pct"] == pytest.approx(
        (abs(pred[0] / 1.0 - 1) + abs(pred[1] / 1.1 - 1)) * 50, abs=0.01)
    noted = mc.note({**report, "headline": hr, "rows": budget_rows})
    assert "| AR on every core / on one thread, this run (median of 4 chunks); the profile prices 1.03x | 1.02x | |" in noted
    assert "its own group's AR turns on every core" in noted


def test_headline_splits_the_error_at_the_measured_prompts_own_acceptance():
    """With --measured-traces each real-acceptance row has a twin at its prompts' own acceptance; a forced
    plan's own prediction stands for it (its acceptance is its forcing)."""
    eesd = {**_row("EESD E=20 γ=3", "eesd", 1.1, 1.0, 1.0, 1.2), "predicted_acceptance_rate": 0.42,
            "measured_acceptance_rate": 0.33, "predicted_speedup_in_sample": 1.02, "speedup_error_in_sample_pct": 2.0,
            "predicted_acceptance_rate_in_sample": 0.34}
    forced = {**_row("PPSD E=15 k=2 forced α=0.9", "ppsd", 0.96, 1.0, 0.9, 1.1), "forced_alpha": 0.9,
              "outputs_match_ar": None}
    doc = {"mape_speedup_pct": 7.0, "rows": [{"plan": "AR", "mode": "ar"}, eesd, forced]}
    h = mc.headline(doc)
    assert h["mape_speedup_own_acceptance_pct"] == pytest.approx(3.0)       # (2 + 4) / 2
    assert h["mape_speedup_own_acceptance_eesd_pct"] == pytest.approx(2.0)
    assert h["acceptance_error_mean_abs"] == pytest.approx(0.09) and h["acceptance_error_own_mean_abs"] == pytest.approx(0.01)
    report = {"headline": h, "machine": {"cpu": "Test CPU", "cores": 2}, "started": "2026-12-04 05:00",
              "finished": "05:40", "minutes": 40.0, "prompt_set": 2, "measured_prompt_ids": ["1"],
              "rows": doc["rows"], "step_minutes": {"traces": 1.5}}
    text = mc.note(report)
    assert "own acceptance (traced before the run): the timing model alone | 3.0% |" in text
    assert "| 1.020, +2.0%, 0.340 |" in text
    # a check made before the traces: no such lines
    plain = mc.headline({"mape_speedup_pct": 7.0, "rows": [{"plan": "AR", "mode": "ar"},
                                                           _row("EESD E=20 γ=3", "eesd", 1.1, 1.0, 1.0, 1.2)]})
    assert plain["mape_speedup_own_acceptance_pct"] is None
    assert "own acceptance" not in mc.note({**report, "headline": plain, "rows": []})


def test_repoint_names_the_folder_the_check_ended_in(tmp_path):
    f = tmp_path / "validation.json"
    f.write_text(json.dumps({"profile": "runs/x.partial/profile", "predicted_from": "runs/x.partial/profile",
                             "measured_prompts": "file runs/x.partial/measured_prompts.jsonl", "rows": []}))
    mc.repoint(f, "runs/x.partial", "examples/x")
    doc = json.loads(f.read_text())
    assert doc["profile"] == doc["predicted_from"] == "examples/x/profile"
    assert doc["measured_prompts"] == "file examples/x/measured_prompts.jsonl" and doc["rows"] == []
