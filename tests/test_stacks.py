"""The software stack of analytic profiles (profiler/stacks.py, its use in profiler/roofline.py and
profiler/estimated_profile.py): compiled = the roofline alone, eager = host-bound at batch 1."""

from __future__ import annotations

import pytest

from ppsd.errors import UserError
from ppsd.archs import resolve_arch
from profiler.estimated_profile import analytic_profile_meta, estimated_step_ms, write_analytic_profile
from profiler.hardware import resolve_hardware
from profiler.roofline import layer_bytes, layer_seconds, make_roofline
from profiler.stacks import DEFAULT_STACK, EAGER_DISPATCH_US, EAGER_OPS_PER_LAYER, STACKS, resolve_stack


def test_default_is_compiled_and_is_the_plain_roofline():
    assert DEFAULT_STACK == "compiled" and STACKS["compiled"].dispatch_us == 0
    shape, hw = resolve_arch("llama-2-7b"), resolve_hardware("h100-sxm")
    roof = make_roofline(hw, "bf16")
    assert roof.stack == "compiled" and roof.host_s_per_op == 0
    # unchanged from before the stack choice: bytes / achieved bandwidth + kernels · launch
    expect = layer_bytes(shape, 1, 64, 2) / (hw.bytes_per_s * hw.bandwidth_efficiency) + 12 * hw.launch_us * 1e-6
    assert layer_seconds(shape, roof, 1, 64) == pytest.approx(expect, rel=1e-12)
    meta = analytic_profile_meta("llama-2-7b", "h100-sxm")
    assert meta["estimate"]["stack"] == "compiled" and meta["estimate"]["batch_size"] == 1


@pytest.mark.parametrize("arch", ["llama-2-7b", "llama-2-13b", "llama-3-8b", "smollm2-135m"])
@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-sxm"])
def test_eager_is_slower_and_host_bound(arch, gpu):
    compiled = estimated_step_ms(arch, gpu, stack="compiled")
    eager = estimated_step_ms(arch, gpu, stack="eager")
    assert eager > compiled
    # host-bound: a layer costs its ops' dispatch time, whatever the GPU
    n = resolve_arch(arch).num_layers
    assert eager >= n * EAGER_OPS_PER_LAYER * EAGER_DISPATCH_US * 1e-3
    if arch.startswith("llama") and gpu == "a100-80gb":
        assert 2.0 < eager / compiled < 5.0  # 7-13B on an A100: published eager vs compiled is ~4x


def test_eager_does_not_follow_the_gpu_and_compiled_does():
    c_a100, c_h100 = (estimated_step_ms("llama-2-7b", g, stack="compiled") for g in ("a100-80gb", "h100-sxm"))
    e_a100, e_h100 = (estimated_step_ms("llama-2-7b", g, stack="eager") for g in ("a100-80gb", "h100-sxm"))
    assert c_h100 < 0.75 * c_a100  # 3.35 vs 2.04 TB/s
    assert e_h100 == pytest.approx(e_a100, rel=0.02)  # the host sets the pace


def test_dispatch_cost_moves_the_eager_estimate_and_only_it():
    base = estimated_step_ms("llama-2-7b", "a100-80gb", stack="eager")
    cheaper = estimated_step_ms("llama-2-7b", "a100-80gb", stack="eager", dispatch_us=EAGER_DISPATCH_US / 2)
    assert cheaper == pytest.approx(base / 2, rel=0.05)
    # so cheap that the GPU binds again: the compiled time (plus nothing)
    free = estimated_step_ms("llama-2-7b", "a100-80gb", stack="eager", dispatch_us=0.0)
    assert free == pytest.approx(estimated_step_ms("llama-2-7b", "a100-80gb", stack="compiled"))
    with pytest.raises(UserError, match="eager"):
        resolve_stack("compiled", 10.0)
    with pytest.raises(UserError, match="negative"):
        resolve_stack("eager", -1.0)
    with pytest.raises(UserError, match="compiled, eager"):
        resolve_stack("tensorrt")


def test_the_profile_records_its_stack(tmp_path):
    prof = write_analytic_profile(tmp_path / "e", "vicuna-7b", "a100-80gb", stack="eager")
    est = prof.meta["estimate"]
    assert est["stack"] == "eager"
    assert est["stack_model"]["dispatch_us"] == EAGER_DISPATCH_US and est["stack_model"]["sources"]
    assert est["roofline"]["stack"] == "eager" and est["roofline"]["host_ops_per_layer"] == EAGER_OPS_PER_LAYER
    assert all(all(row) for row in est["layer_host_bound"])  # every (n, context) host-bound at 7B
    assert "eager stack" in prof.meta["latency"]["whole_step"]["note"]
    compiled = write_analytic_profile(tmp_path / "c", "vicuna-7b", "a100-80gb")
    assert prof.layer_ms(0) > 3 * compiled.layer_ms(0)
    assert prof.head_ms(1) > compiled.head_ms(1)
    assert not any(any(row) for row in compiled.meta["estimate"]["layer_host_bound"])


def test_verification_of_many_tokens_is_no_dearer_per_layer_when_host_bound():
    """Eager: the host dispatches the same ops for 1 or 8 new tokens, so a verification pass costs
    about what a single-token pass costs (the reason EESD gains as much there)."""
    shape, hw = resolve_arch("llama-2-7b"), resolve_hardware("a100-80gb")
    roof = make_roofline(hw, "bf16", stack="eager")
    assert layer_seconds(shape, roof, 8, 256) == pytest.approx(layer_seconds(shape, roof, 1, 256))
