"""sim/batch/sweep.py and `ppsd plan --batch B`: EESD and two-stage PPSD plans ranked at a batch size against
AR at it, each scheme's best plan by batch size and the batch size up to which each pays."""

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


def test_ppsd_plans_rank_beside_eesd_and_have_their_own_curve(batched):
    from ppsd.modes import Mode

    ranked = rank(batched, 2, gammas=range(1, 3))
    assert {p.scheme for p in ranked} == {"eesd", "ppsd"}
    ppsd = [p for p in ranked if p.scheme == "ppsd"]
    assert all(p.plan.startswith("PPSD E=") and p.plan.endswith("k=2") and p.draft_len is None for p in ppsd)
    points = curve(batched, gammas=range(1, 3), scheme=Mode.PPSD)
    assert [p.batch for p in points] == [1, 2, 4, 8] and all(p.scheme == "ppsd" for p in points)
    one = predict(batched, 5, None, 1, scheme=Mode.PPSD)
    assert 0.0 < one.acceptance_rate < 1.0 and one.plan == "PPSD E=5 k=2"


def test_predict_names_its_plan_and_acceptance(batched):
    p = predict(batched, 7, 2, 4)
    assert p.plan == "EESD E=7 γ=2" and p.batch == 4
    assert 0.0 < p.acceptance_rate < 1.0 and p.ms_per_token > 0


def test_plan_batch_prints_json_alone(batched, capsys):
    assert main(["plan", "--profile", str(batched.path), "--batch", "4", "--max-draft-len", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["batch"] == 4 and [p["batch"] for p in doc["curve"]["eesd"]] == [1, 2, 4, 8]
    assert [p["batch"] for p in doc["curve"]["ppsd"]] == [1, 2, 4, 8]
    assert doc["plans"][0]["speedup_vs_ar"] >= doc["plans"][-1]["speedup_vs_ar"]
    assert {p["scheme"] for p in doc["plans"]} == {"eesd", "ppsd"}
    assert doc["eesd_pays_up_to_batch"] in (None, 1, 2, 4, 8) and doc["ppsd_pays_up_to_batch"] in (None, 1, 2, 4, 8)


def test_plan_batch_says_up_to_which_batch_eesd_pays(batched, capsys):
    assert main(["plan", "--profile", str(batched.path), "--batch", "2", "--max-draft-len", "3"]) == 0
    out = capsys.readouterr().out
    assert "EESD pays up to batch" in out and "best EESD plan at each batch size" in out
    assert "best PPSD plan at each batch size" in out and "PPSD E=" in out


def test_plan_batch_between_measured_sizes_says_it_is_interpolated(batched, capsys):
    """B = 3 lies between the measured 2 and 4: priced from pass times interpolated between them, and said so
    in the text (the header and the verdict) and in --json; a measured size carries no such label."""
    assert main(["plan", "--profile", str(batched.path), "--batch", "3", "--max-draft-len", "3"]) == 0
    out = capsys.readouterr().out
    assert "batch 3 was not measured: its pass times are interpolated linearly between the measured batches 2 and 4" \
        in out
    assert "verdict: at batch 3 (interpolated between the measured batches 2 and 4)" in out
    assert main(["plan", "--profile", str(batched.path), "--batch", "3", "--max-draft-len", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["interpolated"] is True and doc["measured_batch_sizes"] == [1, 2, 4, 8]
    assert main(["plan", "--profile", str(batched.path), "--batch", "4", "--max-draft-len", "3"]) == 0
    assert "interpolated" not in capsys.readouterr().out


def test_plan_batch_refuses_a_size_the_profile_does_not_hold(batched, capsys):
    assert main(["plan", "--profile", str(batched.path), "--batch", "16"]) == 2
    err = capsys.readouterr().err
    assert "ppsd profile add-batch" in err and "Traceback" not in err


def test_ppsd_points_are_also_held_against_ar_on_the_two_cores_they_use(batched, tmp_path):
    """With AR's two-thread pass timed (`two_threads_ratio`), a PPSD point carries its same-budget speedup
    against the faster AR on two cores; without it, none; EESD (one core) never."""
    import shutil

    from ppsd.modes import Mode
    from ppsd.profile import load_profile

    assert predict(batched, 5, None, 2, scheme=Mode.PPSD).speedup_vs_ar_tp is None
    folder = tmp_path / "two"
    shutil.copytree(batched.path, folder)
    doc = json.loads((folder / "profile.json").read_text())
    block = doc["latency"]["batch"]
    block["two_threads_ratio"] = [[0.6] * len(block["context_values"]) for _ in block["batch_sizes"]]
    (folder / "profile.json").write_text(json.dumps(doc))
    two = load_profile(folder)
    p = predict(two, 5, None, 2, scheme=Mode.PPSD)
    assert p.ar_both_cores_tokens_per_s == pytest.approx(p.ar_tokens_per_s / 0.6, rel=1e-6)
    assert p.speedup_vs_ar_tp == pytest.approx(p.speedup_vs_ar * 0.6, rel=1e-6)
    assert predict(two, 5, 2, 2).speedup_vs_ar_tp is None
    # two threads slower than one: the faster AR, the one thread, is the baseline
    block["two_threads_ratio"] = [[1.3] * len(block["context_values"]) for _ in block["batch_sizes"]]
    (folder / "profile.json").write_text(json.dumps(doc))
    slow = predict(load_profile(folder), 5, None, 2, scheme=Mode.PPSD)
    assert slow.speedup_vs_ar_tp == pytest.approx(slow.speedup_vs_ar, rel=1e-6)
