"""validation/batch.py: `ppsd validate --batch-sizes` measures AR, EESD and PPSD plans at each batch size in turns
on prompts the profile never traced, puts each beside the batched prediction with its interval, checks
greedy outputs, and writes the folder; a profile measured by default holds the batch tables it needs."""

from __future__ import annotations

import json

import pytest

from conftest import make_tiny_profile
from ppsd.cli import main
from ppsd.profile import load_profile
from validation.batch import BatchPlan, BatchRow, parse_plans, summary
from ppsd.modes import Mode
from ppsd.errors import UserError


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    return make_tiny_profile(tmp_path_factory, "vbatch", [
        "profile", "--model", "tiny-llama", "--limit", "4", "--max-new-tokens", "8", "--n-values", "1,2,4",
        "--context-values", "8,32", "--repeats", "2", "--warmup", "1", "--corun-max", "1", "--no-hop"])


def test_a_default_profile_holds_batch_tables(tiny_profile):
    assert load_profile(tiny_profile).batch.sizes == (1, 2, 4, 8)


def test_validate_batch_sizes_writes_every_pair(tiny_profile, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": f"n{i}", "category": "new", "turns": [f"new prompt {i}"]})
                               + "\n" for i in range(4)))
    out = tmp_path / "v"
    assert main(["validate", "--profile", str(tiny_profile), "--batch-sizes", "1,2", "--plans",
                 "eesd:3:2;eesd:4:1;ppsd:3", "--prompts", str(prompts), "--limit", "4", "--repeats", "1",
                 "--warmup", "0", "--draws", "5", "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["plan"], r["batch"]) for r in doc["rows"]] == [
        ("EESD E=3 γ=2", 1), ("EESD E=4 γ=1", 1), ("PPSD E=3 k=2", 1),
        ("EESD E=3 γ=2", 2), ("EESD E=4 γ=1", 2), ("PPSD E=3 k=2", 2)]
    assert doc["summary"]["pairs"] == 6 and doc["summary"]["lossless_same_batch"] is True
    assert doc["summary"]["lossless_batch1"] is True
    ppsd = [r for r in doc["rows"] if r["scheme"] == "ppsd"]
    assert all(r["measured_speedup_vs_ar_tp"] is not None and 0 <= r["measured_acceptance"] <= 1 for r in ppsd)
    assert all(r["measured_speedup_vs_ar_tp"] is None for r in doc["rows"] if r["scheme"] == "eesd")
    if load_profile(tiny_profile).batch.two_threads is not None:  # timed where the machine has two cores
        assert all(r["predicted_speedup_vs_ar_tp"] is not None for r in ppsd)
        assert doc["summary"]["mape_same_budget_ppsd_pct"] is not None
    assert set(doc["pays_up_to"]) == {"best EESD plan", "best PPSD plan"}
    assert doc["prompts"] == ["n0", "n1", "n2", "n3"]
    for r in doc["rows"]:
        assert r["low"] <= r["predicted"] <= r["high"] or r["low"] <= r["high"]
    assert (out / "batch_validation.csv").read_text().startswith("plan,batch,predicted")


def test_batched_plans_parse_and_malformed_ones_are_refused(tiny_profile):
    profile = load_profile(tiny_profile)
    assert parse_plans("eesd:3:2; ppsd:4; ppsd:5:2", profile) == [
        BatchPlan(Mode.EESD, 3, 2), BatchPlan(Mode.PPSD, 4), BatchPlan(Mode.PPSD, 5)]
    for bad in ("ppsd:3:4", "eesd:3", "ar", "ppsd:x"):
        with pytest.raises(UserError, match="eesd:E:γ or ppsd:E"):
            parse_plans(bad, profile)


def test_default_plans_hold_both_schemes(tiny_profile):
    plans = parse_plans(None, load_profile(tiny_profile))
    assert {p.scheme for p in plans} == {Mode.EESD, Mode.PPSD}
    assert len({p.exit_layer for p in plans if p.scheme is Mode.EESD}) == sum(p.scheme is Mode.EESD for p in plans)


def test_summary_counts_coverage_and_width():
    rows = [BatchRow("p", 1, 1.0, 1.1, -9.09, 0.9, 1.2, True, 1, 1, None, None, True, True),
            BatchRow("p", 2, 2.0, 1.0, 100.0, 1.8, 2.2, False, 1, 1, None, None, True, False)]
    s = summary(rows)
    assert s["coverage"] == 0.5 and s["interval_half_width_median_pct"] == pytest.approx(12.5)
    assert s["lossless_batch1"] is False and s["mape_pct"] == pytest.approx(54.545, rel=1e-3)


def test_batched_intervals_carry_the_latency_spread_of_batch_one_intervals(tiny_profile, monkeypatch):
    import sim.intervals.spread as spread
    from sim.batch.sweep import predict
    from validation.batch import interval

    profile = load_profile(tiny_profile)
    point = predict(profile, 3, 2, 2).speedup_vs_ar
    monkeypatch.setattr(spread, "latency_cv", lambda profile, plan: 0.0)
    lo0, hi0 = interval(profile, BatchPlan(Mode.EESD, 3, 2), 2, prompts=4, draws=60, seed=0)
    monkeypatch.setattr(spread, "latency_cv", lambda profile, plan: 0.1)
    lo1, hi1 = interval(profile, BatchPlan(Mode.EESD, 3, 2), 2, prompts=4, draws=60, seed=0)
    assert hi1 - lo1 > hi0 - lo0
    assert lo1 <= point <= hi1
