"""`ppsd validate --serve` end to end on tiny-llama with a synthetic profile: the folder's shape (rows per
policy and load with predicted, interval and measured figures, the workloads replayed, each run's
requests) and every request's output against AR alone; bad input refused in one line before any server
starts. The folder's figures are never asserted: timing is not what a test checks."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from ppsd.cli import main
from sim.serve.workload import Workload
from validation import serve as vs

NEW_PROMPTS = ["Tell me about rivers.", "x", "What is two plus two?", "A longer prompt about mountains and seas",
               "hi there", "Name three colours."]


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    from ppsd.profile.synthetic import write_synthetic_profile

    out = tmp_path_factory.mktemp("serveprof") / "p"
    write_synthetic_profile(out, alpha_by_exit=lambda e: 0.1 + 0.12 * e, num_layers=6, layer_ms=1.0, head_ms=2.0,
                            batch_free_tokens=64, batch_sizes=(1, 2, 4))
    return out


@pytest.fixture
def inputs(tmp_path):
    prompts = tmp_path / "new.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": f"new{i}", "category": "c" + str(i % 2), "turns": [t]}) + "\n"
                               for i, t in enumerate(NEW_PROMPTS)))
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": 0.7 * i, "input_tokens": 8 + 5 * i, "output_tokens": 4 + i})
                             + "\n" for i in range(8)))
    return prompts, trace


class FakePrediction:
    """What `predict_serving` returns, as the validation reads it: a band per headline figure and a run."""

    def __init__(self, point: float):
        self.bands = {x: SimpleNamespace(point=point, lo=0.5 * point, hi=2 * point) for x in vs.HEADLINE}
        self.run = SimpleNamespace(metrics=SimpleNamespace(duration_s=1.0, acceptance_rate=0.4))


def fake_predictor(calls: list):
    def predict(profile, workload, policy, config, *, replications, seed):
        assert isinstance(workload, Workload) and config.max_batch == 2
        calls.append((policy.spec(), workload))
        return FakePrediction(100.0)
    return predict


def _argv(profile, prompts, trace, out, *extra):
    return ["validate", "--serve", "--profile", str(profile), "--model", "tiny-llama", "--prompts", str(prompts),
            "--trace", str(trace), "--trace-rate", "8", "--rates", "8", "--num-prompts", "4", "--output-len", "5",
            "--max-batch", "2", "--replications", "0", "--out", str(out), *extra]


def recording(calls: list):
    """The simulator's `predict_serving`, recording what it was asked."""
    from sim.serve.predict import predict_serving

    def predict(profile, workload, policy, config, **kw):
        calls.append((policy.spec(), workload))
        return predict_serving(profile, workload, policy, config, **kw)
    return predict


def test_validate_serve_writes_the_folder_and_every_output_matches_ar(profile, inputs, tmp_path, monkeypatch, capsys):
    prompts, trace = inputs
    calls = []
    monkeypatch.setattr(vs, "_predict_serving", lambda: recording(calls))
    out = tmp_path / "sv"
    assert main(_argv(profile, prompts, trace, out, "--policies", "ppsd:3;goodput:3:3", "--replications", "2",
                      "--json")) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert "expected duration about" in captured.err
    assert json.loads((out / vs.JSON_FILE).read_text()) == doc
    assert doc["out_of_sample"] is True and doc["overlapping_prompt_ids"] == []
    assert set(doc["measured_prompt_ids"]) <= {f"new{i}" for i in range(len(NEW_PROMPTS))}
    assert doc["policies"] == ["ppsd:3", "goodput:3:3"] and [load["kind"] for load in doc["loads"]] == ["poisson", "trace"]
    assert [(r["policy"], r["load"]) for r in doc["rows"]] == [
        ("ppsd:3", "poisson-8"), ("goodput:3:3", "poisson-8"), ("ppsd:3", "trace-8"), ("goodput:3:3", "trace-8")]
    # the predictor saw the very workloads the runs replayed, saved in the folder
    for load in doc["loads"]:
        saved = Workload.load(out / load["workload"])
        assert [w.requests for p, w in calls if w.requests == saved.requests]
    for row in doc["rows"]:
        for x in vs.HEADLINE:
            point = row[f"predicted_{x}"]
            assert math.isfinite(point) and row[f"predicted_{x}_lo"] <= point <= row[f"predicted_{x}_hi"]
            assert math.isfinite(row[f"measured_{x}"]) and row[f"measured_{x}"] > 0
        assert row["outputs_match_ar"] is True and row["completed"] == row["requests"] == 4
        run = json.loads((out / row["run"]).read_text())
        assert len(run["requests"]) == 4 and all(r["token_ids"] for r in run["requests"])
        assert {"client", "http_loop", "engine"} <= set(row["cpu_share"])
        assert ("stage_one" in row["cpu_share"]) == row["policy"].startswith("ppsd")  # PPSD's stage 1 process
        speed = row["machine_speed"]  # the machine's step checked either side of the run
        assert speed["before"] > 0 and speed["after"] > 0 and not any(k.startswith("profile_predicted_") for k in row)
    assert doc["machine_speed"]["retimed"] is False and doc["machine_speed"]["min"] > 0
    assert doc["summary"]["outputs_match_ar"] is True
    assert not list(tmp_path.glob(".sv.*"))  # no temporary folder left


def test_retime_prices_each_run_at_the_machines_speed_beside_the_profiles(profile, inputs, tmp_path, monkeypatch,
                                                                          capsys):
    """With --retime each run is predicted again at the machine's speed around it (the checks before and after),
    the profile's own points kept beside; a machine off the profile's step is warned of. An estimated profile,
    which prices no machine, is refused before any server starts."""
    prompts, trace = inputs
    measured = tmp_path / "measured"
    import shutil

    shutil.copytree(profile, measured)
    meta = json.loads((measured / "profile.json").read_text())
    meta["kind"] = "measured"
    (measured / "profile.json").write_text(json.dumps(meta))
    readings = iter([1.2, 1.5] * 8)
    monkeypatch.setattr(vs.SpeedCheck, "take", lambda self, core: next(readings))
    calls = []
    monkeypatch.setattr(vs, "_predict_serving", lambda: recording(calls))
    out = tmp_path / "sv"
    assert main(_argv(measured, prompts, trace, out, "--policies", "ar", "--retime", "--json")) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["machine_speed"]["retimed"] is True and (doc["machine_speed"]["min"], doc["machine_speed"]["max"]) == (1.2, 1.5)
    assert captured.err.count("warning: the machine's decode step ran +20% before and +50% after") == 2
    assert len(calls) == 4  # each run predicted from the profile, then again at its speed
    for row in doc["rows"]:
        assert row["machine_speed"] == {"before": 1.2, "after": 1.5}
        for x in vs.HEADLINE:  # every price times sqrt(1.2 * 1.5): slower than the profile's own
            assert row[f"predicted_{x}"] >= math.sqrt(1.8) * row[f"profile_predicted_{x}"] * (1 - 1e-9)

    assert main(_argv(profile, prompts, trace, tmp_path / "sv2", "--policies", "ar", "--retime")) == 2
    err = capsys.readouterr().err.strip()
    assert "measured profile" in err and len(err.splitlines()) == 1 and not (tmp_path / "sv2").exists()


def test_outputs_that_differ_from_ar_are_caught():
    """The check can fail: a request whose tokens part from its prompt's AR output, or run past it, is named;
    failed requests and those without token ids are not checked."""
    from runtime.serve.loadgen import RequestResult
    from sim.serve.requests import RequestTiming, ServeRequest

    def result(rid, tokens, ok=True):
        t = RequestTiming(rid, 0.0, 3)
        if ok:
            t.deliver(0.1, len(tokens or [1]))
            t.finish_s = 0.2
        return RequestResult(t, token_ids=tokens)
    requests = {i: ServeRequest(i, 0.0, "a" if i % 2 == 0 else "b", "c", 3, 4) for i in range(6)}
    reference = {"a": [1, 2, 3, 4], "b": [5, 6, 7, 8]}
    results = [result(0, [1, 2, 3]), result(1, [5, 6, 7, 8]), result(2, [1, 9]), result(3, [5, 6, 7, 8, 9]),
               result(4, [7], ok=False), result(5, None)]
    assert vs.mismatches(results, requests, reference) == ([2, 3], 4)


@pytest.mark.parametrize("extra,words", [
    (["--policies", "eesd:7:2"], "outside 1..5"), (["--policies", "bogus"], "is not one of"),
    (["--rates", "0"], "--rates 0"), (["--rates", "a,b"], "not a list"), (["--trace-rate", "-2"], "trace-rate -2"),
    (["--max-batch", "8"], "outside the sizes"), (["--num-prompts", "1"], "num-prompts 1")])
def test_bad_input_is_refused_in_one_line_before_any_server(profile, inputs, tmp_path, extra, words, capsys):
    prompts, trace = inputs
    argv = _argv(profile, prompts, trace, tmp_path / "sv")
    for flag, value in zip(extra[::2], extra[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    assert not (tmp_path / "sv").exists()


def test_a_malformed_trace_and_an_existing_folder_are_refused(profile, inputs, tmp_path, capsys, monkeypatch):
    prompts, trace = inputs
    monkeypatch.setattr(vs, "_predict_serving", lambda: fake_predictor([]))
    trace.write_text('{"arrival_s": 0, "input_tokens": 5, "output_tokens": 3}\n{"arrival_s": 1}\n')
    assert main(_argv(profile, prompts, trace, tmp_path / "sv")) == 2
    assert "line 2" in capsys.readouterr().err
    (tmp_path / "sv").mkdir()
    assert main(_argv(profile, prompts, trace, tmp_path / "sv")) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--force" in err
