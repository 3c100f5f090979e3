"""`ppsd validate` end to end on the tiny model: the folder it writes and what it says."""

import csv
import json

import pytest

from ppsd.cli import main
from profiler.schema import load_profile
from ppsd.validation_folder import CSV_COLUMNS, SAME_BUDGET_COLUMNS
from runtime.validate import pick_round_robin

TINY = ["profile", "--model", "tiny-llama", "--limit", "4", "--max-new-tokens", "8", "--n-values", "1,2,4",
        "--context-values", "8,32", "--repeats", "2", "--warmup", "1", "--corun-max", "1", "--no-hop",
        "--thread-counts", "1,2"]


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    out = tmp_path_factory.mktemp("validate") / "tiny"
    mp = pytest.MonkeyPatch()
    mp.setenv("PPSD_CACHE", str(out.parent / "cache"))
    try:
        assert main([*TINY, "--out", str(out)]) == 0
    finally:
        mp.undo()
    return out


def test_validate_writes_the_folder_and_the_outputs_match_ar(tiny_profile, tmp_path, capsys):
    out = tmp_path / "val"
    rc = main(["validate", "--profile", str(tiny_profile), "--plans", "eesd:2:3;ppsd:3:2", "--repeats", "1",
               "--warmup", "0", "--stage-timeout", "60", "--cores", "2", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "validation.json").read_text())
    assert [r["mode"] for r in doc["rows"]] == ["ar", "eesd", "ppsd"]
    for r in doc["rows"]:
        assert r["measured_tokens_per_s"] > 0 and r["predicted_tokens_per_s"] > 0
    assert all(r["outputs_match_ar"] for r in doc["rows"][1:])  # greedy: lossless
    spec = doc["rows"][1:]
    # AR is measured again after each plan; each speedup is against the two AR runs around its plan
    runs = doc["ar_tokens_per_s_runs"]
    assert doc["ar_reference"] == "bracketed" and len(runs) == 3 and all(x > 0 for x in runs)
    for i, r in enumerate(spec):
        assert r["ar_reference_tokens_per_s"] == pytest.approx((runs[i] + runs[i + 1]) / 2, rel=1e-3)
        assert r["measured_speedup"] == pytest.approx(r["measured_tokens_per_s"] / r["ar_reference_tokens_per_s"],
                                                      rel=1e-3)
    assert doc["mape_speedup_pct"] == pytest.approx(sum(abs(r["speedup_error_pct"]) for r in spec) / len(spec),
                                                    abs=1e-2)
    with open(out / "validation.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == CSV_COLUMNS + SAME_BUDGET_COLUMNS and len(rows) == 3
    # same budget (2 cores): predicted from the profile's 2-thread tables, measured against AR on 2 threads
    assert doc["budget"] == "2 cores" and doc["mape_speedup_vs_ar_tp_pct"] >= 0
    assert doc["rows"][0]["measured_speedup_vs_ar_tp"] == 1.0
    for r in spec:
        assert r["predicted_speedup_vs_ar_tp"] > 0 and r["measured_speedup_vs_ar_tp"] > 0
    names = sorted(p.name for p in (out / "timelines").iterdir())
    assert "ar.measured.json" in names and "ppsd-e3-k2.simulated.json" in names
    assert "MAPE speedup" in capsys.readouterr().out
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left behind


def test_validate_refuses_bad_input_in_one_line(tiny_profile, tmp_path, capsys):
    n = load_profile(tiny_profile).num_layers
    for args, words in ((["--plans", f"eesd:{n}:3"], "out of range"), (["--plans", "beam:2:2"], "not eesd or ppsd")):
        out = tmp_path / "never"
        assert main(["validate", "--profile", str(tiny_profile), *args, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0] and not out.exists()


def test_round_robin_spans_the_categories():
    gens = [{"prompt_id": str(i), "category": c} for i, c in enumerate("aaabbbccc")]
    assert [g["category"] for g in pick_round_robin(gens, 4)] == ["a", "b", "c", "a"]
    assert pick_round_robin(gens, 0) == gens and len(pick_round_robin(gens, 50)) == 9
