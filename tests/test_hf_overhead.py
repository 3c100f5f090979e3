"""`ppsd profile add-hf` / `ppsd profile --hf-exits` (profiler/hf_overhead.py) and what the simulator does
with the block (sim/schemes/hf.py, `ppsd simulate/plan --runtime hf`, `ppsd validate --runtime hf`)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ppsd.cli import main
from ppsd.profile import load_profile

TINY = ["profile", "--model", "tiny-llama", "--limit", "4", "--max-new-tokens", "10", "--n-values", "1,2,4",
        "--context-values", "8,32", "--repeats", "2", "--warmup", "1", "--corun-max", "1", "--no-hop",
        "--thread-counts", "1"]
HF = ["--exits", "2,4", "--max-new-tokens", "8", "--limit", "2"]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    mp = pytest.MonkeyPatch()
    mp.setenv("PPSD_CACHE", str(root / "cache"))
    try:
        old = root / "old"
        assert main([*TINY, "--out", str(old)]) == 0
        new = root / "new"
        shutil.copytree(old, new)
        assert main(["profile", "add-hf", str(new), *HF]) == 0
    finally:
        mp.undo()
    return old, new


def test_add_hf_writes_the_block(profiles):
    _, new = profiles
    block = load_profile(new).latency["hf"]
    for key in ("ar_token_overhead_ms", "round_overhead_ms", "draft_overhead_ms", "refeed", "acceptance",
                "piece_scale", "raw_ar", "raw_rounds", "transformers"):
        assert key in block, key
    assert block["added_later"] is True and block["exits"] == [2, 4] and block["refeed"] in ("tail", "sequence")
    assert set(block["acceptance"]) == {"2", "4"}
    assert all(len(r) == 5 for r in block["raw_rounds"]) and all(len(r) == 3 for r in block["raw_ar"]) and block["rounds"] == len(block["raw_rounds"])


def test_add_hf_refuses_twice_without_force(profiles, capsys):
    _, new = profiles
    assert main(["profile", "add-hf", str(new), *HF]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already has a latency.hf block" in err[0] and "--force" in err[0]


def test_old_profile_is_refused_cleanly(profiles, capsys):
    old, _ = profiles
    for argv in (["simulate", "--profile", str(old), "--runtime", "hf", "--mode", "eesd", "--exit", "3"],
                 ["plan", "--profile", str(old), "--runtime", "hf"],
                 ["validate", "--profile", str(old), "--runtime", "hf", "--plans", "eesd:3:2", "--limit", "1"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "no latency.hf block" in err[0] and "ppsd profile add-hf" in err[0], err


def test_simulate_hf_against_hf_ar(profiles, capsys):
    from sim import api
    from ppsd.modes import Mode
    from sim.plan import Plan
    from sim.schemes.hf import hf_ar_step_ms

    _, new = profiles
    prof = load_profile(new)
    ar = api.simulate(prof, Plan(Mode.AR, runtime="hf"))
    assert ar.speedup_vs_ar == pytest.approx(1.0)
    ppsd_ar = api.simulate(prof, Plan(Mode.AR))
    block = prof.latency["hf"]
    assert ar.time_s - ppsd_ar.time_s == pytest.approx(block["ar_token_overhead_ms"] * ar.tokens / 1e3, rel=1e-6)
    eesd = api.simulate(prof, Plan(Mode.EESD, exit_layer=3, draft_len=3, runtime="hf"))
    # the speedup is against transformers' greedy generate on the same contexts
    assert eesd.speedup_vs_ar == pytest.approx(ar.tokens_per_s and eesd.tokens_per_s / eesd.details.ar_tokens_per_s)
    assert eesd.details.ar_tokens_per_s == pytest.approx(ar.tokens_per_s, rel=1e-9)
    heur = api.simulate(prof, Plan(Mode.EESD, exit_layer=3, draft_len=3, runtime="hf", schedule="heuristic"))
    assert heur.plan.label().endswith("[hf heuristic]") and heur.tokens == eesd.tokens
    assert main(["simulate", "--profile", str(new), "--runtime", "hf", "--mode", "eesd", "--exit", "3",
                 "--draft-len", "2", "--schedule", "heuristic", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["runtime"] == "hf" and d["schedule"] == "heuristic" and d["speedup_vs_ar"] > 0
    assert np.all(hf_ar_step_ms(prof, np.array([10.0, 20.0])) > 0)


def test_closed_form_matches_replay_at_full_acceptance(profiles):
    """Every draft accepted, constant γ: the replay's rounds are the closed form's (γ + 1 tokens each)."""
    from sim.model.streams import Stream
    from ppsd.modes import Mode
    from sim.plan import Plan
    from sim.schemes.hf import HFAssisted, hf_costs, simulate_rounds

    _, new = profiles
    prof = load_profile(new)
    plan = Plan(Mode.EESD, exit_layer=3, draft_len=3, runtime="hf")
    costs = hf_costs(prof, plan)
    t = 4 * 100
    stream = Stream(np.ones(t, bool), np.full(t, 20.0), np.eye(1, t, 0, dtype=bool)[0], "trace")
    stats = simulate_rounds(stream, costs)
    per_token = HFAssisted().closed_form(prof, plan, 1.0, 20.0)
    assert stats.time_ms / t == pytest.approx(per_token, rel=1e-9)
    assert set(stats.rounds_a) == {3}


def test_plan_hf_cli(profiles, capsys):
    _, new = profiles
    assert main(["plan", "--profile", str(new), "--runtime", "hf", "--max-draft-len", "2", "--tokens", "200",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["runtime"] for r in rows} == {"hf"}
    assert {r.get("schedule") for r in rows if r["mode"] == "eesd"} == {"constant", "heuristic"}
    assert main(["plan", "--profile", str(new), "--runtime", "hf", "--max-draft-len", "2", "--tokens", "200"]) == 0
    assert "transformers' assisted generation" in capsys.readouterr().out
    # transformers' confidence threshold swept beside each schedule (a constant γ0 = 1 stop is the plan again)
    assert main(["plan", "--profile", str(new), "--runtime", "hf", "--max-draft-len", "2", "--tokens", "200",
                 "--draft-stops", "0.4", "--json"]) == 0
    stops = [r for r in json.loads(capsys.readouterr().out) if r.get("draft_stop") == 0.4]
    assert {(r["schedule"], r["draft_len"]) for r in stops} == {("constant", 2), ("heuristic", 1), ("heuristic", 2)}
    assert all(r["runtime"] == "hf" and "τ=0.4" in r["label"] for r in stops)


def test_validate_hf_writes_hf_rows(profiles, tmp_path, capsys):
    _, new = profiles
    out = tmp_path / "val"
    assert main(["validate", "--profile", str(new), "--runtime", "hf", "--schedule", "both",
                 "--plans", "eesd:3:2", "--limit", "2", "--repeats", "1", "--warmup", "0", "--out", str(out),
                 "--json"]) == 0
    doc = json.loads((out / "validation.json").read_text())
    plans = [r["plan"] for r in doc["rows"]]
    assert any("[hf]" in p for p in plans) and any("[hf heuristic]" in p for p in plans)
    assert all(r["outputs_match_ar"] is True for r in doc["rows"] if r["mode"] == "eesd")
    assert doc.get("runtime") == "hf"
