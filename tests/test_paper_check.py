"""bench/paper_check.py: LayerSkip's self-speculative speedups reproduced from its own acceptance."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def pc():
    from bench import paper_check

    return paper_check


@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.8, 0.95])
@pytest.mark.parametrize("gamma", [1, 4, 6, 12])
def test_acceptance_rate_to_alpha_round_trip(pc, alpha, gamma):
    accepted = alpha * (1 - alpha ** gamma) / (1 - alpha)  # E[accepted drafts] under i.i.d. acceptance
    assert pc.alpha_from_acceptance_rate(accepted / gamma, gamma) == pytest.approx(alpha, abs=1e-6)


def test_acceptance_rate_of_one_draft_is_alpha(pc):
    assert pc.alpha_from_acceptance_rate(0.37, 1) == pytest.approx(0.37, abs=1e-9)


def test_layerskip_reproduction(pc, tmp_path):
    res = pc.layerskip_check(tmp_path)
    judged = [r for r in res["rows"] if r["decode_dominated"]]
    assert len(judged) >= 3
    for r in res["rows"]:
        assert r["paper_speedup"] == pytest.approx(r["ss_tokens_per_s"] / r["ar_tokens_per_s"])
        assert r["error_pct"] == pytest.approx((r["predicted_speedup"] - r["paper_speedup"]) / r["paper_speedup"] * 100)
        assert r["tokens_per_round"] == pytest.approx(1 + r["acceptance_rate"] * r["draft_len"])
    assert res["within_tolerance"] and all(abs(r["error_pct"]) <= 15.0 for r in judged)
    # more acceptance at the same plan, more predicted speedup
    same_plan = sorted((r for r in judged if (r["exit_layer"], r["draft_len"]) == (8, 6)),
                       key=lambda r: r["acceptance_rate"])
    preds = [r["predicted_speedup"] for r in same_plan]
    assert preds == sorted(preds)
