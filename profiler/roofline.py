"""The roofline time model of a decoder-only model on a GPU at batch 1. Torch-free.

One decoder layer processing n new tokens at context c:

    bytes  = layer weights + KV cache read for the c + n positions attended + KV written for n
    FLOPs  = 2 · (layer matmul params) · n + 4 · q_dim · (n·c + n(n+1)/2)      (QKᵀ and AV, causal)
    gpu    = max(bytes / (bandwidth · eff_bw), FLOPs / (peak · eff_compute)) + kernels · launch
    time   = max(gpu, host ops · dispatch)          (host term: the software stack, profiler/stacks.py)

Decoding at batch 1 is memory-bound: the weights dominate, so a layer costs about its weight bytes
over the achieved bandwidth. The head (final norm + LM head) and the embedding gather follow the
same rule. On a compiled stack (graph replay) the host never binds (dispatch = 0); on an eager
PyTorch stack every op costs the host tens of µs and a batch-1 step is host-bound.
`profiler/estimated_profile.py` turns these into a profile; `profiler/calibration.py` fits the
efficiency factors to a measurement.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ppsd.errors import UserError
from ppsd.archs import ArchShape
from profiler.hardware import DTYPE_BYTES, Hardware, normalize_dtype
from profiler.stacks import Stack, resolve_stack

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
    # the software stack (profiler/stacks.py): host cost per dispatched op and the ops of each piece;
    # the defaults (compiled: no host term) keep older estimates' roofline dicts loadable
    stack: str = "compiled"
    host_s_per_op: float = 0.0
    host_ops_per_layer: int = 0
    host_ops_head: int = 0
    host_ops_embed: int = 0

    def gpu_s(self, nbytes: float, flops: float, kernels: int) -> float:
        return max(self.memory_s(nbytes), self.compute_s(flops)) + kernels * self.launch_s

    def host_s(self, ops: int) -> float:
        return ops * self.host_s_per_op

    def seconds(self, nbytes: float, flops: float, kernels: int, host_ops: int = 0) -> float:
        """The GPU's time, or the host's when dispatching the ops takes longer (an async queue
        overlaps the two; the slower one sets the pace)."""
        return max(self.gpu_s(nbytes, flops, kernels), self.host_s(host_ops))

    def memory_s(self, nbytes: float) -> float:
        return nbytes / (self.bandwidth_bps * self.bandwidth_efficiency)

    def compute_s(self, flops: float) -> float:
        return flops / (self.peak_flops * self.compute_efficiency)

    def to_dict(self) -> dict:
        return asdict(self)


def make_roofline(hw: Hardware, dtype: str, bandwidth_efficiency: float | None = None,
                  compute_efficiency: float | None = None, launch_us: float | None = None,
                  kernels_per_layer: int | None = None, stack: str | Stack | None = None,
                  dispatch_us: float | None = None) -> Roofline:
    dtype = normalize_dtype(dtype)
    st = resolve_stack(stack, dispatch_us)
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
                    kernels_per_layer=KERNELS_PER_LAYER if kernels_per_layer is None else int(kernels_per_layer),
                    stack=st.key, host_s_per_op=st.dispatch_us * 1e-6, host_ops_per_layer=st.ops_per_layer,
                    host_ops_head=st.ops_head, host_ops_embed=st.ops_embed)


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
                        roof.kernels_per_layer, roof.host_ops_per_layer)


def layer_host_bound(arch: ArchShape, roof: Roofline, n: int, context: int) -> bool:
    """True when the host's dispatching, not the GPU, sets the layer's time."""
    gpu = roof.gpu_s(layer_bytes(arch, n, context, roof.dtype_bytes), layer_flops(arch, n, context),
                     roof.kernels_per_layer)
    return roof.host_s(roof.host_ops_per_layer) > gpu


def head_seconds(arch: ArchShape, roof: Roofline, n: int) -> float:
    return roof.seconds(head_bytes(arch, n, roof.dtype_bytes), head_flops(arch, n), KERNELS_HEAD, roof.host_ops_head)


def embed_seconds(arch: ArchShape, roof: Roofline, n: int) -> float:
    return roof.seconds(embed_bytes(arch, n, roof.dtype_bytes), 0.0, KERNELS_EMBED, roof.host_ops_embed)


def step_seconds(arch: ArchShape, roof: Roofline, context: int, n: int = 1) -> float:
    """One whole decode step on one GPU: embedding, every layer at `context`, the head."""
    return (embed_seconds(arch, roof, n) + arch.num_layers * layer_seconds(arch, roof, n, context)
            + head_seconds(arch, roof, n))


# --- tensor parallelism: the same-budget baseline on K GPUs ------------------------------------------

def allreduce_seconds(nbytes: float, k: int, latency_s: float, bandwidth_bps: float) -> float:
    """One all-reduce of `nbytes` over k GPUs: NCCL's small-message algorithms take about
    2·log2(k) link latencies, large ones 2(k−1)/k of the bytes over each link (ring)."""
    if k <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(k)) * latency_s + 2 * (k - 1) / k * nbytes / bandwidth_bps


def tp_layer_seconds(arch: ArchShape, roof: Roofline, n: int, context: int, k: int, latency_s: float,
                     bandwidth_bps: float) -> float:
    """One decoder layer tensor-parallel over k GPUs (Megatron style): each GPU holds 1/k of the
    weights and KV heads and does 1/k of the FLOPs (the host still dispatches every op: an eager
    stack gains nothing), then two all-reduces of the n new tokens' activations (after attention,
    after the MLP)."""
    gpu = roof.seconds(layer_bytes(arch, n, context, roof.dtype_bytes) / k, layer_flops(arch, n, context) / k,
                       roof.kernels_per_layer, roof.host_ops_per_layer)
    return gpu + 2 * allreduce_seconds(n * arch.hidden_size * roof.dtype_bytes, k, latency_s, bandwidth_bps)


def tp_head_seconds(arch: ArchShape, roof: Roofline, n: int, k: int, latency_s: float, bandwidth_bps: float) -> float:
    """The LM head split by vocabulary over k GPUs, then the next token agreed (a small all-reduce)."""
    gpu = roof.seconds(head_bytes(arch, n, roof.dtype_bytes) / k, head_flops(arch, n) / k, KERNELS_HEAD,
                       roof.host_ops_head)
    return gpu + allreduce_seconds(n * 8, k, latency_s, bandwidth_bps)


def tp_embed_seconds(arch: ArchShape, roof: Roofline, n: int, k: int, latency_s: float, bandwidth_bps: float) -> float:
    """A vocabulary-parallel embedding: each GPU gathers its rows, an all-reduce assembles them."""
    return embed_seconds(arch, roof, n) + allreduce_seconds(n * arch.hidden_size * roof.dtype_bytes, k, latency_s,
                                                            bandwidth_bps)


def hop_message_bytes(arch: ArchShape, dtype_bytes: int) -> int:
    """One token's hidden state plus its position / token id (8 bytes)."""
    return arch.hidden_size * dtype_bytes + 8


def weight_bytes(arch: ArchShape, dtype_bytes: int) -> int:
    return arch.total_params() * dtype_bytes
