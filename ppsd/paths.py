"""Where things live, and writes that never leave half a file behind."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = PROJECT_ROOT / "examples"
RUNS_DIR = PROJECT_ROOT / "runs"
# Spec-Bench prompts are read by path from the shared folder beside the checkout, never copied.
SHARED_DIR = PROJECT_ROOT.parent / "shared"  # data read by path, never copied in
SPEC_BENCH_PATH = SHARED_DIR / "datasets" / "spec_bench" / "question.jsonl"
AZURE_CONV_TRACE = SHARED_DIR / "datasets" / "azure_llm_inference_2023" / "AzureLLMInferenceTrace_conv.csv"


def cache_dir() -> Path:
    """`$PPSD_CACHE`, else `~/.cache/ppsd`; created on first use."""
    path = Path(os.environ.get("PPSD_CACHE") or Path.home() / ".cache" / "ppsd")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


@contextlib.contextmanager
def atomic_dir(final: str | Path, overwrite: bool = True):
    """Yield a temporary sibling folder; it becomes `final` only if the block succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
    try:
        yield tmp
        if final.exists():
            if not overwrite:
                raise FileExistsError(final)
            old = final.with_name(f".{final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def display_path(path) -> str:
    """A path as result files record it: relative to the project root when inside it (so a committed
    validation folder names `examples/...`, not this machine's checkout), else absolute."""
    full = Path(path).expanduser().resolve()
    try:
        return str(full.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(full)
