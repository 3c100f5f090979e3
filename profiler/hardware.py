"""GPU and interconnect figures for analytic (roofline) profiles, torch-free.

Peak figures are the vendor datasheet numbers (dense, i.e. without the 2:4-sparsity doubling NVIDIA
prints next to them). A real decode step reaches only part of them, so each GPU also carries
efficiency factors and a fixed per-kernel cost; those are not datasheet numbers but typical values
for batch-1 decoding kernels, and `profiler.calibration.fit_efficiency` refits them to a measurement.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ppsd.errors import UserError

# bytes per weight / KV element
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
_DTYPE_ALIASES = {
    "float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
    "auto": "bf16", "float8": "fp8", "fp8_e4m3": "fp8",
}


def normalize_dtype(dtype: str | None) -> str:
    d = (dtype or "bf16").strip().lower()
    d = _DTYPE_ALIASES.get(d, d)
    if d not in DTYPE_BYTES:
        raise UserError(f"unknown dtype {dtype!r}", f"use one of: {', '.join(DTYPE_BYTES)}")
    return d


@dataclass(frozen=True)
class Hardware:
    """One GPU. Rates in the units datasheets use: GB/s (1e9 bytes/s) and TFLOPS (1e12 FLOP/s)."""

    key: str
    name: str
    memory_gb: float
    bandwidth_gbps: float  # HBM / GDDR peak
    tflops: dict[str, float]  # dense matmul peak per dtype (tensor cores where the dtype has them)
    nvlink_gbps: float | None  # per direction, one GPU to one peer (None: no NVLink)
    pcie_gbps: float  # per direction, x16 link
    bandwidth_efficiency: float = 0.80  # achieved / peak bandwidth for decode GEMV-like kernels
    compute_efficiency: float = 0.70  # achieved / peak FLOP rate for the matmuls of a step
    launch_us: float = 2.5  # fixed cost per kernel (launch gap + ramp-up/tail), on the GPU timeline
    sources: tuple[str, ...] = field(default=())

    def peak_flops(self, dtype: str) -> float:
        dtype = normalize_dtype(dtype)
        if dtype not in self.tflops:
            raise UserError(f"{self.name} has no {dtype} matmul rate in the hardware table",
                            f"use one of: {', '.join(self.tflops)}")
        return self.tflops[dtype] * 1e12

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sources"] = list(self.sources)
        return d


# Notes on the non-datasheet entries, the same for every GPU unless said otherwise:
# - bandwidth_efficiency 0.80: batch-1 decode kernels (GEMV, cuBLAS / fused) stream weights at roughly
#   75-90% of peak HBM bandwidth; 0.80 sits in the middle. GDDR parts behave alike.
# - compute_efficiency 0.70: large bf16 GEMMs reach 60-80% of the dense tensor-core peak.
# - launch_us 2.5 µs: the smallest kernels of a decode step take a few µs each on the GPU timeline
#   even when the host runs ahead (CUDA graphs or an async eager queue). A host-bound eager stack
#   (Python dispatch of ~44 ops a layer) is slower: `--stack eager` prices it (profiler/stacks.py).
# - These defaults are the compiled stack's; python -m bench.published_check compares them with published
#   batch-1 figures (A100 within a few percent; H100 about 20% optimistic on torchao's Llama-3.1-8B).
HARDWARE: dict[str, Hardware] = {
    "a100-80gb": Hardware(
        key="a100-80gb", name="NVIDIA A100 80GB SXM", memory_gb=80, bandwidth_gbps=2039,
        # A100 datasheet: FP16/BF16 tensor 312 TFLOPS dense (624 sparse), TF32 156, FP32 19.5; no FP8.
        tflops={"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
        # NVLink 3: 600 GB/s total bidirectional -> 300 per direction; PCIe Gen4 x16: 64 GB/s total.
        nvlink_gbps=300.0, pcie_gbps=32.0,
        sources=("NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column): 2,039 GB/s HBM2e, "
                 "312 TFLOPS BF16/FP16 dense, 19.5 TFLOPS FP32, NVLink 600 GB/s, PCIe Gen4 64 GB/s",),
    ),
    "h100-sxm": Hardware(
        key="h100-sxm", name="NVIDIA H100 SXM 80GB", memory_gb=80, bandwidth_gbps=3350,
        # H100 datasheet (SXM): BF16/FP16 1,979 TFLOPS *with sparsity* -> 989.4 dense; FP8 3,958 -> 1,979;
        # FP32 67 TFLOPS.
        tflops={"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0, "fp32": 67.0},
        # NVLink 4: 900 GB/s total -> 450 per direction; PCIe Gen5 x16: 128 GB/s total.
        nvlink_gbps=450.0, pcie_gbps=64.0,
        sources=("NVIDIA H100 Tensor Core GPU datasheet (SXM column): 3.35 TB/s HBM3, 1,979 TFLOPS BF16 "
                 "with sparsity (989 dense), 67 TFLOPS FP32, NVLink 900 GB/s, PCIe Gen5 128 GB/s",),
    ),
    "h200": Hardware(
        key="h200", name="NVIDIA H200 SXM 141GB", memory_gb=141, bandwidth_gbps=4800,
        # H200 datasheet (SXM): same Hopper compute as H100 SXM; 4.8 TB/s HBM3e, 141 GB.
        tflops={"bf16": 989.4, "fp16": 989.4, "fp8": 1979.0, "fp32": 67.0},
        nvlink_gbps=450.0, pcie_gbps=64.0,
        sources=("NVIDIA H200 Tensor Core GPU datasheet (SXM column): 141 GB HBM3e at 4.8 TB/s, "
                 "1,979 TFLOPS BF16 with sparsity (989 dense), NVLink 900 GB/s, PCIe Gen5 128 GB/s",),
    ),
    "l4": Hardware(
        key="l4", name="NVIDIA L4 24GB", memory_gb=24, bandwidth_gbps=300,
        # L4 datasheet: BF16/FP16 tensor 242 TFLOPS with sparsity -> 121 dense; FP8 485 -> 242.5;
        # FP32 30.3 TFLOPS.
        tflops={"bf16": 121.0, "fp16": 121.0, "fp8": 242.5, "fp32": 30.3},
        # no NVLink; PCIe Gen4 x16 64 GB/s total.
        nvlink_gbps=None, pcie_gbps=32.0,
        sources=("NVIDIA L4 Tensor Core GPU datasheet: 24 GB GDDR6 at 300 GB/s, 242 TFLOPS BF16 with "
                 "sparsity (121 dense), 30.3 TFLOPS FP32, PCIe Gen4 x16 64 GB/s, no NVLink",),
    ),
    "rtx-3090": Hardware(
        key="rtx-3090", name="NVIDIA GeForce RTX 3090 24GB", memory_gb=24, bandwidth_gbps=936,
        # GA102 whitepaper: FP16/BF16 tensor with FP32 accumulate 71 TFLOPS dense (GeForce runs FP32
        # accumulation at half rate; PyTorch accumulates in FP32); FP32 35.6 TFLOPS. No FP8.
        tflops={"bf16": 71.0, "fp16": 71.0, "fp32": 35.6},
        # NVLink bridge 112.5 GB/s total -> 56.25 per direction; PCIe Gen4 x16.
        nvlink_gbps=56.25, pcie_gbps=32.0,
        sources=("NVIDIA Ampere GA102 GPU architecture whitepaper (RTX 3090 column): 936 GB/s GDDR6X, "
                 "71 TFLOPS FP16 tensor with FP32 accumulate, 35.6 TFLOPS FP32, NVLink 112.5 GB/s",),
    ),
}

_HW_ALIASES = {
    "a100": "a100-80gb", "a100-80g": "a100-80gb", "a100-sxm": "a100-80gb", "a100-80gb-sxm": "a100-80gb",
    "h100": "h100-sxm", "h100-80gb": "h100-sxm", "h100-sxm5": "h100-sxm", "h200-sxm": "h200",
    "rtx3090": "rtx-3090", "3090": "rtx-3090", "geforce-rtx-3090": "rtx-3090", "nvidia-l4": "l4",
}


def known_hardware() -> list[str]:
    return sorted(HARDWARE)


def resolve_hardware(name: str | Hardware) -> Hardware:
    if isinstance(name, Hardware):
        return name
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    key = _HW_ALIASES.get(key, key)
    if key not in HARDWARE:
        raise UserError(f"unknown hardware {name!r}", f"use one of: {', '.join(known_hardware())}")
    return HARDWARE[key]


@dataclass(frozen=True)
class Interconnect:
    """A stage-to-stage link. One hop = latency + bytes / bandwidth (one direction)."""

    key: str
    latency_us: float
    bandwidth_gbps: float | None  # None: take it from the GPU (NVLink / PCIe generation)
    note: str

    def bandwidth_for(self, hw: Hardware) -> float:
        """GB/s one way between two stages on this hardware."""
        if self.bandwidth_gbps is not None:
            return self.bandwidth_gbps
        if self.key == "nvlink":
            if hw.nvlink_gbps is None:
                raise UserError(f"{hw.name} has no NVLink", "use --interconnect pcie or --interconnect ethernet")
            return hw.nvlink_gbps
        return hw.pcie_gbps


# Latencies are software-dominated (a point-to-point send/recv of a few KB through NCCL or gloo);
# they are typical measured values, not datasheet figures. Bandwidths: NVLink / PCIe from the GPU's
# datasheet (per direction), Ethernet = one 100 GbE port (12.5 GB/s line rate).
INTERCONNECTS: dict[str, Interconnect] = {
    "nvlink": Interconnect("nvlink", latency_us=8.0, bandwidth_gbps=None,
                           note="GPUs in one node over NVLink; NCCL p2p small-message latency ~5-10 µs"),
    "pcie": Interconnect("pcie", latency_us=15.0, bandwidth_gbps=None,
                         note="GPUs in one node over PCIe (through the host bridge); ~10-20 µs per small message"),
    "ethernet": Interconnect("ethernet", latency_us=50.0, bandwidth_gbps=12.5,
                             note="one GPU per node over 100 GbE (TCP); ~30-80 µs per small message"),
}


def resolve_interconnect(name: str | Interconnect) -> Interconnect:
    if isinstance(name, Interconnect):
        return name
    key = str(name).strip().lower()
    if key not in INTERCONNECTS:
        raise UserError(f"unknown interconnect {name!r}", f"use one of: {', '.join(INTERCONNECTS)}")
    return INTERCONNECTS[key]


def hop_seconds(message_bytes: float, link: Interconnect, hw: Hardware) -> float:
    """One-way time of one message of `message_bytes` between adjacent stages."""
    return link.latency_us * 1e-6 + message_bytes / (link.bandwidth_for(hw) * 1e9)
