"""`--device` (ppsd/devices.py and every command that reads it): `gpu` is an alias of `cuda` that
takes the GPU paths (the GPU-count check included), unknown names and impossible stage counts are
one-line UserErrors with exit code 2, and a one-GPU machine is never told `--stages 2`. CPU only:
torch.cuda is monkeypatched to look like a machine with N GPUs (nothing touches CUDA)."""

from __future__ import annotations

import pytest
import torch

from ppsd.cli import main
from ppsd.devices import normalize_device
from ppsd.errors import UserError


@pytest.mark.parametrize("text, want", [("cpu", "cpu"), ("cuda", "cuda"), ("gpu", "cuda"), ("GPU", "cuda"),
                                        ("cuda:1", "cuda:1"), ("gpu:2", "cuda:2"), (" cuda ", "cuda")])
def test_normalize_device(text, want):
    assert normalize_device(text) == want


@pytest.mark.parametrize("text", ["tpu", "cuda:x", "gpu:", "cuda:-1", "mps", ""])
def test_unknown_device_is_a_user_error(text):
    with pytest.raises(UserError, match="unknown device") as exc:
        normalize_device(text)
    assert "--device cuda" in str(exc.value) and "\n" not in str(exc.value)


def _gpus(monkeypatch, n: int) -> None:
    """This CPU machine looks like one with n GPUs (n = 0: no CUDA at all)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)


def _one_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ppsd {command}: error:") and "\n" not in err, err
    return err


RUN = ["run", "--model", "tiny-llama", "--mode", "ppsd", "--exit", "3", "--max-new-tokens", "4", "--limit", "1"]


@pytest.mark.parametrize("device", ["gpu", "cuda"])
def test_ppsd_on_one_gpu_suggests_eesd_or_cpu_not_two_stages(device, monkeypatch, capsys):
    _gpus(monkeypatch, 1)
    assert main([*RUN, "--device", device, "--stages", "2"]) == 2
    err = _one_line(capsys, "run")
    assert "2 GPUs" in err and "has 1" in err  # "gpu" got the GPU count, not the CPU-core count
    assert "--mode eesd" in err and "--device cpu" in err and "--stages 2" not in err


def test_ppsd_with_more_stages_than_gpus_names_the_gpu_count(monkeypatch, capsys):
    _gpus(monkeypatch, 3)
    assert main([*RUN, "--device", "gpu", "--stages", "4"]) == 2
    err = _one_line(capsys, "run")
    assert "4 GPUs" in err and "has 3" in err and "--stages 3" in err


def test_ppsd_stage_bounds_count_as_stages(monkeypatch, capsys):
    _gpus(monkeypatch, 2)
    assert main([*RUN, "--device", "gpu", "--stage-bounds", "0,3,4,6"]) == 2
    assert "3 GPUs" in _one_line(capsys, "run")


def test_gpu_without_any_gpu_is_one_line(monkeypatch, capsys):
    _gpus(monkeypatch, 0)
    assert main([*RUN, "--device", "gpu"]) == 2
    err = _one_line(capsys, "run")
    assert "no CUDA GPU" in err and "--device cpu" in err
    assert main(["run", "--model", "tiny-llama", "--mode", "ar", "--device", "gpu"]) == 2
    assert "no CUDA GPU" in _one_line(capsys, "run")


def test_gpu_index_beyond_the_gpus_is_one_line(monkeypatch, capsys):
    _gpus(monkeypatch, 1)
    assert main(["run", "--model", "tiny-llama", "--mode", "ar", "--device", "cuda:1"]) == 2
    err = _one_line(capsys, "run")
    assert "GPU 1" in err and "has 1" in err


def test_unknown_device_on_every_command(monkeypatch, capsys, tmp_path):
    _gpus(monkeypatch, 0)
    monkeypatch.setenv("PPSD_CACHE", str(tmp_path / "cache"))
    assert main(["run", "--model", "tiny-llama", "--mode", "ar", "--device", "tpu"]) == 2
    assert "unknown device 'tpu'" in _one_line(capsys, "run")
    assert main(["profile", "--model", "tiny-llama", "--device", "tpu", "--out", str(tmp_path / "p")]) == 2
    assert "unknown device 'tpu'" in _one_line(capsys, "profile")
    assert not (tmp_path / "p").exists()
    assert main(["heads", "train", "--model", "tiny-llama", "--device", "tpu", "--out", str(tmp_path / "h")]) == 2
    assert "unknown device 'tpu'" in _one_line(capsys, "heads")
    assert main(["heads", "eval", "--heads", str(tmp_path / "h"), "--device", "tpu"]) == 2
    assert "unknown device 'tpu'" in _one_line(capsys, "heads")


def test_gpu_alias_reaches_the_gpu_check_of_profile_and_heads(monkeypatch, capsys, tmp_path):
    """`gpu` is not refused as unknown: it is CUDA, so a machine without one says so."""
    _gpus(monkeypatch, 0)
    monkeypatch.setenv("PPSD_CACHE", str(tmp_path / "cache"))
    assert main(["profile", "--model", "tiny-llama", "--device", "gpu", "--skip-acceptance",
                 "--out", str(tmp_path / "p")]) == 2
    assert "no CUDA GPU" in _one_line(capsys, "profile")
    assert main(["heads", "train", "--model", "tiny-llama", "--device", "gpu", "--out", str(tmp_path / "h")]) == 2
    assert "no CUDA GPU" in _one_line(capsys, "heads")


def test_check_resources_for_validate_names_plans_not_run_flags(monkeypatch):
    from runtime.request import check_resources
    from ppsd.modes import Mode
    from sim.plan import Plan

    _gpus(monkeypatch, 1)
    plan = Plan(Mode.PPSD, 3, stages=2)
    with pytest.raises(UserError) as exc:
        check_resources(plan, "cuda", command="validate")
    assert "eesd" in str(exc.value) and "--stages" not in str(exc.value)
    with pytest.raises(UserError, match="2 GPUs"):
        check_resources(plan, "gpu")  # the alias gets the GPU count too
    check_resources(Plan(Mode.EESD, 3, draft_len=3), "gpu")  # one GPU is enough for EESD
    _gpus(monkeypatch, 2)
    check_resources(plan, "gpu")


def test_cpu_path_keeps_its_core_check(monkeypatch, capsys):
    """On CPU nothing changed: the stage count is checked against cores after the plan."""
    monkeypatch.setattr("runtime.request.available_cores", lambda: 2)
    assert main([*RUN, "--device", "cpu", "--stages", "3"]) == 2
    err = _one_line(capsys, "run")
    assert "CPU cores" in err and "--oversubscribe" in err
