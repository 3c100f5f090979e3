"""`--device` as every command reads it. Torch-free: the CLI modules use it before torch is imported.

Accepted spellings: `cpu`, `cuda`, `cuda:N`, and `gpu` / `gpu:N` as aliases of `cuda` / `cuda:N`.
They are normalised here, once, at the start of each command: every later check (the GPU count in
runtime/request.py, the NCCL-or-gloo choice, the stage devices, output folder names, cache keys)
tests `device.startswith("cuda")`, and a `gpu` that reached them unchanged would silently take the
CPU path (a CPU-core count instead of the GPU count, gloo instead of NCCL).
"""

from __future__ import annotations

from ppsd.errors import UserError


def normalize_device(text) -> str:
    """'cpu', 'cuda' or 'cuda:N'; UserError (one line) for anything else."""
    d = str(text).strip().lower()
    if d == "gpu" or d.startswith("gpu:"):
        d = "cuda" + d[3:]
    if d in ("cpu", "cuda"):
        return d
    if d.startswith("cuda:") and d[5:].isdigit():
        return f"cuda:{int(d[5:])}"
    raise UserError(f"unknown device {text!r}", "use --device cpu or --device cuda (gpu means cuda; cuda:N picks GPU N)")
