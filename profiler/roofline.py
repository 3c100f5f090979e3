"""The roofline time model of a decoder-only model on a GPU at batch 1. Torch-free.

One decoder layer processing n new tokens at context c:

    bytes  = layer weights + KV cache read for the c + n positions attended + KV written for n
    FLOPs  = 2 · (layer matmul params) · n + 4 · q_dim · (n·c + n(n+1)/2)      (QKᵀ and AV, causal)
    time   = max(bytes / (bandwidth · eff_bw), FLOPs / (peak · eff_compute)) + kernels · launch

Decoding at batch 1 is memory-bound: the weights dominate, so a layer costs about its weight bytes
over the achieved bandwidth. The head (final norm + LM head) and the embedding gather follow the
same rule. `profiler/estimated_profile.py` turns these into a profile; `profiler/calibration.py`
fits the efficiency factors to a measurement.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ppsd.errors import UserError
from profiler.archs import ArchShape
from profiler.hardware import DTYPE_BYTES, Hardware, normalize_dtype

# Kernels one step launches, in a fused decode stack (what the launch term multiplies):
# layer: RMSNorm, q/k/v projections, rotary, KV-cache write, attention, o projection, residual add,
#        RMSNorm, gate, up, SiLU·mul, down, residual add  ≈ 12 after the usual fusions;
# head: final RMSNorm, LM-head matmul, argmax; embedding: one gather.
KERNELS_PER_LAYER = 12
KERNELS_HEAD = 3
KERNELS_EMBED = 1


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
