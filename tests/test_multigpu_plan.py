"""Multi-GPU PPSD planning on estimated (analytic) profiles: the planner answers "how many GPUs and
which exit layer", stage counts above the profile's GPU count are refused (one line, exit 2), and the
interconnect's hop cost reaches the prediction. Torch-free, a few seconds."""

from __future__ import annotations

import json
import re

import pytest

from ppsd.cli import main
from profiler.estimated_profile import write_analytic_profile
from ppsd.profile.synthetic import write_synthetic_profile


@pytest.fixture(scope="module")
def curve(tmp_path_factory):
    # PPSD-paper-like acceptance: high at a quarter depth, rising with depth
    path = tmp_path_factory.mktemp("curve") / "alpha.csv"
    path.write_text("relative_depth,alpha\n0.125,0.55\n0.25,0.80\n0.5,0.88\n0.875,0.95\n")
    return path


@pytest.fixture(scope="module")
def est4(tmp_path_factory, curve):
    d = tmp_path_factory.mktemp("est") / "vicuna7b-h100-4"
    write_analytic_profile(d, "vicuna-7b", "h100-sxm", alpha_curve=curve, gpu_count=4, interconnect="nvlink")
    return str(d)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_plan_answers_how_many_gpus_and_which_exit(est4, capsys):
    assert main(["plan", "--profile", est4, "--tokens", "600", "--top", "3"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("recommendation:"))
    m = re.search(r"use (\d+) GPUs with exit layer (\d+): PPSD with (\d+) stages on (\d+) GPUs", line)
    assert m, line
    k, e, stages, on = map(int, m.groups())
    assert k == stages == on and 2 <= k <= 4 and 1 <= e < 32
    assert "tokens/s" in line and "× AR" in line
    # high acceptance, cheap NVLink hops: a deep pipeline pays (the paper's 2.5× regime)
    speed = float(re.search(r"([\d.]+)× AR", line).group(1))
    assert speed > 1.8, line


def test_plan_default_devices_is_the_gpu_count(est4, capsys):
    assert main(["plan", "--profile", est4, "--tokens", "300", "--max-draft-len", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ks = {r["stages"] for r in rows if r["mode"] == "ppsd"}
    assert max(ks) == 4


def test_stage_count_above_gpu_count_is_refused(est4, capsys):
    assert main(["plan", "--profile", est4, "--devices", "6"]) == 2
    err = _one_error_line(capsys)
    assert "--devices 6" in err and "4 GPUs" in err
    assert main(["simulate", "--profile", est4, "--exit", "8", "--stages", "5"]) == 2
    err = _one_error_line(capsys)
    assert "5 stages" in err and "plans for 4" in err
    # stages sharing GPUs fit: 6 stages on 3 GPUs
    assert main(["simulate", "--profile", est4, "--exit", "6", "--stages", "6", "--placement", "0,0,1,1,2,2",
                 "--engine", "fast", "--tokens", "200"]) == 0
    capsys.readouterr()


def test_measured_and_synthetic_profiles_keep_their_limits(tmp_path, capsys):
    syn = tmp_path / "syn"
    write_synthetic_profile(syn, alpha_by_exit=lambda e: 0.5, num_layers=12)
    assert main(["simulate", "--profile", str(syn), "--exit", "3", "--stages", "6", "--engine", "fast"]) == 0
    assert main(["plan", "--profile", str(syn), "--tokens", "200", "--max-draft-len", "2"]) == 0
    out = capsys.readouterr().out
    rec = next(ln for ln in out.splitlines() if ln.startswith("recommendation:"))
    assert "GPUs" not in rec  # not a GPU profile: the simulator's own words


def test_interconnect_hop_cost_reaches_the_prediction(tmp_path, curve, capsys):
    tps = {}
    for link in ("nvlink", "ethernet"):
        d = tmp_path / link
        prof = write_analytic_profile(d, "vicuna-7b", "h100-sxm", alpha_curve=curve, gpu_count=4, interconnect=link)
        assert prof.meta["hardware"]["interconnect"] == link
        assert main(["simulate", "--profile", str(d), "--exit", "8", "--stages", "4", "--engine", "fast",
                     "--tokens", "500", "--json"]) == 0
        r = json.loads(capsys.readouterr().out)
        tps[link] = (r["tokens_per_s"], prof.hop_ms())
    assert tps["ethernet"][1] > tps["nvlink"][1] > 0
    assert tps["ethernet"][0] < tps["nvlink"][0]


def test_weights_too_big_for_one_gpu_are_named(tmp_path, curve, capsys):
    d = tmp_path / "l70"
    write_analytic_profile(d, "llama-2-70b", "a100-80gb", alpha_curve=curve, gpu_count=1)
    assert main(["plan", "--profile", str(d), "--tokens", "200", "--max-draft-len", "2"]) == 0
    rec = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("recommendation:"))
    assert "use 1 GPU" in rec and "weights need ≥ 2 GPUs" in rec
