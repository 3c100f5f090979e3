"""sim/batch/sweep.py and `ppsd plan --batch B`: EESD plans ranked at a batch size against AR at it, the
best plan by batch size and the batch size up to which speculation pays."""

from __future__ import annotations

import json

import pytest

from ppsd.cli import main
from ppsd.profile.synthetic import write_synthetic_profile
from sim.batch.sweep import BatchPoint, curve, pays_up_to, predict, rank

LAYERS = 8


@pytest.fixture(scope="module")
def batched(tmp_path_factory):
    # a pass costs as one up to 4 tokens over the batch: speculation's extra tokens are free at batch 1 only
    return write_synthetic_profile(tmp_path_factory.mktemp("b"), alpha_by_exit=lambda e: min(0.95, 0.2 + 0.15 * e),
                                   num_layers=LAYERS, layer_ms=1.0, head_ms=0.5, embed_ms=0.1, batch_free_tokens=4)


def _point(batch: int, speedup: float) -> BatchPoint:
    return BatchPoint("p", 1, 1, "shared", batch, speedup, 1.0, speedup, 1.0, 1.0)


def test_pays_up_to_the_last_size_before_the_first_loss():
    assert pays_up_to([_point(1, 1.5), _point(2, 1.2), _point(4, 0.9), _point(8, 1.1)]) == 2
    assert pays_up_to([_point(1, 0.9)]) is None
    assert pays_up_to([_point(1, 1.3), _point(8, 1.01)]) == 8


def test_ranked_best_first_and_worse_under_load(batched):
    one, eight = rank(batched, 1), rank(batched, 8)
    assert [p.speedup_vs_ar for p in one] == sorted((p.speedup_vs_ar for p in one), reverse=True)
    assert eight[0].speedup_vs_ar < one[0].speedup_vs_ar
    assert one[0].speedup_vs_ar > 1.0


def test_the_curve_has_one_point_per_measured_batch_size(batched):
    points = curve(batched, gammas=range(1, 4), exits=[5, 7])
    assert [p.batch for p in points] == [1, 2, 4, 8]
    assert points[0].speedup_vs_ar > points[-1].speedup_vs_ar


def test_predict_names_its_plan_and_acceptance(batched):
    p = predict(batched, 7, 2, 4)
    assert p.plan == "EESD E=7 γ=2" and p.batch == 4
    assert 0.0 < p.acceptance_rate < 1.0 and p.ms_per_token > 0


def test_plan_batch_prints_json_alone(batched, capsys):
    assert main(["plan", "--profile", str(batched.path), "--batch", "4", "--max-draft-len", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["batch"] == 4 and [p["batch"] for p in doc["curve"]] == [1, 2, 4, 8]
    assert doc["plans"][0]["speedup_vs_ar"] >= doc["plans"][-1]["speedup_vs_ar"]
    assert doc["eesd_pays_up_to_batch"] in (None, 1, 2, 4, 8)


def test_plan_batch_says_up_to_which_batch_eesd_pays(batched, capsys):
    assert main(["plan", "--profile", str(batched.path), "--batch", "2", "--max-draft-len", "3"]) == 0
    out = capsys.readouterr().out
    assert "EESD pays up to batch" in out and "best EESD plan at each batch size" in out


def test_plan_batch_refuses_a_size_the_profile_does_not_hold(batched, capsys):
    assert main(["plan", "--profile", str(batched.path), "--batch", "16"]) == 2
    err = capsys.readouterr().err
    assert "ppsd profile add-batch" in err and "Traceback" not in err
