"""Device placement of the PPSD stage processes (runtime/launch.py, runtime/runner.py) on CUDA,
checked on a CPU: torch.cuda is monkeypatched to look like a 2-GPU machine and records the calls,
so the order can be asserted — each rank's GPU (explicit `cuda:{rank}`, `cuda:{LOCAL_RANK}` under
torchrun) is made current before the model is loaded and before init_process_group. The CPU path
must not touch torch.cuda at all."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ppsd.errors import UserError
from runtime import launch
from runtime.pipeline import PipelineJob


class _Stop(Exception):
    pass


@pytest.fixture
def calls(monkeypatch):
    """A fake 2-GPU torch.cuda recording set_device; returns the list of calls (in order)."""
    seen: list = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: seen.append(("set_device", str(d))))
    return seen


def test_stage_device_is_explicit_and_cpu_is_untouched(calls):
    assert launch.stage_device("cuda", 0) == "cuda:0"
    assert launch.stage_device("gpu", 1) == "cuda:1"
    assert launch.stage_device("cuda", 3) == "cuda:1"  # wrapped over the visible GPUs
    assert launch.stage_device("cpu", 1) == "cpu"
    launch.bind_device("cpu")
    assert calls == []
    launch.bind_device("cuda:1")
    assert calls == [("set_device", "cuda:1")]


def test_stage_device_without_gpus_is_a_user_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="no CUDA GPU"):
        launch.stage_device("cuda", 0)


def _torchrun_env(monkeypatch, rank: int, local_rank: int, world: int = 2) -> None:
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")


def test_run_torchrun_sets_the_rank_device_before_init(calls, monkeypatch):
    import torch.distributed as dist

    _torchrun_env(monkeypatch, rank=3, local_rank=1)  # node 2's second rank: its GPU is LOCAL_RANK's
    monkeypatch.setenv("WORLD_SIZE", "2")

    def init(backend, **kw):
        calls.append(("init_process_group", backend))
        raise _Stop

    monkeypatch.setattr(dist, "init_process_group", init)
    job = PipelineJob("tiny-llama", (0, 3, 6), [[1, 2]], [2], device="cuda")
    with pytest.raises(_Stop):
        launch.run_torchrun(job)
    assert calls == [("set_device", "cuda:1"), ("init_process_group", "nccl")]


def test_torchrun_local_rank_beyond_the_gpus_is_refused(calls, monkeypatch):
    _torchrun_env(monkeypatch, rank=2, local_rank=2, world=3)
    with pytest.raises(UserError, match="local rank 2 but this node has 2") as exc:
        launch.torchrun_device("cuda")
    assert "--nproc-per-node 2" in str(exc.value) and calls == []
    assert launch.torchrun_device("cpu") == "cpu"


def test_run_torchrun_refuses_a_model_on_another_gpu(calls, monkeypatch):
    _torchrun_env(monkeypatch, rank=1, local_rank=1)
    job = PipelineJob("tiny-llama", (0, 3, 6), [[1, 2]], [2], device="cuda")
    with pytest.raises(UserError, match="cuda:0"):
        launch.run_torchrun(job, SimpleNamespace(device=torch.device("cuda:0")))


def test_ppsd_run_under_torchrun_loads_on_the_local_rank_gpu(calls, monkeypatch):
    """runner.py detects torchrun before loading: the model goes to cuda:{LOCAL_RANK}, made current first."""
    from runtime.runner import run_command

    _torchrun_env(monkeypatch, rank=1, local_rank=1)

    def load(spec, device, dtype="float32", *a, **k):
        calls.append(("load_model", device))
        raise _Stop

    monkeypatch.setattr("runtime.llm.load_model", load)
    args = SimpleNamespace(max_new_tokens=4, repeats=1, warmup=0, force_trace=None, device="gpu", stage_bounds=None,
                           mode="ppsd", stages=2, oversubscribe=False, model="tiny-llama", dtype="bfloat16")
    with pytest.raises(_Stop):
        run_command(args)
    assert calls == [("set_device", "cuda:1"), ("load_model", "cuda:1")]


def test_ppsd_run_on_cpu_touches_no_gpu(calls, monkeypatch):
    from runtime.runner import run_command

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(name, raising=False)

    def load(spec, device, dtype="float32", *a, **k):
        calls.append(("load_model", device))
        raise _Stop

    monkeypatch.setattr("runtime.llm.load_model", load)
    args = SimpleNamespace(max_new_tokens=4, repeats=1, warmup=0, force_trace=None, device="cpu", stage_bounds=None,
                           mode="ppsd", stages=2, oversubscribe=False, model="tiny-llama", dtype="float32")
    with pytest.raises(_Stop):
        run_command(args)
    assert calls == [("load_model", "cpu")]


def test_local_stage_sets_its_device_before_loading_and_init(calls, monkeypatch, tmp_path):
    """`_stage_main` (the local launcher's stage process) binds cuda:{rank} first. It ends its
    process, so it runs in a forked child here (which inherits the fakes); the stage's error file
    carries what happened before the model would have been loaded."""
    import torch.distributed as dist

    def build(rank, world, job, model, board, heartbeat, device=None):
        raise _Stop(f"calls={calls} device={device}")

    monkeypatch.setattr(launch, "_build_stage", build)
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: calls.append(("init_process_group",)))
    ctx = mp.get_context("fork")
    job = PipelineJob("tiny-llama", (0, 3, 6), [[1, 2]], [2], device="cuda")
    p = ctx.Process(target=launch._stage_main,
                    args=(1, 2, job, 0, ctx.RawValue("q", 0), ctx.RawValue("q", 0), str(tmp_path), None))
    p.start()
    p.join(60)
    assert p.exitcode == 1
    err = Path(tmp_path, "rank1.err").read_text().splitlines()[0]
    assert err == "_Stop: calls=[('set_device', 'cuda:1')] device=cuda:1", err


def test_spawned_stages_load_their_own_model_and_stay_lossless():
    """The spawn start method every CUDA PPSD run uses (`run_local` picks it for CUDA), on CPU with
    tiny-llama: each stage process starts fresh, loads the job's model itself (nothing inherited)
    and the pipeline's greedy tokens equal AR's. The launcher is handed a model with other weights:
    a stage that used it (as forked stages do) would decode other tokens."""
    from runtime.llm import load_model
    from runtime.acceptance import Sampler
    from runtime.decoding import generate_ar
    from runtime.measure import records_from_logs

    torch.set_num_threads(1)
    tiny = load_model("tiny-llama")
    prompts = [tiny.encode_prompt(t) for t in ("Hello world, spawned stages.", "x")]
    ar = [generate_ar(tiny, p, 12, Sampler.make(0, 0)).tokens for p in prompts]
    other = load_model("tiny-llama", seed=1)
    assert [generate_ar(other, p, 12, Sampler.make(0, 0)).tokens for p in prompts] != ar  # the check can fail
    job = PipelineJob("tiny-llama", (0, 3, 6), prompts, [12] * len(prompts), warmup=0, repeats=1, timeout_s=60)
    logs = launch.run_local(job, model=other, start_method="spawn")
    recs = records_from_logs(job, logs)[0]
    assert [r.tokens for r in recs] == ar
    assert all(r.verified == len(r.tokens) for r in recs)
