"""`ppsd run` under torchrun for real: two ranks on this machine (gloo over loopback), one PPSD stage
each. Rank 0 measures AR in the same run and reports; the one JSON document on stdout is rank 0's,
its outputs equal AR's. Bad requests stay one-line UserErrors (exit 2) on every rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ["-m", "ppsd", "run", "--model", "tiny-llama", "--mode", "ppsd", "--exit", "3", "--max-new-tokens", "8",
       "--limit", "2", "--repeats", "1", "--warmup", "0", "--json"]


def _torchrun(nproc: int, *ppsd_args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env.pop("PPSD_PROGRESS", None)
    env.pop("PYTHONPATH", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           *RUN, *ppsd_args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def two_ranks() -> subprocess.CompletedProcess:
    return _torchrun(2, "--stages", "2")


def test_torchrun_pipeline_matches_ar_and_prints_one_json_document(two_ranks):
    p = two_ranks
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)  # one document alone on stdout: rank 1 printed nothing, logs went to stderr
    assert r["mode"] == "ppsd" and r["stages"] == 2 and r["exit_layer"] == 3 and r["stage_bounds"] == [0, 3, 6]
    assert r["outputs_match_ar"] is True
    assert isinstance(r["speedup_vs_ar"], float) and r["speedup_vs_ar"] > 0
    assert r["ar_tokens_per_s"] > 0 and r["tokens_per_s"] > 0
    assert r["speedup_vs_ar"] == pytest.approx(r["tokens_per_s"] / r["ar_tokens_per_s"], rel=1e-9)
    assert r["speedup_vs_ar_e2e"] > 0
    assert r["model"] == "tiny-llama" and r["prompts"] == 2 and r["max_new_tokens"] == 8 and r["warmup"] == 0
    assert len(r["stage_busy"]) == 2 and r["tokens"] > 0
    if r.get("budget") is not None:  # the same budget, when this machine's cores give each stage one thread
        assert r["budget_tokens_per_s"] == r["tokens_per_s"] and r["ar_tp_tokens_per_s"] > 0


def test_torchrun_world_must_match_the_stages():
    """Refused before any model is loaded, on every rank: its one line and exit code 2 (torchrun then
    ends the other rank, which may not get to print, and adds its own report)."""
    p = _torchrun(2, "--stages", "3", timeout=120)
    assert p.returncode != 0 and p.stdout == ""
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("ppsd run: error:")]
    assert 1 <= len(errors) <= 2, p.stderr[-3000:]
    assert all("torchrun started 2 process(es) for a 3-stage pipeline" in ln and "--stages 2" in ln for ln in errors)
    assert "exitcode  : 2" in p.stderr  # torchrun's report: the first failure is ppsd's UserError exit
    assert "/runtime/" not in p.stderr and "ppsd/cli.py" not in p.stderr  # no frame of ours: no traceback


def _rank_pids(launcher_pid: int) -> dict[int, int]:
    """RANK -> pid of torchrun's worker processes (read from their environment)."""
    out = {}
    for tid in os.listdir(f"/proc/{launcher_pid}/task"):
        try:
            children = Path(f"/proc/{launcher_pid}/task/{tid}/children").read_text().split()
        except OSError:
            continue
        for pid in map(int, children):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            for kv in env:
                if kv.startswith(b"RANK="):
                    out[int(kv[5:])] = pid
    return out


def test_a_hung_rank_ends_the_run_with_one_line_within_the_stage_timeout():
    """No watchdog under torchrun: the process group's timeout (--stage-timeout) ends a rank that waits
    on a hung peer, with a one-line UserError instead of gloo's traceback."""
    import signal
    import time

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env.pop("PPSD_PROGRESS", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           *RUN[:RUN.index("--max-new-tokens")], "--max-new-tokens", "200", "--limit", "4", "--repeats", "50",
           "--warmup", "0", "--no-ar", "--stages", "2", "--stage-timeout", "4"]
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        pids = {}
        while len(pids) < 2 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.2)
            pids = _rank_pids(p.pid)
        assert len(pids) == 2, "torchrun did not start two ranks"
        time.sleep(6)  # loaded and decoding (or about to be: a hang at the rendezvous counts the same)
        os.kill(pids[1], signal.SIGSTOP)
        t0 = time.monotonic()
        while Path(f"/proc/{pids[0]}").exists() and time.monotonic() - t0 < 60:
            time.sleep(0.2)
        elapsed = time.monotonic() - t0
        os.kill(pids[1], signal.SIGCONT)  # let torchrun's SIGTERM end it now rather than after its grace time
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert elapsed < 4 + 15, err[-3000:]
    assert p.returncode != 0 and out == ""
    errors = [ln for ln in err.splitlines() if ln.startswith("ppsd run: error:")]
    assert len(errors) == 1 and "--stage-timeout" in errors[0], err[-3000:]
    assert "/runtime/" not in err  # no traceback of ours
