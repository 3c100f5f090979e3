"""bench/hf_check.py (ppsd's EESD beside transformers' assisted generation) and the Validation page's
part that shows it (dashboard/hf.py)."""

from __future__ import annotations

import json

import pytest


def test_hf_check_writes_note_and_json(tmp_path):
    from bench import hf_check

    out = tmp_path / "check"
    assert hf_check.main(["--model", "tiny-llama", "--pairs", "3:2", "--limit", "2", "--max-new-tokens", "8",
                          "--rounds", "1", "--warmup", "0", "--out", str(out)]) == 0
    doc = json.loads((out / "hf_check.json").read_text())
    assert doc["ar"]["outputs_match"] is True
    (row,) = doc["pairs"]
    assert row["exit_layer"] == 3 and set(row["hf"]) == {"constant", "heuristic"}
    assert row["ppsd_eesd"]["outputs_match_ar"] and all(h["outputs_match_ar"] for h in row["hf"].values())
    # same drafts, same verifier: at constant γ the acceptance rates agree
    assert row["hf"]["constant"]["acceptance_rate"] == pytest.approx(row["ppsd_eesd"]["acceptance_rate"], abs=0.1)
    note = (out / "NOTE.md").read_text()
    assert "| 3 | 2 |" in note and "ppsd / transformers" in note

    from dashboard.hf import check_table, find_hf_check

    val = out / "validation"
    val.mkdir()
    assert find_hf_check(val) == out / "hf_check.json" and find_hf_check(tmp_path) is None
    # the layout under examples/: validation/ beside hf-check/
    bench = tmp_path / "bench"
    (bench / "validation").mkdir(parents=True)
    (bench / "hf-check").mkdir()
    (bench / "hf-check" / "hf_check.json").write_text((out / "hf_check.json").read_text())
    assert find_hf_check(bench / "validation") == bench / "hf-check" / "hf_check.json"
    table = check_table(doc)
    assert list(table["schedule"]) == ["constant", "heuristic"] and (table["same output as AR"] == "yes").all()


def test_hf_check_refuses_bad_pairs(capsys):
    from bench import hf_check

    assert hf_check.main(["--model", "tiny-llama", "--pairs", "3"]) == 2
    assert "E:γ" in capsys.readouterr().err


def test_validation_page_shows_hf_rows_and_the_side_by_side(monkeypatch, tmp_path):
    """An hf validation (`"runtime": "hf"`) gets its note; an hf_check.json beside it its table."""
    from streamlit.testing.v1 import AppTest

    from dashboard import data
    from dashboard_fixtures import make_validation
    from ppsd.paths import PROJECT_ROOT

    folder = make_validation(tmp_path / "runs", "validate-hf")
    doc = json.loads((folder / "validation.json").read_text())
    doc["runtime"] = "hf"
    (folder / "validation.json").write_text(json.dumps(doc))
    check = {"created": "2026-12-04T08:00:00+00:00", "cpu": "test", "prompts": ["a"], "max_new_tokens": 8, "rounds": 1,
             "ar": {"ppsd": {"tokens_per_s": 15.0}, "hf": {"tokens_per_s": 14.0}},
             "pairs": [{"exit_layer": 24, "draft_len": 4,
                        "ppsd_eesd": {"tokens_per_s": 9.0, "acceptance_rate": 0.4, "speedup_vs_own_ar": 0.6,
                                      "outputs_match_ar": True},
                        "hf": {"constant": {"tokens_per_s": 6.0, "acceptance_rate": 0.4, "speedup_vs_own_ar": 0.43,
                                            "outputs_match_ar": True, "ppsd_over_hf": 1.5}}}]}
    (folder / "hf_check.json").write_text(json.dumps(check))
    monkeypatch.setenv(data.DATA_DIRS_ENV, str(tmp_path / "runs"))
    at = AppTest.from_file(str(PROJECT_ROOT / "dashboard" / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("views/validation.py").run()
    assert not [e.value for e in at.exception] + [e.value for e in at.error]
    assert any("transformers' own generate" in i.value for i in at.info)
    assert any("beside transformers' assisted generation" in h.value for h in at.subheader)
    tables = [d.value for d in at.dataframe]
    assert any("ppsd ÷ transformers" in t.columns and t["ppsd ÷ transformers"].iloc[0] == 1.5 for t in tables)
