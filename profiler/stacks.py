"""Software stacks for analytic (roofline) profiles: how the host drives a decode step. Torch-free.

The roofline (`profiler/roofline.py`) prices the GPU's work. Whether the GPU is kept busy depends on
the software around it:

compiled  the decode step is captured once and replayed per token: CUDA graphs (torch.compile
          mode="reduce-overhead" as in gpt-fast / torchao / torchchat), TensorRT-LLM, vLLM and SGLang
          graphs, lmdeploy's C++ TurboMind engine. Kernels run back to back with a small gap each
          (`Hardware.launch_us`): what the roofline alone models. The default: it is what a deployed
          decode stack does; over 8 published figures of such stacks the roofline is 7.8% off on
          average, within 5% for most A100 ones, 20% optimistic on the one H100
          (`python -m bench.published_check`).
eager     PyTorch eager mode (Hugging Face transformers `generate`, gpt-fast without --compile,
          LayerSkip's reference code, ppsd's own runtime): Python dispatches every op, each costing the
          host tens of µs, more than the GPU needs for that op at batch 1. The step is host-bound: a
          layer costs max(its GPU time, ops × dispatch cost), about 4x the compiled time on an A100 for
          a 7B model (published: 25.5 vs 107 tok/s). Choose it to predict `ppsd run` or a plain
          transformers deployment.

The eager model has one free constant, the host cost per dispatched op (`dispatch_us`), fitted to
one published batch-1 eager figure and checked on two others (below); the op counts are counted
from the code of a Llama block.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ppsd.errors import UserError

# Ops (separately dispatched PyTorch calls that launch work) in one eager Llama decoder layer at
# batch 1, counted from transformers' LlamaDecoderLayer / gpt-fast's TransformerBlock:
#   2 RMSNorms x 7 (to fp32, pow, mean, add eps, rsqrt, mul, mul weight + cast)      14
#   q, k, v, o projections                                                            4
#   rotary embedding on q and k, 6 each (two muls, rotate-half slice/neg/cat, add)    12
#   KV-cache write (k and v)                                                          2
#   attention (mask slice + scaled_dot_product_attention)                             2
#   transpose/contiguous copies around attention                                     3
#   MLP: gate, up, SiLU, mul, down                                                    5
#   two residual adds                                                                 2
#                                                                                    --
EAGER_OPS_PER_LAYER = 44
# final RMSNorm (7) + LM head (1) + next-token pick and its feed-back / host sync (~4)
EAGER_OPS_HEAD = 12
EAGER_OPS_EMBED = 1

# Host cost per dispatched op, µs. Fitted (python -m bench.published_check --fit) to ONE published figure,
# the eager starting point of the PyTorch blog "Accelerating Generative AI with PyTorch II: GPT,
# Fast" (Nov 30 2023, section "Starting Point (25.5 tok/s)": Llama-2-7B, batch 1, fp16, an
# A100-80GB power-limited to 330 W; https://pytorch.org/blog/accelerating-generative-ai-2/).
# Held out (not used by the fit): torchao's eager rows of the same A100-80GB session,
# torchao/_models/llama/benchmark_results.txt, "OTHER BENCHMARKS" (2024-08-31): Llama-2-7b-chat
# bf16 compile False 22.97 tok/s, Meta-Llama-3-8B bf16 compile False 23.67 tok/s
# (https://github.com/pytorch/ao/blob/main/torchao/_models/llama/benchmark_results.txt).
# The host CPU sets this cost: LayerSkip's own HF-based eager code ran Llama2-7B at 39.0 tok/s
# (facebookresearch/LayerSkip README, commit 02075d0, GPU not stated), i.e. ~35% cheaper ops, so
# expect ±30% between machines; `--dispatch-us` (or python -m bench.calibrate on a measurement) sets it.
EAGER_DISPATCH_US = 27.6


@dataclass(frozen=True)
class Stack:
    """How the host drives a step: a host cost per dispatched op and the ops of each piece."""

    key: str
    description: str
    dispatch_us: float  # host cost per op; 0: the host never binds (graph replay)
    ops_per_layer: int
    ops_head: int
    ops_embed: int
    sources: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sources"] = list(self.sources)
        d["host_ms_per_layer"] = self.ops_per_layer * self.dispatch_us * 1e-3
        return d


STACKS: dict[str, Stack] = {
    "compiled": Stack(
        key="compiled",
        description="decode step captured and replayed (CUDA graphs / torch.compile, TensorRT-LLM, vLLM, "
                    "lmdeploy): GPU-bound, the roofline alone",
        dispatch_us=0.0, ops_per_layer=0, ops_head=0, ops_embed=0,
        sources=("gpt-fast README 'Benchmarks' (A100-80GB 330 W, Llama-2-7B bf16 104.9 tok/s), "
                 "https://github.com/pytorch-labs/gpt-fast",
                 "torchao quantization README (A100-80GB and H100 bf16 rows), "
                 "https://github.com/pytorch/ao/blob/main/torchao/quantization/README.md",
                 "lmdeploy 'Benchmark on A100 (FP16)' static inference, batch 1, "
                 "https://github.com/InternLM/lmdeploy/blob/main/docs/en/benchmark/a100_fp16.md"),
    ),
    "eager": Stack(
        key="eager",
        description="PyTorch eager (transformers generate, gpt-fast without compile, ppsd run): every op "
                    "dispatched from Python, host-bound at batch 1",
        dispatch_us=EAGER_DISPATCH_US, ops_per_layer=EAGER_OPS_PER_LAYER, ops_head=EAGER_OPS_HEAD,
        ops_embed=EAGER_OPS_EMBED,
        sources=("fitted to: PyTorch blog 'Accelerating Generative AI with PyTorch II: GPT, Fast', "
                 "'Starting Point (25.5 tok/s)', Llama-2-7B fp16 A100-80GB 330 W, "
                 "https://pytorch.org/blog/accelerating-generative-ai-2/",
                 "held out: torchao benchmark_results.txt 'OTHER BENCHMARKS' compile False rows "
                 "(Llama-2-7B 22.97, Llama-3-8B 23.67 tok/s, A100-80GB), "
                 "https://github.com/pytorch/ao/blob/main/torchao/_models/llama/benchmark_results.txt"),
    ),
}
DEFAULT_STACK = "compiled"


def known_stacks() -> list[str]:
    return list(STACKS)


def resolve_stack(name: str | Stack | None, dispatch_us: float | None = None) -> Stack:
    """A stack by name (None: the default), with an optional override of its host cost per op."""
    if isinstance(name, Stack):
        stack = name
    else:
        key = DEFAULT_STACK if name is None else str(name).strip().lower()
        if key not in STACKS:
            raise UserError(f"unknown software stack {name!r}", f"use one of: {', '.join(STACKS)}")
        stack = STACKS[key]
    if dispatch_us is None:
        return stack
    dispatch_us = float(dispatch_us)
    if not dispatch_us >= 0:
        raise UserError(f"host dispatch cost {dispatch_us} µs is negative", "give --dispatch-us 0 or more")
    if stack.ops_per_layer == 0:
        raise UserError(f"--dispatch-us applies to the eager stack, not {stack.key!r}",
                        "add --stack eager (or drop --dispatch-us)")
    return Stack(stack.key, stack.description, dispatch_us, stack.ops_per_layer, stack.ops_head,
                 stack.ops_embed, stack.sources + (f"dispatch cost overridden: {dispatch_us} µs per op",))
