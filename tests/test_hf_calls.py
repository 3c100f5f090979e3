"""bench/hf_calls.py: transformers' assisted generation timed forward call by forward call and priced from a
profile, on tiny-llama."""

from __future__ import annotations

import json

import pytest

from conftest import make_tiny_profile


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    return make_tiny_profile(tmp_path_factory, "hf-calls", [
        "profile", "--model", "tiny-llama", "--limit", "2", "--max-new-tokens", "8", "--n-values", "1,2,4",
        "--context-values", "8,32", "--repeats", "2", "--warmup", "1", "--corun-max", "1", "--no-hop"])


def test_every_call_is_timed_and_priced(tiny_profile, tmp_path, capsys):
    from bench import hf_calls

    out = tmp_path / "calls.json"
    assert hf_calls.main(["--profile", str(tiny_profile), "--exits", "2", "--gammas", "1,2", "--prompts", "1",
                          "--max-new-tokens", "8", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    kinds = {(c[0], c[1], c[2], c[3]) for c in doc["calls"]}
    assert (2, 1, 2, 2) in kinds  # the drafter's 2-token re-feed through the first 2 layers
    assert (2, 2, 2, 1) in kinds  # a one-token draft pass
    assert any(c[0] == 0 for c in doc["calls"])  # plain AR beside them
    assert all(c[5] > 0 for c in doc["calls"])  # every call measured
    assert all(c[6] > 0 for c in doc["calls"] if c[4] > 0)  # and every decode call (what is reported) priced
    printed = capsys.readouterr().out
    assert "ratio" in printed and "full rounds" in printed


def test_exits_outside_the_model_are_refused(tiny_profile, capsys):
    from bench import hf_calls

    assert hf_calls.main(["--profile", str(tiny_profile), "--exits", "99"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and len(err.strip().splitlines()) == 1
