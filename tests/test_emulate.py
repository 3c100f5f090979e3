"""Emulated devices (runtime/emulate.py): precise waits that leave the cores free, the real AR loop
and PPSD stage processes on a profile's times, `ppsd run --emulate` and `ppsd validate --emulate`."""

from __future__ import annotations

import json
import statistics
import time

import numpy as np
import pytest

from ppsd import validation_folder as vf
from ppsd.cli import main
from ppsd.errors import UserError
from ppsd.profile.synthetic import write_synthetic_profile
from runtime.acceptance import ACCEPT_ALL, ForcedTrace
from runtime.emulate import (EMULATED_VOCAB, EmulatedModel, emulated_prompts, load_emulated, profile_traces,
                             synthetic_prompt, wait_ms)
from runtime.measure import Job, measure
from ppsd.modes import Mode
from sim.plan import Plan


def _profile(tmp_path, name="p", **kw):
    kw = {"num_layers": 8, "layer_ms": 0.5, "head_ms": 0.3, "embed_ms": 0.1, **kw}
    return write_synthetic_profile(tmp_path / name, **kw)


def test_a_wait_is_precise_and_leaves_the_core_free():
    errs = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(100):
        t = time.perf_counter()
        wait_ms(2.0)
        errs.append((time.perf_counter() - t) * 1e3 - 2.0)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    assert min(errs) >= 0.0, min(errs)  # a wait never returns early
    assert statistics.median(errs) < 0.05, sorted(errs)[-10:]
    # a rare scheduling hiccup or multi-ms wake-up stall on a shared VM is one wait of the hundred
    assert sum(e <= 0.3 for e in errs) >= 90, sorted(errs)[-15:]
    assert cpu / wall < 0.25, (cpu, wall)  # the last 100 µs of each 2 ms spins; the rest sleeps


def test_layer_prices_are_the_profiles(tmp_path):
    prof = _profile(tmp_path, layer_ms=list(np.linspace(0.2, 0.9, 8)), per_token_fraction=0.3)
    model = EmulatedModel(prof)
    for n, ctx in ((1, 64), (3, 100.5), (4, 2000), (1, 10), (16, 256)):
        secs = model.layer_seconds(n, ctx)
        assert [s * 1e3 for s in secs] == [prof.layer_ms(layer, n, ctx) for layer in range(8)]
    assert model.piece_seconds("head", 4) * 1e3 == prof.head_ms(4)
    assert model.hidden_size == 4096  # a synthetic profile records no hidden size


class _VirtualClock:
    """perf_counter that moves only when the emulator waits: what the emulator charges, with none of
    the loop's own Python and none of this shared VM's stalls."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def wait_until(self, deadline: float) -> None:
        self.now = max(self.now, deadline)


def test_the_emulated_model_keeps_the_adapter_contract(tmp_path, monkeypatch):
    import torch

    clock = _VirtualClock()  # what the emulator charges, exactly, whatever this shared VM's stalls
    monkeypatch.setattr(time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr("runtime.emulate.wait_until", clock.wait_until)
    monkeypatch.setattr("runtime.emulate.sleep_until", clock.wait_until)
    model = load_emulated(str(_profile(tmp_path).path))
    assert model.model_id.startswith("emulate:") and model.model_id.endswith("/p")
    cache = model.new_cache()
    ids = torch.tensor([synthetic_prompt(5)])
    h = model.forward_layers(model.embed(ids), 0, 8, cache, 0)
    assert h.shape == (1, 5, model.hidden_size) and cache.length(7) == 5
    logits = model.head(h)
    assert logits.shape == (1, 5, EMULATED_VOCAB)
    with pytest.raises(RuntimeError, match="out of step"):
        model.forward_layers(h[:, -1:], 0, 8, cache, 7)  # the cache holds 5, not 7
    cache.crop(3)
    t = time.perf_counter()
    assert model.forward_layers(h[:, -1:], 0, 8, cache, 3, should_stop=lambda: cache.length(2) > 3) is None
    assert (time.perf_counter() - t) * 1e3 == pytest.approx(1.5)  # abandoned after 3 of 8 layers (of 4 ms)
    assert [cache.length(i) for i in range(8)] == [4, 4, 4, 3, 3, 3, 3, 3]


def test_emulated_ar_is_charged_the_profiles_step_time(tmp_path, monkeypatch):
    clock = _VirtualClock()
    monkeypatch.setattr(time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr("runtime.emulate.wait_until", clock.wait_until)
    monkeypatch.setattr("runtime.emulate.sleep_until", clock.wait_until)
    model = EmulatedModel(_profile(tmp_path, layer_ms=1.0, head_ms=0.5))
    prompts = [synthetic_prompt(20, i) for i in range(2)]
    m = measure(model, Job(plan=Plan(Mode.AR), prompts=prompts, max_new=[40, 40], warmup=0, repeats=2))
    ideal = 1000 / (0.1 + 8 * 1.0 + 0.5)  # embed + N layers + head, ms
    assert m.result.tokens_per_s == pytest.approx(ideal, rel=1e-9)
    assert m.result.details.emulated is True


def test_emulated_ar_runs_near_the_profiles_step_time(tmp_path):
    # on the wall clock: the loop's own Python (sampling, bookkeeping) costs ~0.1 ms a token here, and
    # this shared VM has stretches ~5% slower than that; a stall only ever slows a repetition, so the
    # fastest one is the emulator's pace (bench/bench_conformance.py prints emulated AR against its prediction).
    model = EmulatedModel(_profile(tmp_path, layer_ms=1.0, head_ms=0.5))
    prompts = [synthetic_prompt(20, i) for i in range(2)]
    m = measure(model, Job(plan=Plan(Mode.AR), prompts=prompts, max_new=[40, 40], warmup=0, repeats=4))
    ideal = 1000 / (0.1 + 8 * 1.0 + 0.5)
    assert m.result.details.tokens_per_s_max < ideal * 1.005  # a wait never comes early
    assert m.result.details.tokens_per_s_max > ideal * 0.85  # a piece charged twice or a lost wait would show


def _stage_ms(prof, bounds):
    k = len(bounds) - 1
    out = []
    for m in range(k):
        t = sum(prof.layer_ms(layer, 1, 64) for layer in range(bounds[m], bounds[m + 1]))
        t += (prof.embed_ms(1) + prof.head_ms(1)) if m == 0 else 0.0
        t += prof.head_ms(1) if m == k - 1 else 0.0
        out.append(t)
    return out


def test_three_stages_with_flushes_match_ar_and_run_near_the_stage_bound(tmp_path):
    """3 stage processes on 2 cores: accept-all near the slowest stage's bound (each pass also pays
    this machine's messages, ~0.2-0.4 ms a token here: stages of ~6 ms keep that under 10%); a trace
    with rejections flushes and abandons passes, and the emulated cache checks every crop."""
    prof = _profile(tmp_path, num_layers=12, layer_ms=1.2, head_ms=1.0, embed_ms=0.05)
    model = EmulatedModel(prof)
    prompts = [synthetic_prompt(30, i) for i in range(2)]
    bounds = (0, 4, 8, 12)
    plan = Plan(Mode.PPSD, 4, stages=3, stage_bounds=bounds)
    ar = measure(model, Job(plan=Plan(Mode.AR), prompts=prompts, max_new=[40, 40], warmup=0, repeats=1))
    job = Job(plan=plan, prompts=prompts, max_new=[40, 40], warmup=1, repeats=2, forced=[ACCEPT_ALL] * 2,
              timeout_s=30)
    m = measure(model, job)
    bound = 1000 / max(_stage_ms(prof, bounds))
    # the lower bound on the fastest repetition: a stall of this shared VM only slows one down
    assert 0.75 * bound < m.result.details.tokens_per_s_max, (m.result.details.tokens_per_s_reps, bound)
    assert m.result.tokens_per_s < 1.02 * bound, (m.result.tokens_per_s, bound)
    assert m.outputs == ar.outputs  # the deterministic emulated model: PPSD commits AR's tokens
    mixed = ForcedTrace((1, 1, 0, 1, 0, 0, 1, 1, 1), "mixed")
    m2 = measure(model, Job(plan=plan, prompts=prompts, max_new=[40, 40], warmup=0, repeats=1,
                            forced=[mixed] * 2, timeout_s=30))
    assert m2.outputs == ar.outputs and m2.result.details.forced_trace == "mixed"
    assert 0 in m2.result.accepted_hist  # rejections happened (and flushed the pipeline)


def test_run_emulate_four_stages_on_two_cores(tmp_path, capsys):
    prof = _profile(tmp_path, num_layers=12, layer_ms=2.0, head_ms=1.5, embed_ms=0.05)
    rc = main(["run", "--emulate", str(prof.path), "--mode", "ppsd", "--exit", "3", "--stages", "4",
               "--force-trace", "accept-all", "--limit", "2", "--max-new-tokens", "32", "--warmup", "1",
               "--repeats", "2", "--no-ar", "--json"])
    assert rc == 0  # 4 stages > 2 cores, no --oversubscribe: emulated stages wait, they use no core
    res = json.loads(capsys.readouterr().out)
    assert res["emulated"] is True and res["stages"] == 4 and res["forced_trace"] == "accept-all"
    bound = 1000 / max(_stage_ms(prof, res["stage_bounds"]))
    # the lower bound on the fastest repetition: a stall of this shared VM only slows one down
    assert 0.75 * bound < res["tokens_per_s_max"], (res["tokens_per_s_reps"], bound, res["stage_bounds"])
    assert res["tokens_per_s"] < 1.02 * bound, (res["tokens_per_s"], bound, res["stage_bounds"])


def test_emulated_prompts_and_traces_come_from_the_profile(tmp_path):
    prof = _profile(tmp_path, alpha_by_exit=lambda e: 0.5)
    prompts = emulated_prompts(prof)
    assert [p.prompt_id for p in prompts] == ["p0", "p1", "p2", "p3"]
    assert all(len(p.tokens) == 64 and p.recorded_new == 64 for p in prompts)  # smallest context, trace length
    traces = profile_traces(prof, 3, ["p0", "p1"])
    assert len(traces[0].pattern) == 64 and traces[0].pattern != traces[1].pattern
    with pytest.raises(UserError, match="no shared trace at exit layer 9"):
        profile_traces(prof, 9, ["p0"])
    with pytest.raises(UserError, match="no acceptance traces"):
        profile_traces(_profile(tmp_path, "bare"), 3, ["p0"])


def test_validate_emulate_writes_an_emulated_folder(tmp_path, capsys):
    # stages of a few ms and the profile's hop near this machine's (~0.15 ms; sending a 16 KB hidden
    # state also costs its sender ~0.2 ms here, which the simulator does not charge)
    prof = _profile(tmp_path, alpha_by_exit=lambda e: 0.7, layer_ms=1.0, head_ms=0.6, hop_ms=0.15)
    out = tmp_path / "val"
    rc = main(["validate", "--emulate", str(prof.path), "--plans", "ppsd:4:3;eesd:4:2", "--limit", "2",
               "--warmup", "1", "--repeats", "1", "--ar-once", "--out", str(out)])
    assert rc == 0
    doc = vf.read_doc(out)
    assert doc["emulated"] is True and doc["forced_trace"] is True and doc["model"].startswith("emulate:")
    rows = vf.read_rows(out, doc)
    assert [r["mode"] for r in rows] == ["ar", "ppsd", "eesd"] and rows[1]["stages"] == 3
    assert all(r["outputs_match_ar"] for r in rows[1:])
    for r in rows[1:]:  # the same profile's times and traces: the prediction lands near (this machine's
        assert abs(r["speedup_error_pct"]) < 30, r  # messages cost more than the profile's hop, see above)
    assert rows[1]["measured_speedup"] > 1.05
    assert "emulated devices" in capsys.readouterr().out


def test_emulate_refuses_what_does_not_apply(tmp_path, capsys):
    path = str(_profile(tmp_path).path)
    assert main(["run", "--emulate", path, "--mode", "ppsd", "--exit", "4", "--device", "cuda"]) == 2
    assert "--device cuda does not apply" in capsys.readouterr().err
    assert main(["run", "--emulate", path, "--mode", "eesd", "--exit", "4"]) == 2  # no traces, no --force-trace
    assert "no acceptance traces" in capsys.readouterr().err
    assert main(["validate", "--profile", path, "--predict-from", path]) == 2  # predicting needs acceptance
    assert "has no acceptance traces" in capsys.readouterr().err
    assert main(["validate", "--emulate", path, "--prompts", "builtin"]) == 2
    assert "--prompts does not apply with --emulate" in capsys.readouterr().err
    assert main(["validate", "--emulate", path]) == 2
    assert "has no acceptance traces" in capsys.readouterr().err


def test_a_finished_sequence_leaves_no_tail_for_the_middle_stages(tmp_path):
    """When the last stage commits a sequence's last token it posts that on the epoch board, so the
    tokens stage 1 drafted past the end are abandoned or dropped instead of run through every middle
    stage, and the next sequence does not queue behind them. Accept-all at k = 3: with the cap at 3,
    two tokens are in flight behind the last one; at most the one already in the middle stage while
    the last token was verified may still finish there."""
    prof = _profile(tmp_path, num_layers=12, layer_ms=1.0, head_ms=0.5, embed_ms=0.05)
    model = EmulatedModel(prof)
    prompt = synthetic_prompt(24)
    plan = Plan(Mode.PPSD, 4, stages=3, stage_bounds=(0, 4, 8, 12))
    m = measure(model, Job(plan=plan, prompts=[prompt], max_new=[12], warmup=0, repeats=1,
                           forced=[ACCEPT_ALL], timeout_s=30))
    last = max(ev.args["pos"] for ev in m.result.timeline if ev.row == "stage 3" and ev.name == "verify")
    past_end = [ev.args["pos"] for ev in m.result.timeline
                if ev.row == "stage 2" and ev.name == "forward" and ev.args["pos"] > last]
    assert len(past_end) <= 1, past_end
    ar = measure(model, Job(plan=Plan(Mode.AR), prompts=[prompt], max_new=[12], warmup=0, repeats=1))
    assert m.outputs == ar.outputs


def test_host_cpu_share_is_the_stage_processes_cpu_over_wall_times_cores(tmp_path):
    from runtime.decoding import SeqRecord
    from runtime.measure import host_cpu_share

    recs = [[SeqRecord(tokens=[1, 2], prefill_s=0.5, decode_s=1.5, cpu_s=[1.0, 0.6, 0.4]),
             SeqRecord(tokens=[1, 2], prefill_s=0.5, decode_s=1.5, cpu_s=[0.4, 0.2, 0.2])]]
    assert host_cpu_share(recs, cores=2) == pytest.approx(2.8 / (4.0 * 2))
    assert host_cpu_share([[SeqRecord(tokens=[1], prefill_s=0.1, decode_s=1.0)]], cores=2) is None  # AR, EESD
    # an emulated pipeline records it; AR in-process does not
    prof = _profile(tmp_path, num_layers=6, layer_ms=1.0, head_ms=0.5)
    model = EmulatedModel(prof)
    prompts = [synthetic_prompt(16)]
    m = measure(model, Job(plan=Plan(Mode.PPSD, 2, stages=3, stage_bounds=(0, 2, 4, 6)), prompts=prompts,
                           max_new=[12], warmup=0, repeats=1, forced=[ACCEPT_ALL], timeout_s=30))
    assert 0.0 < m.result.details.host_cpu_share < 1.0
    ar = measure(model, Job(plan=Plan(Mode.AR), prompts=prompts, max_new=[12], warmup=0, repeats=1))
    assert ar.result.details.host_cpu_share is None


def test_an_emulated_run_that_loaded_the_cores_says_so_on_stderr():
    from runtime.measure import HOST_BUSY_WARN
    from runtime.runner import host_warning
    from sim.plan import MeasuredDetails, Result

    def result(share, emulated=True):
        d = MeasuredDetails(1.0, 1.0, 1.0, 1.0, [1.0], 1, 0.0, 0.0, emulated=emulated, host_cpu_share=share)
        return Result(plan=Plan(Mode.PPSD, 2, stages=3), source="measured", tokens=1, time_s=1.0, tokens_per_s=1.0,
                      details=d)

    assert "80% busy" in host_warning(result(0.8))
    assert host_warning(result(HOST_BUSY_WARN - 0.01)) is None
    assert host_warning(result(0.9, emulated=False)) is None  # real compute: busy cores are the work itself
    assert host_warning(result(None)) is None
