"""Every simulator figure recorded in tests/golden_sim.json (before the schemes got one home each)
is reproduced to 1e-9: sweeps, head comparisons, event and fast simulations, closed forms, on the
committed profile (with pass jitter) and on synthetic ones (hops, co-run slowdown, a second exit
head). A timing-model change that moves any figure fails here; re-record only on purpose
(`python tests/golden_cases.py --write`) and say why in the commit."""

from __future__ import annotations

import json

import pytest

import golden_cases as gc


@pytest.fixture(scope="module")
def golden():
    return json.loads(gc.GOLDEN.read_text())


@pytest.fixture(scope="module")
def computed(tmp_path_factory):
    return gc.record(tmp_path_factory.mktemp("golden"))


def _diff(want: dict, got: dict) -> str:
    keys = [k for k in want if not gc.close(want[k], got.get(k))]
    return ", ".join(f"{k}: want {want[k]!r} got {got.get(k)!r}" for k in keys[:4])


@pytest.mark.parametrize("section", ["sweeps", "simulations", "closed_forms", "batches"])
def test_figures_match_the_golden_record(golden, computed, section):
    assert len(golden[section]) == len(computed[section])
    for want, got in zip(golden[section], computed[section]):
        case = {k: want[k] for k in want if k in ("profile", "kwargs", "plan", "alpha", "case")}
        if section == "sweeps":
            rows_w, rows_g = gc.rows(want["results"]), gc.rows(got["results"])
            assert [r["label"] for r in rows_w] == [r["label"] for r in rows_g], case
            for w, g in zip(rows_w, rows_g):
                assert gc.close(w, g), (case, w["label"], _diff(w, g))
        elif section == "simulations":
            assert gc.close(want["result"], got["result"]), (case, _diff(want["result"], got["result"]))
        elif section == "batches":
            assert gc.close(want["figures"], got["figures"]), (case, _diff(want["figures"], got["figures"]))
        else:
            assert gc.close(want["figures"], got["figures"]), (case, _diff(want["figures"], got["figures"]))


def test_head_ranking_and_comparison_match_the_golden_record(golden, computed):
    w, g = gc.rows(golden["heads"]["merged"]), gc.rows(computed["heads"]["merged"])
    assert [r["label"] for r in w] == [r["label"] for r in g]
    for a, b in zip(w, g):
        assert gc.close(a, b), (a["label"], _diff(a, b))
    assert gc.close(golden["heads"]["comparison"], computed["heads"]["comparison"])


def test_the_comparison_can_fail(golden):
    # the check is not vacuous: a figure moved by one part in 1e8 is caught
    sim = golden["simulations"][3]["result"]
    moved = dict(sim, time_s=sim["time_s"] * (1 + 1e-8))
    assert not gc.close(sim, moved)
