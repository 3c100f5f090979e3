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
