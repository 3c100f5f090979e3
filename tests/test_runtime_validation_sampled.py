"""validation/sampled.py: `ppsd validate --temperature T` on the tiny model: sampled runs over
several seeds beside the prediction from beta at exactly T, and the refusals."""

from __future__ import annotations

import json

import pytest

from conftest import make_tiny_profile
from ppsd.cli import main
from ppsd.profile import load_profile

TINY = ["profile", "--model", "tiny-llama", "--limit", "3", "--max-new-tokens", "8", "--n-values", "1,2,4",
        "--context-values", "8,32", "--repeats", "2", "--warmup", "1", "--corun-max", "1", "--no-hop",
        "--thread-counts", "1", "--temperatures", "0.8"]


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    return make_tiny_profile(tmp_path_factory, "vsampled", TINY)


def test_sampled_validation_reports_seeds_acceptance_and_temperature(tiny_profile, tmp_path, capsys):
    out = tmp_path / "val"
    rc = main(["validate", "--profile", str(tiny_profile), "--plans", "eesd:2:3;ppsd:3:2", "--temperature", "0.8",
               "--seeds", "2", "--repeats", "1", "--warmup", "0", "--cores", "1", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "validation.json").read_text())
    assert doc["temperature"] == 0.8 and doc["seeds"] == [0, 1] and doc["beta_trajectory"] == "sampled"
    assert doc["out_of_sample"] is False
    assert [r["mode"] for r in doc["rows"]] == ["ar", "eesd", "ppsd"]
    # AR first, then each plan and AR again, for every seed
    assert len(doc["ar_tokens_per_s_runs"]) == 2 * 3
    prof = load_profile(tiny_profile)
    for r in doc["rows"][1:]:
        seeds = r["measured_speedup_seeds"]
        assert len(seeds) == 2 and all(s > 0 for s in seeds)
        assert r["measured_speedup"] == pytest.approx(sorted(seeds)[0] + (sorted(seeds)[1] - sorted(seeds)[0]) / 2,
                                                      rel=1e-3)  # the median of the seeds
        assert 0 <= r["measured_acceptance_rate"] <= 1 and 0 <= r["predicted_acceptance_rate"] <= 1
        assert len(r["measured_acceptance_rate_seeds"]) == 2
        lo, hi = r["predicted_speedup_seed_range"]
        assert lo <= r["predicted_speedup"] <= hi
        assert r["outputs_match_ar"] is None  # sampled text differs from AR's run by construction
        # the prediction used β at T = 0.8 along the sampled trajectories: its acceptance is near their mean β
        mean_beta = prof.beta_by_exit(0.8)[r["exit_layer"]]
        assert r["predicted_acceptance_rate"] == pytest.approx(mean_beta, abs=0.25)
    errs = [abs(r["predicted_acceptance_rate"] - r["measured_acceptance_rate"]) for r in doc["rows"][1:]]
    assert doc["acceptance_error_max_abs"] == pytest.approx(max(errs), abs=1e-3)
    text = capsys.readouterr().out
    assert "sampled at T=0.8 over seeds [0, 1]" in text and "acceptance-rate error" in text


@pytest.mark.parametrize("extra,needle", [
    (["--temperature", "0.5"], "0 (greedy), 0.8, not at 0.5"),
    (["--seeds", "3"], "--seeds applies to sampled validation only"),
    (["--temperature", "0.8", "--force-trace"], "--force-trace"),
    (["--temperature", "0.8", "--seeds", "0"], "--seeds 0"),
])
def test_sampled_validation_refuses_bad_input_in_one_line(tiny_profile, tmp_path, capsys, extra, needle):
    rc = main(["validate", "--profile", str(tiny_profile), "--out", str(tmp_path / "v"), *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and needle in err and len(err.splitlines()) == 1
    assert not (tmp_path / "v").exists()


def test_emulated_validation_refuses_a_temperature(tiny_profile, tmp_path, capsys):
    rc = main(["validate", "--emulate", str(tiny_profile), "--temperature", "0.8", "--out", str(tmp_path / "v")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--emulate" in err and len(err.splitlines()) == 1


def test_sampled_split_reports_out_of_sample_and_in_sample_apart(tiny_profile, tmp_path, capsys):
    """--split with --temperature: the prediction uses only the prediction prompts' β, the rows also
    carry what the measured prompts' own β predicts, and the acceptance errors are reported apart."""
    out = tmp_path / "split"
    rc = main(["validate", "--profile", str(tiny_profile), "--split", "0.5", "--plans", "ppsd:3:2",
               "--temperature", "0.8", "--seeds", "1", "--repeats", "1", "--warmup", "0", "--cores", "1",
               "--draws", "20", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "validation.json").read_text())
    assert doc["out_of_sample"] is True and doc["temperature"] == 0.8
    r = doc["rows"][1]
    assert 0 <= r["predicted_acceptance_rate_in_sample"] <= 1 and r["predicted_speedup_in_sample"] > 0
    assert doc["acceptance_error_in_sample_max_abs"] == pytest.approx(
        abs(r["predicted_acceptance_rate_in_sample"] - r["measured_acceptance_rate"]), abs=1e-3)
    assert doc["breakdown"]["in_sample"]["plans"] == 1
    assert "predicted in sample" in capsys.readouterr().out
