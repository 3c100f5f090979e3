"""Random-weight real-size models (`random:ARCH`), the GPU check's CPU dry run end to end, its
fail-fast without a GPU, and `python -m bench.calibrate`. CPU only, under a minute."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bench import gpu_check as gc
from bench import gpu_check_env
from ppsd.cli import main
from ppsd.errors import UserError
from runtime.llm import load_model, parse_random_spec

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(1)


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHON=sys.executable, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", **extra)
    env.pop("OUT", None)
    return env


# --- random:ARCH -----------------------------------------------------------------------------------

def test_random_model_has_the_architecture_shape_and_is_seeded():
    m = load_model("random:smollm2-135m?layers=2")
    assert m.model_id == "random:smollm2-135m?layers=2"
    assert (m.num_layers, m.hidden_size, m.vocab_size, m.max_context) == (2, 576, 49152, 8192)
    attn = m.layers[0].self_attn
    assert attn.k_proj.weight.shape == (3 * 64, 576)  # 3 KV heads of 64: grouped-query attention kept
    assert m.model.lm_head.weight is m.embed_tokens.weight  # SmolLM2 ties its embeddings
    again = load_model("random:SmolLM2-135M?layers=2")
    assert torch.equal(m.layers[1].mlp.up_proj.weight, again.layers[1].mlp.up_proj.weight)
    other = load_model("random:smollm2-135m?layers=2&seed=1")
    assert not torch.equal(m.layers[1].mlp.up_proj.weight, other.layers[1].mlp.up_proj.weight)
    assert float(m.norm.weight.detach().min()) == 1.0
    ids = torch.tensor([m.encode_prompt("random weights")])
    h = m.forward_layers(m.embed(ids), 0, 2, m.new_cache(), 0)
    assert torch.isfinite(m.head(h)).all()


def test_random_model_dtype_and_config_path(tmp_path):
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 128,
           "intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 512, "max_position_embeddings": 1024}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = load_model(f"random:{tmp_path / 'config.json'}", dtype="bfloat16")
    assert m.num_layers == 3 and m.dtype == torch.bfloat16
    assert m.layers[0].mlp.gate_proj.weight.dtype == torch.bfloat16
    assert m.model_id == f"random:{(tmp_path / 'config.json').resolve()}"
    shape, seed, mid = parse_random_spec("random:qwen2.5-7b?layers=3")
    assert shape.num_layers == 3 and shape.qkv_bias and seed is None and mid == "random:qwen2.5-7b?layers=3"


@pytest.mark.parametrize("spec, words", [
    ("random:gpt-7", "llama-2-7b"),  # unknown: the known ones are listed
    ("random:llama-2-7b?layers=1", "between 2 and 32"),
    ("random:llama-2-7b?depth=3", "unknown option"),
    ("random:", "names no architecture"),
])
def test_random_model_bad_specs(spec, words):
    with pytest.raises(UserError, match=words):
        parse_random_spec(spec)


def test_profile_cli_refuses_unknown_random_arch(tmp_path, capsys):
    assert main(["profile", "--model", "random:nope", "--skip-acceptance", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "unknown architecture" in err and "llama-2-7b" in err


# --- the GPU check ---------------------------------------------------------------------------------

RUN = "gpu_check-random-smollm2-135m-l4-cpu"


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The whole check on CPU through gpu_check.sh, as a lent GPU machine runs it (no wheels carried
    here: this Python has every pin). Returns (the unpacked result folder, stdout, the output folder)."""
    root = tmp_path_factory.mktemp("gpu-check")
    out = root / "out"
    r = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--cpu-dry-run", "--out", str(out)],
                       env=_env(PPSD_WHEELS=str(root / "no-wheels")), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    import tarfile

    with tarfile.open(out / f"{RUN}.tgz") as tar:
        tar.extractall(root / "unpacked", filter="data")
    return root / "unpacked" / RUN, r.stdout, out


def test_dry_run_brings_back_one_archive_and_its_summary(dry_run):
    """A device brings back a few files: the output folder gets the archive and the summary, nothing
    else; the archive (built outside the folder it packs) holds every result and the whole log."""
    res, log, out = dry_run
    assert sorted(p.name for p in out.iterdir()) == [f"{RUN}.json", f"{RUN}.tgz"]
    assert json.loads((out / f"{RUN}.json").read_text()) == json.loads((res / f"{RUN}.json").read_text())
    assert not list(res.rglob("*.tgz"))  # it did not pack itself (nor an earlier archive)
    full = (res / "gpu_check.log").read_text()
    assert "== 5 heads:" in full and "$ ppsd heads train" in full
    # the carried wheels are the first thing said (seconds in), present or not
    first = log.splitlines()[0]
    assert first.startswith("gpu_check: no carried wheels in ") and "fetch_gpu_wheels.sh" in first
    assert f"gpu_check: results: {out}/{RUN}.tgz" in log


def test_dry_run_writes_every_result_with_the_device_in_the_names(dry_run):
    from ppsd.profile import load_profile

    out, log, _ = dry_run
    for phase in ("1 profile", "2 traces", "3 estimate", "4 validate", "5 heads"):
        assert f"== {phase}:" in log  # each phase timed
    assert "plan: 1 profile random:smollm2-135m?layers=4" in log
    prof = load_profile(out / "profile-random-smollm2-135m-l4-cpu")
    assert prof.kind == "measured" and prof.num_layers == 4 and prof.model_id == "random:smollm2-135m?layers=4"
    assert prof.has_acceptance and len(prof.generations()) == 2
    # the hop and the pipeline probe ran: two spawned workers, as on one GPU
    assert prof.latency["hop"]["backend"] == "gloo" and prof.latency["pipeline"]["backend"] == "gloo"
    est = load_profile(out / "estimate-smollm2-135m-l4-h200")
    assert est.kind == "estimated" and est.num_layers == 4 and est.has_acceptance
    assert load_profile(out / "estimate-smollm2-135m-l4-h200-calibrated").meta["calibration"]["reading"]
    val = json.loads((out / "validation-random-smollm2-135m-l4-cpu" / "validation.json").read_text())
    modes = {r["mode"] for r in val["rows"]}
    assert {"ar", "eesd"} <= modes
    assert ("ppsd" in modes) == (len(os.sched_getaffinity(0)) >= 2)
    assert val["forced_trace"] is True and val["model"] == "random:smollm2-135m?layers=4"
    # traces drawn from an α curve commit drafts a random model would reject: no losslessness asked
    assert prof.acceptance_drawn and all(r["outputs_match_ar"] is None for r in val["rows"])
    summary = json.loads((out / f"{RUN}.json").read_text())
    assert summary["cpu_dry_run"] and set(summary["phases_s"]) == {"1 profile", "2 traces", "3 estimate",
                                                                   "4 validate", "5 heads"}
    assert {r["plan"] for r in summary["estimate_vs_measured"]} == {r["plan"] for r in val["rows"]}
    fit = json.loads((out / "calibration-random-smollm2-135m-l4-cpu.json").read_text())
    assert len(fit["per_layer"]) == 4 and fit["mape_pct_after"] < fit["mape_pct_before"]
    heads = out / "heads-tiny-llama-cpu"
    lat = json.loads((heads / "latency.json").read_text())
    assert set(lat["exit_heads"]) == {"trained", "vocab64"} and lat["shared"]["median_ms"][0] > 0
    assert (heads / "eval.csv").read_text().startswith("exit_layer,head,category")
    assert summary["heads"] == "heads-tiny-llama-cpu" and set(summary["heads_draft_ms_n1"]) == {"shared", "trained",
                                                                                               "vocab64"}


def test_dry_run_summary_says_which_paths_ran(dry_run):
    out, log, _ = dry_run
    paths = {p["path"]: p for p in json.loads((out / f"{RUN}.json").read_text())["paths"]}
    assert set(paths) == {"cuda_event_timing", "spawn_workers", "hop", "pipeline_probe", "nccl", "spawn_stages",
                          "runtime_ar_eesd", "heads"}
    for name in ("cuda_event_timing", "spawn_workers", "hop", "pipeline_probe", "runtime_ar_eesd", "heads"):
        assert paths[name]["ran"] and not paths[name]["on_cuda"], paths[name]
    assert not paths["nccl"]["ran"] and not paths["spawn_stages"]["ran"]
    assert "paths:" in log and "NOT run" in log


def test_calibrate_reports_per_layer_error_before_and_after(dry_run):
    out, _, _ = dry_run
    prof = out / "profile-random-smollm2-135m-l4-cpu"
    r = subprocess.run([sys.executable, "-m", "bench.calibrate", "--measured", str(prof), "--hardware", "h200"],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "per-layer time at n=1" in r.stdout and "MAPE over" in r.stdout and "--bandwidth-efficiency" in r.stdout
    # a CPU device matches no hardware-table entry: one line, exit 2
    r = subprocess.run([sys.executable, "-m", "bench.calibrate", "--measured", str(prof)],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--hardware" in r.stderr


def test_without_a_gpu_it_fails_fast_with_one_line(tmp_path):
    r = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--out", str(tmp_path)],
                       env=_env(CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().startswith("gpu_check: error: no CUDA GPU") and r.stderr.strip().count("\n") == 0
    assert "--cpu-dry-run" in r.stderr
    assert not any(tmp_path.iterdir())  # nothing written


# --- surviving a bare GPU machine: the environment check, carried wheels, the summary -----------------

def _fake_package(root: Path, name: str, body: str) -> Path:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "__init__.py").write_text(body)
    return root


def _env_check(*args, pythonpath: Path | None = None, wheels: Path | None = None):
    env = _env()
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    cmd = [sys.executable, "-m", "bench.gpu_check_env", "--cpu", *args]
    if wheels:
        cmd += ["--wheels", str(wheels)]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_env_check_enforces_the_transformers_pin(tmp_path):
    """The lent image's transformers 5.17.0 without the carried wheel: refused with the fixes named."""
    shadow = _fake_package(tmp_path / "shadow", "transformers", '__version__ = "5.17.0"\n')
    r = _env_check(pythonpath=shadow, wheels=tmp_path / "none")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    err = r.stderr.strip()
    assert err.startswith("gpu_check: error: transformers 5.17.0 is installed but ppsd pins 5.24.0")
    assert "no transformers wheel is carried" in err and "fetch_gpu_wheels.sh" in err
    assert "--allow-transformers-mismatch" in err
    # the flag does not wave through a transformers whose calls differ: this one has no decoder layers
    r = _env_check("--allow-transformers-mismatch", pythonpath=shadow, wheels=tmp_path / "none")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "transformers 5.17.0 (ppsd pins 5.24.0) breaks a call ppsd makes" in r.stderr
    assert "LlamaDecoderLayer" in r.stderr and "fetch_gpu_wheels.sh" in r.stderr


def test_mismatch_flag_runs_once_the_calls_check_out(monkeypatch, tmp_path, capsys):
    """Another version whose calls are ppsd's (here: the real one under another version number)."""
    import transformers

    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    assert gpu_check_env.check(True, False, tmp_path) == 2
    assert "--allow-transformers-mismatch" in capsys.readouterr().err
    assert gpu_check_env.check(True, True, tmp_path) == 0
    assert "not the pinned 5.24.0 (--allow-transformers-mismatch): the decoder-layer arguments" in capsys.readouterr().out


def test_transformers_call_problems_catch_a_renamed_cache_argument(monkeypatch):
    """The silent failure the mismatch flag risks: a layer whose cache argument has another name takes
    ppsd's `cache=` into **kwargs and runs without a KV cache. Both the signature and a cached step
    catch it; so does a missing init helper."""
    from transformers import initialization as hf_init
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from runtime.llm import _cached_step_problems, load_model, transformers_call_problems

    assert transformers_call_problems() == []
    real = LlamaDecoderLayer.forward

    def renamed(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False,
                position_embeddings=None, **kwargs):
        return real(self, hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                    cache=past_key_values, use_cache=use_cache, position_embeddings=position_embeddings)

    monkeypatch.setattr(LlamaDecoderLayer, "forward", renamed)
    problems = transformers_call_problems()
    assert len(problems) == 1 and problems[0].startswith("LlamaDecoderLayer.forward takes no argument named cache")
    tiny = load_model("tiny-llama")
    assert _cached_step_problems(tiny)[0].startswith("the decoder layers did not fill ppsd's KV cache")
    monkeypatch.setattr(LlamaDecoderLayer, "forward", real)
    assert _cached_step_problems(tiny) == []
    monkeypatch.delattr(hf_init, "no_init_weights")
    assert transformers_call_problems()[-1].startswith("transformers.initialization.no_init_weights is unusable")


def test_env_check_names_the_fix_for_a_missing_package(tmp_path):
    shadow = _fake_package(tmp_path / "shadow", "simpy", 'raise ImportError("No module named \'simpy\'")\n')
    r = _env_check(pythonpath=shadow)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "simpy" in r.stderr and "No module named" in r.stderr and "fetch_gpu_wheels.sh" in r.stderr


def test_an_environment_failure_still_leaves_a_summary(tmp_path):
    """gpu_check.sh --out DIR stopped by the environment check: DIR has the reason as JSON."""
    shadow = _fake_package(tmp_path / "shadow", "simpy", 'raise ImportError("No module named \'simpy\'")\n')
    out = tmp_path / "out"
    env = _env(PYTHONPATH=str(shadow), PPSD_WHEELS=str(tmp_path / "none"))
    r = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--cpu-dry-run", "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    doc = json.loads((out / "gpu_check-environment.json").read_text())
    assert doc["status"] == "failed" and doc["phase"] == "environment" and "simpy" in doc["error"]


def _fake_wheel(folder: Path, name: str, version: str) -> Path:
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    whl = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f'__version__ = "{version}"\n',
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{p},,\n" for p in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(whl, "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
    return whl


def test_carried_wheels_this_python_lacks_are_installed_first(tmp_path):
    """A carried wheel of another version than this Python's goes into a private folder ahead of the
    installed packages (as simpy / transformers do on the lent image); one it already has is skipped."""
    wheels = tmp_path / "whl"
    _fake_wheel(wheels, "simpy", "9.9.9")
    _fake_wheel(wheels, "rich", __import__("importlib.metadata").metadata.version("rich"))  # already there
    r = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--cpu-dry-run", "--env-only"],
                       env=_env(PPSD_WHEELS=str(wheels), PPSD_SITE=str(tmp_path / "site")),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith(f"gpu_check: carried wheels in {wheels}/: rich-")  # said first
    installing = next(line for line in r.stdout.splitlines() if "installing carried wheels" in line)
    assert "simpy-9.9.9" in installing and "rich-" not in installing
    simpy_line = next(line for line in r.stdout.splitlines() if line.split()[:1] == ["simpy"])
    assert "9.9.9" in simpy_line and str(tmp_path / "site") in simpy_line
    assert "environment ready" in r.stdout


def test_scripts_parse_and_the_wheel_fetch_dry_run_prints_pinned_downloads():
    for script in ("gpu_check.sh", "fetch_gpu_wheels.sh"):
        assert subprocess.run(["bash", "-n", str(ROOT / "bench" / script)]).returncode == 0
    r = subprocess.run(["bash", str(ROOT / "bench" / "fetch_gpu_wheels.sh"), "--dry-run", "regex==2025.11.3"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert [line.split()[-1] for line in lines] == ["simpy==4.1.2", "transformers==5.24.0", "regex==2025.11.3"]
    for line in lines:
        assert "pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp" in line
        assert "--platform manylinux_2_28_x86_64" in line and "-d .whl" in line
    bad = subprocess.run(["bash", str(ROOT / "bench" / "fetch_gpu_wheels.sh"), "--bogus"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_phase_4_tokens_fit_the_budget_or_it_is_skipped():
    from types import SimpleNamespace

    size = dict(gc.SIZES["gpu"])
    measured = SimpleNamespace(latency={"whole_step": {"median_ms": 25.0}})
    plans = ["eesd:8:3", "eesd:16:3"]  # one GPU: no PPSD
    heads = size["heads_s"]  # phase 5 runs after phase 4: its time is kept
    assert gc.fit_tokens(size, plans, measured, 60.0, cpu=False, reserve_s=heads) == (64, None)
    tokens, why = gc.fit_tokens(size, plans, measured, 200.0, cpu=False, reserve_s=heads)
    assert 8 <= tokens < 64 and "cut from 64" in why
    assert gc.fit_tokens(size, plans, measured, 200.0, cpu=False) == (64, None)  # without phase 5: room enough
    tokens, why = gc.fit_tokens(size, plans, measured, 300.0, cpu=False, reserve_s=heads)  # no room left
    assert tokens is None and "would not fit" in why and "kept for phase 5" in why
    # by the estimate, one H200: ~60 s start-up, profile ~90 s (grid ~10 s, two workers loading the
    # model ~40 s), 56 runs of 64 tokens at 25 ms × 1.3 and 20 s fixed, heads 60 s, packing 10 s:
    # within the budget, and the whole within the 8 minutes a device call is given
    phases = 90 + 10 + (20 + 56 * 64 * 0.025 * 1.3) + heads
    assert phases < size["budget_s"] and 60 + size["budget_s"] + 10 <= 8 * 60


def test_summary_records_a_phase_that_raises(tmp_path, monkeypatch, capsys):
    """A non-UserError in validate (a CUDA error, say) fails that phase, not the check: the summary
    holds every phase's status and the error, and the exit code is 1."""
    real = gc.ppsd

    def ppsd(*argv):
        if argv[0] == "validate":
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")
        if argv[0] == "profile":  # the dry run covers the hop and the probe; spare this test their 20 s
            argv = (*argv, "--no-hop")
        return real(*argv)

    monkeypatch.setattr(gc, "ppsd", ppsd)
    monkeypatch.setenv("PPSD_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OUT", raising=False)
    assert gc.main(["--cpu-dry-run", "--no-heads", "--out", str(tmp_path / "out")]) == 1
    summary = json.loads((tmp_path / "out" / "gpu_check-random-smollm2-135m-l4-cpu.json").read_text())
    phases = summary["phases"]
    assert [phases[p]["status"] for p in gc.PHASES] == ["ok", "ok", "ok", "failed", "skipped"]
    assert phases["4 validate"]["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert summary["validation"] is None and set(summary["phases_s"]) == set(gc.PHASES) - {"5 heads"}
    assert {p["path"]: p["detail"] for p in summary["paths"]}["spawn_stages"] == "phase 4 did not finish"
    assert summary["versions"]["installed"]["torch"] == torch.__version__
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("gpu_check: error: phase 4 validate failed (RuntimeError: CUDA error")


def test_summary_skips_the_phases_after_a_failed_profile(tmp_path, monkeypatch):
    monkeypatch.setattr(gc, "ppsd", lambda *argv: 2)  # `ppsd profile` refused the input
    monkeypatch.delenv("OUT", raising=False)
    assert gc.main(["--cpu-dry-run", "--out", str(tmp_path / "out")]) == 1
    summary = json.loads((tmp_path / "out" / "gpu_check-random-smollm2-135m-l4-cpu.json").read_text())
    assert summary["phases"]["1 profile"]["status"] == "failed"
    assert "exited with code 2" in summary["phases"]["1 profile"]["error"]
    assert {summary["phases"][p]["status"] for p in ("2 traces", "3 estimate", "4 validate")} == {"skipped"}
    # the heads smoke needs no profile: it still ran (and failed here, as every ppsd call does)
    assert summary["phases"]["5 heads"]["error"] == "ppsd heads train exited with code 2 (see the log above)"
    paths = {p["path"]: p for p in summary["paths"]}
    assert not any(p["ran"] for p in paths.values())
    assert paths["hop"]["detail"] == "phase 1 did not finish"


def test_the_hard_stop_ends_the_running_phase_and_keeps_the_summary(tmp_path, monkeypatch, capsys):
    """--stop-after-s (gpu_check.sh sets it so that packing happens before the device's limit):
    the phase running then fails with the reason, the rest are skipped, exit 1, and no alarm is left."""
    import signal

    def slow(*argv):
        time.sleep(30)
        return 0

    monkeypatch.setattr(gc, "ppsd", slow)
    monkeypatch.delenv("OUT", raising=False)
    before = signal.getsignal(signal.SIGTERM)
    t0 = time.monotonic()
    assert gc.main(["--cpu-dry-run", "--stop-after-s", "1", "--out", str(tmp_path / "out")]) == 1
    assert time.monotonic() - t0 < 20
    assert signal.alarm(0) == 0 and signal.getsignal(signal.SIGTERM) == before
    summary = json.loads((tmp_path / "out" / "gpu_check-random-smollm2-135m-l4-cpu.json").read_text())
    assert summary["phases"]["1 profile"] == {"status": "failed", "seconds": summary["phases"]["1 profile"]["seconds"],
                                              "error": "stopped: the --stop-after-s deadline passed"}
    assert {summary["phases"][p]["status"] for p in gc.PHASES[1:]} == {"skipped"}
    assert summary["stopped"].endswith("the --stop-after-s deadline passed")
    assert "gpu_check: error: phase 1 profile failed (stopped" in capsys.readouterr().err


def test_path_reports_on_one_and_on_two_gpus():
    """What the summary says about each CUDA path: on one GPU the hop and the probe run (two workers
    over gloo) and the heads smoke, NCCL and the PPSD stage spawn cannot; on two GPUs they all can."""
    one = gc.RunState(cpu=False, gpus=1, profile_ok=True, hop={"backend": "gloo"}, pipeline={"backend": "gloo"},
                      validated_modes=("ar", "eesd"), heads_ok=True)
    got = {r.path: r for r in gc.path_reports(one)}
    for name in ("cuda_event_timing", "spawn_workers", "hop", "pipeline_probe", "runtime_ar_eesd", "heads"):
        assert got[name].ran and got[name].on_cuda, got[name]
    assert not got["nccl"].ran and "needs 2 GPUs" in got["nccl"].detail
    assert not got["spawn_stages"].ran and "test_launch.py" in got["spawn_stages"].detail
    two = gc.RunState(cpu=False, gpus=2, profile_ok=True, hop={"backend": "nccl"}, pipeline={"backend": "nccl"},
                      validated_modes=("ar", "eesd", "ppsd"), heads_ok=True)
    got = {r.path: r for r in gc.path_reports(two)}
    assert all(r.ran and r.on_cuda for r in got.values()), got
    failed = gc.RunState(cpu=False, gpus=1, profile_ok=True, profile_warnings=("pipeline probe failed (x); kept",))
    got = {r.path: r for r in gc.path_reports(failed)}
    assert not got["pipeline_probe"].ran and got["pipeline_probe"].detail.startswith("pipeline probe failed")
    # a reading that stayed unphysical: the probe went through its path, the profile dropped its figure
    dropped = gc.RunState(cpu=True, gpus=0, profile_ok=True, hop={"backend": "gloo"}, pipeline={"runtime": {"slowdown": 1.0}},
                          profile_warnings=("pipeline runtime probe dropped (y, which is not physical)",
                                            "pipeline probe failed (latency.pipeline.slowdown = 0.900 ..., which is "
                                            "not physical ...); kept"))
    got = {r.path: r for r in gc.path_reports(dropped)}
    assert got["pipeline_probe"].ran and got["pipeline_probe"].detail.startswith("ran; its reading was dropped: pipeline probe")


def test_probe_clock_waits_for_its_compute_stream_only(monkeypatch):
    """The pipeline probe's stage clock (profiler/latency.py `_ProbeStage._now`) synchronises the
    stage's own compute stream, as a runtime stage does, never the whole device (which would also
    wait for a pending NCCL send); checked on a CPU with fakes that record the calls."""
    from types import SimpleNamespace

    from profiler.latency import _ProbeStage

    log = []

    class Stream:
        def synchronize(self):
            log.append("stream sync")

    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: log.append(("stream of", str(d))) or Stream())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: log.append("device-wide sync"))
    stage = object.__new__(_ProbeStage)
    stage.cuda, stage.adapter = True, SimpleNamespace(device=torch.device("cuda:1"))
    assert isinstance(stage._now(), float)
    assert log == [("stream of", "cuda:1"), "stream sync"]
