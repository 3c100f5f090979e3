"""Estimated (roofline) profiles: what a model would cost per layer on a GPU you do not have.

`ppsd profile --analytic --arch A --hardware H ... --out DIR` writes a profile folder in the usual
schema, marked `kind: "estimated"`, `timing.method: "roofline"`, so the simulator and the planner
answer for it exactly as for a measured one. Torch-free.

Layer, head and embedding times come from the roofline (`profiler/roofline.py`); the hop is
latency + bytes / bandwidth of the chosen interconnect; one stage per GPU, so stages never share a
device (co-run slowdown 1.0). The software stack (`profiler/stacks.py`: compiled, the default, or
eager) decides whether the host's dispatching binds; `estimate.stack` records it. Acceptance cannot
be estimated from shapes: it comes from a measured profile of the same model (another model's only
with `force_acceptance_transfer`, recorded in `warnings`) or an α curve
(`profiler/acceptance_transfer.py`). Batch 1 only.
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ppsd import __version__
from ppsd.errors import UserError
from ppsd.paths import atomic_dir
from profiler.acceptance_transfer import curve_acceptance, rescaled_acceptance
from ppsd.archs import ArchShape, canonical_arch_name, resolve_arch
from profiler.hardware import (
    Hardware,
    Interconnect,
    hop_seconds,
    normalize_dtype,
    resolve_hardware,
    resolve_interconnect,
)
from profiler.roofline import (
    KERNELS_EMBED,
    KERNELS_HEAD,
    embed_seconds,
    head_seconds,
    hop_message_bytes,
    layer_bytes,
    layer_flops,
    layer_host_bound,
    tp_embed_seconds,
    tp_head_seconds,
    tp_layer_seconds,
    layer_seconds,
    make_roofline,
    step_seconds,
    weight_bytes,
)
from ppsd.profile import PROFILE_FILE, SCHEMA_VERSION, Profile, load_profile, save_profile
from profiler.stacks import DEFAULT_STACK, resolve_stack

DEFAULT_N_VALUES = (1, 2, 4, 8, 16)
DEFAULT_CONTEXT_VALUES = (64, 256, 1024)
DEFAULT_GPU_COUNT = 8  # one HGX/DGX node; PPSD wants one stage per GPU
BATCH_SIZES = (1,)  # what the estimate models


def check_batch_size(batch_size) -> int:
    """Batch 1 only: every price in the estimate (weights read once per token, a GEMV per matrix)
    is a batch-1 price."""
    try:
        b = int(batch_size)
    except (TypeError, ValueError):
        raise UserError(f"batch size {batch_size!r} is not a whole number", "give --batch-size 1") from None
    if b < 1:
        raise UserError(f"batch size {b} is below 1", "give --batch-size 1")
    if b not in BATCH_SIZES:
        raise UserError(f"batch size {b} is not modelled yet; ppsd models batch-1 decoding",
                        "give --batch-size 1 (or drop it)")
    return b


def _stat(a) -> dict:
    a = np.asarray(a, dtype=float)
    # an estimate has no spread: p10 = median = p90
    return {"median_ms": a.tolist(), "p10_ms": a.tolist(), "p90_ms": a.tolist()}


def _grid(values, name: str) -> list[int]:
    try:
        out = [int(v) for v in values]
    except (TypeError, ValueError):
        raise UserError(f"{name} must be whole numbers, got {values!r}", f"e.g. {name}=1,2,4,8") from None
    if not out or any(v < (1 if name == "n_values" else 0) for v in out) or any(b <= a for a, b in zip(out, out[1:])):
        raise UserError(f"{name} must be a non-empty increasing list of non-negative whole numbers, got {out}",
                        f"e.g. {name}=1,2,4,8")
    return out


def analytic_profile_meta(
    arch: str | ArchShape,
    hardware: str | Hardware,
    dtype: str = "bf16",
    interconnect: str | Interconnect | None = "nvlink",
    n_values=DEFAULT_N_VALUES,
    context_values=DEFAULT_CONTEXT_VALUES,
    *,
    gpu_count: int = DEFAULT_GPU_COUNT,
    bandwidth_efficiency: float | None = None,
    compute_efficiency: float | None = None,
    launch_us: float | None = None,
    kernels_per_layer: int | None = None,
    stack: str | None = DEFAULT_STACK,
    dispatch_us: float | None = None,
    batch_size: int = 1,
) -> dict:
    """profile.json content (schema 1, kind "estimated", timing.method "roofline"), no acceptance.

    `interconnect=None` picks NVLink where the GPU has it, else PCIe. The efficiency / launch
    overrides let a calibrated fit (`profiler.calibration.fit_efficiency`) replace the table's defaults.
    `stack` "compiled" (graph replay: the GPU binds) or "eager" (PyTorch eager: the host's per-op
    dispatch binds at batch 1); `dispatch_us` overrides the eager host cost per op. Batch 1 only."""
    batch = check_batch_size(batch_size)
    st = resolve_stack(stack, dispatch_us)
    shape = resolve_arch(arch)
    hw = resolve_hardware(hardware)
    dtype = normalize_dtype(dtype)
    link = resolve_interconnect(interconnect if interconnect is not None else ("nvlink" if hw.nvlink_gbps else "pcie"))
    n_grid = _grid(n_values, "n_values")
    c_grid = _grid(context_values, "context_values")
    if c_grid[-1] + n_grid[-1] > shape.max_context:
        raise UserError(f"context {c_grid[-1]} + {n_grid[-1]} new tokens exceeds {shape.name}'s "
                        f"maximum context of {shape.max_context}",
                        f"use context values up to {shape.max_context - n_grid[-1]}")
    if int(gpu_count) < 1:
        raise UserError(f"GPU count {gpu_count} is below 1", "give --gpus 1 or more")
    roof = make_roofline(hw, dtype, bandwidth_efficiency, compute_efficiency, launch_us, kernels_per_layer,
                         stack=st)
    hop_bytes = hop_message_bytes(shape, roof.dtype_bytes)
    hop_ms = hop_seconds(hop_bytes, link, hw) * 1e3  # raises for NVLink on a GPU without it
    tables, grids = _estimated_tables(shape, roof, n_grid, c_grid)
    parallel = _tensor_parallel_tables(shape, roof, n_grid, c_grid, int(gpu_count), link, hw)
    step_ms = float(tables["embedding"][0] + tables["layers"][:, 0, 0].sum() + tables["head"][0])
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "estimated",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": {"id": shape.name, "source": f"analytic:{shape.source}", "architecture": shape.architecture,
                  "num_layers": shape.num_layers, "hidden_size": shape.hidden_size,
                  "vocab_size": shape.vocab_size, "dtype": dtype, "max_context": shape.max_context},
        "hardware": {"device": "cuda", "device_name": f"{hw.name} (estimated)", "cores": 0, "threads": 0,
                     "gpu_count": int(gpu_count), "hardware_key": hw.key, "interconnect": link.key},
        "versions": {"ppsd": __version__, "python": platform.python_version(), "torch": None, "transformers": None},
        "timing": {"method": "roofline", "warmup": 0, "repeats": 0},
        "latency": {
            "n_values": n_grid, "context_values": c_grid,
            "layers": _stat(tables["layers"]), "embedding": _stat(tables["embedding"]), "head": _stat(tables["head"]),
            "hop": {"backend": link.key, "bytes": hop_bytes, "median_ms": hop_ms, "p10_ms": hop_ms,
                    "p90_ms": hop_ms, "repeats": 0},
            # one stage per GPU: stages never share a device
            "corun": {"processes": [1, 2], "slowdown": [1.0, 1.0], "p10": [1.0, 1.0], "p90": [1.0, 1.0]},
            "whole_step": {"context": c_grid[0], "median_ms": step_ms, "sum_of_parts_ms": step_ms, "ratio": 1.0,
                           "note": f"estimated: the sum of the parts, one GPU, {st.key} stack"},
            **({"parallel": parallel} if parallel else {}),
        },
        "acceptance": None,
        "estimate": _estimate_block(shape, hw, link, dtype, batch, st, roof, grids),
    }


def _estimated_tables(shape, roof, n_grid, c_grid) -> tuple[dict, dict]:
    """({layers [L][n][c], embedding [n], head [n]} in ms, {bytes, FLOPs and bound per (n, c)}): identical
    layers; the bound is the GPU side's (what calibration fits against) and, apart, where the host binds."""
    per_layer = np.array([[layer_seconds(shape, roof, n, c) * 1e3 for c in c_grid] for n in n_grid])
    bytes_grid = [[layer_bytes(shape, n, c, roof.dtype_bytes) for c in c_grid] for n in n_grid]
    flops_grid = [[layer_flops(shape, n, c) for c in c_grid] for n in n_grid]
    bound = [["memory" if roof.memory_s(b) >= roof.compute_s(f) else "compute" for b, f in zip(rb, rf)]
             for rb, rf in zip(bytes_grid, flops_grid)]
    tables = {"layers": np.repeat(per_layer[None, :, :], shape.num_layers, axis=0),
              "head": np.array([head_seconds(shape, roof, n) * 1e3 for n in n_grid]),
              "embedding": np.array([embed_seconds(shape, roof, n) * 1e3 for n in n_grid])}
    grids = {"layer_bytes": bytes_grid, "layer_flops": flops_grid, "layer_bound": bound,
             "layer_host_bound": [[layer_host_bound(shape, roof, n, c) for c in c_grid] for n in n_grid]}
    return tables, grids


def _estimate_block(shape, hw, link, dtype: str, batch: int, st, roof, grids: dict) -> dict:
    """profile.json's `estimate`: everything the estimate rests on, so a reader (or fit_efficiency) can
    redo it."""
    wbytes = weight_bytes(shape, roof.dtype_bytes)
    usable = hw.memory_gb * 1e9 * 0.9  # leave ~10% for KV cache, activations and the CUDA context
    return {
        "arch": shape.to_dict(),
        "hardware": hw.to_dict(),
        "interconnect": asdict(link) | {"bandwidth_gbps_used": link.bandwidth_for(hw)},
        "dtype": dtype,
        "batch_size": batch,
        "stack": st.key,
        "stack_model": st.to_dict(),
        "roofline": roof.to_dict() | {"kernels_head": KERNELS_HEAD, "kernels_embed": KERNELS_EMBED},
        **grids,
        "weights_gb": wbytes / 1e9,
        "min_gpus_for_weights": max(1, math.ceil(wbytes / usable)),
        "note": ("roofline estimate, not a measurement: time = max(max(bytes / (bandwidth · eff_bw), "
                 "FLOPs / (peak · eff_compute)) + kernels · launch, host ops · dispatch); batch 1; "
                 f"{st.key} stack ({st.description})"),
    }


def _tensor_parallel_tables(shape, roof, n_grid, c_grid, gpus: int, link, hw) -> dict | None:
    """`latency.parallel` of kind "tensor_parallel": the tables with the model split over k = 2..gpus
    GPUs (the same-budget AR and EESD baselines of a multi-GPU plan; sim/model/budget.py)."""
    if gpus < 2:
        return None
    lat_s, bw = link.latency_us * 1e-6, link.bandwidth_for(hw) * 1e9
    tables = {}
    for k in range(2, gpus + 1):
        per_layer = np.array([[tp_layer_seconds(shape, roof, n, c, k, lat_s, bw) * 1e3 for c in c_grid]
                              for n in n_grid])
        tables[str(k)] = {
            "layers": _stat(np.repeat(per_layer[None, :, :], shape.num_layers, axis=0)),
            "embedding": _stat(np.array([tp_embed_seconds(shape, roof, n, k, lat_s, bw) * 1e3 for n in n_grid])),
            "head": _stat(np.array([tp_head_seconds(shape, roof, n, k, lat_s, bw) * 1e3 for n in n_grid])),
        }
    return {"kind": "tensor_parallel", "base": 1, "tables": tables,
            "method": "roofline with weights, KV heads and FLOPs split k ways, two all-reduces of the new "
                      "tokens' activations per layer over the interconnect (2·log2(k) latencies + ring bytes)"}


def estimated_step_ms(arch, hardware, dtype: str = "bf16", context: int = 64, *, stack: str | None = DEFAULT_STACK,
                      dispatch_us: float | None = None, bandwidth_efficiency: float | None = None,
                      launch_us: float | None = None) -> float:
    """The estimate's time of one batch-1 decode step (embedding, every layer, the head) on one GPU at
    `context` tokens already in the KV cache, in ms: what `whole_step` records at the grid's first
    context, at any context."""
    shape = resolve_arch(arch)
    roof = make_roofline(resolve_hardware(hardware), dtype, bandwidth_efficiency, None, launch_us, None,
                         stack=stack, dispatch_us=dispatch_us)
    return step_seconds(shape, roof, int(context)) * 1e3


def _model_key(name) -> str:
    return canonical_arch_name(name)


def acceptance_transfer_mismatch(source: Profile, model_meta: dict) -> list[str]:
    """Why `source`'s acceptance is not this model's: different model id, architecture or layer
    count (empty when it is the same model). Ids compare after dropping `random:`, options, an
    organisation prefix, `-hf` and the usual aliases (`vicuna-7b-v1.3` is `vicuna-7b`)."""
    reasons = []
    if _model_key(source.model_id) != _model_key(model_meta["id"]):
        reasons.append(f"model {source.model_id} is not {model_meta['id']}")
    src_arch = (source.meta.get("model") or {}).get("architecture")
    if src_arch and model_meta.get("architecture") and src_arch != model_meta["architecture"]:
        reasons.append(f"architecture {src_arch} is not {model_meta['architecture']}")
    if source.num_layers != int(model_meta["num_layers"]):
        reasons.append(f"{source.num_layers} layers are not {model_meta['num_layers']}")
    return reasons


def write_analytic_profile(out: str | Path, arch, hardware, dtype: str = "bf16", interconnect=None, *,
                           acceptance_from=None, alpha_curve=None, seed: int = 0,
                           force_acceptance_transfer: bool = False, **meta_kwargs) -> Profile:
    """Build the estimate (and its acceptance), write the folder atomically, load and return it.

    `acceptance_from` must be a measured profile of the same model (id, architecture, layer count):
    acceptance belongs to a model's weights, and copying another model's by relative depth is a
    guess. `force_acceptance_transfer=True` copies it anyway, warns on stderr and records the
    transfer in the profile's `warnings` and `acceptance.transfer`."""
    if acceptance_from and alpha_curve:
        raise UserError("--acceptance-from and --alpha-curve both given", "give one source of acceptance")
    out = Path(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / PROFILE_FILE).exists())):
        raise UserError(f"{out} exists and is not a profile folder; refusing to overwrite it",
                        "give a new folder (or an old profile folder) for --out")
    meta = analytic_profile_meta(arch, hardware, dtype, interconnect, **meta_kwargs)
    n_layers = meta["model"]["num_layers"]
    acc = gens = None
    if acceptance_from:
        src = acceptance_from if isinstance(acceptance_from, Profile) else load_profile(acceptance_from)
        acc, gens, acc_meta = rescaled_acceptance(src, n_layers)
        reasons = acceptance_transfer_mismatch(src, meta["model"])
        if reasons and not force_acceptance_transfer:
            raise UserError(f"--acceptance-from {src.path} measured another model ({'; '.join(reasons)}), and "
                            "acceptance does not carry across models",
                            f"measure {meta['model']['id']}'s acceptance with `ppsd profile`, give --alpha-curve FILE, "
                            "or add --force-acceptance-transfer to copy it by relative depth anyway")
        if reasons:
            note = (f"acceptance transferred from another model: {src.model_id} ({src.num_layers} layers, {src.path}) "
                    f"copied onto {meta['model']['id']} ({n_layers} layers) by relative depth "
                    f"({'; '.join(reasons)}); its α is a guess, not a measurement")
            print(f"warning: {note}", file=sys.stderr)
            meta.setdefault("warnings", []).append(note)
            acc_meta["transfer"] = {"forced": True, "reasons": reasons, "source_model": src.model_id,
                                    "target_model": meta["model"]["id"]}
        meta["acceptance"] = acc_meta
    elif alpha_curve:
        acc, acc_meta = curve_acceptance(alpha_curve, n_layers, seed=seed)
        meta["acceptance"] = acc_meta
    with atomic_dir(out) as tmp:
        save_profile(tmp, meta, acceptance=acc, generations=gens)
    return load_profile(out)
