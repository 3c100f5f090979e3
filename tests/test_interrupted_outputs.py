"""Output folders are never replaced by halves: `ppsd profile` and `ppsd validate` refuse an existing folder
without --force, build the new one in a temporary sibling and swap it in at the end (ppsd/paths.py:
atomic_dir), so a run interrupted by SIGINT or killed by SIGKILL mid-measurement leaves an earlier folder at
--out byte-identical and nothing half-written under its name."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ppsd import paths
from ppsd.cli import main
from ppsd.paths import PROJECT_ROOT, atomic_dir

EXAMPLE_PROFILE = PROJECT_ROOT / "examples" / "smollm2-135m-cpu"
EXAMPLE_VALIDATION = PROJECT_ROOT / "examples" / "smollm2-135m-cpu-oos-validation-unseen"


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _env(tmp: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "HF_HUB_OFFLINE": "1", "PPSD_CACHE": str(tmp / "cache"),
            "PPSD_PROGRESS": "jsonl"}


def _start(argv: list[str], tmp: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ppsd", *argv], cwd=tmp, env=_env(tmp), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(proc: subprocess.Popen, ready, what: str, timeout_s: float = 240.0) -> None:
    """Poll until `ready()` holds while `proc` still runs (it is then mid-run)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"the run ended (rc {proc.returncode}) before {what}: {proc.stderr.read()[-2000:]}")
        if ready():
            return
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no {what} within {timeout_s:.0f} s")


def _interrupt(proc: subprocess.Popen, sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _leftovers(parent: Path, name: str) -> list[str]:
    """What sits beside `name` in `parent` that carries its name (a temporary or set-aside folder)."""
    return sorted(p.name for p in parent.iterdir() if p.name != name and name in p.name)


PROFILE_ARGS = ["profile", "--model", "tiny-llama", "--limit", "2", "--max-new-tokens", "8", "--n-values", "1,2",
                "--context-values", "8", "--repeats", "100", "--warmup", "0", "--corun-max", "1", "--no-hop",
                "--thread-counts", "1", "--batch-sizes", "1", "--force"]


def _latency_progress(stderr_lines: list[str], proc: subprocess.Popen):
    """A readiness test: the first JSON progress line of the profile's measuring (the model is loaded and the
    latency grid, seconds long at these repeats, has begun)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)

    def ready() -> bool:
        while sel.select(timeout=0):
            line = proc.stderr.readline()
            if not line:
                return False
            stderr_lines.append(line)
            if line.startswith("{") and "phase" in json.loads(line):
                return True
        return False

    return ready


@pytest.mark.slow
def test_an_interrupted_profile_leaves_the_earlier_profile_byte_identical(tmp_path):
    runs = {}
    for sig in (signal.SIGINT, signal.SIGKILL):
        base = tmp_path / sig.name
        base.mkdir()
        shutil.copytree(EXAMPLE_PROFILE, base / "prof")
        runs[sig] = (base, tree(base / "prof"), _start([*PROFILE_ARGS, "--out", "prof"], base))
    for sig, (base, before, proc) in runs.items():
        lines: list[str] = []
        _wait_for(proc, _latency_progress(lines, proc), "measuring progress")
        rc, err = _interrupt(proc, sig)
        assert tree(base / "prof") == before, sig.name
        assert _leftovers(base, "prof") == [], sig.name  # nothing half-written beside it either
        if sig == signal.SIGINT:
            assert rc == 2 and "profiling was interrupted" in err and "Traceback" not in err
        else:
            assert rc == -signal.SIGKILL


@pytest.mark.slow
def test_an_interrupted_validation_leaves_the_earlier_folder_byte_identical(tmp_path):
    argv = ["validate", "--emulate", str(EXAMPLE_PROFILE), "--plans", "eesd:24:3", "--limit", "2", "--repeats", "1",
            "--warmup", "0", "--cores", "1", "--ar-once", "--force", "--out", "val"]
    runs = {}
    for sig in (signal.SIGINT, signal.SIGKILL):
        base = tmp_path / sig.name
        base.mkdir()
        shutil.copytree(EXAMPLE_VALIDATION, base / "val")
        runs[sig] = (base, tree(base / "val"), _start(argv, base))
    for sig, (base, before, proc) in runs.items():
        # mid-run: the new folder is being written in its temporary sibling
        _wait_for(proc, lambda b=base: any(p.name.endswith(".partial") for p in b.iterdir()), "temporary folder")
        rc, err = _interrupt(proc, sig)
        assert tree(base / "val") == before, sig.name
        left = _leftovers(base, "val")
        if sig == signal.SIGINT:
            assert rc == 130 and left == [] and "Traceback" not in err
        else:  # a killed run cannot clean up: its temporary folder stays, under another name, until the next run
            assert rc == -signal.SIGKILL and len(left) == 1 and left[0].endswith(f".{proc.pid}.partial")
            with atomic_dir(base / "val") as tmp:  # the next writer of that path removes it
                (tmp / "validation.json").write_text("{}")
            assert _leftovers(base, "val") == []


def test_atomic_dir_swaps_an_earlier_folder_whole(tmp_path):
    final = tmp_path / "out"
    with atomic_dir(final) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(final) as tmp:
            (tmp / "a").write_text("half")
            raise KeyboardInterrupt
    assert tree(final) == {"a": b"1"} and _leftovers(tmp_path, "out") == []
    with atomic_dir(final) as tmp:
        (tmp / "b").write_text("2")
    assert tree(final) == {"b": b"2"} and _leftovers(tmp_path, "out") == []


def test_atomic_dir_without_an_atomic_exchange_recovers_a_swap_cut_in_half(tmp_path, monkeypatch):
    """Where the system has no RENAME_EXCHANGE the swap is two renames: a run killed between them leaves the
    earlier folder set aside, and the next call puts it back before anything else."""
    monkeypatch.setattr(paths, "_exchange", lambda a, b: False)
    final = tmp_path / "out"
    with atomic_dir(final) as tmp:
        (tmp / "a").write_text("1")
    os.replace(final, paths._aside(final))  # killed right after the first rename
    assert not final.exists()
    with pytest.raises(RuntimeError):
        with atomic_dir(final):
            assert tree(final) == {"a": b"1"}  # recovered before the new run writes anything
            raise RuntimeError
    assert tree(final) == {"a": b"1"} and _leftovers(tmp_path, "out") == []
    with atomic_dir(final) as tmp:
        (tmp / "b").write_text("2")
    assert tree(final) == {"b": b"2"} and _leftovers(tmp_path, "out") == []


def test_analytic_profile_needs_force_to_replace_and_then_replaces_it(tmp_path, capsys):
    base = ["profile", "--analytic", "--arch", "llama-2-7b", "--hardware", "h100-sxm", "--out", str(tmp_path / "p")]
    assert main(base) == 0
    before = tree(tmp_path / "p")
    capsys.readouterr()
    assert main([*base, "--stack", "eager"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a profile folder" in err[0] and "--force" in err[0]
    assert tree(tmp_path / "p") == before
    assert main([*base, "--stack", "eager", "--force"]) == 0
    assert json.loads((tmp_path / "p" / "profile.json").read_text())["estimate"]["stack"] == "eager"
    assert _leftovers(tmp_path, "p") == []
