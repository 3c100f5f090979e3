"""Trained exit heads on the tiny model: training helps where it must, round trips, refusals, and
the reduced-vocabulary head's rejections."""

import json

import pytest
import torch

from ppsd.cli import main
from ppsd.errors import UserError
from profiler.heads.collect import Records
from profiler.heads.evaluate import score, summarise
from runtime.heads.store import ExitHeads, FrozenHead, HeadsMeta, LinearAdapter, load_heads, read_meta
from profiler.heads.train import fit_exit
from runtime.llm import load_model
from ppsd.profile import ACCEPTANCE_COLUMNS


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return load_model("tiny-llama")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny):
    """A head folder trained through the CLI on the built-in prompts (tiny, seconds)."""
    root = tmp_path_factory.mktemp("heads")
    mp = pytest.MonkeyPatch()
    mp.setenv("PPSD_CACHE", str(root / "cache"))
    out = root / "heads"
    rc = main(["heads", "train", "--model", "tiny-llama", "--exits", "2,4", "--prompts", "builtin",
               "--per-category", "1", "--heldout-per-category", "1", "--max-new-tokens", "8", "--epochs", "2",
               "--vocab-sizes", "64,128", "--out", str(out), "--quiet"])
    assert rc == 0
    yield out
    mp.undo()


def _linear_case(tiny, n, seed):
    """Exit states x and a last-layer state that is a fixed linear map of them: a linear adapter can
    reproduce the full model's distribution exactly, so training must close the gap."""
    g = torch.Generator().manual_seed(1234)
    mix = torch.randn(tiny.hidden_size, tiny.hidden_size, generator=g) / tiny.hidden_size ** 0.5
    x = torch.randn(n, tiny.hidden_size, generator=torch.Generator().manual_seed(seed)) * 3.0
    return x, x @ mix.T


def test_training_reduces_loss_and_raises_heldout_agreement(tiny):
    frozen = FrozenHead(tiny)
    x, final = _linear_case(tiny, 3000, seed=1)
    xh, final_h = _linear_case(tiny, 600, seed=2)
    target_h = frozen.logits(final_h).argmax(-1)
    naive = (frozen.logits(xh).argmax(-1) == target_h).float().mean().item()
    for init in ("lstsq", "identity"):
        # From the identity, distillation alone has the whole way to go: more passes, a larger step.
        epochs, lr = (4, 1e-3) if init == "lstsq" else (20, 1e-2)
        fit = fit_exit(x, final, frozen, epochs=epochs, init=init, lr=lr)
        assert fit.loss_final < 0.5 * fit.loss_naive, (init, fit)
        with torch.no_grad():
            held = (frozen.logits(fit.adapter(xh)).argmax(-1) == target_h).float().mean().item()
        assert held > naive + 0.3 and held > 0.7, (init, naive, held)


def test_identity_adapter_is_the_naive_head(tiny):
    heads = ExitHeads(HeadsMeta("tiny-llama", 6, 64, 320), {3: LinearAdapter(64)}, FrozenHead(tiny))
    h = torch.randn(2, 5, 64) * 4
    assert torch.allclose(heads.logits(h, 3), tiny.head(h), atol=1e-4)


def test_round_trip_and_training_record(trained, tiny):
    meta = read_meta(trained)
    assert meta.exits == [2, 4] and meta.model_id == "tiny-llama" and meta.num_layers == 6
    for e in ("2", "4"):
        info = meta.training["per_exit"][e]
        assert info["loss_final"] <= info["loss_naive"] + 1e-6
    heads = load_heads(trained, tiny)
    h = torch.randn(3, 64)
    a = heads.logits(h, 4)
    again = load_heads(trained, tiny).logits(h, 4)
    assert torch.equal(a, again)
    # The saved adapter is not the identity (it was trained) and differs from the naive head.
    assert not torch.allclose(heads.adapters[4].weight, torch.eye(64))
    # Resuming with nothing left to do keeps the weights.
    rc = main(["heads", "train", "--model", "tiny-llama", "--exits", "2,4", "--prompts", "builtin",
               "--per-category", "1", "--heldout-per-category", "1", "--max-new-tokens", "8", "--epochs", "2",
               "--vocab-sizes", "64,128", "--out", str(trained), "--quiet"])
    assert rc == 0
    assert torch.equal(load_heads(trained, tiny).logits(h, 4), a)


def test_eval_writes_profile_rows(trained, tmp_path, capsys):
    table, acc, lat = tmp_path / "heldout.csv", tmp_path / "acc.csv.gz", tmp_path / "lat.json"
    rc = main(["heads", "eval", "--heads", str(trained), "--out", str(table), "--acceptance-out", str(acc),
               "--latency-out", str(lat), "--quiet"])
    assert rc == 0
    import pandas as pd

    summary = pd.read_csv(table)
    assert set(summary["head"]) == {"shared", "trained", "vocab64", "vocab128"}
    assert set(summary["exit_layer"]) == {2, 4}
    rows = pd.read_csv(acc)
    assert list(rows.columns) == ACCEPTANCE_COLUMNS + ["confidence"]
    assert rows["match"].isin([0, 1]).all() and rows["beta"].between(0, 1.0001).all()
    assert rows["confidence"].between(0, 1.0001).all() and rows["confidence"].gt(0).all()
    exit_heads = json.loads(lat.read_text())["exit_heads"]
    assert {"trained", "vocab64"} <= set(exit_heads)
    assert all(len(v["median_ms"]) == len(v["n_values"]) for v in exit_heads.values())
    assert "alpha_naive" in capsys.readouterr().out


def _edit_meta(folder, **changes):
    path = folder / "heads.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


@pytest.mark.parametrize("change", ["model", "layers", "missing_exit", "missing_file"])
def test_mismatched_head_folder_is_refused(trained, tmp_path, capsys, change):
    import shutil

    folder = tmp_path / "h"
    shutil.copytree(trained, folder)
    args = ["heads", "eval", "--heads", str(folder), "--model", "tiny-llama", "--no-latency", "--quiet"]
    if change == "model":
        _edit_meta(folder, model_id="smollm2-135m")
    elif change == "layers":
        _edit_meta(folder, num_layers=30)
    elif change == "missing_exit":
        args += ["--exits", "3"]
    else:
        (folder / "exit4.safetensors").unlink()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ppsd heads: error:") and "\n" not in err


def test_missing_folder_is_refused(tmp_path, capsys):
    assert main(["heads", "eval", "--heads", str(tmp_path / "nope"), "--quiet"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_vocab_drafts_outside_subset_are_rejections(tiny):
    """Records where the exit state equals the last layer's: the full heads always agree, but the
    full model's tokens are put at the end of the frequency order, outside every subset, so the
    reduced-vocabulary head must count each of them as a rejection."""
    torch.manual_seed(0)
    n = 200
    h = torch.randn(n, 64) * 3
    frozen = FrozenHead(tiny)
    target = frozen.logits(h).argmax(-1)
    outside = set(target.tolist())
    order = torch.tensor([t for t in range(320) if t not in outside] + sorted(outside))
    V = 320 - len(outside)
    heads = ExitHeads(HeadsMeta("tiny-llama", 6, 64, 320, exits=[3]), {3: LinearAdapter(64)}, frozen, order)
    records = Records(exits={3: h}, final=h, target=target, position=torch.arange(n),
                      prompt_index=torch.zeros(n, dtype=torch.long), prompt_ids=["p"], categories=["qa"])
    rows = score(heads, records, [3], [V])
    by_head = summarise(rows).query("category == 'all'").set_index("head")
    assert by_head.loc["shared", "alpha"] == 1.0 and by_head.loc["trained", "alpha"] == 1.0
    assert by_head.loc[f"vocab{V}", "alpha"] == 0.0
    assert by_head.loc[f"vocab{V}", "beta"] < 1.0
    vh = heads.vocab_head(V)
    drafts = vh.draft(h, 3)
    assert not vh.contains(target).any() and vh.contains(drafts).all()


def test_bad_exits_and_vocab_sizes_are_refused(tmp_path, capsys):
    assert main(["heads", "train", "--model", "tiny-llama", "--exits", "0,9", "--out", str(tmp_path / "x"),
                 "--quiet"]) == 2
    assert "outside 1..5" in capsys.readouterr().err


# --- devices and dtypes (the CUDA path's rules, checked on a CPU) ------------------------------------

def test_heads_compute_in_the_dtype_they_are_loaded_in(trained, tiny):
    """Drafting loads heads in the model's dtype (a bf16 model drafts with bf16 heads, as with its
    own LM head); evaluation keeps fp32. The two agree up to bf16 rounding."""
    h = torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(0))
    fp32 = load_heads(trained, tiny)
    bf16 = load_heads(trained, tiny, dtype=torch.bfloat16)
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16
    assert bf16.adapters[4].weight.dtype == torch.bfloat16 and bf16.frozen.norm_weight.dtype == torch.bfloat16
    a, b = fp32.logits(h, 4), bf16.logits(h.bfloat16(), 4)
    assert b.dtype == torch.bfloat16 and b.shape == a.shape
    assert torch.allclose(a, b.float(), atol=0.1 * float(a.abs().max()))
    vh = bf16.vocab_head(64)
    assert vh.logits(h.bfloat16(), 2).dtype == torch.bfloat16
    q = vh.full_probs(h.bfloat16(), 2)
    assert q.shape == (2, 3, 320) and torch.allclose(q.sum(-1), torch.ones(2, 3), atol=1e-3)


def test_drafter_heads_follow_the_model_dtype(trained, tiny):
    from runtime.acceptance import Sampler
    from runtime.heads import make_drafter

    assert make_drafter(tiny, 4, str(trained), "trained").heads.dtype == torch.float32  # fp32 model: as before
    model16 = load_model("tiny-llama", dtype="bfloat16")
    d = make_drafter(model16, 4, str(trained), "vocab64")
    assert d.heads.dtype == torch.bfloat16 and d.vocab.rows_weight.dtype == torch.bfloat16
    h = model16.forward_layers(model16.embed(torch.tensor([[5, 6, 7]])), 0, 4, None, 0)[:, -1:]
    tok, q = d.choose(Sampler.make(0.0, 0), h)
    assert 0 <= tok < 320 and q is None
    tok, q = d.choose(Sampler.make(0.8, 1), h)
    assert q.shape == (320,) and abs(float(q.sum()) - 1.0) < 1e-3


def test_time_ms_uses_the_profilers_cuda_event_clock(monkeypatch):
    """On a CUDA device an exit head's draft is timed with the clock the profiler times the shared
    head with (profiler/latency.py StepClock: CUDA events, read after the call), never perf_counter;
    checked on a CPU with a fake clock that records what it is asked."""
    import profiler.latency as latency
    from profiler.heads.timing import time_ms

    log = []

    class FakeClock:
        def __init__(self, device):
            log.append(("clock", str(device)))

        def start(self):
            log.append("start")

        def mark(self):
            log.append("mark")

        def lap_ms(self):
            log.append("read")
            return [2.5]

    monkeypatch.setattr(latency, "StepClock", FakeClock)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: log.append("device-wide sync"))
    stats = time_ms(lambda: log.append("call"), repeats=3, warmup=1, device="cuda:1")
    assert stats == {"median_ms": 2.5, "p10_ms": 2.5, "p90_ms": 2.5}  # the events' reading, not a wall clock
    assert log == ["call", ("clock", "cuda:1")] + ["start", "call", "mark", "read"] * 3
    log.clear()
    time_ms(lambda: log.append("call"), repeats=2, warmup=0, device=torch.device("cpu"))
    time_ms(lambda: log.append("call"), repeats=2, warmup=0)
    assert log == ["call"] * 4  # CPU: perf_counter, nothing to wait for


def test_head_latency_times_heads_in_their_dtype(trained, tiny):
    from profiler.heads.evaluate import measure_latency

    heads = load_heads(trained, tiny, dtype=torch.bfloat16)
    out, shared = measure_latency(heads, 4, [64], n_values=(1, 2), repeats=2)
    assert set(out) == {"trained", "vocab64"} and shared["kind"] == "shared"
    assert all(v > 0 for v in out["trained"]["median_ms"])


def test_time_ms_runs_before_untimed_ahead_of_every_timed_call():
    import time

    from profiler.heads.timing import time_ms

    calls = []

    def before():
        calls.append("before")
        time.sleep(0.02)  # an eviction that costs far more than the call timed

    got = time_ms(lambda: calls.append("call"), repeats=4, warmup=2, before=before)
    assert calls == ["call"] * 2 + ["before", "call"] * 4  # warmup as it was; then before each timed call
    assert got["p90_ms"] < 10.0  # the eviction is not in the time


def test_draft_path_evictor_reads_the_layers_before_the_exit_only(tiny, monkeypatch):
    from profiler.heads.timing import draft_path_evictor

    summed = []
    evict = draft_path_evictor(tiny, 2)
    monkeypatch.setattr(torch.Tensor, "sum", lambda self, *a, **k: summed.append(self.data_ptr()))
    evict()
    expected = [p.data_ptr() for layer in tiny.layers[:2] for p in layer.parameters()]
    assert summed == expected and 0 < len(expected) < len(list(tiny.layers.parameters()))


def test_head_latency_with_an_evictor_says_how_it_was_timed(trained, tiny):
    from profiler.heads.evaluate import measure_latency
    from profiler.heads.timing import draft_path_evictor

    heads = load_heads(trained, tiny)
    cold, _ = measure_latency(heads, 4, [64], n_values=(1,), repeats=3, evict=draft_path_evictor(tiny, 4))
    hot, _ = measure_latency(heads, 4, [64], n_values=(1,), repeats=3)
    assert {e["timing"] for e in cold.values()} == {"after_draft_layers"}
    assert {e["timing"] for e in hot.values()} == {"hot_loop"}
