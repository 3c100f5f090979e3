"""bench/piece_drift.py: a decode step's pieces re-timed against a profile, and its bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import piece_drift as pd_

ROOT = Path(__file__).resolve().parents[1]


class _Profile:
    """The pieces' prices, as a profile gives them (ms)."""

    def __init__(self, layer_ms, head_ms):
        self.context_values = [64]
        self.num_layers = 2
        self.piece_calibration = 1.0  # tables as timed (no paired whole step)
        self._layer, self._head = layer_ms, head_ms

    def embed_ms(self, n):
        return 0.1

    def head_ms(self, n):
        return self._head

    def layer_ms(self, layer, n, context):
        return self._layer


@pytest.fixture(scope="module")
def adapter():
    from runtime.llm import load_model

    return load_model("tiny-llama")


def test_the_profiles_side_and_every_piece_are_read(adapter):
    got = pd_.piece_drift(_Profile(1.0, 2.0), adapter, repeats=3, warmup=1)
    assert got["context"] == 64 and got["repeats"] == 3
    assert {k: v["profile_ms"] for k, v in got["pieces"].items()} == {"layers": 2.0, "head": 2.0, "embedding": 0.1}
    assert all(v["now_ms"] > 0 for v in got["pieces"].values())


def test_pieces_that_drift_apart_are_flagged():
    then = {"layers": 48.1, "head": 12.6, "embedding": 0.07}
    apart = pd_.summarize(then, {"layers": 42.8, "head": 8.1, "embedding": 0.07}, 64, 40)  # 2026-12-03
    assert apart["pieces"]["head"]["drift_pct"] == pytest.approx(-35.71, abs=0.01)
    assert apart["flagged"] and apart["apart_pct"] == pytest.approx(24.7, abs=0.1) and "re-profile" in apart["note"]
    alike = pd_.summarize(then, {"layers": 40.0, "head": 10.5, "embedding": 0.07}, 64, 40)  # both ~-17%
    assert not alike["flagged"] and "hold" in alike["note"]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bench.piece_drift", "--profile", str(tmp_path / "none")],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "bench.piece_drift", "--profile", "x", "--repeats", "1"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "--repeats" in r.stderr and not r.stdout


def test_json_is_alone_on_stdout():
    r = subprocess.run([sys.executable, "-m", "bench.piece_drift", "--profile",
                        str(ROOT / "examples" / "smollm2-135m-cpu"), "--repeats", "3", "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out["pieces"]) == {"layers", "head", "embedding"} and out["pieces"]["head"]["now_ms"] > 0
