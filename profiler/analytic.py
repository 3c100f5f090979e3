"""Analytic (roofline) profiles: what a model would cost per layer on a GPU you do not have.

`ppsd profile --analytic --arch A --hardware H ... --out DIR` writes a profile folder in the usual
schema, marked `kind: "estimated"`, `timing.method: "roofline"`, so the simulator and the planner
answer for it exactly as for a measured one. Torch-free.

The model of one decoder layer processing n new tokens at context c (batch 1):

    bytes  = layer weights + KV cache read for the c + n positions attended + KV written for n
    FLOPs  = 2 · (layer matmul params) · n + 4 · q_dim · (n·c + n(n+1)/2)      (QKᵀ and AV, causal)
    time   = max(bytes / (bandwidth · eff_bw), FLOPs / (peak · eff_compute)) + kernels · launch

Decoding at batch 1 is memory-bound: the weights dominate, so a layer costs about its weight bytes
over the achieved bandwidth. The head (final norm + LM head) and the embedding gather follow the
same rule; the hop is latency + bytes / bandwidth of the chosen interconnect; one stage per GPU, so
stages never share a device (co-run slowdown 1.0).

Acceptance cannot be estimated from shapes. It comes either from a measured profile of another
model, rescaled by relative depth (exit E of the target reads the source's exit at the nearest
E/N), or from a user-given α curve, turned into a seeded Bernoulli match table.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ppsd import __version__
from ppsd.errors import UserError
from ppsd.paths import atomic_dir
from profiler.archs import ArchShape, known_archs, resolve_arch
from profiler.hardware import (
    DTYPE_BYTES,
    INTERCONNECTS,
    Hardware,
    Interconnect,
    hop_seconds,
    known_hardware,
    normalize_dtype,
    resolve_hardware,
    resolve_interconnect,
)
from profiler.schema import PROFILE_FILE, SCHEMA_VERSION, SHARED_HEAD, Profile, load_profile, save_profile

# Kernels one step launches, in a fused decode stack (what the launch term multiplies):
# layer: RMSNorm, q/k/v projections, rotary, KV-cache write, attention, o projection, residual add,
#        RMSNorm, gate, up, SiLU·mul, down, residual add  ≈ 12 after the usual fusions;
# head: final RMSNorm, LM-head matmul, argmax; embedding: one gather.
KERNELS_PER_LAYER = 12
KERNELS_HEAD = 3
KERNELS_EMBED = 1

DEFAULT_N_VALUES = (1, 2, 4, 8, 16)
DEFAULT_CONTEXT_VALUES = (64, 256, 1024)
DEFAULT_GPU_COUNT = 8  # one HGX/DGX node; PPSD wants one stage per GPU


# --------------------------------------------------------------------------------------------------
# pure formulas
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Roofline:
    """The knobs of the time model, resolved for one GPU and dtype (SI units)."""

    bandwidth_bps: float  # peak bytes/s
    peak_flops: float  # dense FLOP/s for the dtype
    bandwidth_efficiency: float
    compute_efficiency: float
    launch_s: float  # per kernel
    dtype_bytes: int
    kernels_per_layer: int = KERNELS_PER_LAYER

    def seconds(self, nbytes: float, flops: float, kernels: int) -> float:
        return max(self.memory_s(nbytes), self.compute_s(flops)) + kernels * self.launch_s

    def memory_s(self, nbytes: float) -> float:
        return nbytes / (self.bandwidth_bps * self.bandwidth_efficiency)

    def compute_s(self, flops: float) -> float:
        return flops / (self.peak_flops * self.compute_efficiency)

    def to_dict(self) -> dict:
        return asdict(self)


def make_roofline(hw: Hardware, dtype: str, bandwidth_efficiency: float | None = None,
                  compute_efficiency: float | None = None, launch_us: float | None = None,
                  kernels_per_layer: int | None = None) -> Roofline:
    dtype = normalize_dtype(dtype)
    eff_bw = hw.bandwidth_efficiency if bandwidth_efficiency is None else float(bandwidth_efficiency)
    eff_c = hw.compute_efficiency if compute_efficiency is None else float(compute_efficiency)
    launch = hw.launch_us if launch_us is None else float(launch_us)
    if not (0 < eff_bw <= 1 and 0 < eff_c <= 1):
        raise UserError(f"efficiency factors must lie in (0, 1], got bandwidth {eff_bw}, compute {eff_c}",
                        "give a fraction such as 0.8")
    if launch < 0:
        raise UserError(f"launch overhead {launch} µs is negative", "give a launch overhead >= 0")
    return Roofline(bandwidth_bps=hw.bytes_per_s, peak_flops=hw.peak_flops(dtype), bandwidth_efficiency=eff_bw,
                    compute_efficiency=eff_c, launch_s=launch * 1e-6, dtype_bytes=DTYPE_BYTES[dtype],
                    kernels_per_layer=KERNELS_PER_LAYER if kernels_per_layer is None else int(kernels_per_layer))


def layer_bytes(arch: ArchShape, n: int, context: int, dtype_bytes: int) -> float:
    """Bytes one decoder layer moves for n new tokens at context c: all its weights once, the K and V
    of the c + n attended positions read, the n new positions' K and V written. Activations (a few
    n·hidden vectors) are left out: under 0.1% of the weights at n ≤ 16."""
    weights = arch.layer_params() * dtype_bytes
    kv_read = 2 * (context + n) * arch.kv_dim * dtype_bytes
    kv_write = 2 * n * arch.kv_dim * dtype_bytes
    return float(weights + kv_read + kv_write)


def layer_flops(arch: ArchShape, n: int, context: int) -> float:
    """2 FLOPs per weight per token for the matmuls, plus causal attention: token i (1..n) attends
    c + i positions, each costing 2·q_dim for QKᵀ and 2·q_dim for AV."""
    attended = n * context + n * (n + 1) / 2
    return float(2 * arch.layer_params() * n + 4 * arch.q_dim * attended)


def head_bytes(arch: ArchShape, n: int, dtype_bytes: int) -> float:
    """Final norm + LM head: the whole vocab × hidden matrix, plus n rows of logits written."""
    return float(arch.head_params() * dtype_bytes + n * arch.vocab_size * dtype_bytes)


def head_flops(arch: ArchShape, n: int) -> float:
    return float(2 * arch.vocab_size * arch.hidden_size * n)


def embed_bytes(arch: ArchShape, n: int, dtype_bytes: int) -> float:
    """Gather n embedding rows and write them out."""
    return float(2 * n * arch.hidden_size * dtype_bytes)


def layer_seconds(arch: ArchShape, roof: Roofline, n: int, context: int) -> float:
    return roof.seconds(layer_bytes(arch, n, context, roof.dtype_bytes), layer_flops(arch, n, context),
                        roof.kernels_per_layer)


def head_seconds(arch: ArchShape, roof: Roofline, n: int) -> float:
    return roof.seconds(head_bytes(arch, n, roof.dtype_bytes), head_flops(arch, n), KERNELS_HEAD)


def embed_seconds(arch: ArchShape, roof: Roofline, n: int) -> float:
    return roof.seconds(embed_bytes(arch, n, roof.dtype_bytes), 0.0, KERNELS_EMBED)


def hop_message_bytes(arch: ArchShape, dtype_bytes: int) -> int:
    """One token's hidden state plus its position / token id (8 bytes)."""
    return arch.hidden_size * dtype_bytes + 8


def weight_bytes(arch: ArchShape, dtype_bytes: int) -> int:
    return arch.total_params() * dtype_bytes


# --------------------------------------------------------------------------------------------------
# the profile meta
# --------------------------------------------------------------------------------------------------
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
) -> dict:
    """profile.json content (schema 1, kind "estimated", timing.method "roofline"), no acceptance.

    `interconnect=None` picks NVLink where the GPU has it, else PCIe. The efficiency / launch
    overrides let a calibrated fit (`fit_efficiency`) replace the table's defaults."""
    shape = resolve_arch(arch)
    hw = resolve_hardware(hardware)
    dtype = normalize_dtype(dtype)
    if interconnect is None:
        interconnect = "nvlink" if hw.nvlink_gbps else "pcie"
    link = resolve_interconnect(interconnect)
    n_grid = _grid(n_values, "n_values")
    c_grid = _grid(context_values, "context_values")
    if c_grid[-1] + n_grid[-1] > shape.max_context:
        raise UserError(f"context {c_grid[-1]} + {n_grid[-1]} new tokens exceeds {shape.name}'s "
                        f"maximum context of {shape.max_context}",
                        f"use context values up to {shape.max_context - n_grid[-1]}")
    if int(gpu_count) < 1:
        raise UserError(f"GPU count {gpu_count} is below 1", "give --gpus 1 or more")
    roof = make_roofline(hw, dtype, bandwidth_efficiency, compute_efficiency, launch_us, kernels_per_layer)
    hop_bytes = hop_message_bytes(shape, roof.dtype_bytes)
    hop_ms = hop_seconds(hop_bytes, link, hw) * 1e3  # raises for NVLink on a GPU without it

    per_layer = np.array([[layer_seconds(shape, roof, n, c) * 1e3 for c in c_grid] for n in n_grid])
    bytes_grid = [[layer_bytes(shape, n, c, roof.dtype_bytes) for c in c_grid] for n in n_grid]
    flops_grid = [[layer_flops(shape, n, c) for c in c_grid] for n in n_grid]
    bound = [["memory" if roof.memory_s(b) >= roof.compute_s(f) else "compute" for b, f in zip(rb, rf)]
             for rb, rf in zip(bytes_grid, flops_grid)]
    layers = np.repeat(per_layer[None, :, :], shape.num_layers, axis=0)  # identical layers
    head = np.array([head_seconds(shape, roof, n) * 1e3 for n in n_grid])
    emb = np.array([embed_seconds(shape, roof, n) * 1e3 for n in n_grid])
    step_ms = float(emb[0] + layers[:, 0, 0].sum() + head[0])
    wbytes = weight_bytes(shape, roof.dtype_bytes)
    usable = hw.memory_gb * 1e9 * 0.9  # leave ~10% for KV cache, activations and the CUDA context

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
            "layers": _stat(layers), "embedding": _stat(emb), "head": _stat(head),
            "hop": {"backend": link.key, "bytes": hop_bytes, "median_ms": hop_ms, "p10_ms": hop_ms,
                    "p90_ms": hop_ms, "repeats": 0},
            # one stage per GPU: stages never share a device
            "corun": {"processes": [1, 2], "slowdown": [1.0, 1.0], "p10": [1.0, 1.0], "p90": [1.0, 1.0]},
            "whole_step": {"context": c_grid[0], "median_ms": step_ms, "sum_of_parts_ms": step_ms, "ratio": 1.0,
                           "note": "estimated: the sum of the parts, one GPU"},
        },
        "acceptance": None,
        # additive: everything the estimate rests on, so a reader (or fit_efficiency) can redo it
        "estimate": {
            "arch": shape.to_dict(),
            "hardware": hw.to_dict(),
            "interconnect": asdict(link) | {"bandwidth_gbps_used": link.bandwidth_for(hw)},
            "dtype": dtype,
            "roofline": roof.to_dict() | {"kernels_head": KERNELS_HEAD, "kernels_embed": KERNELS_EMBED},
            "layer_bytes": bytes_grid,
            "layer_flops": flops_grid,
            "layer_bound": bound,
            "weights_gb": wbytes / 1e9,
            "min_gpus_for_weights": max(1, math.ceil(wbytes / usable)),
            "note": ("roofline estimate, not a measurement: time = max(bytes / (bandwidth · eff_bw), "
                     "FLOPs / (peak · eff_compute)) + kernels · launch; batch 1"),
        },
    }


# --------------------------------------------------------------------------------------------------
# acceptance
# --------------------------------------------------------------------------------------------------
def rescale_exit_map(src_exits: list[int], src_layers: int, dst_layers: int) -> dict[int, int]:
    """Target exit E' (1..N'-1) -> the source exit whose relative depth E/N is nearest E'/N'
    (ties to the shallower one, the conservative side)."""
    if not src_exits:
        raise UserError("the acceptance profile has no exit layers in its match table",
                        "profile acceptance with `ppsd profile` first")
    src = sorted(set(int(e) for e in src_exits))
    out = {}
    for e in range(1, dst_layers):
        d = e / dst_layers
        out[e] = min(src, key=lambda s: (abs(s / src_layers - d), s))
    return out


def rescaled_acceptance(source: Profile | str | Path, dst_layers: int):
    """(match table for a dst_layers-deep model, generations, acceptance meta) from a measured
    profile: the shared head's traces, copied exit by exit by relative depth."""
    src = source if isinstance(source, Profile) else load_profile(source)
    if not src.has_acceptance:
        raise UserError(f"profile {src.path} has no acceptance data to rescale",
                        "give a profile written by `ppsd profile` with acceptance, or use --alpha-curve FILE")
    df = src.acceptance
    df = df[df["head"] == SHARED_HEAD]
    if df.empty:
        raise UserError(f"profile {src.path} has no traces for the shared exit head",
                        "give a profile whose acceptance table includes the shared head")
    mapping = rescale_exit_map(df["exit_layer"].unique().tolist(), src.num_layers, dst_layers)
    import pandas as pd

    by_exit = {int(e): g for e, g in df.groupby("exit_layer")}
    parts = []
    for e_dst, e_src in mapping.items():
        g = by_exit[e_src].copy()
        g["exit_layer"] = e_dst
        parts.append(g)
    out = pd.concat(parts, ignore_index=True)
    src_acc = src.meta.get("acceptance") or {}
    meta = {k: src_acc.get(k) for k in ("temperature", "max_new_tokens", "prompt_set", "num_prompts")}
    meta.update({
        "categories": sorted(out["category"].unique().tolist()),
        "heads": [SHARED_HEAD],
        "rescaled_from": {
            "profile": str(src.path), "model": src.model_id, "num_layers": src.num_layers,
            "device_name": src.device_name, "kind": src.kind,
            "method": "per-exit match traces copied from the source exit at the nearest relative depth E/N "
                      "(shared exit head only; generations' token ids are the source model's)",
            "exit_map": {str(k): v for k, v in mapping.items()},
        },
    })
    return out, src.generations() or None, meta


def load_alpha_curve(path: str | Path) -> tuple[str, np.ndarray, np.ndarray]:
    """Read an α curve: CSV with a header `relative_depth,alpha` or `exit_layer,alpha`, or JSON as
    {"relative_depth"|"exit_layer": [...], "alpha": [...]}, a list of such row objects, or a plain
    mapping {"0.25": 0.8, ...} (keys below 1 or with a decimal point = relative depth, else exit
    layers). Returns (kind, x sorted, alpha)."""
    path = Path(path)
    fix = ('write a CSV with a header "relative_depth,alpha" (or "exit_layer,alpha") and one row per '
           'point, or JSON {"relative_depth": [...], "alpha": [...]}')
    if not path.is_file():
        raise UserError(f"alpha curve file {path} does not exist", fix)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read alpha curve {path} ({exc.__class__.__name__})", fix) from None
    rows: list[dict]
    try:
        if path.suffix.lower() == ".json" or text.lstrip().startswith(("{", "[")):
            obj = json.loads(text)
            if isinstance(obj, dict) and "alpha" in obj:
                key = "relative_depth" if "relative_depth" in obj else "exit_layer"
                rows = [{key: x, "alpha": a} for x, a in zip(obj[key], obj["alpha"], strict=True)]
            elif isinstance(obj, dict):
                keys = list(obj)
                depth = any("." in str(k) for k in keys) or all(float(k) < 1 for k in keys)
                key = "relative_depth" if depth else "exit_layer"
                rows = [{key: k, "alpha": v} for k, v in obj.items()]
            elif isinstance(obj, list):
                rows = obj
            else:
                raise ValueError("not an object or a list")
        else:
            rows = list(csv.DictReader(text.splitlines()))
        kinds = {("relative_depth" if "relative_depth" in r else "exit_layer") for r in rows}
        if len(kinds) != 1:
            raise ValueError("rows mix relative_depth and exit_layer")
        kind = kinds.pop()
        x = np.array([float(r[kind]) for r in rows])
        a = np.array([float(r["alpha"]) for r in rows])
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
        raise UserError(f"alpha curve {path} is malformed ({exc})", fix) from None
    if len(x) == 0:
        raise UserError(f"alpha curve {path} has no points", fix)
    if not np.all(np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise UserError(f"alpha curve {path} has α values outside [0, 1]", "give acceptance rates between 0 and 1")
    if kind == "relative_depth" and np.any((x <= 0) | (x >= 1)):
        raise UserError(f"alpha curve {path} has relative depths outside (0, 1)",
                        "give relative depths E/N strictly between 0 and 1")
    if kind == "exit_layer" and np.any(x < 1):
        raise UserError(f"alpha curve {path} has exit layers below 1", "give exit layers 1..N-1")
    order = np.argsort(x)
    x, a = x[order], a[order]
    if np.any(np.diff(x) == 0):
        raise UserError(f"alpha curve {path} lists the same point twice", "give each depth / exit layer once")
    return kind, x, a


def alpha_at(kind: str, x: np.ndarray, a: np.ndarray, exit_layer: int, num_layers: int) -> float:
    """Linear interpolation of the curve at an exit layer; past the ends the end value holds."""
    pos = exit_layer / num_layers if kind == "relative_depth" else float(exit_layer)
    return float(np.interp(pos, x, a))


def curve_acceptance(path: str | Path, num_layers: int, seed: int = 0, prompts: int = 8, tokens: int = 128):
    """(seeded Bernoulli match table, acceptance meta) for a user-given α curve."""
    from profiler.synthetic import bernoulli_acceptance

    kind, x, a = load_alpha_curve(path)
    if kind == "exit_layer" and x[-1] > num_layers - 1:
        raise UserError(f"alpha curve {path} names exit layer {int(x[-1])}, past this {num_layers}-layer model",
                        f"give exit layers 1..{num_layers - 1}, or relative depths")
    alphas = {e: alpha_at(kind, x, a, e, num_layers) for e in range(1, num_layers)}
    df = bernoulli_acceptance(num_layers, alphas, prompts=prompts, tokens=tokens, seed=seed)
    meta = {"temperature": 0.0, "max_new_tokens": tokens, "prompt_set": "alpha-curve", "num_prompts": prompts,
            "categories": sorted(df["category"].unique().tolist()), "heads": [SHARED_HEAD],
            "alpha_curve": {"file": str(path), "kind": kind, "x": x.tolist(), "alpha": a.tolist(), "seed": seed,
                            "method": "Bernoulli(α(E)) match per position, α linear in the curve, ends held"}}
    return df, meta


# --------------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------------
def write_analytic_profile(out: str | Path, arch, hardware, dtype: str = "bf16", interconnect=None, *,
                           acceptance_from=None, alpha_curve=None, seed: int = 0, **meta_kwargs) -> Profile:
    """Build the estimate (and its acceptance), write the folder atomically, load and return it."""
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
        acc, gens, acc_meta = rescaled_acceptance(acceptance_from, n_layers)
        meta["acceptance"] = acc_meta
    elif alpha_curve:
        acc, acc_meta = curve_acceptance(alpha_curve, n_layers, seed=seed)
        meta["acceptance"] = acc_meta
    with atomic_dir(out) as tmp:
        save_profile(tmp, meta, acceptance=acc, generations=gens)
    return load_profile(out)


# --------------------------------------------------------------------------------------------------
# calibration
# --------------------------------------------------------------------------------------------------
def fit_efficiency(meta_estimated: dict, measured_profile: Profile | str | Path) -> dict:
    """Fit the bandwidth efficiency (and the fixed per-layer overhead) to measured per-layer times.

    Over the estimate's memory-bound (n, context) points that lie inside the measured grid, least
    squares on  t_measured(l, n, c) = bytes(n, c) / (bandwidth · eff) + overhead. When the bytes
    spread less than 10% over the points (one model's weights dominate), or the fit comes out
    non-physical (eff or overhead ≤ 0), the overhead stays at the modelled value and only eff is
    fitted; `alternative` gives the other reading (eff held, overhead fitted). Compute efficiency is not fitted (batch-1 decode rarely
    reaches the compute roof). Returns the fitted factors and per-layer relative errors (%) of the
    estimate before and after the fit, at n = 1 and the smallest shared context, plus the MAPE over
    every fitted point."""
    est = meta_estimated.get("estimate") if isinstance(meta_estimated, dict) else None
    if not est or meta_estimated.get("kind") != "estimated":
        raise UserError("fit_efficiency needs the meta of an analytic (estimated) profile",
                        "build it with profiler.analytic.analytic_profile_meta")
    meas = measured_profile if isinstance(measured_profile, Profile) else load_profile(measured_profile)
    n_layers = int(meta_estimated["model"]["num_layers"])
    if meas.num_layers != n_layers:
        raise UserError(f"the measured profile has {meas.num_layers} layers, the estimate {n_layers}",
                        "estimate the same architecture that was measured")
    roof = Roofline(**{k: v for k, v in est["roofline"].items() if k in Roofline.__dataclass_fields__})
    lat = meta_estimated["latency"]
    n_grid, c_grid = lat["n_values"], lat["context_values"]
    est_layers = np.asarray(lat["layers"]["median_ms"], dtype=float)
    mn, mx = meas.n_values, meas.context_values
    pts = []  # (layer, n index, c index, bytes, measured seconds)
    for i, n in enumerate(n_grid):
        if not mn[0] <= n <= mn[-1]:
            continue
        for j, c in enumerate(c_grid):
            if not mx[0] <= c <= mx[-1] or est["layer_bound"][i][j] != "memory":
                continue
            for layer in range(n_layers):
                pts.append((layer, i, j, est["layer_bytes"][i][j], meas.layer_ms(layer, n, c) * 1e-3))
    if not pts:
        raise UserError("the measured profile shares no memory-bound (n, context) point with the estimate",
                        "measure n = 1 at contexts the estimate covers (e.g. 64, 256, 1024)")
    b = np.array([p[3] for p in pts])
    t = np.array([p[4] for p in pts])
    overhead0 = roof.kernels_per_layer * roof.launch_s
    slope = overhead = None
    method = "slope and overhead"
    # Weights dominate the bytes, so across one model's grid the bytes vary by a few percent only;
    # below 10% spread slope and overhead are not separately identifiable (nearly collinear).
    if np.ptp(b) > 0.10 * b.mean():
        A = np.vstack([b, np.ones_like(b)]).T
        (s, o), *_ = np.linalg.lstsq(A, t, rcond=None)
        if s > 0 and o >= 0:
            slope, overhead = float(s), float(o)
    if slope is None:
        method = "slope only (overhead held at the modelled value)"
        overhead = overhead0
        s = float(np.dot(b, t - overhead) / np.dot(b, b))
        if s <= 0:
            raise UserError("the measured layer times do not grow with the bytes moved (overhead-bound)",
                            "measure a larger model or longer contexts, or set the launch overhead by hand")
        slope = s
    eff = 1.0 / (slope * roof.bandwidth_bps)
    launch_us = overhead / roof.kernels_per_layer * 1e6
    # the other reading of the same data: bandwidth efficiency as modelled, overhead fitted
    alt_overhead = float(np.mean(t - b * (1.0 / (roof.bandwidth_bps * roof.bandwidth_efficiency))))

    fitted = {(p[0], p[1], p[2]): (p[3] * slope + overhead) for p in pts}
    before = np.array([(est_layers[l, i, j] * 1e-3 - tm) / tm for (l, i, j, _, tm) in pts]) * 100
    after = np.array([(fitted[(l, i, j)] - tm) / tm for (l, i, j, _, tm) in pts]) * 100
    # per-layer table at n = 1 (or the smallest fitted n) and the smallest fitted context
    i0 = min(p[1] for p in pts)
    j0 = min(p[2] for p in pts if p[1] == i0)
    rows = []
    for (l, i, j, _, tm) in pts:
        if i == i0 and j == j0:
            e_ms, f_ms = est_layers[l, i, j], fitted[(l, i, j)] * 1e3
            rows.append({"layer": l, "measured_ms": tm * 1e3, "estimated_ms": float(e_ms), "fitted_ms": f_ms,
                         "rel_err_pct": (e_ms - tm * 1e3) / (tm * 1e3) * 100,
                         "fitted_rel_err_pct": (f_ms - tm * 1e3) / (tm * 1e3) * 100})
    head_meas = meas.head_ms(1)
    head_est = float(np.interp(1, n_grid, lat["head"]["median_ms"]))
    return {
        "bandwidth_efficiency": eff,
        "overhead_ms_per_layer": overhead * 1e3,
        "launch_us": launch_us,
        "kernels_per_layer": roof.kernels_per_layer,
        "modelled": {"bandwidth_efficiency": roof.bandwidth_efficiency, "overhead_ms_per_layer": overhead0 * 1e3},
        "method": method,
        "alternative": {"bandwidth_efficiency": roof.bandwidth_efficiency,
                        "overhead_ms_per_layer": alt_overhead * 1e3,
                        "note": "overhead fitted with the modelled efficiency held; prefer it when the "
                                "measurement is host-bound (eager launches)"},
        "points": len(pts),
        "at": {"n": n_grid[i0], "context": c_grid[j0]},
        "mape_pct_before": float(np.mean(np.abs(before))),
        "mape_pct_after": float(np.mean(np.abs(after))),
        "per_layer": rows,
        "head": {"measured_ms": head_meas, "estimated_ms": head_est,
                 "rel_err_pct": (head_est - head_meas) / head_meas * 100 if head_meas > 0 else None},
        "measured_profile": str(meas.path),
        "measured_device": meas.device_name,
    }


# --------------------------------------------------------------------------------------------------
# CLI glue (wired into `ppsd profile` by profiler/cli.py)
# --------------------------------------------------------------------------------------------------
def _has(parser: argparse.ArgumentParser, option: str) -> bool:
    return option in parser._option_string_actions  # noqa: SLF001 - argparse has no public lookup


def add_analytic_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `--analytic` options to a `ppsd profile` parser. Options the parser already has
    (--out, --dtype, --seed) are reused, not redefined."""
    g = parser.add_argument_group("analytic estimate (no model, no GPU: a roofline over a built-in hardware table)")
    g.add_argument("--analytic", action="store_true",
                   help="write an estimated profile from the architecture's shape and a GPU's datasheet figures")
    g.add_argument("--arch", metavar="A",
                   help=f"built-in architecture ({', '.join(known_archs())}) or a Hugging Face config.json path")
    g.add_argument("--hardware", metavar="H", help=f"GPU: {', '.join(known_hardware())}")
    g.add_argument("--interconnect", choices=list(INTERCONNECTS), default=None,
                   help="link between pipeline stages (default: nvlink where the GPU has it, else pcie)")
    g.add_argument("--acceptance-from", metavar="PROFILE",
                   help="take the per-exit match traces from this measured profile, rescaled by relative depth")
    g.add_argument("--alpha-curve", metavar="FILE",
                   help="CSV/JSON of relative_depth (or exit_layer) -> alpha; a seeded Bernoulli match table")
    g.add_argument("--gpus", type=int, default=DEFAULT_GPU_COUNT,
                   help=f"GPUs available for pipeline stages (default {DEFAULT_GPU_COUNT})")
    g.add_argument("--bandwidth-efficiency", type=float, default=None, metavar="F",
                   help="override the achieved fraction of peak memory bandwidth (e.g. a calibrated fit)")
    g.add_argument("--launch-us", type=float, default=None, metavar="US",
                   help="override the fixed cost per kernel in µs")
    if not _has(parser, "--dtype"):
        g.add_argument("--dtype", default=None, help="weights and KV cache dtype: bf16 (default), fp16, fp32, fp8")
    else:
        # The measured profiler's --dtype has a CPU default (fp32); the estimate's default is bf16.
        # Mark the existing action so run_analytic can tell "given" from "defaulted".
        action = parser._option_string_actions["--dtype"]  # noqa: SLF001
        base = type(action)

        class _MarkGiven(base):  # type: ignore[misc, valid-type]
            def __call__(self, parser, namespace, values, option_string=None):
                setattr(namespace, "analytic_dtype_given", True)
                super().__call__(parser, namespace, values, option_string)

        action.__class__ = _MarkGiven
        parser.set_defaults(analytic_dtype_given=False)
    if not _has(parser, "--seed"):
        g.add_argument("--seed", type=int, default=0, help="seed of the Bernoulli match table (--alpha-curve)")
    if not _has(parser, "--out"):
        g.add_argument("--out", metavar="DIR", help="profile folder to write")


def run_analytic(args: argparse.Namespace) -> int:
    """Handler for `ppsd profile --analytic ...`: write the folder, print one summary line."""
    if not getattr(args, "arch", None) or not getattr(args, "hardware", None):
        raise UserError("--analytic needs --arch and --hardware",
                        f"e.g. --arch llama-2-7b --hardware h100-sxm (GPUs: {', '.join(known_hardware())})")
    out = getattr(args, "out", None)
    if not out:
        raise UserError("--analytic needs --out DIR", "name the profile folder to write")
    dtype = getattr(args, "dtype", None)
    if dtype in (None, "auto") or getattr(args, "analytic_dtype_given", True) is False:
        dtype = "bf16"  # the GPU default, unless --dtype was given on the command line
    prof = write_analytic_profile(
        out, args.arch, args.hardware, dtype, getattr(args, "interconnect", None),
        acceptance_from=getattr(args, "acceptance_from", None), alpha_curve=getattr(args, "alpha_curve", None),
        seed=int(getattr(args, "seed", 0) or 0), gpu_count=getattr(args, "gpus", DEFAULT_GPU_COUNT),
        bandwidth_efficiency=getattr(args, "bandwidth_efficiency", None),
        launch_us=getattr(args, "launch_us", None),
    )
    est = prof.meta["estimate"]
    step = prof.meta["latency"]["whole_step"]["median_ms"]
    acc = prof.meta.get("acceptance") or {}
    acc_txt = ("rescaled acceptance from " + acc["rescaled_from"]["profile"] if "rescaled_from" in acc
               else "Bernoulli acceptance from " + acc["alpha_curve"]["file"] if "alpha_curve" in acc
               else "no acceptance (simulate with --acceptance bernoulli --alpha A)")
    print(f"estimated {prof.model_id} on {prof.device_name}, {est['dtype']}: layer {prof.layer_ms(0):.3f} ms, "
          f"head {prof.head_ms(1):.3f} ms, hop {prof.hop_ms() * 1e3:.1f} µs ({est['interconnect']['key']}), "
          f"AR ≈ {step:.2f} ms/token on one GPU ({1e3 / step:.0f} tokens/s); weights {est['weights_gb']:.1f} GB "
          f"need ≥ {est['min_gpus_for_weights']} GPU(s); {acc_txt} -> {prof.path}")
    return 0
