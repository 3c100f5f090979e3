"""`ppsd simulate --serve` and `ppsd plan --rate`: JSON alone on stdout, the chosen policy as config, and bad input
refused in one line with exit 2 and nothing written."""

from __future__ import annotations

import json

import pytest

from ppsd.cli import main
from ppsd.paths import EXAMPLES_DIR
from serve_fixtures import write_serving_profile
from sim.serve.workload import Workload

BATCH_EXAMPLE = str(EXAMPLES_DIR / "smollm2-135m-batch-amd-epyc" / "profile")
NO_BATCH = str(EXAMPLES_DIR / "smollm2-135m-cpu")


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    out = tmp_path_factory.mktemp("serve-cli")
    write_serving_profile(out)
    return str(out)


def test_simulate_serve_json_is_alone_on_stdout_and_saves_its_result(synth, tmp_path, capsys):
    result, work = tmp_path / "r.json", tmp_path / "w.json"
    argv = ["simulate", "--serve", "--profile", synth, "--policy", "eesd:2:3", "--request-rate", "4", "--num-prompts",
            "30", "--replications", "3", "--goodput", "ttft:50", "tpot:20", "--json", "--save-result", str(result),
            "--workload-out", str(work)]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["policy"] == "eesd:2:3" and d["workload"]["requests"] == 30 and d["config"]["max_batch"] == 8
    assert d["predicted_tpot_p50_ms_lo"] <= d["predicted_tpot_p50_ms"] <= d["predicted_tpot_p50_ms_hi"]
    assert d["metrics"]["slo"] == "ttft:50,tpot:20" and d["metrics"]["completed"] == 30
    saved = json.loads(result.read_text())
    assert len(saved["requests"]) == 30 and saved["predicted_e2e_p99_ms"] == d["predicted_e2e_p99_ms"]
    # the saved workload replays to the same prediction
    assert len(Workload.load(work).requests) == 30
    assert main(["simulate", "--serve", "--profile", synth, "--policy", "eesd:2:3", "--workload", str(work),
                 "--replications", "3", "--goodput", "ttft:50,tpot:20", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["predicted_e2e_p99_ms"] == d["predicted_e2e_p99_ms"]


def test_simulate_serve_text_and_a_trace_replay(synth, tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": 0.5 * i, "input_tokens": 100 + i, "output_tokens": 10 + 3 * i})
                             + "\n" for i in range(12)))
    assert main(["simulate", "--serve", "--profile", synth, "--policy", "ppsd:2", "--trace", str(trace),
                 "--request-rate", "3", "--output-len", "16", "--num-prompts", "10", "--replications", "0"]) == 0
    out = capsys.readouterr().out
    assert "Median TPOT (ms):" in out and "policy ppsd:2" in out and "time ×" in out


def test_simulate_serve_sweep_prints_the_crossover(synth, capsys):
    assert main(["simulate", "--serve", "--profile", synth, "--policy", "eesd:2:3", "--sweep-rates", "1,40,100",
                 "--num-prompts", "30", "--replications", "2"]) == 0
    out = capsys.readouterr().out
    assert "p50 TPOT" in out and ("stops beating AR" in out or "beats AR" in out)


def test_plan_rate_ranks_the_policies_and_prints_the_config(synth, capsys):
    assert main(["plan", "--profile", synth, "--rate", "2", "--num-prompts", "30", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    kinds = {p["policy"].split(":")[0] for p in d["policies"]}
    assert kinds == {"ar", "eesd", "ppsd", "off-above", "table", "goodput"}
    assert d["chosen"] == d["policies"][0]["policy"] and d["chosen"] != "ar"  # drafting pays at light load here
    e2e = [p["e2e_p50_ms"] for p in d["policies"]]
    assert e2e == sorted(e2e)
    table = d["vllm"]["num_speculative_tokens_per_batch_size"]
    assert table[0][0] == 1 and table[-1][1] == 8 and all(len(r) == 3 for r in table)
    assert main(["plan", "--profile", synth, "--rate", "2", "--num-prompts", "30", "--slo", "ttft:40,tpot:10"]) == 0
    out = capsys.readouterr().out
    assert "under SLO ttft:40,tpot:10" in out and "ppsd serve --policy" in out


def test_plan_rate_answers_on_the_committed_batch_profile(capsys):
    assert main(["plan", "--profile", BATCH_EXAMPLE, "--rate", "0.3", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["max_batch"] == 8 and len(d["policies"]) >= 6
    # the adaptive policies start from the EESD plan that serves this load best (ranked by median E2E here)
    eesd = min((p for p in d["policies"] if p["policy"].startswith("eesd:")), key=lambda p: p["e2e_p50_ms"])
    adaptive = [p["policy"] for p in d["policies"] if p["policy"].startswith(("off-above:", "table:", "goodput:"))]
    assert len(adaptive) == 3 and {a.split(":")[1] for a in adaptive} == {eesd["policy"].split(":")[1]}


@pytest.mark.parametrize("extra, says", [
    (["--request-rate", "0"], "--request-rate 0.0 must be a positive"),
    (["--request-rate", "-1"], "must be a positive"),
    (["--request-rate", "1", "--goodput", "ttft"], "SLO item"),
    (["--request-rate", "1", "--max-batch", "16"], "--max-batch 16 is above"),
    (["--request-rate", "1", "--policy", "eesd:99:2"], "outside"),
    (["--request-rate", "1", "--policy", "nope"], "not one of"),
    (["--trace", "MISSING"], "does not exist"),
    (["--trace", "BAD"], "line 2 is malformed"),
    ([], "needs an arrival process"),
])
def test_bad_serving_input_is_one_line_exit_2_and_writes_nothing(synth, tmp_path, capsys, extra, says):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"arrival_s": 0, "input_tokens": 5, "output_tokens": 3}\n{"arrival_s": "x"}\n')
    extra = [str(bad) if x == "BAD" else str(tmp_path / "missing.jsonl") if x == "MISSING" else x for x in extra]
    out = tmp_path / "r.json"
    rc = main(["simulate", "--serve", "--profile", synth, "--num-prompts", "5", "--save-result", str(out), *extra])
    err = capsys.readouterr()
    assert rc == 2 and says in err.err and len(err.err.strip().splitlines()) == 1 and not err.out
    assert not out.exists()


def test_profiles_without_batch_tables_are_refused_naming_add_batch(capsys):
    assert main(["plan", "--profile", NO_BATCH, "--rate", "1"]) == 2
    err = capsys.readouterr().err
    assert "ppsd profile add-batch" in err and len(err.strip().splitlines()) == 1
    assert main(["simulate", "--serve", "--profile", NO_BATCH, "--request-rate", "1"]) == 2
    assert "ppsd profile add-batch" in capsys.readouterr().err


@pytest.mark.parametrize("extra, says", [(["--rate", "0"], "--rate"), (["--rate", "1", "--slo", "tpot:x"], "SLO item"),
                                         (["--rate", "1", "--max-batch", "9"], "--max-batch 9 is above")])
def test_bad_plan_rate_input_is_one_line_exit_2(synth, capsys, extra, says):
    assert main(["plan", "--profile", synth, *extra]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def test_json_stays_strict_when_every_request_arrives_at_once(synth, capsys):
    assert main(["simulate", "--serve", "--profile", synth, "--request-rate", "inf", "--num-prompts", "6",
                 "--output-len", "1", "--replications", "2", "--json"]) == 0

    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    d = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert d["rate"] is None and d["predicted_tpot_p50_ms"] is None  # one-token answers have no TPOT
    assert d["metrics"]["completed"] == 6
