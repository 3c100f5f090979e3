"""Prefill (sim/model/prefill.py, Profile.prefill_ms, profiler.latency.measure_prefill): time to first
token and end-to-end figures next to the decode speedup."""

from __future__ import annotations

import json

import pytest

from ppsd.cli import main
from ppsd.profile import load_profile, save_profile
from ppsd.profile.synthetic import bernoulli_acceptance, synthetic_meta
from sim import api
from ppsd.modes import Mode
from sim.plan import Plan

HOP = 0.5


@pytest.fixture(scope="module")
def prof(tmp_path_factory):
    meta = synthetic_meta(num_layers=8, layer_ms=1.0, head_ms=3.0, hop_ms=HOP)
    meta["latency"]["prefill"] = {"lengths": [32, 128], "median_ms": [20.0, 50.0], "p10_ms": [19.0, 48.0],
                                  "p90_ms": [21.0, 52.0]}
    acc = bernoulli_acceptance(8, lambda e: 0.6, prompts=2, tokens=40)
    meta["acceptance"] = {"temperature": 1.0, "max_new_tokens": 40}
    out = tmp_path_factory.mktemp("prefill")
    save_profile(out, meta, acceptance=acc)
    return load_profile(out)


def test_measured_prefill_interpolates_and_extrapolates(prof, tmp_path):
    assert prof.prefill_ms(32) == 20.0 and prof.prefill_ms(80) == pytest.approx(35.0)
    assert prof.prefill_ms(224) == pytest.approx(80.0)  # linear past the last length
    bare = load_profile(save_profile(tmp_path / "b", synthetic_meta(num_layers=4, layer_ms=1.0, head_ms=3.0,
                                                                    embed_ms=0.0)))
    # no measurement: every layer at n = L from the tables (flat in n here) plus the head
    assert bare.prefill_source.startswith("extrapolated") and bare.prefill_ms(100) == pytest.approx(4 * 1.0 + 3.0)


def test_first_token_and_end_to_end(prof):
    ar = api.simulate(prof, Plan(Mode.AR), prompt_len=128)
    pp = api.simulate(prof, Plan(Mode.PPSD, 4, stages=3), prompt_len=128)
    gens = pp.details.generations
    assert ar.details.ttft_s == pytest.approx(0.050) and ar.details.prefill_s == pytest.approx(0.050 * gens)
    # the prompt's hidden states pass the stages one after another: two hops for three stages
    assert pp.details.ttft_s == pytest.approx(0.050 + 2 * HOP / 1e3)
    assert pp.details.e2e_s == pytest.approx(pp.time_s + pp.details.prefill_s)
    e2e = (ar.time_s + ar.details.prefill_s) / pp.details.e2e_s
    assert pp.details.speedup_vs_ar_e2e == pytest.approx(e2e)
    # prefill is paid by both: end to end the speedup moves towards 1
    assert abs(pp.details.speedup_vs_ar_e2e - 1) < abs(pp.speedup_vs_ar - 1)


def test_prompt_len_on_the_command_line(prof, capsys):
    assert main(["simulate", "--profile", str(prof.path), "--mode", "eesd", "--exit", "4", "--prompt-len", "32",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["ttft_s"] == pytest.approx(0.020) and r["speedup_vs_ar_e2e"] > 0
    assert main(["simulate", "--profile", str(prof.path), "--mode", "eesd", "--exit", "4", "--prompt-len", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--prompt-len 0" in err and "\n" not in err


def test_the_profiler_times_a_whole_prefill():
    from profiler.latency import LatencyConfig, measure_prefill
    from runtime.llm import load_model

    tiny = load_model("tiny-llama")
    got = measure_prefill(tiny, LatencyConfig(warmup=1, repeats=4, prefill_lengths=(8, 64, 10 ** 9)))
    assert got["lengths"] == [8, 64]  # a length past the model's context is left out
    assert all(m > 0 for m in got["median_ms"]) and all(a <= b for a, b in zip(got["p10_ms"], got["p90_ms"]))
