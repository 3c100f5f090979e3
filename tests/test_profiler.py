"""`ppsd profile`: the folder it writes, its summary, resume, progress lines and every bad input."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from ppsd.cli import main
from ppsd.errors import UserError
from ppsd.profile import ACCEPTANCE_COLUMNS, SCHEMA_VERSION, load_profile
from profiler import runtime_probe

# A tiny, fast run: the random tiny Llama, 3 prompts, a 2 x 2 latency grid, no extra processes.
TINY = ["profile", "--model", "tiny-llama", "--limit", "3", "--max-new-tokens", "6", "--n-values", "1,2",
        "--context-values", "8,16", "--repeats", "2", "--warmup", "1", "--corun-max", "1", "--no-hop"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PPSD_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    import os

    out = tmp_path_factory.mktemp("prof") / "tiny"
    old = os.environ.get("PPSD_CACHE")
    os.environ["PPSD_CACHE"] = str(out.parent / "cache")
    try:
        assert main([*TINY, "--out", str(out)]) == 0
    finally:
        if old is None:
            os.environ.pop("PPSD_CACHE")
        else:
            os.environ["PPSD_CACHE"] = old
    return out


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "expected an error line"
    line = err[-1]
    assert line.startswith("ppsd profile: error: ") and ";" in line
    assert "Traceback" not in "\n".join(err)
    return line


# --- the folder ---------------------------------------------------------------------------------------

def test_profile_round_trip(tiny_profile):
    prof = load_profile(tiny_profile)
    N = prof.num_layers
    assert prof.meta["schema_version"] == SCHEMA_VERSION and prof.kind == "measured"
    assert prof.layers.median_ms.shape == (N, 2, 2)
    assert np.all(prof.layers.median_ms > 0) and np.all(prof.layers.p10_ms <= prof.layers.p90_ms)
    assert prof.head_ms(1) > 0 and prof.embed_ms(2) > 0
    assert prof.meta["timing"]["method"] == "perf_counter" and prof.meta["hardware"]["threads"] == 1
    whole = prof.latency["whole_step"]
    assert whole["median_ms"] > 0 and whole["ratio"] > 0 and isinstance(whole["flagged"], bool)
    # acceptance: every exit 1..N-1 for every generated token of every prompt
    df = prof.acceptance
    assert list(df.columns) == ACCEPTANCE_COLUMNS + ["confidence"]  # and each draft's confidence
    gens = prof.generations()
    assert len(gens) == 3 and {g["prompt_id"] for g in gens} == set(df["prompt_id"])
    tokens = sum(len(g["token_ids"]) for g in gens)
    assert len(df) == tokens * (N - 1)
    assert sorted(df["exit_layer"].unique()) == list(range(1, N))
    assert set(df["head"]) == {"shared"} and df["match"].isin([0, 1]).all()
    assert df["beta"].between(0, 1.0001).all()
    alpha = prof.alpha_by_exit()
    assert set(alpha) == set(range(1, N)) and all(0 <= a <= 1 for a in alpha.values())
    for g in gens:
        assert g["prompt_len"] == len(g["prompt_tokens"]) > 0 and g["prompt"]
    assert prof.meta["acceptance"]["teacher_forced_agree"] == tokens
    # what a draw at T > 0 costs, over the model's vocabulary (latency.sampling)
    assert prof.sampling["vocab"] == [prof.meta["model"]["vocab_size"]] and prof.sample_ms(prof.head_vocab()) > 0
    # no temp leftovers beside or inside the folder
    assert sorted(p.name for p in tiny_profile.iterdir()) == ["acceptance.csv.gz", "generations.jsonl",
                                                              "profile.json"]
    assert not [p for p in tiny_profile.parent.iterdir() if p.name.startswith(".")]


def test_show_prints_the_summary(tiny_profile, capsys):
    assert main(["profile", "show", str(tiny_profile)]) == 0
    out = capsys.readouterr().out
    assert "tiny-llama" in out and "alpha" in out and "draft cost" in out
    from profiler.cli import summary_rows

    rows = summary_rows(load_profile(tiny_profile))
    assert [r["exit"] for r in rows] == list(range(1, 6))
    costs = [r["draft_cost"] for r in rows]
    assert all(0 < c < 1 for c in costs) and costs == sorted(costs)


def test_resume_after_interrupt_keeps_finished_prompts(tmp_path, capsys, monkeypatch):
    import profiler.acceptance as acc

    out = tmp_path / "prof"
    real = acc.exit_traces
    calls = {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(acc, "exit_traces", flaky)
    assert main([*TINY, "--out", str(out)]) == 2
    line = _error_line(capsys)
    assert "interrupted" in line and "--resume" in line
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    work = list((tmp_path / "cache" / "work").iterdir())
    assert len(work) == 1 and (work[0] / "latency.json").exists()
    assert len(list((work[0] / "acceptance").glob("*.json"))) == 2

    calls["n"] = -100  # no more interruptions; count what the resumed run redoes
    assert main([*TINY, "--resume", "--out", str(out)]) == 0
    assert calls["n"] == -100 + 1          # only the unfinished prompt was traced again
    assert load_profile(out).acceptance["prompt_id"].nunique() == 3
    assert not work[0].exists()            # the work folder goes once the profile is written


def test_progress_jsonl(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PPSD_PROGRESS", "jsonl")
    assert main([*TINY, "--skip-latency", "--out", str(tmp_path / "p")]) == 0
    lines = [json.loads(s) for s in capsys.readouterr().err.splitlines() if s.startswith("{")]
    phases = {d["phase"] for d in lines}
    assert {"generate (tokens)", "trace (prompts)"} <= phases
    for phase in phases:
        last = [d for d in lines if d["phase"] == phase][-1]
        assert last["done"] == last["total"] and set(last) == {"phase", "done", "total"}
    prof = load_profile(tmp_path / "p")
    assert prof.meta["timing"]["quick"] and prof.layers.median_ms.shape[1:] == (1, 1)


def test_skip_acceptance_and_replace_existing_profile(tiny_profile, tmp_path, capsys):
    out = tmp_path / "again"
    assert main([*TINY, "--skip-acceptance", "--out", str(out)]) == 0
    assert load_profile(out).meta["acceptance"] is None and not load_profile(out).has_acceptance
    first = (out / "profile.json").read_bytes()
    capsys.readouterr()
    assert main([*TINY, "--skip-acceptance", "--out", str(out)]) == 2   # never replaced without --force
    assert "--force" in _error_line(capsys) and (out / "profile.json").read_bytes() == first
    assert main([*TINY, "--skip-acceptance", "--out", str(out), "--force"]) == 0   # with it, replaced whole
    assert (out / "profile.json").read_bytes() != first
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".again")]


# --- bad input: one line, exit 2, nothing written ---------------------------------------------------

def _assert_no_output(out: Path):
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]


@pytest.mark.parametrize("args, words", [
    (["--model", "no-such-model"], "unknown model"),
    (["--model", "/nowhere/model.gguf"], "does not exist"),
    (["--device", "tpu"], "unknown device"),
    (["--max-new-tokens", "0"], "max-new-tokens"),
    (["--n-values", "0,1"], "n-values"),
    (["--skip-acceptance", "--skip-latency"], "nothing to profile"),
    (["--context-values", "4096"], "context"),
])
def test_bad_arguments(tmp_path, capsys, args, words):
    out = tmp_path / "out"
    assert main([*TINY, *args, "--out", str(out)]) == 2
    assert words in _error_line(capsys)
    _assert_no_output(out)


def test_cuda_without_gpu(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "out"
    assert main([*TINY, "--device", "cuda", "--out", str(out)]) == 2
    assert "no CUDA GPU" in _error_line(capsys)
    _assert_no_output(out)


def test_gguf_that_is_not_a_causal_lm(tmp_path, capsys):
    fake = tmp_path / "notamodel.gguf"
    fake.write_bytes(b"GGUF" + b"\0" * 64)
    out = tmp_path / "out"
    assert main([*TINY[:1], "--model", str(fake), "--skip-acceptance", "--out", str(out)]) == 2
    assert "could not be loaded as a causal language model" in _error_line(capsys)
    _assert_no_output(out)
    models = tmp_path / "cache" / "models"
    assert not models.exists() or not list(models.iterdir())   # no (half-)converted model in the cache


@pytest.mark.parametrize("content, words", [
    ("", "holds no prompts"),
    ("{not json\n", "not valid JSON"),
    ('{"question_id": 1, "category": "qa"}\n', "turns"),
])
def test_bad_prompt_files(tmp_path, capsys, content, words):
    path = tmp_path / "q.jsonl"
    path.write_text(content)
    out = tmp_path / "out"
    assert main([*TINY, "--prompts", str(path), "--out", str(out)]) == 2
    assert words in _error_line(capsys)
    _assert_no_output(out)


def test_missing_prompt_file(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*TINY, "--prompts", str(tmp_path / "none.jsonl"), "--out", str(out)]) == 2
    assert "does not exist" in _error_line(capsys)
    _assert_no_output(out)


def test_prompt_longer_than_context(tmp_path, capsys):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question_id": 7, "category": "rag", "turns": ["x" * 2100]}) + "\n")
    out = tmp_path / "out"
    assert main([*TINY, "--prompts", str(path), "--out", str(out)]) == 2
    line = _error_line(capsys)
    assert "prompt 7" in line and "context" in line
    _assert_no_output(out)


def test_out_is_not_a_profile_folder(tmp_path, capsys):
    out = tmp_path / "stuff"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    assert main([*TINY, "--out", str(out)]) == 2
    assert "not a profile folder" in _error_line(capsys)
    assert (out / "precious.txt").read_text() == "keep me"


def test_show_rejects_bad_schema(tmp_path, capsys, tiny_profile):
    import shutil

    for version, words in ((None, "no schema_version"), (99, "schema_version 99")):
        bad = tmp_path / f"bad{version}"
        shutil.copytree(tiny_profile, bad)
        meta = json.loads((bad / "profile.json").read_text())
        if version is None:
            del meta["schema_version"]
        else:
            meta["schema_version"] = version
        (bad / "profile.json").write_text(json.dumps(meta))
        assert main(["profile", "show", str(bad)]) == 2
        assert words in _error_line(capsys)
    assert main(["profile", "show", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in _error_line(capsys)


# --- the embedded model, end to end -----------------------------------------------------------------

def _dropped(prof, prefix: str) -> bool:
    """True where the profile holds a warning that starts with `prefix` and says the reading was not physical."""
    return any(w.startswith(prefix) and "not physical" in w for w in prof.meta["warnings"])


def _check_pipeline_probe(prof):
    """The two-stage worker probe, split in the middle; or, where its reading stayed unphysical over every
    try on a shared machine, no probe and a warning that says so."""
    lat = prof.latency
    if not (lat.get("pipeline") or {}).get("stage_bounds"):
        assert _dropped(prof, "pipeline probe failed")
        return
    pipe = lat["pipeline"]  # the two-stage probe, split in the middle
    assert pipe["stage_bounds"] == [0, 15, 30] and pipe["passes"] == 60 and pipe["slowdown_base"] == "alone"  # tables calibrated to paired whole steps
    assert 0.5 < pipe["slowdown"] < 3.0 and pipe["pass_cv"] >= 0
    if pipe["hop"] is None:  # no stage waited on the other in 60 passes (a loaded VM): the idle hop stands in
        assert prof.hop_ms() == pytest.approx(lat["hop"]["median_ms"])
    else:  # what a pipeline sees, not the ping-pong
        assert pipe["hop"]["median_ms"] > 0 and pipe["hop"]["samples"] >= 5
        assert prof.hop_ms() == pytest.approx(pipe["hop"]["median_ms"])


def _check_runtime_probe(prof):
    """The runtime's own pipeline, read between the grid's rounds; or dropped with a warning (as above)."""
    lat = prof.latency
    if (lat.get("pipeline") or {}).get("runtime") is None:
        assert _dropped(prof, "pipeline runtime probe dropped")
        return
    pipe = lat["pipeline"]
    # the co-run slowdown the simulator uses: the runtime's own pipeline, read between the grid's rounds
    run = pipe["runtime"]
    assert len(run["rounds"]) == min(2, runtime_probe.ROUNDS) and run["exit_layer"] == 15  # one a grid round here
    assert 0.5 < run["slowdown"] < 3.0 and run["slowdown_cv"] >= 0
    assert all(len(r["pass_ms"]) == 2 and min(r["alone_ms"]) > 0 for r in run["rounds"])
    assert prof.corun_slowdown(2) == pytest.approx(run["slowdown"])
    assert prof.pipeline_slowdown_cv() == pytest.approx(run["slowdown_cv"])  # the same spread, read back
    # each stage's pass-to-pass jitter, which the lock step of two tokens in flight waits out
    assert 0.0 <= run["pass_jitter_cv"] < 0.5 and all("pass_jitter_cv" in r for r in run["rounds"])
    assert prof.lockstep_jitter_cv() == pytest.approx(run["pass_jitter_cv"])
    assert len(prof.corun_stage_bias(2)) == 2 and min(prof.corun_stage_bias(2)) > 0.5
    # and cut where the last stage waits for every draft: what the verifier's pass costs in such plans
    waiting = run["waiting"]
    assert waiting["exit_layer"] == 24 and len(waiting["rounds"]) == len(run["rounds"])
    assert all(r["alone_ms"][0] > r["alone_ms"][1] > 0 for r in waiting["rounds"])  # stage 1 the longer
    assert 0.5 < waiting["last_stage_slowdown"] < 3.0
    assert prof.waiting_last_stage_slowdown() == pytest.approx(waiting["last_stage_slowdown"])


@pytest.mark.slow
def test_smoke_embedded_model(tmp_path, monkeypatch):
    monkeypatch.delenv("PPSD_CACHE")  # the converted SmolLM2 lives in the user cache
    out = tmp_path / "smol"
    args = ["profile", "--limit", "3", "--max-new-tokens", "4", "--n-values", "1,2", "--context-values", "16,64",
            "--repeats", "2", "--warmup", "1", "--corun-max", "2", "--out", str(out)]
    assert main(args) == 0
    prof = load_profile(out)
    assert prof.num_layers == 30 and prof.layers.median_ms.shape == (30, 2, 2)
    assert np.all(prof.layers.median_ms > 0)
    lat = prof.latency
    assert lat["hop"]["backend"] == "gloo" and lat["hop"]["median_ms"] > 0
    assert lat["corun"]["processes"] == [1, 2] and lat["corun"]["slowdown"][0] == pytest.approx(1.0)
    assert prof.corun_slowdown(2) > 0.5
    _check_pipeline_probe(prof)
    _check_runtime_probe(prof)
    df = prof.acceptance
    assert sorted(df["exit_layer"].unique()) == list(range(1, 30))
    assert prof.meta["acceptance"]["chat_template"]
    with gzip.open(out / "acceptance.csv.gz", "rt") as fh:
        assert fh.readline().strip().split(",") == ACCEPTANCE_COLUMNS + ["confidence"]
    assert prof.has_confidence() and df["confidence"].between(0, 1.0001).all()


# --- the pipeline probe's arithmetic and what the simulator reads from it ----------------------------

def test_pipeline_summary_pairs_sends_and_receives():
    from profiler.latency import pipeline_summary

    # alone: rank 0 passes 6 + 4 ms, rank 1 5 + 4 ms. In the pipeline each pass is 10% slower; rank 0
    # sends at 100 + 20 i, rank 1 was waiting and has the state 0.3 ms later; its verdict leaves at
    # +9.9 ms and reaches rank 0 (waiting since before) 0.2 ms later.
    alone = {0: [(6.0, 4.0)] * 9, 1: [(5.0, 4.0)] * 9}
    sent = {i: 100.0 + 20.0 * i for i in range(12)}
    piped = {
        0: [(i, 6.6, 4.4, sent[i] / 1e3, (sent[i - 2] + 9.0) / 1e3, (sent[i - 2] + 10.6) / 1e3) for i in range(3, 12)],
        1: [(i, 5.5, 4.4, (sent[i] + 10.4) / 1e3, (sent[i] - 1.0) / 1e3, (sent[i] + 0.3) / 1e3) for i in range(3, 12)],
    }
    got = pipeline_summary(alone, piped, 4, 8, "gloo")
    assert got["slowdown"] == pytest.approx(1.1) and got["slowdown_base"] == "alone"
    assert got["layer_slowdown"] == pytest.approx(1.1) and got["head_slowdown"] == pytest.approx(1.1)
    assert got["hop"]["median_ms"] == pytest.approx(0.3, abs=0.11)  # 0.3 forward, 0.2 back
    assert got["hop"]["samples"] == 9 + 7  # verdicts on passes 3..9 were awaited by passes 5..11
    assert got["pass_cv"] == pytest.approx(0.0, abs=1e-12)
    # against the tables (the simulator's prices): 11 / 10 and 9.9 / 9
    got = pipeline_summary(alone, piped, 4, 8, "gloo", table_ms=[10.0, 9.0])
    assert got["slowdown_per_stage"] == pytest.approx([1.1, 1.1]) and got["slowdown_base"] == "tables"


def test_profile_reads_the_pipeline_probe(tmp_path):
    from ppsd.profile.synthetic import write_synthetic_profile

    prof = write_synthetic_profile(tmp_path / "a", num_layers=6, hop_ms=0.05, corun_slowdown=1.2)
    assert prof.pipeline == {} and prof.hop_ms() == pytest.approx(0.05) and prof.pass_jitter_cv() == 0.0
    assert prof.corun_slowdown(2) == pytest.approx(1.2)
    meta = json.loads((tmp_path / "a" / "profile.json").read_text())
    meta["latency"]["pipeline"] = {"slowdown": 1.5, "pass_cv": 0.02, "hop": {"median_ms": 0.3}}
    (tmp_path / "a" / "profile.json").write_text(json.dumps(meta))
    prof = load_profile(tmp_path / "a")
    assert prof.hop_ms() == pytest.approx(0.3) and prof.idle_hop_ms() == pytest.approx(0.05)
    assert prof.corun_slowdown(1) == 1.0 and prof.corun_slowdown(2) == pytest.approx(1.5)
    assert prof.pass_jitter_cv() == pytest.approx(0.02)


def test_a_cpu_profile_names_its_cores(tmp_path):
    """`cpu_cores`: hardware.cores of a CPU profile only (the planner's default stage count)."""
    from ppsd.profile.synthetic import write_synthetic_profile

    write_synthetic_profile(tmp_path / "a", num_layers=6, corun_slowdown=1.2)
    assert load_profile(tmp_path / "a").cpu_cores is None  # synthetic
    meta = json.loads((tmp_path / "a" / "profile.json").read_text())
    for hw, cores in (({"device": "cpu", "cores": 2}, 2), ({"device": "cuda", "cores": 2}, None),
                      ({"device": "cpu", "cores": 0}, None)):
        meta["hardware"] = {"device_name": "d", "threads": 1, "gpu_count": 0, **hw}
        (tmp_path / "a" / "profile.json").write_text(json.dumps(meta))
        assert load_profile(tmp_path / "a").cpu_cores == cores, hw
    meta["hardware"]["cores"] = "x"  # not a count: the schema refuses it, naming the field
    (tmp_path / "a" / "profile.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match="hardware.cores"):
        load_profile(tmp_path / "a")


def test_profile_measures_the_control_plane_at_the_stage_counts_asked(tmp_path):
    """--control-plane-stages: the real stage processes with zero-time layers give a fixed cost per
    pass and a message transit at each stage count, which the simulator then adds (Profile
    accessors interpolate between counts and hold the ends)."""
    out = tmp_path / "cp"
    assert main(["profile", "--model", "tiny-llama", "--skip-acceptance", "--n-values", "1,2", "--context-values",
                 "8,16", "--repeats", "2", "--warmup", "1", "--corun-max", "1", "--no-hop", "--thread-counts", "1",
                 "--control-plane-stages", "2,4", "--out", str(out)]) == 0
    prof = load_profile(out)
    stages = prof.meta["latency"]["control_plane"]["stages"]
    assert set(stages) == {"2", "4"} and prof.meta["latency"]["control_plane"]["hidden_size"] == prof.meta["model"]["hidden_size"]
    for v in stages.values():
        assert 0.0 < v["pass_overhead_ms"] < 20.0 and 0.0 < v["transit_ms"] < 20.0
    assert prof.pass_overhead_ms(2) == stages["2"]["pass_overhead_ms"]
    assert prof.pass_overhead_ms(3) == pytest.approx((stages["2"]["pass_overhead_ms"] + stages["4"]["pass_overhead_ms"]) / 2)
    assert prof.pass_overhead_ms(8) == stages["4"]["pass_overhead_ms"]
    # by role: stage 1's part before its send, the middle stages' (none at 2 stages), the last stage's
    assert stages["2"]["middle_pass_overhead_ms"] is None and stages["4"]["middle_pass_overhead_ms"] > 0.0
    roles = prof.pass_overheads_ms(4)
    assert 0.0 < roles.first_before_send <= roles.first == stages["4"]["pass_overhead_ms"]
    assert roles.middle == stages["4"]["middle_pass_overhead_ms"] and roles.last == stages["4"]["last_pass_overhead_ms"]
    assert all(v["hop_jitter_ms"] >= 0.0 for v in stages.values())
    assert "control_plane" in prof.meta["profiling"]["phases_s"]


def test_add_sampling_measures_into_an_existing_profile(tiny_profile, tmp_path, capsys):
    """`ppsd profile add-sampling DIR` times a draw per vocabulary the profile's plans draw from and
    rewrites profile.json with it (marked added_later); a second time needs --force."""
    import shutil

    folder = tmp_path / "p"
    shutil.copytree(tiny_profile, folder)
    meta = json.loads((folder / "profile.json").read_text())
    del meta["latency"]["sampling"]
    (folder / "profile.json").write_text(json.dumps(meta))
    assert load_profile(folder).sample_ms(320) is None
    assert main(["profile", "add-sampling", str(folder)]) == 0
    prof = load_profile(folder)
    table = prof.sampling
    assert table["vocab"] == [320] and table["median_ms"][0] > 0 and table["added_later"]
    assert table["threads"] == 1 and "one draw at T > 0" in capsys.readouterr().err
    assert main(["profile", "add-sampling", str(folder)]) == 2
    assert "--force" in _error_line(capsys)
    assert main(["profile", "add-sampling", str(folder), "--force"]) == 0
    estimated = tmp_path / "est"
    from ppsd.profile.synthetic import write_synthetic_profile

    write_synthetic_profile(estimated, num_layers=4, vocab_size=100)
    assert main(["profile", "add-sampling", str(estimated)]) == 2
    assert "not measured" in _error_line(capsys)


def _probe_round(slow: float, alone_ms=(10.0, 9.0)):
    """One probe round: stages alone at `alone_ms`, in the pipeline `slow` times that."""
    a0, a1 = alone_ms
    alone = {0: [(a0 - 4.0, 4.0)] * 6, 1: [(a1 - 4.0, 4.0)] * 6}
    sent = {i: 100.0 + 30.0 * i for i in range(9)}
    piped = {
        0: [(i, (a0 - 4.0) * slow, 4.0 * slow, sent[i] / 1e3, (sent[i - 2] + 9.0) / 1e3, (sent[i - 2] + 10.6) / 1e3)
            for i in range(3, 9)],
        1: [(i, (a1 - 4.0) * slow, 4.0 * slow, (sent[i] + 10.4) / 1e3, (sent[i] - 1.0) / 1e3, (sent[i] + 0.3) / 1e3)
            for i in range(3, 9)],
    }
    return alone, piped


def test_probe_rounds_keep_the_median_round_and_pool_the_hops():
    from profiler.latency import probe_warnings, summarise_probe_rounds

    # the first round ran during a burst of load: the median round (the last) is kept
    rounds = [_probe_round(1.55, alone_ms=(11.5, 10.8)), _probe_round(1.05), _probe_round(1.10, alone_ms=(10.5, 9.0))]
    got = summarise_probe_rounds(rounds, 4, 8, "gloo", table_ms=[10.0, 9.0])
    assert got["round_kept"] == 2 and got["pass_ms_alone"] == pytest.approx([10.5, 9.0])
    assert got["slowdown"] == pytest.approx((1.1 * 1.05 + 1.1) / 2)
    # the burst round against the tables: (1.55 * 11.5 / 10 + 1.55 * 10.8 / 9) / 2
    assert [r["slowdown"] for r in got["rounds"]] == pytest.approx([1.82125, 1.05, 1.1275], abs=1e-4)
    assert got["passes"] == 18 and got["passes_per_round"] == 6
    assert got["hop"]["samples"] == 3 * (6 + 4)  # every round's waits pooled
    assert got["rounds"][0]["alone_vs_tables"] == pytest.approx([1.15, 1.2])
    assert got["round_spread"] > 0.15
    warned = probe_warnings(got)
    assert len(warned) == 1 and "rounds disagree" in warned[0] and "re-profile" in warned[0]
    # steady rounds, but in the kept round the stages alone ran 25% over the tables: the drift is named
    drifted = summarise_probe_rounds([_probe_round(1.1), _probe_round(1.0, alone_ms=(12.5, 11.25)),
                                      _probe_round(1.28)], 4, 8, "gloo", table_ms=[10.0, 9.0])
    assert drifted["round_kept"] == 1 and drifted["round_spread"] < 0.15
    warned = probe_warnings(drifted)
    assert len(warned) == 1 and "1.25x, 1.25x the latency tables" in warned[0]
    # the usual offset of a whole pass over its table pieces (5-8% here) is not drift
    assert probe_warnings(summarise_probe_rounds([_probe_round(1.1, alone_ms=(10.8, 9.7))] * 3, 4, 8, "gloo",
                                                 table_ms=[10.0, 9.0])) == []
    # a steady probe on the tables' machine: nothing to say
    assert probe_warnings(summarise_probe_rounds([_probe_round(1.1)] * 3, 4, 8, "gloo", table_ms=[10.0, 9.0])) == []
