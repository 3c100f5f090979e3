"""profiler/acceptance_sampled.py: beta along trajectories the full model samples at each temperature,
and `ppsd profile --temperatures` writing them into a schema-2 profile."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ppsd.cli import main
from profiler.acceptance import exit_traces, generate_greedy, layer_states
from profiler.acceptance_sampled import generate_sampled, profile_sampled, sampled_table
from runtime.llm import load_model
from ppsd.prompts import Prompt
from ppsd.profile import SAMPLED_COLUMNS, SCHEMA_VERSION, load_profile


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


def _prompts(tiny):
    texts = ["Hello there, how are you?", "abc", "A longer prompt about nothing in particular.", "Why?"]
    prompts = [Prompt(f"p{i}", "qa" if i % 2 else "math", t) for i, t in enumerate(texts)]
    return prompts, [tiny.encode_prompt(t) for t in texts]


def test_sampled_generation_is_seeded_and_follows_the_distribution(tiny):
    prompts, encoded = _prompts(tiny)
    a = generate_sampled(tiny, encoded, 10, 1.0, seed=3)
    b = generate_sampled(tiny, encoded, 10, 1.0, seed=3)
    c = generate_sampled(tiny, encoded, 10, 1.0, seed=4)
    assert a == b and a != c  # seeded, and the seed matters
    greedy = generate_greedy(tiny, encoded, 10)
    assert a != greedy  # it samples: at T = 1 the random model's text is not the argmax path
    # a very low temperature samples the argmax path
    assert generate_sampled(tiny, encoded, 10, 1e-4, seed=3) == greedy


def test_beta_is_computed_along_the_sampled_trajectory_at_its_temperature(tiny):
    prompts, encoded = _prompts(tiny)
    out = profile_sampled(tiny, prompts, encoded, 8, [0.5, 1.0], seed=1)
    assert sorted(out) == [0.5, 1.0]
    N = tiny.num_layers
    for t, results in out.items():
        assert [r.prompt_id for r in results] == [p.prompt_id for p in prompts]
        for r, ids in zip(results, encoded):
            assert r.beta.shape == (N - 1, len(r.token_ids))
            # the same numbers as one teacher-forced pass over this trajectory at this temperature
            states = layer_states(tiny, ids, r.token_ids)
            _, beta, _, _ = exit_traces(tiny, states, r.token_ids, t)
            np.testing.assert_allclose(r.beta, beta, atol=1e-6)
            # and each draft's confidence along it: the exit head's top-1 probability at T = 1, whatever T
            from runtime.decoding import draft_confidence

            with torch.inference_mode():
                want = draft_confidence(tiny.head(states[:N - 1]).float()).numpy()
            np.testing.assert_allclose(r.confidence, want, atol=1e-5)
            assert ((r.beta >= 0) & (r.beta <= 1 + 1e-6)).all()
    # the two temperatures sample different text, so their trajectories differ
    assert [r.token_ids for r in out[0.5]] != [r.token_ids for r in out[1.0]]
    table = sampled_table(out)
    assert list(table.columns) == SAMPLED_COLUMNS + ["trajectory", "confidence"] and set(table["trajectory"]) == {0}
    assert table["confidence"].between(0, 1).all()
    assert sorted(table["temperature"].unique()) == [0.5, 1.0]
    assert len(table) == sum(r.beta.size for rs in out.values() for r in rs)


def test_beta_at_a_temperature_is_exactly_sum_of_min(tiny):
    ids = tiny.encode_prompt("Check the formula")
    gen = generate_sampled(tiny, [ids], 6, 0.7, seed=0)[0]
    states = layer_states(tiny, ids, gen)
    _, beta, _, _ = exit_traces(tiny, states, gen, 0.7)
    e, pos = 2, 3
    p_full = torch.softmax(tiny.head(states[-1][pos]).float() / 0.7, -1)
    p_exit = torch.softmax(tiny.head(states[e - 1][pos]).float() / 0.7, -1)
    assert beta[e - 1, pos] == pytest.approx(float(torch.minimum(p_full, p_exit).sum()), abs=1e-5)


def test_profile_cli_records_the_temperatures(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PPSD_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "prof"
    rc = main(["profile", "--model", "tiny-llama", "--limit", "3", "--max-new-tokens", "6", "--skip-latency",
               "--no-hop", "--temperatures", "1.0,0.5", "--out", str(out)])
    assert rc == 0
    prof = load_profile(out)
    assert prof.meta["schema_version"] == SCHEMA_VERSION == 3
    assert prof.temperatures() == [0.0, 0.5, 1.0] and prof.beta_trajectory == "sampled"
    sampled = prof.meta["acceptance"]["sampled"]
    assert sampled["temperatures"] == [0.5, 1.0] and set(sampled["tokens"]) == {"0.5", "1"}
    assert prof.sampled_acceptance["prompt_id"].nunique() == 3
    # each draft's confidence along the sampled trajectories, so a confidence stop prices at T too
    conf = prof.sampled_acceptance["confidence"]
    assert conf.between(0, 1).all() and ((conf * 1000).round() - conf * 1000).abs().max() < 1e-6
    assert prof.has_confidence("shared", 0.5) and prof.has_confidence("shared", 1.0)
    assert "sampled decoding: beta along sampled trajectories at T = 0.5, 1" in capsys.readouterr().out
    # a bad list is one line, exit 2
    rc = main(["profile", "--model", "tiny-llama", "--temperatures", "0.7,-1", "--out", str(tmp_path / "bad")])
    err = capsys.readouterr().err
    assert rc == 2 and "--temperatures" in err and len(err.strip().splitlines()) == 1
    assert json.loads((out / "profile.json").read_text())["acceptance"]["temperature"] == 1.0  # legacy kept


def test_several_trajectories_per_prompt_are_averaged_position_by_position(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PPSD_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "prof"
    rc = main(["profile", "--model", "tiny-llama", "--limit", "2", "--max-new-tokens", "6", "--skip-latency",
               "--no-hop", "--temperatures", "1.0", "--sampled-trajectories", "3", "--out", str(out)])
    assert rc == 0
    prof = load_profile(out)
    sampled = prof.meta["acceptance"]["sampled"]
    assert sampled["trajectories"] == 3
    raw = prof.sampled_acceptance
    assert sorted(raw["trajectory"].unique()) == [0, 1, 2]
    assert ((raw["beta"] * 1000).round() - raw["beta"] * 1000).abs().max() < 1e-6  # written to 3 decimals
    assert sampled["tokens"]["1"] == int(raw[raw["exit_layer"] == 1].shape[0])  # every trajectory's tokens
    # the trajectories are different samples (seeds sample_seed, +1, +2) ...
    one = raw[(raw["exit_layer"] == 1)]
    per_traj = [tuple(g.sort_values(["prompt_id", "position"])["beta"].round(4)) for _, g in one.groupby("trajectory")]
    assert len(set(per_traj)) == 3
    # ... and a prediction reads each position's mean over them
    rows = prof.beta_rows(1.0)
    assert len(rows) == raw.groupby(["prompt_id", "exit_layer", "position"]).ngroups
    pid = str(raw["prompt_id"].iloc[0])
    want = raw[(raw["prompt_id"] == pid) & (raw["exit_layer"] == 2) & (raw["position"] == 0)]["beta"].mean()
    got = rows[(rows["prompt_id"] == pid) & (rows["exit_layer"] == 2) & (rows["position"] == 0)]["beta"]
    assert float(got.iloc[0]) == pytest.approx(float(want), abs=1e-6)
    # trajectory 0 is what one trajectory with the same seed samples
    rc = main(["profile", "--model", "tiny-llama", "--limit", "2", "--max-new-tokens", "6", "--skip-latency",
               "--no-hop", "--temperatures", "1.0", "--out", str(tmp_path / "one")])
    assert rc == 0
    single = load_profile(tmp_path / "one").sampled_acceptance
    assert set(single["trajectory"]) == {0}  # an older file without the column reads as trajectory 0
    a = raw[raw["trajectory"] == 0].sort_values(["prompt_id", "exit_layer", "position"])["beta"].to_numpy()
    b = single.sort_values(["prompt_id", "exit_layer", "position"])["beta"].to_numpy()
    np.testing.assert_allclose(a, b, atol=1e-6)
    capsys.readouterr()
    rc = main(["profile", "--model", "tiny-llama", "--temperatures", "1.0", "--sampled-trajectories", "0",
               "--out", str(tmp_path / "bad")])
    err = capsys.readouterr().err
    assert rc == 2 and "--sampled-trajectories" in err and len(err.strip().splitlines()) == 1
