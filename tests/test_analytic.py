"""Analytic (roofline) profiles: arithmetic, ordering, schema, acceptance, calibration, bad input."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np
import pytest

from ppsd.errors import UserError
from profiler.acceptance_transfer import rescale_exit_map
from profiler.analytic_cli import add_analytic_arguments, run_analytic
from ppsd.archs import arch_from_config, resolve_arch
from profiler.calibration import fit_efficiency
from profiler.estimated_profile import analytic_profile_meta, write_analytic_profile
from profiler.hardware import resolve_hardware
from ppsd.profile import load_profile, save_profile
from ppsd.profile.synthetic import write_synthetic_profile


def layer_ms(meta, layer=0, i_n=0, i_c=0):
    return meta["latency"]["layers"]["median_ms"][layer][i_n][i_c]


# --- first-principles arithmetic ------------------------------------------------------------------
def test_llama2_7b_h100_layer_is_weights_over_bandwidth():
    meta = analytic_profile_meta("llama-2-7b", "h100-sxm", "bf16", context_values=(64, 256, 1024))
    # Llama-2-7B, from its config.json: hidden 4096, MLP 11008, 32 heads = 32 KV heads.
    h, inter = 4096, 11008
    weights = (4 * h * h + 3 * h * inter + 2 * h) * 2  # q,k,v,o + gate,up,down + two norms, bf16
    assert weights == 404_766_720  # 405 MB a layer
    kv = 2 * (64 + 1) * h * 2 + 2 * 1 * h * 2  # K,V read over 65 positions + written for the new one
    bandwidth = 3.35e12  # H100 SXM datasheet, bytes/s
    ideal_ms = weights / bandwidth * 1e3
    assert ideal_ms == pytest.approx(0.1208, abs=1e-4)
    # the model: achieved bandwidth = 80% of peak, plus 12 kernels × 2.5 µs fixed cost
    expected_ms = (weights + kv) / (bandwidth * 0.80) * 1e3 + 12 * 2.5e-3
    got = layer_ms(meta)
    assert got == pytest.approx(expected_ms, rel=1e-9)
    assert got == pytest.approx(0.1814, abs=2e-4)
    # bounded by the plain roofline and the roofline at the modelled efficiency plus overhead
    assert ideal_ms < got < ideal_ms / 0.80 + 0.031
    assert meta["estimate"]["layer_bound"][0][0] == "memory"
    # every layer identical; the AR step is embedding + 32 layers + head
    layers = np.asarray(meta["latency"]["layers"]["median_ms"])
    assert layers.shape == (32, 5, 3) and np.allclose(layers, layers[0])
    head_w = (32000 * h + h) * 2
    head_expected = (head_w + 32000 * 2) / (bandwidth * 0.8) * 1e3 + 3 * 2.5e-3
    assert meta["latency"]["head"]["median_ms"][0] == pytest.approx(head_expected, rel=1e-9)
    step = meta["latency"]["whole_step"]["median_ms"]
    assert step == pytest.approx(meta["latency"]["embedding"]["median_ms"][0] + 32 * got + head_expected, rel=1e-9)
    # NVLink hop: 8 µs latency + 8 KB at 450 GB/s
    assert meta["latency"]["hop"]["median_ms"] == pytest.approx((8e-6 + (h * 2 + 8) / 450e9) * 1e3, rel=1e-9)


def test_compute_bound_at_large_n():
    meta = analytic_profile_meta("llama-2-7b", "rtx-3090", n_values=(1, 512), context_values=(64,))
    assert meta["estimate"]["layer_bound"][0][0] == "memory"
    assert meta["estimate"]["layer_bound"][1][0] == "compute"
    flops = meta["estimate"]["layer_flops"][1][0]
    assert layer_ms(meta, i_n=1) == pytest.approx(flops / (71e12 * 0.7) * 1e3 + 0.030, rel=1e-9)


def test_bigger_models_and_slower_hardware_are_slower():
    def t(arch, hw, **kw):
        return layer_ms(analytic_profile_meta(arch, hw, interconnect=None, **kw))

    def step(arch, hw):
        return analytic_profile_meta(arch, hw, interconnect=None)["latency"]["whole_step"]["median_ms"]

    assert t("llama-2-7b", "h100-sxm") < t("llama-2-13b", "h100-sxm") < t("llama-2-70b", "h100-sxm")
    assert step("llama-2-7b", "h100-sxm") < step("llama-2-13b", "h100-sxm") < step("llama-2-70b", "h100-sxm")
    assert step("smollm2-135m", "h100-sxm") < step("llama-2-7b", "h100-sxm")
    order = ["h200", "h100-sxm", "a100-80gb", "rtx-3090", "l4"]
    times = [t("llama-2-7b", hw) for hw in order]
    assert times == sorted(times) and len(set(times)) == len(times)
    # fp32 moves twice the bytes of bf16
    assert t("llama-2-7b", "a100-80gb", dtype="fp32") > 1.9 * t("llama-2-7b", "a100-80gb") - 0.03
    # longer context and more new tokens never make a layer faster
    layers = np.asarray(analytic_profile_meta("llama-3-8b", "l4", interconnect=None)["latency"]["layers"]["median_ms"])[0]
    assert np.all(np.diff(layers, axis=0) >= 0) and np.all(np.diff(layers, axis=1) > 0)
    # GQA: Llama-3-8B's KV cache grows 4x slower with context than Llama-2-7B's
    a = np.asarray(analytic_profile_meta("llama-2-7b", "h100-sxm")["estimate"]["layer_bytes"])
    b = np.asarray(analytic_profile_meta("llama-3-8b", "h100-sxm")["estimate"]["layer_bytes"])
    assert (a[0, 2] - a[0, 0]) == pytest.approx(4 * (b[0, 2] - b[0, 0]))
    # interconnects: nvlink < pcie < ethernet
    hops = [analytic_profile_meta("llama-2-7b", "h100-sxm", interconnect=x)["latency"]["hop"]["median_ms"]
            for x in ("nvlink", "pcie", "ethernet")]
    assert hops == sorted(hops)


def test_builtin_shapes_match_published_configs():
    a = resolve_arch("llama-2-70b")
    assert (a.hidden_size, a.intermediate_size, a.num_layers, a.num_heads, a.num_kv_heads) == (8192, 28672, 80, 64, 8)
    assert 68e9 < a.total_params() < 70e9
    assert 6.6e9 < resolve_arch("llama-2-7b").total_params() < 6.8e9
    assert 12.9e9 < resolve_arch("vicuna-13b").total_params() < 13.1e9
    assert 7.9e9 < resolve_arch("llama-3-8b").total_params() < 8.1e9
    assert 7.5e9 < resolve_arch("qwen2.5-7b").total_params() < 7.7e9
    assert 0.13e9 < resolve_arch("smollm2-135m").total_params() < 0.14e9
    assert resolve_arch("LLaMA-2-7B") is resolve_arch("llama-2-7b")
    assert resolve_hardware("H100").key == "h100-sxm"


def test_config_json_path(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
           "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    from_cfg = analytic_profile_meta(str(tmp_path), "h100-sxm")  # a folder holding config.json
    builtin = analytic_profile_meta("llama-2-7b", "h100-sxm")
    assert from_cfg["latency"]["layers"] == builtin["latency"]["layers"]
    assert from_cfg["latency"]["head"] == builtin["latency"]["head"]


# --- the profile folder ---------------------------------------------------------------------------
def test_meta_loads_with_load_profile(tmp_path):
    assert analytic_profile_meta("llama-2-7b", "l4", interconnect=None)["hardware"]["interconnect"] == "pcie"
    prof = write_analytic_profile(tmp_path / "p", "llama-2-13b", "a100-80gb", interconnect="pcie", gpu_count=4)
    again = load_profile(tmp_path / "p")
    assert again.kind == "estimated" and again.meta["timing"]["method"] == "roofline"
    assert again.num_layers == 40 and "A100" in again.device_name and "estimated" in again.device_name
    assert again.layer_ms(39, 1, 64) == pytest.approx(prof.layer_ms(0, 1, 64))
    assert again.layer_ms(0, 1, 1024) > again.layer_ms(0, 1, 64)
    assert again.hop_ms() > 0.015 and again.corun_slowdown(2) == 1.0
    assert again.meta["hardware"]["gpu_count"] == 4 and not again.has_acceptance
    # overwriting an old profile folder is fine; a folder of something else is refused
    write_analytic_profile(tmp_path / "p", "llama-2-7b", "h200")
    assert load_profile(tmp_path / "p").num_layers == 32
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="refusing to overwrite"):
        write_analytic_profile(other, "llama-2-7b", "h200")
    assert (other / "keep.txt").read_text() == "mine"


# --- acceptance -----------------------------------------------------------------------------------
def _src_alpha(e, n=30):
    return 0.1 + 0.8 * e / n


def test_rescaled_acceptance_keeps_alpha_vs_relative_depth(tmp_path, capsys):
    src = write_synthetic_profile(tmp_path / "src", alpha_by_exit=_src_alpha, num_layers=30, seed=3)
    src_alpha = src.alpha_by_exit()
    for arch, n_dst in (("llama-2-70b", 80), ("qwen2.5-7b", 28)):
        # another model's acceptance: copied only when forced, and then flagged
        prof = write_analytic_profile(tmp_path / arch, arch, "h100-sxm", acceptance_from=tmp_path / "src",
                                      force_acceptance_transfer=True)
        assert "acceptance transferred from another model" in capsys.readouterr().err
        assert any("synthetic" in w and arch in w for w in prof.meta["warnings"])
        assert prof.meta["acceptance"]["transfer"]["forced"] is True
        resc = prof.meta["acceptance"]["rescaled_from"]
        assert resc["num_layers"] == 30 and resc["model"] == "synthetic"
        dst_alpha = prof.alpha_by_exit()
        assert sorted(dst_alpha) == list(range(1, n_dst))
        for e, a in dst_alpha.items():
            e_src = resc["exit_map"][str(e)]
            nearest = min(abs(s / 30 - e / n_dst) for s in range(1, 30))
            assert abs(e_src / 30 - e / n_dst) == pytest.approx(nearest)  # nearest relative depth
            assert nearest <= 0.5 / 30 + 1e-12 or e / n_dst < 1 / 30 or e / n_dst > 29 / 30
            assert a == pytest.approx(src_alpha[e_src])  # the very traces, copied
            assert a == pytest.approx(_src_alpha(e_src), abs=0.15)
        # the curve against relative depth is kept: same α at the same depth (within one source step)
        for d in (0.25, 0.5, 0.75):
            assert dst_alpha[round(d * n_dst)] == pytest.approx(src_alpha[round(d * 30)], abs=0.08)


def test_exit_map_ties_and_ends():
    m = rescale_exit_map([1, 2, 3], 4, 8)
    assert m == {1: 1, 2: 1, 3: 1, 4: 2, 5: 2, 6: 3, 7: 3}


def test_alpha_curve_csv_and_json(tmp_path):
    csv_file = tmp_path / "curve.csv"
    csv_file.write_text("relative_depth,alpha\n0.25,0.80\n0.5,0.88\n0.75,0.94\n")
    prof = write_analytic_profile(tmp_path / "c", "llama-2-13b", "h100-sxm", alpha_curve=csv_file, seed=1)
    alpha = prof.alpha_by_exit()
    assert sorted(alpha) == list(range(1, 40))
    assert alpha[10] == pytest.approx(0.80, abs=0.05) and alpha[20] == pytest.approx(0.88, abs=0.05)
    assert prof.meta["acceptance"]["alpha_curve"]["kind"] == "relative_depth"
    # same seed, same table
    again = write_analytic_profile(tmp_path / "c2", "llama-2-13b", "h100-sxm", alpha_curve=csv_file, seed=1)
    assert again.acceptance.equals(prof.acceptance)
    js = tmp_path / "curve.json"
    js.write_text(json.dumps({"exit_layer": [8, 16], "alpha": [0.6, 0.9]}))
    prof = write_analytic_profile(tmp_path / "j", "llama-2-7b", "h100-sxm", alpha_curve=js)
    alpha = prof.alpha_by_exit()
    assert alpha[4] == pytest.approx(0.6, abs=0.06) and alpha[30] == pytest.approx(0.9, abs=0.06)
    js.write_text(json.dumps({"0.25": 0.5, "0.5": 0.7}))
    assert write_analytic_profile(tmp_path / "k", "llama-2-7b", "h100-sxm", alpha_curve=js).has_acceptance


# --- calibration ----------------------------------------------------------------------------------
def _measured_like(tmp_path, name, arch, ctx, **truth_kw):
    truth = analytic_profile_meta(arch, "h100-sxm", context_values=ctx, **truth_kw)
    truth["kind"] = "measured"
    truth["timing"] = {"method": "cuda_event", "warmup": 3, "repeats": 20}
    save_profile(tmp_path / name, truth)
    return tmp_path / name


def test_fit_efficiency_recovers_factors(tmp_path):
    # a grid where the KV cache changes the bytes enough (> 10%) to tell slope from overhead
    ctx = (64, 1024, 4096)
    est = analytic_profile_meta("smollm2-135m", "h100-sxm", context_values=ctx)
    meas = _measured_like(tmp_path, "m", "smollm2-135m", ctx, bandwidth_efficiency=0.62, launch_us=7.0)
    fit = fit_efficiency(est, meas)
    assert fit["method"] == "slope and overhead"
    assert fit["bandwidth_efficiency"] == pytest.approx(0.62, rel=1e-3)
    assert fit["launch_us"] == pytest.approx(7.0, rel=1e-2)
    assert fit["mape_pct_after"] < 0.1 < fit["mape_pct_before"]
    assert len(fit["per_layer"]) == 30 and fit["per_layer"][0]["rel_err_pct"] < -10
    # Llama-2-7B's weights dominate its bytes: only the efficiency is fitted, overhead held
    est7 = analytic_profile_meta("llama-2-7b", "h100-sxm")
    meas7 = _measured_like(tmp_path, "m7", "llama-2-7b", (64, 256, 1024), bandwidth_efficiency=0.62)
    fit7 = fit_efficiency(est7, meas7)
    assert fit7["method"].startswith("slope only")
    assert fit7["bandwidth_efficiency"] == pytest.approx(0.62, rel=1e-3)
    assert fit7["alternative"]["overhead_ms_per_layer"] > fit7["overhead_ms_per_layer"]
    assert fit7["head"]["rel_err_pct"] < 0  # the estimate (eff 0.8) is faster than the "measurement"
    with pytest.raises(UserError, match="layers"):
        fit_efficiency(analytic_profile_meta("llama-2-13b", "h100-sxm"), meas7)


# --- bad input ------------------------------------------------------------------------------------
def test_bad_input_errors(tmp_path):
    with pytest.raises(UserError, match="llama-2-7b") as exc:
        analytic_profile_meta("gpt-17", "h100-sxm")
    assert "unknown architecture" in str(exc.value)
    with pytest.raises(UserError, match="h100-sxm") as exc:
        analytic_profile_meta("llama-2-7b", "tpu-v9")
    assert "a100-80gb" in str(exc.value) and "rtx-3090" in str(exc.value)
    with pytest.raises(UserError, match="no NVLink"):
        analytic_profile_meta("llama-2-7b", "l4", interconnect="nvlink")
    with pytest.raises(UserError, match="interconnect"):
        analytic_profile_meta("llama-2-7b", "l4", interconnect="carrier-pigeon")
    with pytest.raises(UserError, match="dtype"):
        analytic_profile_meta("llama-2-7b", "h100-sxm", dtype="int3")
    with pytest.raises(UserError, match="fp8"):
        analytic_profile_meta("llama-2-7b", "a100-80gb", dtype="fp8")
    with pytest.raises(UserError, match="maximum context"):
        analytic_profile_meta("vicuna-7b", "h100-sxm", context_values=(64, 4096))
    t5 = tmp_path / "t5.json"
    t5.write_text(json.dumps({"architectures": ["T5ForConditionalGeneration"], "model_type": "t5",
                              "is_encoder_decoder": True, "d_model": 512}))
    with pytest.raises(UserError, match="encoder-decoder") as exc:
        arch_from_config(t5)
    assert "llama-2-7b" in str(exc.value)
    bert = tmp_path / "bert.json"
    bert.write_text(json.dumps({"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768}))
    with pytest.raises(UserError, match="not a decoder-only causal LM"):
        analytic_profile_meta(str(bert), "h100-sxm")
    gpt2 = tmp_path / "gpt2.json"
    gpt2.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    with pytest.raises(UserError):
        resolve_arch(str(gpt2))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(UserError, match="JSON"):
        resolve_arch(str(broken))
    curve = tmp_path / "bad.csv"
    curve.write_text("relative_depth,alpha\n0.5,1.7\n")
    with pytest.raises(UserError, match=r"\[0, 1\]"):
        write_analytic_profile(tmp_path / "x", "llama-2-7b", "h100-sxm", alpha_curve=curve)
    with pytest.raises(UserError, match="both"):
        write_analytic_profile(tmp_path / "x", "llama-2-7b", "h100-sxm", alpha_curve=curve, acceptance_from=tmp_path)
    with pytest.raises(UserError, match="not a profile folder"):
        write_analytic_profile(tmp_path / "y", "llama-2-7b", "h100-sxm", acceptance_from=tmp_path)


# --- CLI glue -------------------------------------------------------------------------------------
def _parser():
    p = argparse.ArgumentParser(prog="ppsd profile")
    p.add_argument("--out")  # what `ppsd profile` already has: reused, not redefined
    add_analytic_arguments(p)
    return p


def test_cli_glue(tmp_path, capsys):
    curve = tmp_path / "curve.csv"
    curve.write_text("relative_depth,alpha\n0.25,0.8\n0.75,0.95\n")
    args = _parser().parse_args(["--analytic", "--arch", "vicuna-7b", "--hardware", "a100", "--interconnect",
                                 "pcie", "--alpha-curve", str(curve), "--out", str(tmp_path / "v")])
    assert run_analytic(args) == 0
    line = capsys.readouterr().out
    assert "vicuna-7b" in line and "A100" in line and "tokens/s" in line
    prof = load_profile(tmp_path / "v")
    assert prof.meta["model"]["dtype"] == "bf16" and prof.meta["hardware"]["interconnect"] == "pcie"
    with pytest.raises(UserError, match="--arch and --hardware"):
        run_analytic(_parser().parse_args(["--analytic", "--out", str(tmp_path / "w")]))
    with pytest.raises(UserError, match="--out"):
        run_analytic(_parser().parse_args(["--analytic", "--arch", "llama-2-7b", "--hardware", "h200"]))


def test_cli_glue_reuses_an_existing_dtype_option(tmp_path):
    def parser():
        p = argparse.ArgumentParser(prog="ppsd profile")
        p.add_argument("--out")
        p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])  # the CPU profiler's
        add_analytic_arguments(p)
        return p

    base = ["--analytic", "--arch", "llama-2-7b", "--hardware", "h100-sxm"]
    args = parser().parse_args([*base, "--out", str(tmp_path / "a")])
    assert args.dtype == "fp32"  # the measured path still sees its own default
    run_analytic(args)
    assert load_profile(tmp_path / "a").meta["model"]["dtype"] == "bf16"
    run_analytic(parser().parse_args([*base, "--dtype", "fp32", "--out", str(tmp_path / "b")]))
    assert load_profile(tmp_path / "b").meta["model"]["dtype"] == "fp32"


def test_no_torch_imported():
    code = ("import sys, profiler.acceptance_transfer, profiler.analytic_cli, ppsd.archs, profiler.calibration, "
            "profiler.estimated_profile, profiler.hardware, profiler.roofline, profiler.stacks; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
