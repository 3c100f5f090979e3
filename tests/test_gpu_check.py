"""Random-weight real-size models (`random:ARCH`), the GPU check's CPU dry run end to end, its
fail-fast without a GPU, and bench/calibrate.py. CPU only, under a minute."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ppsd.cli import main
from ppsd.errors import UserError
from profiler.model import load_model, parse_random_spec

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

@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    r = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--cpu-dry-run", "--out", str(out),
                        "--archive", str(out.parent / "gpu-check.tgz")],
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out, r.stdout


def test_dry_run_writes_every_result_with_the_device_in_the_names(dry_run):
    from profiler.schema import load_profile

    out, log = dry_run
    for phase in ("1 profile", "2 traces", "3 estimate", "4 validate"):
        assert f"== {phase}:" in log  # each phase timed
    assert "plan: 1 profile random:smollm2-135m?layers=4" in log
    import tarfile

    with tarfile.open(out.parent / "gpu-check.tgz") as tar:  # one file to bring back from a GPU machine
        assert f"{out.name}/validation-random-smollm2-135m-l4-cpu/validation.json" in tar.getnames()
    prof = load_profile(out / "profile-random-smollm2-135m-l4-cpu")
    assert prof.kind == "measured" and prof.num_layers == 4 and prof.model_id == "random:smollm2-135m?layers=4"
    assert prof.has_acceptance and len(prof.generations()) == 2
    est = load_profile(out / "estimate-smollm2-135m-l4-h200")
    assert est.kind == "estimated" and est.num_layers == 4 and est.has_acceptance
    assert load_profile(out / "estimate-smollm2-135m-l4-h200-calibrated").meta["calibration"]["reading"]
    val = json.loads((out / "validation-random-smollm2-135m-l4-cpu" / "validation.json").read_text())
    modes = {r["mode"] for r in val["rows"]}
    assert {"ar", "eesd"} <= modes
    assert ("ppsd" in modes) == (len(os.sched_getaffinity(0)) >= 2)
    assert val["forced_trace"] is True and val["model"] == "random:smollm2-135m?layers=4"
    summary = json.loads((out / "gpu_check-random-smollm2-135m-l4-cpu.json").read_text())
    assert summary["cpu_dry_run"] and set(summary["phases_s"]) == {"1 profile", "2 traces", "3 estimate", "4 validate"}
    assert {r["plan"] for r in summary["estimate_vs_measured"]} == {r["plan"] for r in val["rows"]}
    fit = json.loads((out / "calibration-random-smollm2-135m-l4-cpu.json").read_text())
    assert len(fit["per_layer"]) == 4 and fit["mape_pct_after"] < fit["mape_pct_before"]


def test_calibrate_reports_per_layer_error_before_and_after(dry_run):
    out, _ = dry_run
    prof = out / "profile-random-smollm2-135m-l4-cpu"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "calibrate.py"), "--measured", str(prof),
                        "--hardware", "h200"], env=_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "per-layer time at n=1" in r.stdout and "MAPE over" in r.stdout and "--bandwidth-efficiency" in r.stdout
    # a CPU device matches no hardware-table entry: one line, exit 2
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "calibrate.py"), "--measured", str(prof)],
                       env=_env(), capture_output=True, text=True, timeout=60)
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
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_check_env.py"), "--cpu", *args]
    if wheels:
        cmd += ["--wheels", str(wheels)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def test_env_check_enforces_the_transformers_pin(tmp_path):
    """The lent image's transformers 5.17.0 without the carried wheel: refused with the fixes named."""
    shadow = _fake_package(tmp_path / "shadow", "transformers", '__version__ = "5.17.0"\n')
    r = _env_check(pythonpath=shadow, wheels=tmp_path / "none")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    err = r.stderr.strip()
    assert err.startswith("gpu_check: error: transformers 5.17.0 is installed but ppsd pins 5.24.0")
    assert "no transformers wheel is carried" in err and "fetch_gpu_wheels.sh" in err
    assert "--allow-transformers-mismatch" in err
    r = _env_check("--allow-transformers-mismatch", pythonpath=shadow, wheels=tmp_path / "none")
    assert r.returncode == 0, r.stderr
    assert "not the pinned 5.24.0" in r.stdout


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
    assert "installing carried wheels" in r.stdout and "simpy-9.9.9" in r.stdout and "rich-" not in r.stdout
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


def _gpu_check_module():
    import importlib

    sys.path.insert(0, str(ROOT / "bench"))
    return importlib.import_module("gpu_check")


def test_phase_4_tokens_fit_the_budget_or_it_is_skipped():
    from types import SimpleNamespace

    gc = _gpu_check_module()
    size = dict(gc.SIZES["gpu"])
    measured = SimpleNamespace(latency={"whole_step": {"median_ms": 25.0}})
    plans = ["eesd:8:3", "eesd:16:3"]  # one GPU: no PPSD
    assert gc.fit_tokens(size, plans, measured, 60.0, cpu=False) == (64, None)
    tokens, why = gc.fit_tokens(size, plans, measured, 350.0, cpu=False)
    assert 8 <= tokens < 64 and "cut from 64" in why
    tokens, why = gc.fit_tokens(size, plans, measured, 420.0, cpu=False)  # under the budget, but no room left
    assert tokens is None and "would not fit" in why
    # the bracketing AR runs count: 56 runs of 64 tokens at 25 ms × 1.3, plus start-up, within 450 s
    assert 20 + 56 * 64 * 0.025 * 1.3 < size["budget_s"]


def test_summary_records_a_phase_that_raises(tmp_path, monkeypatch, capsys):
    """A non-UserError in validate (a CUDA error, say) fails that phase, not the check: the summary
    holds every phase's status and the error, and the exit code is 1."""
    gc = _gpu_check_module()
    real = gc.ppsd

    def ppsd(*argv):
        if argv[0] == "validate":
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")
        return real(*argv)

    monkeypatch.setattr(gc, "ppsd", ppsd)
    monkeypatch.setenv("PPSD_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OUT", raising=False)
    assert gc.main(["--cpu-dry-run", "--out", str(tmp_path / "out")]) == 1
    summary = json.loads((tmp_path / "out" / "gpu_check-random-smollm2-135m-l4-cpu.json").read_text())
    phases = summary["phases"]
    assert [phases[p]["status"] for p in gc.PHASES] == ["ok", "ok", "ok", "failed"]
    assert phases["4 validate"]["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert summary["validation"] is None and set(summary["phases_s"]) == set(gc.PHASES)
    assert summary["versions"]["installed"]["torch"] == torch.__version__
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("gpu_check: error: phase 4 validate failed (RuntimeError: CUDA error")


def test_summary_skips_the_phases_after_a_failed_profile(tmp_path, monkeypatch):
    gc = _gpu_check_module()
    monkeypatch.setattr(gc, "ppsd", lambda *argv: 2)  # `ppsd profile` refused the input
    monkeypatch.delenv("OUT", raising=False)
    assert gc.main(["--cpu-dry-run", "--out", str(tmp_path / "out")]) == 1
    summary = json.loads((tmp_path / "out" / "gpu_check-random-smollm2-135m-l4-cpu.json").read_text())
    assert summary["phases"]["1 profile"]["status"] == "failed"
    assert "exited with code 2" in summary["phases"]["1 profile"]["error"]
    assert {summary["phases"][p]["status"] for p in gc.PHASES[1:]} == {"skipped"}
