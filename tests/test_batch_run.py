"""runtime/batch_run.py: `ppsd run --batch B` measures AR and the plan at batch B in turns, checks greedy
outputs against AR at batch B and at batch 1, prints JSON alone with --json, and refuses what the
batched runtime does not run before a model loads."""

from __future__ import annotations

import json
import os

import pytest
import torch

from ppsd.cli import main
from runtime.batch_run import first_difference, kv_bytes, measure_batched
from runtime.heads import make_drafter
from runtime.llm import load_model
from runtime.request import make_plan
from ppsd.modes import Mode

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_kv_bytes_counts_every_layer_key_and_value(tiny):
    # tiny-llama: 6 layers, 2 key/value heads of 16 dims, float32
    assert kv_bytes(tiny, batch=3, slots=10) == 2 * 6 * 3 * 2 * 16 * 10 * 4


def test_a_batched_eesd_run_is_measured_against_batched_ar(tiny):
    prompts = [tiny.encode_prompt(t) for t in ("one prompt", "a second, longer prompt", "3", "four")]
    plan = make_plan(Mode.EESD, tiny.num_layers, 3, 3)
    res = measure_batched(tiny, plan, prompts, 10, 2, drafter=make_drafter(tiny, 3), warmup=0, repeats=2)
    assert res.batch_size == 2 and res.sequences == 4 and res.repeats == 2
    assert res.tokens_per_s > 0 and res.ar_tokens_per_s > 0
    assert res.speedup_vs_ar == pytest.approx(res.tokens_per_s / res.ar_tokens_per_s)
    assert res.outputs_match_ar is True
    assert isinstance(res.outputs_match_ar_batch1, bool)
    assert 0.0 <= res.acceptance_rate <= 1.0 and 1.0 <= res.mean_accepted <= 4.0
    assert res.ms_per_token > 0 and res.cache_slots > 0


@pytest.mark.parametrize("mode, label", [("eesd", "EESD E=3 γ=2"), ("ppsd", "PPSD E=3 k=2 [0,3,6]")])
def test_ppsd_run_batch_prints_json_alone(mode, label, capsys):
    code = main(["run", "--model", "tiny-llama", "--mode", mode, "--exit", "3", "--draft-len", "2", "--batch", "2",
                 "--limit", "3", "--max-new-tokens", "6", "--warmup", "0", "--repeats", "1", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["batch_size"] == 2 and doc["sequences"] == 4  # --limit 3 rounds up to two batches of 2
    assert doc["plan"] == label and doc["outputs_match_ar"] is True
    assert (doc["speedup_vs_ar_tp"] is None) == (mode == "eesd")


def test_a_batched_ppsd_run_is_measured_against_batched_ar_on_one_and_both_cores(tiny):
    prompts = [tiny.encode_prompt(t) for t in ("one prompt", "a second, longer prompt", "3", "four")]
    plan = make_plan(Mode.PPSD, tiny.num_layers, 3, stages=2)
    res = measure_batched(tiny, plan, prompts, 10, 2, drafter=make_drafter(tiny, 3), warmup=0, repeats=2)
    assert res.plan.startswith("PPSD E=3 k=2") and res.outputs_match_ar is True
    assert res.ar_both_cores_tokens_per_s > 0
    assert res.speedup_vs_ar_tp == pytest.approx(res.tokens_per_s / max(res.ar_tokens_per_s,
                                                                         res.ar_both_cores_tokens_per_s))
    assert 0.0 <= res.acceptance_rate <= 1.0
    assert res.mean_accepted == pytest.approx(1 / (2 - res.acceptance_rate))
    assert torch.get_num_threads() == 1  # the both-cores turns hand the threads back


@pytest.mark.parametrize("argv, words", [
    (["--mode", "ppsd", "--exit", "3", "--batch", "2", "--stages", "3"], "two stages"),
    (["--mode", "ppsd", "--exit", "3", "--batch", "2", "--temperature", "0.7"], "greedy"),
    (["--mode", "eesd", "--exit", "3", "--batch", "0"], "at least 1"),
    (["--mode", "eesd", "--exit", "3", "--batch", "2", "--force-trace", "accept-all"], "--force-trace"),
    (["--mode", "eesd", "--exit", "3", "--batch", "2", "--runtime", "hf"], "--runtime hf"),
])
def test_what_the_batched_runtime_does_not_run_is_refused_before_loading(argv, words, capsys, monkeypatch):
    import runtime.llm

    monkeypatch.setattr(runtime.llm, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    assert main(["run", "--model", "tiny-llama", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_a_batch_larger_than_the_prompt_file_is_refused(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "x", "turns": ["hi"]}) + "\n")
    assert main(["run", "--model", "tiny-llama", "--mode", "ar", "--batch", "4", "--prompts", str(prompts)]) == 2
    assert "needs 4 prompts" in capsys.readouterr().err
