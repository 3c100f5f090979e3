"""ppsd/validation_folder.py: the folder `ppsd validate` writes and the dashboard reads (torch-free)."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import pytest

from dashboard import data
from ppsd import validation_folder as vf
from ppsd.errors import UserError
from ppsd.paths import PROJECT_ROOT
from ppsd.modes import Mode
from sim.plan import MeasuredDetails, Plan, Result, SimulatedDetails

# a folder `ppsd validate` wrote on 2026-11-30 (once examples/smollm2-135m-cpu-validation, measured
# against a profile since re-measured): the oldest format the module must still read and write
COMMITTED = PROJECT_ROOT / "tests" / "fixtures" / "validation-folder-2026-11-30"


def _rewrite(src, out):
    """The committed folder's rows written again through this module."""
    doc = json.loads((src / vf.JSON_FILE).read_text())
    rows = [vf.ValidationRow.from_dict(r) for r in doc["rows"]]
    new = vf.make_doc(rows, profile=doc["profile"], model=doc["model"], device_name=doc["device_name"],
                      forced_trace=doc["forced_trace"], exit_head=doc["exit_head"], ar_reference=doc["ar_reference"],
                      ar_tokens_per_s_runs=doc["ar_tokens_per_s_runs"], created=doc["created"])
    # summaries derived from the rows that this module learnt to add after the folder was written
    new = {k: v for k, v in new.items() if k in doc or k not in ("machine_drift", "breakdown")}
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
    assert [f for f in vf.ROW_FIELDS if f not in vf.OPTIONAL_FIELDS] == list(doc["rows"][0])


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
    # same budget: when measured; intervals: when predicted with one
    assert list(d) == [f for f in vf.ROW_FIELDS if f not in vf.OPTIONAL_FIELDS]
    assert vf.ValidationRow.from_dict(d) == row
    both = row.with_same_budget(0.74, 0.7)
    assert list(both.to_dict()) == [f for f in vf.ROW_FIELDS if f not in vf.OPTIONAL_FIELDS or f in vf.SAME_BUDGET_COLUMNS]
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


def _row(plan, predicted, measured):
    return vf.ValidationRow(plan=plan.label(), mode=plan.mode, exit_layer=plan.exit_layer, draft_len=None, stages=2,
                            stage_bounds=None, predicted_tokens_per_s=10.0, measured_tokens_per_s=10.0,
                            measured_tokens_per_s_p10=9.0, measured_tokens_per_s_p90=11.0,
                            predicted_speedup=predicted, measured_speedup=measured, speedup_error_pct=0.0,
                            tokens_per_s_error_pct=0.0, outputs_match_ar=True)


def test_intervals_and_coverage_in_the_document(tmp_path):
    ar = _row(Plan(Mode.AR), 1.0, 1.0).with_interval(1.0, 1.0)
    inside = _row(Plan(Mode.PPSD, exit_layer=4), 1.1, 1.05).with_same_budget(0.8, 0.75).with_interval(1.0, 1.2)
    outside = _row(Plan(Mode.PPSD, exit_layer=6), 1.1, 1.3).with_interval(1.0, 1.2)
    assert inside.covered() and not outside.covered() and _row(Plan(Mode.AR), 1.0, 1.0).covered() is None
    # the same-budget twin is scaled like the speedup's interval
    assert inside.predicted_speedup_vs_ar_tp_lo == pytest.approx(0.8 / 1.1, abs=1e-4) and \
        inside.predicted_speedup_vs_ar_tp_hi == pytest.approx(0.8 * 1.2 / 1.1, abs=1e-4)
    src = vf.prompt_sources(predicted_from="/p", prediction_prompt_ids=["a", "b"], measured_prompt_ids=["c", "d"],
                            measured_prompts="profile")
    doc = vf.make_doc([ar, inside, outside], profile="/m", model="m", device_name="cpu", forced_trace=False,
                      exit_head="shared", ar_reference="once", ar_tokens_per_s_runs=[10.0], sources=src,
                      interval={"level": 0.9, "prompts_n": 2})
    assert doc["out_of_sample"] is True and doc["coverage"] == 0.5 and doc["coverage_plans"] == 2
    assert doc["prediction_prompt_ids"] == ["a", "b"] and doc["measured_prompt_ids"] == ["c", "d"]
    assert list(doc)[-1] == "rows" and list(doc)[:12] == ["schema_version", "created", "profile", "model",
                                                           "device_name", "mape_speedup_pct", "mape_tokens_per_s_pct",
                                                           "forced_trace", "exit_head", "ar_reference",
                                                           "ar_tokens_per_s_runs", "machine_drift"]
    assert list(doc)[12] == "predicted_from"
    vf.write_validation(tmp_path, doc)
    with open(tmp_path / vf.CSV_FILE, newline="") as fh:
        header = next(csv.reader(fh))
    assert header[-4:] == vf.INTERVAL_COLUMNS
    back = vf.read_rows(tmp_path, {**vf.read_doc(tmp_path), "rows": []})  # from the CSV
    assert back[2]["predicted_speedup_lo"] == 1.0 and back[2]["predicted_speedup_hi"] == 1.2


def test_out_of_sample_only_when_the_prompt_sets_are_disjoint():
    def oos(pred, meas, **kw):
        return vf.prompt_sources(predicted_from="/p", prediction_prompt_ids=pred, measured_prompt_ids=meas,
                                 measured_prompts="profile", **kw)["out_of_sample"]

    assert oos(["a", "b"], ["c"]) is True
    assert oos(["a", "b"], ["b", "c"]) is False  # one shared prompt is enough to make it in sample
    assert oos(["a", "b"], ["a", "b"]) is False
    assert oos(["a"], ["z"], overlap=["z"]) is False  # the same prompt text under another id


def test_breakdown_separates_forced_paying_and_in_sample_rows():
    from dataclasses import replace

    def row(e, pred, meas, forced=None):
        r = _row(Plan(Mode.PPSD, exit_layer=e), pred, meas)
        return replace(r, speedup_error_pct=round(100 * (pred - meas) / meas, 3), forced_alpha=forced)

    ar = _row(Plan(Mode.AR), 1.0, 1.0)
    slow = row(4, 0.9, 1.0).with_in_sample(0.95)        # real acceptance, not paying
    pays = row(6, 1.1, 1.2).with_in_sample(1.2)         # real acceptance, paying
    forced = row(8, 1.5, 1.5, forced=0.9)               # forced, paying
    assert pays.paying and forced.paying and not slow.paying and not ar.paying
    assert pays.speedup_error_in_sample_pct == 0.0 and slow.speedup_error_in_sample_pct == pytest.approx(-5.0)
    doc = vf.make_doc([ar, slow, pays, forced], profile="/m", model="m", device_name="cpu", forced_trace=False,
                      exit_head="shared", ar_reference="once", ar_tokens_per_s_runs=[10.0])
    b = doc["breakdown"]
    assert b["real_acceptance"] == {"plans": 2, "mape_speedup_pct": pytest.approx(9.1665, abs=1e-3),
                                    "worst_error_pct": 10.0}
    assert b["forced"]["plans"] == 1 and b["forced"]["mape_speedup_pct"] == 0.0
    assert b["paying"]["plans"] == 2 and b["paying"]["threshold"] == vf.PAYING_SPEEDUP
    assert b["paying_real_acceptance"]["plans"] == 1
    assert b["in_sample"] == {"plans": 2, "mape_speedup_pct": 2.5, "worst_error_pct": 5.0}
    assert forced.plan == Plan(Mode.PPSD, exit_layer=8).label()  # the row label is the caller's (from_results adds α)
    assert "breakdown" not in vf.make_doc([ar, row(4, 0.9, 1.0)], profile="/m", model="m", device_name="cpu", forced_trace=False,
                                          exit_head="shared", ar_reference="once", ar_tokens_per_s_runs=[10.0])


def test_machine_drift_flags_an_ar_far_from_the_profiles_price():
    ar = _row(Plan(Mode.AR), 1.0, 1.0)  # predicted 10 tokens/s
    calm = vf.make_doc([ar], profile="/m", model="m", device_name="cpu", forced_trace=False, exit_head="shared",
                       ar_reference="once", ar_tokens_per_s_runs=[10.2, 10.1, 10.3])["machine_drift"]
    assert calm["drift_pct"] == 2.0 and calm["flagged"] is False and calm["ar_measured_tokens_per_s"] == 10.2
    fast = vf.make_doc([ar], profile="/m", model="m", device_name="cpu", forced_trace=False, exit_head="shared",
                       ar_reference="once", ar_tokens_per_s_runs=[10.8, 11.0])["machine_drift"]
    assert fast["drift_pct"] == pytest.approx(9.0) and fast["flagged"] and "faster" in fast["note"]
    emulated = vf.make_doc([ar], profile="/m", model="m", device_name="cpu", forced_trace=False, exit_head="shared",
                           ar_reference="once", ar_tokens_per_s_runs=[11.0], emulated=True)["machine_drift"]
    assert emulated["flagged"] is False  # waits do not drift with the machine


def test_rounds_report_their_spread_and_the_noise_floor():
    ar = _row(Plan(Mode.AR), 1.0, 1.0)
    a = replace(_row(Plan(Mode.PPSD, exit_layer=4), 1.1, 1.0), measured_speedup_rounds=[0.9, 1.0, 1.1])
    b = replace(_row(Plan(Mode.PPSD, exit_layer=6), 1.2, 1.2), measured_speedup_rounds=[1.2, 1.2, 1.2])
    kw = dict(profile="/m", model="m", device_name="cpu", forced_trace=False, exit_head="shared",
              ar_reference="bracketed", ar_tokens_per_s_runs=[10.0])
    doc = vf.make_doc([ar, a, b], rounds=3, **kw)
    noise = doc["measurement_noise"]
    assert doc["rounds"] == 3 and noise["plans"] == 2
    assert noise["median_round_spread_pct"] == pytest.approx((20.0 + 0.0) / 2, abs=0.01)
    # plan a: SD 0.1 of a mean of 1.0; the median of 3 draws has SE 0.6698 SD; E|e| = sqrt(2/pi) SE
    assert noise["noise_floor_mape_pct"] == pytest.approx((100 * 0.7979 * 0.6698 * 0.1 + 0.0) / 2, abs=0.01)
    assert "rounds" not in vf.make_doc([ar, a, b], **kw)  # one round: nothing to report
    assert doc["rows"][1]["measured_speedup_rounds"] == [0.9, 1.0, 1.1] and "measured_speedup_rounds" not in \
        doc["rows"][0]
    assert "measured_speedup_rounds" not in vf.csv_text([vf.ValidationRow.from_dict(r) for r in doc["rows"]])


def test_corun_drift_flags_stages_that_slow_each_other_more_than_profiled():
    from ppsd.validation_folder import corun_summary

    assert corun_summary() == {} and corun_summary(1.05, []) == {}
    d = corun_summary(1.05, [1.20, 1.22])["corun_drift"]
    assert d["measured_slowdown"] == 1.21 and d["drift_pct"] == pytest.approx(100 * (1.21 / 1.05 - 1), abs=0.01)
    assert d["flagged"] and "1.210x" in d["note"] and "1.22x" in d["note"] and "re-profile" in d["note"]
    assert d["spread_pct"] == pytest.approx(100 * 0.02 / 1.21, abs=0.01)
    calm = corun_summary(1.05, [1.06, 1.04, 1.07])["corun_drift"]
    assert not calm["flagged"] and calm["measured_slowdown"] == 1.06 and "within 5%" in calm["note"]
    faster = corun_summary(1.30, [1.05])["corun_drift"]
    assert faster["flagged"] and faster["drift_pct"] < 0 and "less than then" in faster["note"]


def test_simulated_timeline_is_clipped_to_the_measured_span():
    from ppsd.validation_folder import clip_to_span
    from sim.timeline import Event

    measured = [Event("forward", "stage 1", 0.0, 0.5), Event("forward", "stage 1", 0.5, 0.5)]  # ends at 1.0 s
    simulated = [Event("draft", "device 0", t / 4, 0.25) for t in range(16)]  # a 4 s replay of more tokens
    kept = clip_to_span(simulated, measured)
    assert [e.start_s for e in kept] == [0.0, 0.25, 0.5, 0.75]
    assert clip_to_span(simulated, []) == simulated and clip_to_span([], measured) == []


def test_a_host_stall_is_found_in_a_measured_timeline_and_warned_of():
    from sim.timeline import Event
    from validation.report import drift_warnings

    # stage 1 drafts at ~50 ms and stage 2 verifies at ~25 ms, one draft held 2.7 s; long prefills are no stall
    events = [Event("draft", "stage 1", i * 0.06, 0.05 + 0.001 * (i % 3)) for i in range(40)]
    events += [Event("verify", "stage 2", i * 0.06, 0.025) for i in range(40)]
    events += [Event("draft", "stage 1", 3.0, 2.7), Event("prefill", "stage 1", 0.0, 3.4)]
    excess, longest = vf.host_stall(events)
    assert longest == pytest.approx(2.7) and excess == pytest.approx(2.7 - 0.051, abs=0.002)
    assert vf.host_stall([*events[:-2], events[-1]]) is None  # a steady run, its long prefill included, has none
    doc = {"rows": [{"plan": "PPSD E=24 k=2", "host_stall_s": excess, "longest_pass_s": longest}, {"plan": "AR"}]}
    assert any("PPSD E=24 k=2 caught a host stall: one pass took 2.70 s" in w for w in drift_warnings(doc))
