"""profiler/batch_latency.py and `ppsd profile add-batch`: passes of B sequences timed the way the batched
runtime runs them, with batch 1 in the same rounds, written into a measured profile that then prices
`ppsd plan --batch`; asked twice, refused without --force."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from conftest import make_tiny_profile
from ppsd.cli import main
from ppsd.profile import load_profile
from profiler.batch_latency import batch_block, measure_batch_block
from runtime.llm import load_model


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    return make_tiny_profile(tmp_path_factory, "batch", [
        "profile", "--model", "tiny-llama", "--limit", "4", "--max-new-tokens", "8", "--n-values", "1,2,4",
        "--context-values", "8,32", "--repeats", "2", "--warmup", "1", "--corun-max", "1", "--no-hop",
        "--batch-sizes", "1"])


def test_ratios_pair_each_cell_with_batch_one_round_by_round():
    # cell (batch index, n index, context index, threads) -> laps [embedding, layers, head] per round
    laps = {(0, 0, 0, 1): [[0.1, 10.0, 1.0], [0.1, 20.0, 1.0]], (1, 0, 0, 1): [[0.2, 15.0, 2.0], [0.2, 30.0, 2.0]]}
    block = batch_block(laps, [1, 2], [1], [64], repeats=2)
    assert block["layers_ratio"] == [[[1.0]], [[1.5]]]
    assert block["head_ms"] == [[1.0], [2.0]]
    assert "two_threads_ratio" not in block  # no two-thread cell timed


def test_two_thread_passes_are_paired_with_the_same_cell_on_one_thread():
    laps = {(0, 0, 0, 1): [[0.1, 10.0, 1.0], [0.1, 20.0, 1.0]], (1, 0, 0, 1): [[0.2, 15.0, 2.0], [0.2, 30.0, 2.0]],
            (0, 0, 0, 2): [[0.1, 9.0, 0.9], [0.1, 18.0, 0.9]], (1, 0, 0, 2): [[0.2, 9.0, 1.0], [0.2, 18.0, 1.0]]}
    block = batch_block(laps, [1, 2], [1], [64], repeats=2)
    # batch 1: (10.0 / 11.1 + 19.0 / 21.1) / 2; batch 2: whole passes 10.2 / 17.2 and 19.2 / 32.2
    assert block["budget_threads"] == 2
    assert block["two_threads_ratio"][0][0] == pytest.approx(np.median([10.0 / 11.1, 19.0 / 21.1]), abs=1e-4)
    assert block["two_threads_ratio"][1][0] == pytest.approx(np.median([10.2 / 17.2, 19.2 / 32.2]), abs=1e-4)


def test_a_measured_block_has_every_cell():
    tiny = load_model("tiny-llama")
    torch.set_num_threads(1)
    block = measure_batch_block(tiny, (1, 3), n_values=(1, 2), context_values=(8,), warmup=0, repeats=2)
    assert block["batch_sizes"] == [1, 3]
    ratio = np.asarray(block["layers_ratio"])
    assert ratio.shape == (2, 2, 1) and np.all(ratio[0] == 1.0) and np.all(ratio > 0)
    if len(os.sched_getaffinity(0)) >= 2:  # AR's same-budget pass on two threads, every batch size and context
        assert np.asarray(block["two_threads_ratio"]).shape == (2, 1) and block["budget_threads"] == 2
    assert torch.get_num_threads() == 1  # handed back


def test_add_batch_writes_a_block_that_ppsd_plan_prices(tiny_profile, capsys):
    assert not load_profile(tiny_profile).batch.measured  # --batch-sizes 1: none measured
    assert main(["plan", "--profile", str(tiny_profile), "--batch", "2"]) == 2
    assert "add-batch" in capsys.readouterr().err
    assert main(["profile", "add-batch", str(tiny_profile), "--batch-sizes", "1,2", "--repeats", "1"]) == 0
    profile = load_profile(tiny_profile)
    assert profile.batch.sizes == (1, 2)
    assert main(["plan", "--profile", str(tiny_profile), "--batch", "2", "--max-draft-len", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["batch"] == 2 and doc["plans"]
    assert main(["profile", "add-batch", str(tiny_profile)]) == 2
    assert "--force" in capsys.readouterr().err


def test_bad_batch_sizes_are_refused(tiny_profile, capsys):
    assert main(["profile", "add-batch", str(tiny_profile), "--batch-sizes", "0,2", "--force"]) == 2
    assert "between 1 and 256" in capsys.readouterr().err
