"""ppsd/validation_folder.py: the folder `ppsd validate` writes and the dashboard reads (torch-free)."""

from __future__ import annotations

import csv
import json

import pytest

from dashboard import data
from ppsd import validation_folder as vf
from ppsd.errors import UserError
from ppsd.paths import EXAMPLES_DIR
from sim.modes import Mode
from sim.plan import MeasuredDetails, Plan, Result, SimulatedDetails

COMMITTED = EXAMPLES_DIR / "smollm2-135m-cpu-validation"


def _rewrite(src, out):
    """The committed folder's rows written again through this module."""
    doc = json.loads((src / vf.JSON_FILE).read_text())
    rows = [vf.ValidationRow.from_dict(r) for r in doc["rows"]]
    new = vf.make_doc(rows, profile=doc["profile"], model=doc["model"], device_name=doc["device_name"],
                      forced_trace=doc["forced_trace"], exit_head=doc["exit_head"], ar_reference=doc["ar_reference"],
                      ar_tokens_per_s_runs=doc["ar_tokens_per_s_runs"], created=doc["created"])
    vf.write_validation(out, new)
    return doc, new


def test_the_committed_folder_is_written_again_byte_for_byte(tmp_path):
    doc, new = _rewrite(COMMITTED, tmp_path)
    # the CSV exactly; the JSON too, but for the note added to the committed one by hand
    assert (tmp_path / vf.CSV_FILE).read_bytes() == (COMMITTED / vf.CSV_FILE).read_bytes()
    committed = {k: v for k, v in doc.items() if k != "note"}
    assert (tmp_path / vf.JSON_FILE).read_text() == json.dumps(committed, indent=1) + "\n"
    assert list(new) == list(committed) and new["mape_speedup_pct"] == doc["mape_speedup_pct"]
    assert new["mape_tokens_per_s_pct"] == doc["mape_tokens_per_s_pct"]
    with open(COMMITTED / vf.CSV_FILE, newline="") as fh:
        assert next(csv.reader(fh)) == vf.CSV_COLUMNS
    assert [f for f in vf.ROW_FIELDS if f not in vf.SAME_BUDGET_COLUMNS] == list(doc["rows"][0])


def test_rows_read_back_from_the_csv_when_the_json_lists_none(tmp_path):
    _rewrite(COMMITTED, tmp_path)
    doc = json.loads((tmp_path / vf.JSON_FILE).read_text())
    from_json = vf.read_rows(tmp_path)
    from_csv = vf.read_rows(tmp_path, {**doc, "rows": []})
    assert [set(r) for r in from_csv] == [set(vf.CSV_COLUMNS)] * len(from_json)
    assert from_csv == [{k: r[k] for k in vf.CSV_COLUMNS} for r in from_json]


def test_a_wrong_schema_version_or_no_rows_is_one_line(tmp_path):
    (tmp_path / vf.JSON_FILE).write_text(json.dumps({"schema_version": 7, "rows": []}))
    with pytest.raises(UserError, match="schema_version 7"):
        vf.read_doc(tmp_path)
    (tmp_path / vf.JSON_FILE).write_text(json.dumps({"schema_version": vf.SCHEMA_VERSION, "rows": []}))
    with pytest.raises(UserError, match="no plans"):
        data.load_validation(tmp_path)


def test_a_row_from_results():
    plan = Plan(Mode.PPSD, exit_layer=6, stage_bounds=(0, 6, 12), exit_head="trained")
    pred = Result(plan, "simulated", 100, 5.0, 20.0, speedup_vs_ar=1.25, acceptance_rate=0.5,
                  details=SimulatedDetails("event", "trace", 0.5, 16.0))
    meas = Result(plan, "measured", 100, 5.5, 18.0, acceptance_rate=0.45,
                  details=MeasuredDetails(17.5, 18.5, 17.0, 19.0, [18.0], 1, 0.1, 1.0))
    row = vf.ValidationRow.from_results(plan, pred, meas, 15.0, True)
    assert row.mode is Mode.PPSD and row.plan == plan.label() and row.stage_bounds == [0, 6, 12]
    assert row.draft_len is None and row.stages == 2
    assert (row.measured_speedup, row.predicted_speedup) == (1.2, 1.25)
    assert row.speedup_error_pct == pytest.approx(100 * (1.25 - 1.2) / 1.2, abs=1e-3)
    assert row.measured_tokens_per_s_p10 == 17.5 and row.ar_reference_tokens_per_s == 15.0
    d = row.to_dict()
    assert d["mode"] == "ppsd" and type(d["mode"]) is str
    assert list(d) == [f for f in vf.ROW_FIELDS if f not in vf.SAME_BUDGET_COLUMNS]  # same budget: when measured
    assert vf.ValidationRow.from_dict(d) == row
    both = row.with_same_budget(0.74, 0.7)
    assert list(both.to_dict()) == vf.ROW_FIELDS
    assert both.speedup_vs_ar_tp_error_pct == pytest.approx(100 * (0.74 - 0.7) / 0.7, abs=1e-3)
    assert "measured_speedup_vs_ar_tp" in vf.csv_text([row, both]).splitlines()[0]
    assert "measured_speedup_vs_ar_tp" not in vf.csv_text([row]).splitlines()[0]
    text = {k: "" if v is None else str(v) for k, v in row.to_csv_dict().items()}  # as csv writes it
    assert vf.ValidationRow.from_csv_dict(text) == vf.ValidationRow.from_dict({**d, "measured_acceptance_rate": None,
                                                                              "predicted_acceptance_rate": None})


def test_timeline_names_carry_a_non_shared_head():
    assert vf.timeline_name(Plan(Mode.AR), vf.MEASURED) == "ar.measured.json"
    assert vf.timeline_slug(Plan(Mode.EESD, exit_layer=10, draft_len=3)) == "eesd-e10-g3"
    assert vf.timeline_slug(Plan(Mode.EESD, exit_layer=10, draft_len=3, exit_head="vocab4096")) == \
        "eesd-e10-g3-vocab4096"
    assert vf.timeline_name(Plan(Mode.PPSD, exit_layer=15, stages=2, exit_head="trained"), vf.SIMULATED) == \
        "ppsd-e15-k2-trained.simulated.json"
    with pytest.raises(ValueError):
        vf.timeline_name(Plan(Mode.AR), "guessed")


def test_the_dashboard_finds_the_timelines_of_a_non_shared_head(tmp_path):
    folder = tmp_path / "runs" / "validate-heads"
    _rewrite(COMMITTED, folder)
    shared = Plan(Mode.PPSD, exit_layer=6, stages=2)
    trained = Plan(Mode.PPSD, exit_layer=6, stages=2, exit_head="trained")
    for plan in (shared, trained):
        for kind in vf.TIMELINE_KINDS:
            path = vf.timeline_path(folder, plan, kind)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"traceEvents": []}))
    val = data.load_validation(folder)
    assert set(val.timelines_for(trained)) == {vf.MEASURED, vf.SIMULATED}
    assert val.timelines_for(trained)[vf.MEASURED].name == "ppsd-e6-k2-trained.measured.json"
    assert val.timelines_for(shared)[vf.MEASURED].name == "ppsd-e6-k2.measured.json"
    assert val.timelines_for(Plan(Mode.PPSD, exit_layer=6, stages=2, exit_head="vocab4096")) == {}
    # the Timeline page's default pick for the plan it simulates
    names = [f"runs/validate-heads: {slug}" for slug in val.timeline_files()]
    assert names[data.default_recording(names, trained)].endswith(": ppsd-e6-k2-trained")
    assert names[data.default_recording(names, shared)].endswith(": ppsd-e6-k2")
