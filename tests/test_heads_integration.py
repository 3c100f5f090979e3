"""Trained exit heads end to end on the tiny model: the profile records them, the runtime drafts
with them losslessly (EESD and PPSD, full and reduced vocabulary), the planner compares them, and
head folders for another model or without the exit are refused through the CLI."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from ppsd.cli import main
from runtime.llm import load_model
from ppsd.profile import load_profile
from runtime.acceptance import Sampler
from runtime.decoding import generate_ar, generate_eesd
from runtime.heads import make_drafter
from runtime.launch import run_local
from runtime.measure import records_from_logs
from runtime.pipeline import PipelineJob

torch.set_num_threads(1)
TEXTS = ["Hello world, this is a test prompt.", "Another one: 1 2 3"]
HEAD_NAMES = ["trained", "vocab64", "vocab128"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("heads-int")
    mp = pytest.MonkeyPatch()
    mp.setenv("PPSD_CACHE", str(root / "cache"))
    heads = root / "heads"
    assert main(["heads", "train", "--model", "tiny-llama", "--exits", "2,4", "--prompts", "builtin",
                 "--per-category", "1", "--heldout-per-category", "1", "--max-new-tokens", "8", "--epochs", "1",
                 "--vocab-sizes", "64,128", "--out", str(heads), "--quiet"]) == 0
    prof = root / "profile"
    assert main(["profile", "--model", "tiny-llama", "--limit", "4", "--max-new-tokens", "12", "--n-values", "1,2",
                 "--context-values", "8,16", "--repeats", "2", "--warmup", "1", "--corun-max", "1", "--no-hop",
                 "--heads", str(heads), "--out", str(prof)]) == 0
    yield {"root": root, "heads": heads, "profile": prof}
    mp.undo()


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


def _err(capsys, cmd: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ppsd {cmd}: error: ") and "Traceback" not in err[0], err
    return err[0]


# --- profile ------------------------------------------------------------------------------------------

def test_profile_records_head_latency_and_traces(work, capsys):
    prof = load_profile(work["profile"])
    lat = prof.latency["exit_heads"]
    assert set(lat) == set(HEAD_NAMES)
    for name, entry in lat.items():
        assert entry["params"] == 64 * 64 + 64 and entry["kind"].startswith("linear")
        assert len(entry["median_ms"]) == len(prof.n_values) and min(entry["median_ms"]) > 0
        assert prof.exit_head_ms(name, 1) == pytest.approx(entry["median_ms"][0])
        assert entry["timing"] == "after_draft_layers"  # priced with the caches a draft leaves, as the LM head
    assert prof.meta["exit_heads"]["exits"] == [2, 4] and prof.meta["acceptance"]["heads"] == ["shared", *HEAD_NAMES]
    acc = prof.acceptance
    shared = acc[acc["head"] == "shared"]
    for name in HEAD_NAMES:
        rows = acc[acc["head"] == name]
        assert sorted(rows["exit_layer"].unique()) == [2, 4]
        # the same trajectory (positions per prompt) as the shared head's rows
        assert len(rows) == 2 * len(shared[shared["exit_layer"] == 2])
        assert rows["beta"].between(0, 1).all()
    assert set(prof.alpha_by_exit(head="trained")) == {2, 4}
    assert main(["profile", "show", str(work["profile"])]) == 0
    assert "exit heads" in capsys.readouterr().out


# --- runtime: lossless with trained and reduced-vocabulary heads ----------------------------------------

def test_eesd_with_heads_matches_ar(work, tiny):
    prompts = [tiny.encode_prompt(t) for t in TEXTS]
    ar = [generate_ar(tiny, p, 20, Sampler.make(0, 0)).tokens for p in prompts]
    for name in HEAD_NAMES:
        for e in (2, 4):
            drafter = make_drafter(tiny, e, str(work["heads"]), name)
            for p, ref in zip(prompts, ar):
                rec = generate_eesd(tiny, p, 20, Sampler.make(0, 0), e, 3, drafter=drafter)
                assert rec.tokens == ref, (name, e)
    # sampling with a reduced vocabulary runs (q is spread over the full vocabulary)
    drafter = make_drafter(tiny, 2, str(work["heads"]), "vocab64")
    rec = generate_eesd(tiny, prompts[0], 12, Sampler.make(1.0, 3), 2, 3, drafter=drafter)
    assert len(rec.tokens) == 12


@pytest.mark.parametrize("name,bounds,temperature", [("trained", (0, 2, 6), 0.0), ("vocab64", (0, 4, 6), 0.0),
                                                     ("vocab128", (0, 2, 4, 6), 0.0), ("vocab64", (0, 2, 6), 1.0)])
def test_ppsd_with_heads_matches_ar(work, tiny, name, bounds, temperature):
    prompts = [tiny.encode_prompt(t) for t in TEXTS]
    job = PipelineJob("tiny-llama", bounds, prompts, [16] * len(prompts), warmup=0, repeats=1, timeout_s=30,
                      temperature=temperature, heads_dir=str(work["heads"]), exit_head=name)
    recs = records_from_logs(job, run_local(job, model=tiny))[0]
    if temperature == 0:
        assert [r.tokens for r in recs] == [generate_ar(tiny, p, 16, Sampler.make(0, 0)).tokens for p in prompts]
    else:
        assert all(len(r.tokens) == 16 for r in recs)


def test_ppsd_run_command_with_heads(work, capsys):
    assert main(["run", "--model", "tiny-llama", "--mode", "ppsd", "--exit", "4", "--heads", str(work["heads"]),
                 "--exit-head", "vocab128", "--limit", "2", "--max-new-tokens", "12", "--repeats", "1",
                 "--warmup", "0", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["exit_head"] == "vocab128" and res["outputs_match_ar"] is True


# --- planner ---------------------------------------------------------------------------------------------

def test_plan_compares_heads(work, capsys):
    prof = str(work["profile"])
    assert main(["plan", "--profile", prof, "--devices", "2", "--tokens", "200", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    best = {r["exit_head"]: r for r in results if r.get("head_rank") == 1}
    assert set(best) == {"shared", *HEAD_NAMES}
    assert sum(r["mode"] == "ar" for r in results) == 1
    assert all(best[h]["exit_layer"] in (2, 4) for h in HEAD_NAMES)  # only the exits the heads have
    assert main(["plan", "--profile", prof, "--devices", "2", "--tokens", "200"]) == 0
    out = capsys.readouterr().out
    assert "best per exit head" in out and "naive (shared)" in out and "vocab64" in out
    assert main(["plan", "--profile", prof, "--tokens", "200", "--exit-head", "trained", "--json"]) == 0
    assert {r["exit_head"] for r in json.loads(capsys.readouterr().out) if r["mode"] != "ar"} == {"trained"}
    # simulate drafts with the head: its traces and its cost
    assert main(["simulate", "--profile", prof, "--mode", "eesd", "--exit", "2", "--exit-head", "vocab64",
                 "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    alpha = load_profile(prof).alpha_by_exit(head="vocab64")[2]
    assert sim["exit_head"] == "vocab64" and sim["stream_alpha"] == pytest.approx(alpha)
    for cmd in (["plan", "--profile", prof, "--exit-head", "vocab9"],
                ["simulate", "--profile", prof, "--mode", "ppsd", "--exit", "2", "--exit-head", "vocab9"]):
        assert main(cmd) == 2
        line = _err(capsys, cmd[0])
        assert "vocab9" in line and "shared, trained, vocab64, vocab128" in line


# --- bad input ----------------------------------------------------------------------------------------------

def _edited(work, name: str, **changes):
    folder = work["root"] / name
    shutil.copytree(work["heads"], folder, dirs_exist_ok=True)
    meta = json.loads((folder / "heads.json").read_text())
    meta.update(changes)
    (folder / "heads.json").write_text(json.dumps(meta))
    return folder


def test_mismatched_head_folders_refused(work, capsys):
    other_model = _edited(work, "other-model", model_id="smollm2-135m", num_layers=30, hidden_size=576)
    other_layers = _edited(work, "other-layers", num_layers=8)
    no_exit4 = _edited(work, "no-exit4")
    (no_exit4 / "exit4.safetensors").unlink()
    run = ["run", "--model", "tiny-llama", "--limit", "1", "--max-new-tokens", "4", "--repeats", "1", "--warmup", "0"]
    cases = [
        (run + ["--mode", "eesd", "--exit", "2", "--heads", str(other_model)], "smollm2-135m"),
        (run + ["--mode", "ppsd", "--exit", "2", "--heads", str(other_layers)], "layer count"),
        (run + ["--mode", "eesd", "--exit", "3", "--heads", str(work["heads"])], "exit layer(s) [3]"),
        (run + ["--mode", "ppsd", "--exit", "4", "--heads", str(no_exit4)], "exit layer(s) [4]"),
        (run + ["--mode", "eesd", "--exit", "2", "--exit-head", "trained"], "--heads"),
        (["profile", "--model", "tiny-llama", "--skip-latency", "--limit", "1", "--heads", str(other_model),
          "--out", str(work["root"] / "p-bad")], "smollm2-135m"),
        (["profile", "--model", "tiny-llama", "--skip-latency", "--limit", "1", "--heads", str(no_exit4),
          "--out", str(work["root"] / "p-bad")], "exit layer(s) [4]"),
        (["profile", "--model", "tiny-llama", "--heads", str(work["root"] / "nowhere"),
          "--out", str(work["root"] / "p-bad")], "does not exist"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        assert words in _err(capsys, argv[0]), argv
    assert not (work["root"] / "p-bad").exists()


def test_ppsd_stages_load_only_what_they_need(work, tiny):
    from runtime.pipeline import EpochBoard, Stage

    job = PipelineJob("tiny-llama", (0, 2, 4, 6), [[1, 2]], [4], heads_dir=str(work["heads"]), exit_head="trained")
    stages = [Stage(r, 3, job, tiny, EpochBoard()) for r in range(3)]
    assert stages[0].drafter.heads.exits == [2]  # exit 2's adapter only, not exit 4's
    assert stages[1].drafter is None and stages[2].drafter is None  # greedy: the verifier needs no q


def test_heldout_profile_drops_the_heads_training_prompts(work, tmp_path, capsys):
    """`ppsd profile --heads DIR --heldout`: no profiled prompt is one the heads were trained on, and
    the profile says so; --heldout without --heads is one line, exit 2."""
    trained_on = set(json.loads((work["heads"] / "heads.json").read_text())["training"]["train_prompt_ids"])
    out = tmp_path / "heldout"
    assert main(["profile", "--model", "tiny-llama", "--max-new-tokens", "6", "--n-values", "1,2",
                 "--context-values", "8,16", "--repeats", "2", "--warmup", "1", "--corun-max", "1", "--no-hop",
                 "--skip-latency", "--heads", str(work["heads"]), "--heldout", "--out", str(out)]) == 0
    prof = load_profile(out)
    ids = {g["prompt_id"] for g in prof.generations()}
    assert ids and not ids & trained_on
    assert prof.meta["acceptance"]["heldout_from_heads"] is True
    assert prof.meta["acceptance"]["excluded_training_prompts"] == len(trained_on)
    assert prof.meta["exit_heads"]["trained_on_profile_prompts"] == 0
    capsys.readouterr()
    assert main(["profile", "--model", "tiny-llama", "--heldout", "--out", str(tmp_path / "never")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--heldout" in err[0]
