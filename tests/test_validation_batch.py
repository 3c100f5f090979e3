"""validation/batch.py: `ppsd validate --batch-sizes` measures AR and EESD plans at each batch size in turns
on prompts the profile never traced, puts each beside the batched prediction with its interval, checks
greedy outputs, and writes the folder; a profile measured by default holds the batch tables it needs."""

from __future__ import annotations

import json

import pytest

from conftest import make_tiny_profile
from ppsd.cli import main
from ppsd.profile import load_profile
from validation.batch import parse_eesd_plans, summary, BatchRow
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
    assert main(["validate", "--profile", str(tiny_profile), "--batch-sizes", "1,2", "--plans", "eesd:3:2;eesd:4:1",
                 "--prompts", str(prompts), "--limit", "4", "--repeats", "1", "--warmup", "0", "--draws", "5",
                 "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["plan"], r["batch"]) for r in doc["rows"]] == [("EESD E=3 γ=2", 1), ("EESD E=4 γ=1", 1),
                                                             ("EESD E=3 γ=2", 2), ("EESD E=4 γ=1", 2)]
    assert doc["summary"]["pairs"] == 4 and doc["summary"]["lossless_same_batch"] is True
    assert doc["prompts"] == ["n0", "n1", "n2", "n3"]
    for r in doc["rows"]:
        assert r["low"] <= r["predicted"] <= r["high"] or r["low"] <= r["high"]
    assert (out / "batch_validation.csv").read_text().startswith("plan,batch,predicted")


def test_ppsd_plans_are_refused_with_batch_sizes(tiny_profile):
    with pytest.raises(UserError, match="PPSD does not run batched"):
        parse_eesd_plans("ppsd:3:2", load_profile(tiny_profile))


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
    lo0, hi0 = interval(profile, 3, 2, 2, prompts=4, draws=60, seed=0)
    monkeypatch.setattr(spread, "latency_cv", lambda profile, plan: 0.1)
    lo1, hi1 = interval(profile, 3, 2, 2, prompts=4, draws=60, seed=0)
    assert hi1 - lo1 > hi0 - lo0
    assert lo1 <= point <= hi1
