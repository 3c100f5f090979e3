"""A prompt set's acceptance shift (sim/intervals/shift.py): estimated from the predicting prompts
themselves (between categories, or between blocks in the profile's order), carried by every interval,
and honest on sets drawn from a workload that moved."""

import numpy as np
import pandas as pd
import pytest

from ppsd.exit_heads import SHARED
from ppsd.profile import load_profile, save_profile
from ppsd.profile.synthetic import synthetic_meta
from sim import intervals as iv
from sim.api import resolve_plan
from sim.intervals import shift as sh
from sim.plan import Plan

N = 12


def _profile(path, prompt_alphas, categories, tokens=64, seed=0):
    """A synthetic profile: prompt i matches at exit 6 with probability prompt_alphas[i], in the order given."""
    meta = synthetic_meta(num_layers=N, layer_ms=1.0, head_ms=2.0, hop_ms=0.05)
    rng = np.random.default_rng(seed)
    rows, gens = [], []
    for p, (a, cat) in enumerate(zip(prompt_alphas, categories)):
        pid = f"q{p:03d}"
        gens.append({"prompt_id": pid, "category": cat, "prompt": f"prompt {p}", "prompt_tokens": [1] * 40,
                     "token_ids": [0] * tokens})
        for e in (3, 6, 9):
            m = rng.random(tokens) < a
            rows += [(SHARED, pid, cat, e, i, int(m[i]), float(a)) for i in range(tokens)]
    acc = pd.DataFrame(rows, columns=["head", "prompt_id", "category", "exit_layer", "position", "match", "beta"])
    meta["acceptance"] = {"temperature": 0.0, "max_new_tokens": tokens, "prompt_set": "test",
                          "num_prompts": len(prompt_alphas), "categories": sorted(set(categories)), "heads": [SHARED]}
    save_profile(path, meta, acceptance=acc, generations=gens)
    return load_profile(path)


def test_tau_is_the_spread_between_groups_beyond_their_prompts():
    rng = np.random.default_rng(0)
    # 8 groups of 6 prompts: group means spread by sd 0.8 on the logit scale, prompts by 0.3 around them
    means = rng.normal(0.0, 0.8, 8)
    logits = np.concatenate([m + rng.normal(0.0, 0.3, 6) for m in means])
    groups = [list(range(6 * g, 6 * g + 6)) for g in range(8)]
    assert sh.between_groups_tau(logits, groups) == pytest.approx(np.std(means, ddof=1), rel=0.25)
    # groups drawn alike: what spread their means show is their prompts' own, and τ is (near) zero
    alike = rng.normal(0.0, 0.5, 48)
    assert sh.between_groups_tau(alike, groups) < 0.15
    assert sh.between_groups_tau(alike, groups[:1]) == 0.0


def test_estimate_reads_categories_for_the_pool_and_blocks_within_a_stratum():
    logits = np.array([-2.0, -2.1, -1.9, 1.0, 1.1, 0.9, 0.0, 0.1, -0.1])
    cats = ["a", "a", "a", "b", "b", "b", "c", "c", "c"]
    pooled = sh.estimate(logits, range(9), cats, None, pooled=True)
    assert pooled.source == sh.CATEGORIES and pooled.groups == 3 and pooled.tau > 1.0
    # within one stratum: blocks in the profile's order; 3 prompts cannot make three blocks
    assert sh.estimate(logits, [0, 1, 2], cats, None, pooled=False).source == sh.NONE
    # the profile's order decides the blocks: ordered by group, the blocks differ; interleaved, they do not
    by_group = sh.estimate(logits, range(9), None, list(range(9)), pooled=True)
    mixed = sh.estimate(logits, range(9), None, [0, 3, 6, 1, 4, 7, 2, 5, 8], pooled=True)
    assert by_group.source == sh.BLOCKS and by_group.tau > 1.0
    assert mixed.tau < 0.3
    assert "categories" in pooled.words() and "order" in by_group.words()


def test_shifted_moves_a_greedy_trace_by_flipping_and_beta_on_its_logit():
    rng = np.random.default_rng(1)
    trace = (rng.random(20000) < 0.4).astype(float)
    up = sh.shifted(trace, 1.0, rng, sampled=False)
    down = sh.shifted(trace, -1.0, rng, sampled=False)
    expect_up = 1 / (1 + np.exp(-(np.log(0.4 / 0.6) + 1.0)))
    assert set(np.unique(up)) <= {0.0, 1.0}
    assert up.mean() == pytest.approx(expect_up, abs=0.01)
    assert down.mean() == pytest.approx(1 / (1 + np.exp(-(np.log(0.4 / 0.6) - 1.0))), abs=0.01)
    assert np.all(up[trace == 1.0] == 1.0) and np.all(down[trace == 0.0] == 0.0)  # only one kind flips
    beta = np.full(5, 0.5)
    assert sh.shifted(beta, np.log(3.0), rng, sampled=True) == pytest.approx(np.full(5, 0.75))
    assert sh.shifted(trace, 0.0, rng, sampled=False) is trace


def test_an_interval_widens_when_the_profiles_categories_draft_apart(tmp_path):
    cats = [c for c in ("a", "b", "c", "d") for _ in range(4)]
    apart = _profile(tmp_path / "apart", [a for a in (0.2, 0.45, 0.65, 0.85) for _ in range(4)], cats)
    alike = _profile(tmp_path / "alike", [0.55] * 16, cats)
    plan = resolve_plan(Plan("ppsd", 6, stages=2), alike)
    widths = {}
    for name, prof in (("apart", apart), ("alike", alike)):
        traces = iv.prompt_traces(prof, 6)
        shift = traces.shift(range(len(traces)))
        interval = iv.replay_interval(prof, plan, traces, prompts_n=8, draws=200, seed=2)
        widths[name] = (interval.hi - interval.lo, shift)
        assert interval.shift == shift
    assert widths["apart"][1].tau > 0.5 and widths["alike"][1].tau < 0.2
    assert widths["apart"][0] > 1.5 * widths["alike"][0]


def test_intervals_hold_sets_from_a_workload_that_moved(tmp_path):
    """Profile 24 prompts of a task whose prompts come in clusters that draft alike (in file order, six
    clusters of four), then measure sets of 8 from clusters the profile never saw: the 90% intervals
    hold about 90% of them, where the bootstrap over the profile's prompts alone held far fewer."""
    rng = np.random.default_rng(5)
    cluster_mean = rng.normal(0.0, 0.7, 40)  # logit of each cluster's acceptance

    def alphas(clusters):
        return [float(1 / (1 + np.exp(-(cluster_mean[c] + rng.normal(0, 0.2))))) for c in clusters for _ in range(4)]

    prof = _profile(tmp_path / "p", alphas(range(6)), ["task"] * 24)
    plan = resolve_plan(Plan("eesd", 6, draft_len=3), prof)
    traces = iv.prompt_traces(prof, 6)
    held, held_no_shift = 0, 0
    sets = 30
    for s in range(sets):
        clusters = [6 + 2 * s, 7 + 2 * s] if 7 + 2 * s < 40 else [6 + (2 * s) % 34, 7 + (2 * s) % 34]
        truth = np.mean(alphas(clusters))
        a_lo, a_hi = _alpha_interval(traces, 8, shift=True, seed=s)
        b_lo, b_hi = _alpha_interval(traces, 8, shift=False, seed=s)
        held += a_lo <= truth <= a_hi
        held_no_shift += b_lo <= truth <= b_hi
    assert traces.shift(range(24)).source == sh.BLOCKS
    assert held / sets >= 0.75
    assert held / sets > held_no_shift / sets


def _alpha_interval(traces, n, shift: bool, seed: int, draws: int = 2000) -> tuple[float, float]:
    """The 90% interval of a set's pooled acceptance, as the sweep engine draws it (`_alpha_draws`)."""
    from sim.intervals.predict import _alpha_draws

    rng = np.random.default_rng(seed)
    a = _alpha_draws(traces, n, draws, rng, 1.0, traces.shift(range(len(traces))) if shift else None)
    return float(np.quantile(a, 0.05)), float(np.quantile(a, 0.95))
