"""Suite-wide guards."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _keep_main_module():
    """Streamlit's AppTest leaves `sys.modules['__main__']` pointing at dashboard/app.py. Processes
    started later with multiprocessing's spawn would then re-run the app as their main module and
    die before doing any work; restore the real one after every test."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture
def spec_bench_path():
    """The Spec-Bench prompts read from ../shared beside the checkout (ppsd/paths.py). The project needs
    that folder (CI copies it beside the clone), so a checkout without it fails here, saying why, rather
    than skipping the test."""
    from ppsd import paths

    if not paths.SPEC_BENCH_PATH.is_file():
        pytest.fail(f"needs the Spec-Bench prompts at {paths.SPEC_BENCH_PATH}: put ../shared beside the checkout")
    return paths.SPEC_BENCH_PATH


def make_tiny_profile(tmp_path_factory, folder: str, argv: list[str]):
    """A `ppsd profile` of tiny-llama (`argv`: the command line, without --out) in a fresh folder, its
    model cache beside it: the module fixtures of the validation tests build theirs with it."""
    from ppsd.cli import main

    out = tmp_path_factory.mktemp(folder) / "tiny"
    mp = pytest.MonkeyPatch()
    mp.setenv("PPSD_CACHE", str(out.parent / "cache"))
    try:
        assert main([*argv, "--out", str(out)]) == 0
    finally:
        mp.undo()
    return out


BATCH_TEXTS = ["Hello world, this is a test prompt.", "Another one: 1 2 3", "x",
               "a somewhat longer prompt, of several words"]


@pytest.fixture(scope="module")
def tiny():
    """The tiny random Llama the batched runtime tests decode with (one thread)."""
    import torch

    from runtime.llm import load_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    return load_model("tiny-llama")


@pytest.fixture(scope="module")
def prompts(tiny):
    """`BATCH_TEXTS` encoded: four prompts of different lengths."""
    return [tiny.encode_prompt(t) for t in BATCH_TEXTS]


@pytest.fixture(scope="session")
def sure(tmp_path_factory):
    """A synthetic 12-layer profile whose traces carry each draft's confidence (what a confidence stop
    is priced from): acceptance 0.1 + 0.07 E, layers 2 ms, head 6 ms."""
    from ppsd.profile.synthetic import write_synthetic_profile

    return write_synthetic_profile(tmp_path_factory.mktemp("sure"), alpha_by_exit=lambda e: 0.1 + 0.07 * e,
                                   num_layers=12, layer_ms=2.0, head_ms=6.0, confidence=True)
