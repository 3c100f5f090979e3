"""`ppsd simulate` / `ppsd plan`: JSON fields, Chrome trace, bad input (one line, exit 2), no torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ppsd.cli import main
from ppsd.profile.synthetic import write_synthetic_profile

SYN = ["simulate", "--synthetic-layers", "12", "--layer-ms", "2", "--head-ms", "6", "--alpha", "0.6"]


@pytest.fixture(scope="module")
def prof(tmp_path_factory):
    d = tmp_path_factory.mktemp("p")
    write_synthetic_profile(d, alpha_by_exit=lambda e: 0.1 + 0.07 * e, num_layers=12, layer_ms=2.0, head_ms=6.0,
                            hop_ms=0.2, corun_slowdown=1.2)
    return str(d)


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    d = tmp_path_factory.mktemp("bare")
    write_synthetic_profile(d, num_layers=12)
    return str(d)


def test_simulate_json_fields(prof, capsys):
    assert main(["simulate", "--profile", prof, "--mode", "ppsd", "--exit", "4", "--stages", "3", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("mode", "exit_layer", "draft_len", "stages", "tokens", "time_s", "tokens_per_s", "speedup_vs_ar",
                "mean_accepted", "accepted_hist", "acceptance_rate", "stage_busy", "device_busy"):
        assert key in d, key
    assert d["mode"] == "ppsd" and d["stages"] == 3 and len(d["stage_busy"]) == 3 and d["tokens"] == 4 * 64


def test_simulate_synthetic_trace_out(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(SYN + ["--exit", "4", "--tokens", "50", "--hop-us", "300", "--trace-out", str(out),
                       "--stage-bounds", "0,4,8,12"]) == 0
    assert "PPSD E=4 k=3" in capsys.readouterr().out
    names = {e["name"] for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"}
    assert {"draft", "verify", "flush", "hop"} <= names
    assert main(SYN + ["--mode", "eesd", "--exit", "4", "--draft-len", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["draft_len"] == 3


def test_plan_json_and_text(prof, capsys):
    assert main(["plan", "--profile", prof, "--devices", "3", "--tokens", "300", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1 + 11 * 8 + sum(min(3, 12 - e + 1) - 1 for e in range(1, 12))
    assert rows[0]["speedup_vs_ar"] == max(r["speedup_vs_ar"] for r in rows)
    assert main(["plan", "--profile", prof, "--hop-us", "100", "--alpha-scale", "1.2", "--tokens", "300"]) == 0
    assert "recommendation:" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (SYN + ["--exit", "12"], "between 1 and 11"),
    (SYN + ["--exit", "0"], "between 1 and 11"),
    (SYN + ["--exit", "10", "--stages", "4"], "between 2 and 3"),
    (SYN + ["--exit", "4", "--stage-bounds", "0,4,3,12"], "increase strictly"),
    (SYN + ["--exit", "4", "--stage-bounds", "0,4,8"], "increase strictly from 0 to 12"),
    (SYN + ["--exit", "4", "--stage-bounds", "0,5,12"], "stage 1 must end at the exit layer"),
    (["simulate", "--synthetic-layers", "12", "--alpha", "1.2", "--exit", "4"], "[0, 1]"),
    (["simulate", "--synthetic-layers", "12", "--alpha", "-0.1", "--exit", "4"], "[0, 1]"),
    (SYN + ["--exit", "4", "--tokens", "0"], "at least 1"),
    (SYN + ["--exit", "4", "--hop-us", "-5"], ">= 0"),
    (SYN + ["--mode", "eesd", "--exit", "4", "--draft-stop-confidence", "1.2"], "outside (0, 1)"),
    (SYN + ["--mode", "ar", "--draft-stop-confidence", "0.4"], "use --mode eesd or ppsd"),
    (SYN + ["--exit", "4", "--draft-stop-confidence", "0.4"], "ppsd profile"),
    (SYN + ["--exit", "4", "--launch", "torchrun", "--draft-stop-confidence", "0.4"], "local launch"),
    (SYN + ["--mode", "eesd", "--exit", "4", "--draft-stop-confidence", "0.4"], "ppsd profile"),
])
def test_bad_input_one_line_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("ppsd simulate: error:") and needle in err


def test_bad_profile_inputs(prof, bare, capsys):
    assert main(["simulate", "--profile", bare, "--exit", "4", "--acceptance", "trace"]) == 2
    assert "no acceptance data" in capsys.readouterr().err
    assert main(["simulate", "--profile", prof, "--exit", "4", "--category", "poetry"]) == 2
    err = capsys.readouterr().err
    assert "unknown category 'poetry'" in err and "math" in err and "writing" in err
    assert main(["plan", "--profile", bare]) == 2
    assert "no acceptance data" in capsys.readouterr().err
    assert main(["plan", "--profile", prof, "--draft-stops", "0.5"]) == 2  # traced before confidences
    assert "no draft confidences" in capsys.readouterr().err


def test_simulate_prices_a_confidence_stop(tmp_path, capsys):
    d = tmp_path / "sure"
    write_synthetic_profile(d, alpha_by_exit=lambda e: 0.1 + 0.07 * e, num_layers=12, confidence=True)
    base = ["simulate", "--profile", str(d), "--mode", "eesd", "--exit", "8", "--draft-len", "6", "--json"]
    assert main(base) == 0
    fixed = json.loads(capsys.readouterr().out)
    assert main(base + ["--draft-stop-confidence", "0.5"]) == 0
    stopped = json.loads(capsys.readouterr().out)
    assert stopped["draft_stop"] == 0.5 and "draft_stop" not in fixed
    assert stopped["mean_accepted"] < fixed["mean_accepted"]  # shorter rounds
    assert main(["plan", "--profile", str(d), "--devices", "2", "--tokens", "300", "--max-draft-len", "4",
                 "--draft-stops", "0.4,0.6", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r.get("draft_stop") for r in rows if r["mode"] == "eesd"} == {None, 0.4, 0.6}
    assert sum(r.get("draft_stop") == 0.4 and r["mode"] == "eesd" for r in rows) == 11 * 3  # every exit × γ >= 2
    # and PPSD's stage 1 waits on unsure drafts: every exit once per stop
    assert {r.get("draft_stop") for r in rows if r["mode"] == "ppsd"} == {None, 0.4, 0.6}
    assert main(["plan", "--profile", str(d), "--draft-stops", "0.4,1.5"]) == 2
    assert "outside (0, 1)" in capsys.readouterr().err


def test_sim_imports_no_torch():
    code = ("import sys, sim.api, sim.cli, sim.schemes, sim.planner.resolve, sim.run, ppsd.profile.synthetic; "
            "import tempfile; from ppsd.profile.synthetic import write_synthetic_profile; from sim.plan import Plan; "
            "p = write_synthetic_profile(tempfile.mkdtemp(), alpha_by_exit=lambda e: 0.5, num_layers=6); "
            "sim.api.sweep(p, tokens=50); sim.api.simulate(p, Plan('ppsd', exit_layer=2), timeline=True); sim.api.closed_form(p, sim.api.resolve_plan(Plan('eesd', exit_layer=2), p), 0.5); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def cpu2(tmp_path_factory):
    """The synthetic profile as if measured on a 2-core CPU (hardware.device cpu, 2 cores)."""
    d = tmp_path_factory.mktemp("cpu2")
    write_synthetic_profile(d, alpha_by_exit=lambda e: 0.1 + 0.07 * e, num_layers=12, layer_ms=2.0, head_ms=6.0,
                            hop_ms=0.2, corun_slowdown=1.2)
    meta = json.loads((d / "profile.json").read_text())
    meta["hardware"] = {"device": "cpu", "device_name": "CPU: test (2 cores)", "cores": 2, "threads": 1,
                        "gpu_count": 0}
    (d / "profile.json").write_text(json.dumps(meta))
    return str(d)


def test_plan_on_a_cpu_profile_sweeps_as_many_stages_as_it_has_cores(cpu2, capsys):
    """A stage is a process that wants a core: the default sweep stops at the profile's cores, and
    more stages (asked for with --devices) come with a note naming --oversubscribe."""
    assert main(["plan", "--profile", cpu2, "--tokens", "300", "--json"]) == 0
    out = capsys.readouterr()
    rows = json.loads(out.out)
    assert max(r["stages"] for r in rows if r["mode"] == "ppsd") == 2 and "share" not in out.err
    assert main(["plan", "--profile", cpu2, "--devices", "4", "--tokens", "300", "--json"]) == 0
    out = capsys.readouterr()
    rows = json.loads(out.out)  # stdout stays JSON alone
    assert {r["stages"] for r in rows if r["mode"] == "ppsd"} == {2, 3, 4}
    assert "share this CPU's 2 cores" in out.err and "--oversubscribe" in out.err
    assert main(["simulate", "--profile", cpu2, "--mode", "ppsd", "--exit", "4", "--stages", "4", "--json"]) == 0
    out = capsys.readouterr()
    shared = json.loads(out.out)["tokens_per_s"]
    assert "share this CPU's 2 cores" in out.err and shared > 0



def test_plan_reprices_on_another_profiles_prompts(prof, tmp_path, capsys):
    """`ppsd plan --acceptance-from DIR`: the latency of --profile, the acceptance of DIR (a better-drafting
    traffic makes every speculative plan faster, at the same latency); another model is one line, exit 2."""
    traffic = write_synthetic_profile(tmp_path / "traffic", alpha_by_exit=lambda e: 0.95, num_layers=12,
                                      layer_ms=5.0, seed=7)
    assert main(["plan", "--profile", prof, "--tokens", "600", "--json"]) == 0
    own = {(r["mode"], r["exit_layer"], r["draft_len"], r["stages"]): r for r in json.loads(capsys.readouterr().out)}
    assert main(["plan", "--profile", prof, "--acceptance-from", str(traffic.path), "--tokens", "600", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    # early exits, where acceptance decides (late ones pay the co-run slowdown more often the fuller the pipeline)
    moved = [(r, own[(r["mode"], r["exit_layer"], r["draft_len"], r["stages"])]) for r in rows
             if r["mode"] == "ppsd" and r["exit_layer"] <= 6]
    assert moved and all(r["speedup_vs_ar"] > o["speedup_vs_ar"] for r, o in moved)
    assert all(r["acceptance_rate"] > 0.9 for r, _ in moved)
    ar = [r for r in rows if r["mode"] == "ar"][0]
    assert ar["tokens_per_s"] == pytest.approx([o for o in own.values() if o["mode"] == "ar"][0]["tokens_per_s"])
    assert main(["plan", "--profile", prof, "--acceptance-from", str(traffic.path), "--tokens", "600"]) == 0
    assert f"acceptance from {traffic.path}" in capsys.readouterr().out
    small = write_synthetic_profile(tmp_path / "small", alpha_by_exit=lambda e: 0.5, num_layers=6)
    assert main(["plan", "--profile", prof, "--acceptance-from", str(small.path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--acceptance-from" in err[0] and "6 layers" in err[0]
    assert main(["simulate", "--synthetic-layers", "12", "--alpha", "0.5", "--mode", "ppsd", "--exit", "4",
                 "--acceptance-from", str(traffic.path)]) == 2
