"""Starting the PPSD stage processes and watching them.

`run_local` forks (CPU: the stages inherit the already loaded model, nothing is re-read) or spawns
(CUDA) one process per stage on this machine, rendezvous over tcp://127.0.0.1:PORT, and watches
them: a stage that dies, or a pipeline that makes no progress for `timeout_s`, ends the run with
a UserError after every stage process is gone. Children also die with the parent (PR_SET_PDEATHSIG).

`run_torchrun` is the same stage code under torchrun (env:// rendezvous, one stage per rank), for
pipelines across GPUs or nodes; rank 0 gathers every stage's log, and may first run something of
its own (`ppsd run`: the AR baseline) while the other ranks wait for it, idle. What differs from
the local launcher: the epoch board is the rendezvous store (a network round trip, not shared
memory), so stage 1 cannot abandon a stale pass mid-way; no watchdog process: a hung stage ends at
the process group's timeout (`--stage-timeout`), and torchrun ends the other ranks of a node.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import pickle
import re
import signal
import socket
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from multiprocessing.connection import wait as wait_sentinels
from pathlib import Path

from ppsd.errors import UserError
from ppsd.net import free_port


def check_port(port: int) -> int:
    if not 1 <= port <= 65535:
        raise UserError(f"port {port} is out of range", "give --port between 1024 and 65535, or leave it out")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise UserError(f"port {port} is already taken on this machine",
                            "choose another --port, or leave it out to pick a free one") from None
    return port


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies, so no stage outlives `ppsd run`."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def keep_only_layers(model, start: int, end: int) -> None:
    """Drop references to the decoder layers another stage owns (indices stay valid)."""
    import torch

    for i in range(model.num_layers):
        if not start <= i < end:
            model.layers[i] = torch.nn.Identity()


def stage_device(device: str, index: int) -> str:
    """The one device of the process that runs stage (or rank) `index`. CUDA: `cuda:{index}` with an
    explicit index (wrapped over the visible GPUs; ppsd run refuses more stages than GPUs), so the
    model, the message buffers, the samplers' generators and any CUDA event name the same GPU, never
    "whatever is current". CPU: `device` unchanged."""
    from ppsd.devices import normalize_device

    device = normalize_device(device)
    if not device.startswith("cuda"):
        return device
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 1:
        raise UserError(f"--device {device} was asked for but this machine has no CUDA GPU", "use --device cpu")
    return f"cuda:{index % n}"


def bind_device(device: str) -> None:
    """Make `device` this process's current CUDA device; call it before anything touches CUDA. The
    current device is cuda:0 until set, and NCCL's communicator, torch.distributed's barrier, the
    CUDA context and every tensor made with a bare "cuda" land on it: without this, every rank
    would put a context (and NCCL its buffers) on GPU 0. No-op on CPU."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.set_device(torch.device(device))


def _build_stage(rank: int, world: int, job, model, board, heartbeat, device: str | None = None):
    import torch

    from runtime.llm import load_model
    from runtime.pipeline import Stage

    torch.set_num_threads(job.threads)
    if model is None:
        model = load_model(job.model_spec, device or stage_device(job.device, rank), job.dtype, job.model_seed)
    keep_only_layers(model, job.bounds[rank], job.bounds[rank + 1])
    return Stage(rank, world, job, model, board, heartbeat)


def _stage_main(rank, world, job, port, shared_epoch, heartbeat, out_dir, model) -> None:
    _die_with_parent()
    try:
        import torch.distributed as dist

        from runtime.pipeline import EpochBoard

        # CUDA: stage r owns cuda:r, made current before the model is loaded and before NCCL starts
        # (set after loading, the load's context and allocations went to cuda:0 first)
        dev = stage_device(job.device, rank)
        bind_device(dev)
        stage = _build_stage(rank, world, job, model, EpochBoard(shared=shared_epoch), heartbeat, dev)
        heartbeat.value += 1  # loaded
        backend = "nccl" if job.device.startswith("cuda") else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=job.timeout_s))
        log = stage.run()
        Path(out_dir, f"rank{rank}.pkl.tmp").write_bytes(pickle.dumps(log))
        os.replace(Path(out_dir, f"rank{rank}.pkl.tmp"), Path(out_dir, f"rank{rank}.pkl"))
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - report and leave; the parent turns it into a UserError
        msg = f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        try:
            Path(out_dir, f"rank{rank}.err").write_text(msg + "\n" + traceback.format_exc())
        except OSError:
            pass
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: nothing left to flush, and it can stall on gloo threads


def _stop_all(procs) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 3
    for p in procs:
        p.join(max(deadline - time.monotonic(), 0.05))
        if p.is_alive():
            p.kill()
            p.join(2)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def run_local(job, model=None, port: int | None = None, start_method: str | None = None,
              load_timeout_s: float = 300.0) -> list:
    """Run `job` with one process per stage on this machine; return the StageLog of every rank."""
    world = len(job.bounds) - 1
    port = check_port(port) if port else free_port()
    if start_method is None:
        start_method = "spawn" if job.device.startswith("cuda") else "fork"
    ctx = mp.get_context(start_method)
    shared_epoch = ctx.RawValue("q", 0)
    heartbeat = ctx.RawValue("q", 0)
    inherit = model if start_method == "fork" else None
    with tempfile.TemporaryDirectory(prefix="ppsd-stages-") as out_dir:
        procs = [ctx.Process(target=_stage_main, name=f"ppsd-stage-{r + 1}", daemon=True,
                             args=(r, world, job, port, shared_epoch, heartbeat, out_dir, inherit))
                 for r in range(world)]
        for p in procs:
            p.start()
        try:
            _watch(procs, heartbeat, world, job.timeout_s, load_timeout_s, out_dir)
        finally:
            _stop_all(procs)
        logs = []
        for r in range(world):
            path = Path(out_dir, f"rank{r}.pkl")
            if not path.exists():
                raise UserError(f"PPSD stage {r + 1} ended without a result", "rerun; if it repeats, report it")
            logs.append(pickle.loads(path.read_bytes()))
        return logs


def _watch(procs, heartbeat, world: int, timeout_s: float, load_timeout_s: float, out_dir: str) -> None:
    last_beat, last_change = heartbeat.value, time.monotonic()
    pending = {p.sentinel: (r, p) for r, p in enumerate(procs)}
    while pending:
        ready = wait_sentinels(list(pending), timeout=0.25)
        for s in ready:
            r, p = pending.pop(s)
            p.join()
            if p.exitcode != 0:
                # The cause is among the first failures; a peer of a stage that timed out or crashed
                # fails too ("connection closed by peer"), sometimes a moment before it: wait briefly
                # for the others, then name the cause.
                failures = [(r, _why(out_dir, r, p.exitcode))]
                deadline = time.monotonic() + PEER_GRACE_S
                while pending and time.monotonic() < deadline:
                    for s2 in wait_sentinels(list(pending), timeout=0.1):
                        r2, p2 = pending.pop(s2)
                        p2.join()
                        if p2.exitcode != 0:
                            failures.append((r2, _why(out_dir, r2, p2.exitcode)))
                raise _failure(failures, world)
        beat = heartbeat.value
        now = time.monotonic()
        if beat != last_beat:
            last_beat, last_change = beat, now
            continue
        limit = timeout_s if beat >= world else load_timeout_s  # loading counts separately
        if pending and now - last_change > limit:
            stuck = ", ".join(str(r + 1) for r, _ in pending.values())
            raise UserError(f"the PPSD pipeline made no progress for {limit:.0f} s (stages still running: {stuck}); "
                            "the run was stopped and every stage process ended", HANG_FIX)


HANG_FIX = "a stage hung or is starved of CPU: use fewer --stages or raise --stage-timeout"
_TRANSPORT_TIMEOUT = re.compile(r"timed out|timeout caused|operation timeout|watchdog", re.IGNORECASE)


PEER_GRACE_S = 2.0  # how long the other stages get to report after the first one fails
_PEER_GONE = re.compile(r"closed by peer|reset by peer|broken pipe", re.IGNORECASE)


def _why(out_dir: str, rank: int, exitcode: int | None) -> str:
    """A failed stage's first error line (its rank<r>.err), else what its exit code says."""
    err = Path(out_dir, f"rank{rank}.err")
    lines = err.read_text().splitlines() if err.exists() else []
    return lines[0] if lines else _describe_exit(exitcode)


def _failure(failures: list[tuple[int, str]], world: int) -> UserError:
    """The error for stages that failed together: a hang when any of them gave up waiting on a peer
    (gloo's own receive timeout can fire before the watchdog), else the first stage that did not
    merely lose its peer."""
    for r, why in failures:
        if _is_transport_timeout(why):
            return UserError(f"the PPSD pipeline made no progress: stage {r + 1} of {world} gave up waiting for a "
                             f"peer ({why}); the run was stopped and every stage process ended", HANG_FIX)
    r, why = next(((r, w) for r, w in failures if not _PEER_GONE.search(w)), failures[0])
    return UserError(f"PPSD stage {r + 1} of {world} died ({why}); the run was stopped and every stage process "
                     "ended", "check memory and the stage's layers, then rerun")


def _is_transport_timeout(why: str) -> bool:
    """Whether a stage's error is a collective's timeout (gloo: "Timed out waiting ...", "Application
    timeout caused pair closure"; NCCL: "Watchdog caught collective operation timeout ...")."""
    return bool(_TRANSPORT_TIMEOUT.search(why))


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ


def torchrun_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def torchrun_world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def torchrun_local_world() -> int:
    """Ranks on this node (torchrun's LOCAL_WORLD_SIZE; the whole world without it)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


def torchrun_one_node() -> bool:
    """Whether every rank runs on this node (they share its cores and its clock)."""
    return torchrun_local_world() == torchrun_world()


def check_torchrun_world(stages: int) -> None:
    """torchrun's world must be the pipeline: one stage per rank (asked before a model is loaded)."""
    world = torchrun_world()
    if world != stages:
        raise UserError(f"torchrun started {world} process(es) for a {stages}-stage pipeline",
                        f"start {stages} in all (torchrun --nnodes N --nproc-per-node G with N × G = {stages}), "
                        f"or use --stages {world}")


def local_rank() -> int:
    """This process's index among the ranks on its node (torchrun's LOCAL_RANK; RANK without it)."""
    return int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))


def torchrun_device(device: str) -> str:
    """Under torchrun, this rank's device, made current: `cuda:{LOCAL_RANK}` on CUDA (so `ppsd run`
    loads the model there, not on cuda:0 in every rank), `device` unchanged on CPU."""
    r = local_rank()
    dev = stage_device(device, r)
    if dev.startswith("cuda"):
        import torch

        n = torch.cuda.device_count()
        if r >= n:  # wrapping would put two ranks on one GPU, which NCCL refuses mid-run
            raise UserError(f"torchrun started local rank {r} but this node has {n} GPU(s)",
                            f"use torchrun --nproc-per-node {n} or fewer (one stage per GPU)")
    bind_device(dev)
    return dev


# How long the other ranks wait for rank 0's own work before the pipeline (`ppsd run`: the AR
# baseline, as long as the model and the prompts make it). A rank 0 that dies is seen at once (its
# gloo connections close); only a hung one is left to this, as a hung AR is in a local `ppsd run`.
RANK0_FIRST_TIMEOUT = timedelta(hours=24)
# what torch.distributed raises for a timeout or a lost peer (gloo and NCCL: RuntimeError and its DistError kin)
_DIST_ERRORS = (RuntimeError, TimeoutError, ConnectionError)


def run_torchrun(job, model=None, rank0_first=None) -> list | None:
    """This process is one stage (rank from the environment). Rank 0 returns every rank's log.

    `rank0_first()`, when given, runs on rank 0 after the rendezvous and before any stage drops the
    layers it does not own (rank 0's model is still whole: `ppsd run` measures AR with it), while
    every other rank waits for it in a gloo broadcast, idle, so nothing competes for the CPU or the
    GPUs' host. Its failure ends every rank: rank 0 raises it, the others a UserError naming it."""
    import torch.distributed as dist

    from runtime.pipeline import EpochBoard

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    check_torchrun_world(len(job.bounds) - 1)
    backend = "nccl" if job.device.startswith("cuda") else "gloo"
    # the rank's GPU is made current before init_process_group: NCCL binds the communicator to the
    # current device, and the model (when loaded here) goes to the same explicit cuda:{LOCAL_RANK}
    dev = torchrun_device(job.device)
    if model is not None and backend == "nccl" and str(model.device) != dev:
        raise UserError(f"rank {rank}'s model is on {model.device}, not on its GPU {dev}",
                        "load it with runtime.launch.torchrun_device(...) (ppsd run does); report this")
    try:  # every rank joins once its model is loaded: a slower loader counts against the timeout
        dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=job.timeout_s))
        # objects (rank 0's go-ahead, the logs) travel on CPU whatever the data backend
        group = dist.new_group(backend="gloo", timeout=RANK0_FIRST_TIMEOUT)
    except _DIST_ERRORS as exc:
        raise UserError(f"rank {rank}: the ranks did not all meet within --stage-timeout {job.timeout_s:g} s "
                        f"({_first_line(exc)})", "a rank failed or loads its model more slowly: see torchrun's "
                        "report, or raise --stage-timeout") from None
    if rank0_first is not None:
        _rank0_first(rank, rank0_first, group)
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        store = _get_default_store()
    except Exception:  # noqa: BLE001 - private API; without it middle stages just drop stale work later
        store = None
    stage = _build_stage(rank, world, job, model, EpochBoard(store=store), None, dev)
    try:
        log = stage.run()
        logs = [None] * world if rank == 0 else None
        dist.gather_object(log, logs, dst=0, group=group)
    except _DIST_ERRORS as exc:  # a timeout or a lost peer: one line, as the local launcher says it
        raise UserError(f"PPSD stage {rank + 1} of {world} stopped ({_first_line(exc)})",
                        "another stage hung or died (torchrun's report names it) or is starved of CPU: "
                        "check it, or raise --stage-timeout") from None
    dist.destroy_process_group()
    return logs


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{exc.__class__.__name__}: {text.splitlines()[0]}" if text else exc.__class__.__name__


def _rank0_first(rank: int, fn, group) -> None:
    """Rank 0 runs `fn()`; then every rank learns, in one broadcast, whether it went well."""
    import torch.distributed as dist

    box = [None]  # rank 0's error line, None when fine
    if rank == 0:
        try:
            fn()
        except BaseException as exc:
            box[0] = str(exc).splitlines()[0] if str(exc).strip() else exc.__class__.__name__
            dist.broadcast_object_list(box, src=0, group=group)
            raise
    try:
        dist.broadcast_object_list(box, src=0, group=group)
    except _DIST_ERRORS as exc:  # rank 0 died or hung before it could say
        raise UserError(f"rank {rank} lost rank 0 before the pipeline started ({_first_line(exc)})",
                        "see rank 0's error in torchrun's report") from None
    if box[0] is not None and rank != 0:
        raise UserError(f"rank 0 stopped before the pipeline started ({box[0]})", "see rank 0's error")
