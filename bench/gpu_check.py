"""The GPU check: measure a real-size random-weight model on this GPU, replay traces through the
real runtime, set the roofline estimate beside the measurement, and go through every CUDA path one
machine allows. Run through bench/gpu_check.sh, which checks the environment, runs
`python -m bench.gpu_check` from the project root and packs the results (one archive and this
summary, see there).

    bench/gpu_check.sh [--out DIR] [--model random:ARCH] [--hardware H] [--budget-s S] ...
    bench/gpu_check.sh --cpu-dry-run --out DIR      # the same steps on CPU with small models

Phases (each timed, the plan printed first):
  1 profile    `ppsd profile --model random:llama-2-7b --device cuda --dtype bfloat16 --skip-acceptance`
               per-layer / head / embedding latency with CUDA events, then the hop and the two-stage
               pipeline probe in two spawned worker processes: one per GPU over NCCL with >= 2 GPUs,
               both on the one GPU over gloo otherwise (NCCL refuses two ranks on one GPU)
  2 traces     attach a seeded match table from an α-by-depth curve (default: PPSD-paper-like,
               α = 0.80 at E/N = 1/4) and the built-in prompts as bytes: random weights have no
               meaningful acceptance, and under forced traces timing is all that is checked
  3 estimate   the roofline profile of the same architecture on this GPU's hardware-table entry, with
               the same traces, and the fit of its efficiency factors (bench.calibrate): the
               per-layer error of the roofline against the measurement, before and after
  4 validate   `ppsd validate --force-trace`: AR, EESD and (with ≥ 2 GPUs: NCCL cannot put two stages
               on one GPU) PPSD measured for real and predicted by the simulator; each plan is also
               predicted from the estimate, so plan-level estimate-vs-measurement lands in the summary
  5 heads      `ppsd heads train` then `ppsd heads eval` on the device (a short smoke on a 4-layer
               cut of the model): exit heads trained, scored and timed with CUDA events

Writes, under --out (default $OUT, else runs/gpu-check-<time>), folders named after the model and the
device: profile-<model>-<device>/, validation-<model>-<device>/, estimate-<arch>-<hardware>/,
heads-<model>-<device>/, calibration-<model>-<device>.json, gpu_check-<model>-<device>.json (summary:
every phase's status "ok" / "failed" / "skipped" with its error or reason and seconds, and `paths`:
each CUDA path and whether this run went through it; rewritten before and after each phase, so a
failed or killed phase still leaves it). A phase that fails (any exception) skips only the phases that
need it; exit 1 then, with one line naming it. --stop-after-s is a hard stop (gpu_check.sh sets it
so that packing the results always happens before the device's limit): the running phase is marked
failed, the rest skipped. Exit 2 with one line when there is no GPU (without --cpu-dry-run) or on
bad input; the phases aim at --budget-s (380 s), so with gpu_check.sh's start-up the whole check
stays within 8 minutes on one H200.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# PPSD-paper-like acceptance by relative depth (Vicuna/LLaMA-2 with a trained exit: α ≈ 0.81 at E/N = 1/4)
DEFAULT_CURVE = "relative_depth,alpha\n0.125,0.45\n0.25,0.80\n0.5,0.88\n0.75,0.93\n"

SIZES = {
    # ~25 ms/token for an eager bf16 7B step on one H200: the grid is ~160 steps, the hop and probe
    # workers (two spawned processes, each loading the model: ~30 s), the runtime 4 runs × 4 prompts
    # × 64 tokens per plan plus a bracketing AR run (~2 min), PPSD stage start-up ~40 s per plan (≥ 2
    # GPUs), the heads smoke ~60 s; budget_s is the target for the phases (phase 4's tokens shrink to
    # fit it, or it is skipped): 380 s plus gpu_check.sh's start-up (~60 s) and packing keeps the
    # whole check within 8 minutes.
    "gpu": dict(model="random:llama-2-7b", device="cuda", dtype="bfloat16", n_values="1,2,4,8",
                context_values="64,256,1024", repeats=10, warmup=3, prompts=4, tokens=64, run_repeats=3,
                run_warmup=1, budget_s=380.0, heads_model="random:llama-2-7b?layers=4", heads_exits="2,3",
                heads_vocab="4096", heads_tokens=16, heads_dtype="bfloat16", heads_s=60.0,
                batch_sizes="1,2,4,8,16,32"),
    "cpu": dict(model="random:smollm2-135m?layers=4", device="cpu", dtype="float32", n_values="1,2",
                context_values="32,64", repeats=3, warmup=1, prompts=2, tokens=10, run_repeats=1, run_warmup=0,
                budget_s=150.0, heads_model="tiny-llama", heads_exits="2,4", heads_vocab="64", heads_tokens=8,
                heads_dtype="bfloat16", heads_s=20.0, batch_sizes="1,2"),  # the GPU's head dtype: the dry run goes its way
}


PHASES = ("1 profile", "2 traces", "3 estimate", "4 validate", "5 heads")


class Deadline(BaseException):
    """The hard stop (--stop-after-s) or a SIGTERM: ends the running phase wherever it is (not an
    Exception, so no `except Exception` on the way swallows it) and skips the rest."""


def arm_deadline(seconds: float | None) -> dict:
    """SIGALRM after `seconds` (None: no alarm) and SIGTERM raise Deadline; returns the handlers
    they replace, for `disarm`."""
    def stop(signum, _frame):
        what = "the --stop-after-s deadline passed" if signum == signal.SIGALRM else "terminated (SIGTERM)"
        raise Deadline(what)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGALRM)}
    if seconds:
        signal.alarm(max(1, int(seconds)))
    return previous


def disarm(previous: dict) -> None:
    signal.alarm(0)
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@dataclass
class PathReport:
    """One CUDA path of the project and whether this run went through it (`ran`), on a GPU
    (`on_cuda`; the CPU dry run goes through the CPU side of the same code), and how or why not."""

    path: str
    ran: bool
    on_cuda: bool
    detail: str


class Phases:
    """Runs the check's phases in order, timing each and recording its status ("ok", "failed",
    "skipped") and one-line error in the summary, which is rewritten before and after every phase:
    a phase that raises (any exception, not only a UserError), a run killed at its time limit, or
    an interrupted one still leaves a summary saying how far the check got and why it stopped."""

    def __init__(self, summary: dict | None = None, path: Path | None = None):
        self.t0 = time.perf_counter()
        self.times: dict[str, float] = {}
        self.status: dict[str, dict] = {name: {"status": "pending"} for name in PHASES}
        self.summary, self.path = summary, path

    def run(self, name: str, fn, check=None) -> tuple[bool, object]:
        """fn() -> (passed, result); `check(result)` returns None for a good result or the error
        (e.g. for a nonzero exit code)."""
        print(f"\n== {name} ==", flush=True)
        self.status[name] = {"status": "running"}
        self.save()
        t = time.perf_counter()
        result, error = None, "interrupted"
        try:
            result = fn()
            error = check(result) if check else None
        except Deadline as exc:  # recorded (finally), then it ends the check
            error = f"stopped: {exc}"
            raise
        except Exception as exc:  # noqa: BLE001 - recorded in the summary; the later phases decide
            import traceback

            traceback.print_exc()
            error = one_line(exc)
        finally:
            self.times[name] = round(time.perf_counter() - t, 2)
            self.status[name] = {"status": "failed" if error else "ok", "seconds": self.times[name],
                                 **({"error": error} if error else {})}
            print(f"== {name}: {self.times[name]:.1f} s (total {self.elapsed():.1f} s)"
                  + (f" FAILED: {error}" if error else ""), flush=True)
            self.save()
        return error is None, result

    def skip(self, name: str, why: str) -> None:
        print(f"\n== {name}: skipped ({why})", flush=True)
        self.status[name] = {"status": "skipped", "reason": why}
        self.save()

    def failed(self) -> list[str]:
        return [n for n, st in self.status.items() if st["status"] == "failed"]

    def save(self) -> None:
        if self.summary is None or self.path is None:
            return
        from ppsd.paths import atomic_write_json

        self.summary["phases"] = self.status
        self.summary["phases_s"] = self.times
        self.summary["total_s"] = round(self.elapsed(), 2)
        atomic_write_json(self.path, self.summary)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def one_line(exc: BaseException) -> str:
    from ppsd.errors import UserError

    if isinstance(exc, UserError):
        return exc.one_line()
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{exc.__class__.__name__}: {first}" if first else exc.__class__.__name__


def fail(msg: str) -> int:
    print(f"gpu_check: error: {msg}", file=sys.stderr, flush=True)
    return 2


def slug(text: str) -> str:
    s = text.lower().replace("nvidia", "").replace("geforce", "")
    s = s.replace("random:", "random-").replace("?layers=", "-l").replace("&seed=", "-s")
    return re.sub(r"[^a-z0-9.]+", "-", s).strip("-") or "x"


def ppsd(*argv) -> int:
    from ppsd.cli import main

    print("$ ppsd " + " ".join(map(str, argv)), flush=True)
    return main([str(a) for a in argv])


def attach_traces(profile_dir: Path, curve: Path, prompts: int, tokens: int, seed: int = 0):
    """Give the measured (latency-only) profile a seeded match table from the curve and generations
    whose prompts are the built-in prompts' UTF-8 bytes (the random model's tokens); returns the
    table and the generations so the estimate can carry the very same traces."""
    from ppsd.paths import atomic_dir
    from profiler.acceptance_transfer import curve_acceptance
    from ppsd.prompts import load_prompts
    from ppsd.profile import load_profile, save_profile

    prof = load_profile(profile_dir)
    chosen = load_prompts(None, limit=prompts)
    df, acc_meta = curve_acceptance(curve, prof.num_layers, seed=seed, prompts=len(chosen), tokens=tokens)
    ids = {f"p{i}": p for i, p in enumerate(chosen)}
    df["category"] = df["prompt_id"].map(lambda k: ids[k].category)
    df["prompt_id"] = df["prompt_id"].map(lambda k: ids[k].prompt_id)
    gens = []
    for p in chosen:
        pt = list(p.text.encode("utf-8"))[:256]
        gens.append({"prompt_id": p.prompt_id, "category": p.category, "prompt": p.text, "prompt_tokens": pt,
                     "prompt_len": len(pt), "token_ids": [46] * tokens})
    acc_meta.update({"prompt_set": "builtin", "num_prompts": len(chosen),
                     "categories": sorted({p.category for p in chosen}),
                     "note": "random-weight model: acceptance is a seeded Bernoulli table from the α curve, "
                             "prompts are the built-in prompts' UTF-8 bytes; replayed with --force-trace, so "
                             "timing is what is checked, not outputs"})
    meta = dict(prof.meta)
    meta["acceptance"] = acc_meta
    with atomic_dir(profile_dir) as tmp:
        save_profile(tmp, meta, acceptance=df, generations=gens)
    return df, gens, acc_meta


def choose_plans(n_layers: int, gpus: int, cpu: bool, cores: int) -> tuple[list[str], str | None]:
    e4, e2 = max(1, round(n_layers / 4)), max(1, round(n_layers / 2))
    plans = [f"eesd:{e4}:3"] + ([f"eesd:{e2}:3"] if e2 != e4 and not cpu else [])
    room = cores if cpu else gpus
    note = None
    if room >= 2:
        plans.append(f"ppsd:{e2}:2")
        if room >= 4 and not cpu and n_layers >= 8:
            plans.append(f"ppsd:{e4}:4")
    else:
        what = "CPU cores" if cpu else "GPUs"
        note = (f"PPSD skipped: k stages need k {what} (one stage process each; NCCL cannot put two stages on "
                f"one GPU) and this machine has {room}; AR and EESD only")
    return plans, note


def estimate_vs_measured(est_dir: Path, val_dir: Path) -> list[dict]:
    """Each validated plan predicted from the estimate too, and from the calibrated estimate (same
    traces, same prompts)."""
    from ppsd.profile import load_profile

    rows = _predict_rows(load_profile(est_dir), val_dir)
    cal_dir = est_dir.with_name(est_dir.name + "-calibrated")
    if cal_dir.exists():
        for r, c in zip(rows, _predict_rows(load_profile(cal_dir), val_dir)):
            r["predicted_from_calibrated_estimate"] = c["predicted_from_estimate"]
            r["calibrated_estimate_error_pct"] = c["estimate_error_pct"]
    return rows


def _predict_rows(est, val_dir: Path) -> list[dict]:
    """Each plan of the validation at `val_dir` simulated on the profile `est`, beside its measurement."""
    from ppsd.statistics import percent_error
    from sim.api import resolve_plan, simulate
    from sim.plan import Plan

    doc = json.loads((val_dir / "validation.json").read_text())
    ids = [g["prompt_id"] for g in est.generations()]
    rows = []
    for r in doc["rows"]:
        plan = Plan.from_dict({"mode": r["mode"], "exit_layer": r["exit_layer"], "draft_len": r.get("draft_len") or 1,
                               "stages": r.get("stages") or 1})
        pred = simulate(est, resolve_plan(plan, est), acceptance="trace", prompt_ids=ids, engine="fast")
        rows.append({"plan": r["plan"], "measured_tokens_per_s": r["measured_tokens_per_s"],
                     "predicted_from_measured_profile": r["predicted_tokens_per_s"],
                     "predicted_from_estimate": round(pred.tokens_per_s, 3),
                     "estimate_error_pct": round(percent_error(pred.tokens_per_s, r["measured_tokens_per_s"]), 2),
                     "measured_speedup": r["measured_speedup"],
                     "speedup_from_estimate": round(pred.speedup_vs_ar or 1.0, 4)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="GPU check: profile a random-weight real-size model, replay traces "
                                 "through the runtime, compare with the roofline estimate, train exit heads.")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="run the same steps on CPU with small random models (also: PPSD_GPU_CHECK_CPU=1)")
    ap.add_argument("--out", help="output folder (default $OUT, else runs/gpu-check-<time>)")
    ap.add_argument("--model", help="random:ARCH to profile (default random:llama-2-7b; dry run: "
                    "random:smollm2-135m?layers=4)")
    ap.add_argument("--hardware", help="hardware-table key for the estimate (default: from the device name)")
    ap.add_argument("--dtype", help="default bfloat16 (dry run float32)")
    ap.add_argument("--prompts", type=int, help="prompts replayed by the runtime")
    ap.add_argument("--tokens", type=int, help="tokens per prompt")
    ap.add_argument("--repeats", type=int, help="profiler repeats per latency cell")
    ap.add_argument("--alpha-curve", metavar="FILE", help="α by relative depth for the traces (default: paper-like)")
    ap.add_argument("--budget-s", type=float, help="target seconds for the phases: phase 4's tokens shrink to fit, and it is "
                    "skipped when even 8 tokens would not fit (default 380: with gpu_check.sh's start-up, within 8 minutes)")
    ap.add_argument("--stop-after-s", type=float, help="hard stop: the running phase fails, the rest are skipped, "
                    "the summary is written (gpu_check.sh sets it from its --deadline-s)")
    ap.add_argument("--no-heads", action="store_true", help="skip phase 5 (the exit-head smoke)")
    ap.add_argument("--allow-transformers-mismatch", action="store_true",
                    help="run with a transformers other than the pinned one, once the calls ppsd makes are checked "
                    "against it (decoder-layer arguments, the init helper, a cached step)")
    args = ap.parse_args(argv)
    cpu = args.cpu_dry_run or os.environ.get("PPSD_GPU_CHECK_CPU") == "1"
    size = dict(SIZES["cpu" if cpu else "gpu"])
    for key in ("model", "dtype", "prompts", "tokens", "repeats", "budget_s"):
        if getattr(args, key, None) is not None:
            size[key] = getattr(args, key)
    if size["prompts"] < 1 or size["tokens"] < 2 or size["repeats"] < 1:
        return fail("--prompts, --tokens and --repeats must be positive (tokens at least 2)")
    if not str(size["model"]).startswith("random:"):
        return fail(f"--model {size['model']} is not a random:ARCH model; the check times random weights")
    if args.stop_after_s is not None and args.stop_after_s <= 0:
        return fail(f"--stop-after-s must be positive (got {args.stop_after_s:g})")

    try:
        import torch
    except ImportError:
        return fail("torch is not installed in this Python; install ppsd (pip install -e .) with a CUDA build of torch")
    mismatch = transformers_mismatch(args.allow_transformers_mismatch)
    if mismatch.startswith("error: "):
        return fail(mismatch.removeprefix("error: "))
    if cpu:
        torch.set_num_threads(1)
        device_name, gpus = "cpu", 0
        from runtime.request import available_cores

        cores = available_cores()
    else:
        if not torch.cuda.is_available():
            return fail(f"no CUDA GPU visible to torch {torch.__version__} (CUDA build: {torch.version.cuda}); "
                        "run this on a GPU machine, or pass --cpu-dry-run")
        gpus, cores = torch.cuda.device_count(), os.cpu_count() or 1
        device_name = torch.cuda.get_device_name(0)
    out = Path(args.out or os.environ.get("OUT") or ROOT / "runs" / f"gpu-check-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    return _check(args, size, cpu, torch, device_name, gpus, cores, out, mismatch)


def transformers_mismatch(allowed: bool) -> str:
    """"" when transformers is the pinned version; "allowed: ..." when it is not, --allow-transformers-
    mismatch was given and every call ppsd makes checks out against it (runtime/llm.py
    `transformers_call_problems`); "error: ..." otherwise (the fix named)."""
    import transformers

    from bench.gpu_check_env import pins

    have, pin = transformers.__version__, pins().get("transformers")
    if not pin or have == pin:
        return ""
    if not allowed:
        return (f"error: transformers {have} is installed but ppsd pins {pin}; carry the pinned wheel "
                "(bench/fetch_gpu_wheels.sh, then gpu_check.sh installs it), or pass --allow-transformers-mismatch")
    from runtime.llm import transformers_call_problems

    problems = transformers_call_problems()
    if problems:
        return (f"error: transformers {have} (ppsd pins {pin}) breaks a call ppsd makes: {problems[0]}"
                + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                + "; carry the pinned wheel (bench/fetch_gpu_wheels.sh)")
    return f"allowed: transformers {have}, not the pinned {pin}; the decoder-layer arguments, the init helper and a cached step checked out"


def _check(args, size, cpu, torch, device_name, gpus, cores, out: Path, mismatch: str = "") -> int:
    """The plan printed, the summary started, the phases run under the hard stop, the summary finished."""
    from bench.calibrate import hardware_key_for

    hw = args.hardware or hardware_key_for(device_name) or ("h200" if cpu else None)
    mslug, dslug = slug(size["model"]), slug(device_name)
    prof_dir, val_dir = out / f"profile-{mslug}-{dslug}", out / f"validation-{mslug}-{dslug}"
    heads_dir = out / f"heads-{slug(size['heads_model'])}-{dslug}"
    curve = Path(args.alpha_curve) if args.alpha_curve else out / "alpha-curve.csv"
    if not args.alpha_curve:
        curve.write_text(DEFAULT_CURVE)

    where = "CPU dry run" if cpu else (f"{gpus} GPU(s), {torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB")
    print(f"gpu_check on {device_name} ({where})")
    hop_how = ("one worker per GPU, NCCL" if gpus >= 2 else
               "both workers on the one GPU, gloo" if not cpu else "two CPU workers, gloo")
    print(f"  plan: 1 profile {size['model']} {size['dtype']}: n {size['n_values']} × context {size['context_values']}, "
          f"{size['warmup']}+{size['repeats']} steps per cell, then the hop and the pipeline probe ({hop_how}); "
          f"2 traces from {curve.name}; 3 roofline estimate on "
          f"{hw or '(no hardware-table entry: skipped)'} + fit; 4 validate AR/EESD/PPSD with forced traces, "
          f"{size['prompts']} prompts × {size['tokens']} tokens, {size['run_warmup']}+{size['run_repeats']} runs each; "
          f"5 heads train + eval on {size['heads_model']} (~{size['heads_s']:.0f} s); "
          f"budget {size['budget_s']:.0f} s in all"
          + (f", hard stop at {args.stop_after_s:.0f} s" if args.stop_after_s else ""))
    print(f"  output: {out}")
    summary = {"device_name": device_name, "gpu_count": gpus, "cpu_dry_run": cpu, "model": size["model"],
               "dtype": size["dtype"], "hardware_key": hw, "torch": torch.__version__, "versions": versions(),
               "sizes": size, "profile": prof_dir.name, "validation": None, "estimate": None, "calibration": None,
               "heads": None, "paths": [], "notes": []}
    if mismatch:
        summary["transformers_mismatch_allowed"] = True
        summary["notes"].append(mismatch.removeprefix("allowed: "))
    summary_path = out / f"gpu_check-{mslug}-{dslug}.json"
    ph = Phases(summary, summary_path)
    state = RunState(cpu=cpu, gpus=gpus)
    summary["paths"] = [asdict(r) for r in path_reports(state)]
    ph.save()  # from the start: a run killed in phase 1 still leaves the plan and "running"
    settings = CheckSettings(args=args, size=size, cpu=cpu, device_name=device_name, gpus=gpus, cores=cores,
                             out=out, hw=hw, mslug=mslug, dslug=dslug, prof_dir=prof_dir, val_dir=val_dir,
                             heads_dir=heads_dir, curve=curve)
    previous = arm_deadline(args.stop_after_s)
    try:
        _phases(settings, summary, ph, state)
    except Deadline as exc:
        disarm(previous)
        summary["stopped"] = f"at {ph.elapsed():.0f} s: {exc}"
        for name in PHASES:
            if ph.status[name]["status"] in ("pending", "running"):
                ph.skip(name, f"stopped before it: {exc}")
    finally:
        disarm(previous)  # writing the summary and packing the results must not be cut short
        summary["paths"] = [asdict(r) for r in path_reports(state)]
        print_paths(path_reports(state))
    return finish(ph, summary, summary_path, out)


@dataclass
class RunState:
    """What the check went through, for `path_reports`."""

    cpu: bool
    gpus: int
    profile_ok: bool = False
    hop: dict | None = None            # the profile's latency.hop
    pipeline: dict | None = None       # the profile's latency.pipeline (the probe)
    profile_warnings: tuple[str, ...] = ()
    validated_modes: tuple[str, ...] = ()
    heads_ok: bool = False
    heads_latency: dict | None = None  # `ppsd heads eval --latency-out`


def path_reports(s: RunState) -> list[PathReport]:
    """Each CUDA path and whether this run went through it (on the GPU, or on the CPU in the dry run)."""
    cuda = not s.cpu
    dev = "the CPU" if s.cpu else ("one GPU" if s.gpus == 1 else f"{s.gpus} GPUs")
    warn = {k: next((w for w in s.profile_warnings if w.startswith(k)), None) for k in ("hop", "pipeline probe")}
    why_not_run = "phase 1 did not finish" if not s.profile_ok else None
    hop_backend = (s.hop or {}).get("backend")
    probe_backend = (s.pipeline or {}).get("backend")
    # the worker probe went through its path where its figures stand, or where the profile dropped a
    # reading that stayed unphysical (the runtime probe's block alone has no backend)
    probe_ran = probe_backend is not None or "not physical" in (warn["pipeline probe"] or "")
    ppsd_ran = "ppsd" in s.validated_modes
    out = [
        PathReport("cuda_event_timing", s.profile_ok, cuda and s.profile_ok,
                   ("per-layer / head / embedding tables timed with CUDA events" if cuda else "perf_counter (CPU)")
                   if s.profile_ok else why_not_run),
        PathReport("spawn_workers", s.hop is not None or s.pipeline is not None,
                   cuda and (s.hop is not None or s.pipeline is not None),
                   f"the profiler's two spawned worker processes on {dev} (hop and probe)"
                   if (s.hop or s.pipeline) else (why_not_run or "no hop and no probe was measured")),
        PathReport("hop", s.hop is not None, cuda and s.hop is not None,
                   f"idle ping-pong over {hop_backend}" if s.hop else (warn["hop"] or why_not_run or "not measured")),
        PathReport("pipeline_probe", probe_ran, cuda and probe_ran,
                   (f"two stand-in stages over {probe_backend}, the runtime's transport, clocks synchronised on "
                    "the compute stream only") if probe_backend
                   else (f"ran; its reading was dropped: {warn['pipeline probe']}" if probe_ran
                         else warn["pipeline probe"] or why_not_run or "not measured")),
        PathReport("nccl", hop_backend == "nccl" or (ppsd_ran and cuda), hop_backend == "nccl" or (ppsd_ran and cuda),
                   "hidden states between GPUs over NCCL (hop, probe" + (", PPSD stages)" if ppsd_ran else ")")
                   if hop_backend == "nccl" else
                   ("NCCL needs 2 GPUs (it refuses two ranks on one GPU); the hop and the probe used gloo here"
                    if cuda else "CPU dry run: gloo only")),
        PathReport("spawn_stages", ppsd_ran and cuda, ppsd_ran and cuda,
                   "PPSD stage processes spawned by runtime.launch.run_local, one per GPU" if ppsd_ran and cuda else
                   (("PPSD stages need one GPU each (NCCL refuses two ranks on one GPU); tests/test_launch.py "
                     "runs the spawn start method on CPU") if cuda and s.gpus < 2 else
                    "phase 4 did not finish" if not s.validated_modes else
                    "no PPSD plan ran (too few cores)" if not ppsd_ran else
                    "CPU stages fork (ppsd validate ran PPSD); tests/test_launch.py runs spawn on CPU")),
        PathReport("runtime_ar_eesd", bool(s.validated_modes), cuda and bool(s.validated_modes),
                   f"ppsd validate ran {', '.join(s.validated_modes)} on {dev}" if s.validated_modes
                   else "phase 4 did not finish"),
        PathReport("heads", s.heads_ok, cuda and s.heads_ok,
                   (f"ppsd heads train / eval on {dev}; exit heads and the shared head timed with "
                    + ("CUDA events" if cuda else "perf_counter")) if s.heads_ok else "phase 5 did not finish"),
    ]
    return out


def print_paths(reports: list[PathReport]) -> None:
    print("\npaths:")
    for r in reports:
        mark = ("ran on CUDA" if r.on_cuda else "ran (CPU)") if r.ran else "NOT run"
        print(f"  {r.path:18} {mark:12} {r.detail}")


@dataclass
class CheckSettings:
    """What the phases read: the command line, the sizes (SIZES with the command line's overrides;
    phase 4 may cut its tokens), the machine, and where each result goes."""

    args: argparse.Namespace
    size: dict
    cpu: bool
    device_name: str
    gpus: int
    cores: int
    out: Path
    hw: str | None       # the hardware-table key of the estimate (None: phase 3 is skipped)
    mslug: str           # the model and the device, as they appear in the file names
    dslug: str
    prof_dir: Path
    val_dir: Path
    heads_dir: Path
    curve: Path          # the α-by-depth curve the traces are drawn from


def _note(summary: dict, text: str) -> None:
    """Print a note and keep it in the summary."""
    print(text)
    summary["notes"].append(text)


def _exit_code(what: str):
    """A `Phases.run` check of a `ppsd` command's exit code."""
    return lambda rc: None if rc == 0 else f"ppsd {what} exited with code {rc} (see the log above)"


def _phases(s: CheckSettings, summary: dict, ph: Phases, state: RunState) -> None:
    """The five phases in order: a failed phase skips the phases that need it; phase 5 needs none of
    the others and runs whatever happened before it."""
    ok = _profile_phase(s, summary, ph, state)
    traces = None
    if not ok:
        for name in ("2 traces", "3 estimate", "4 validate"):
            ph.skip(name, "needs the profile of phase 1")
    else:
        ok, traces = ph.run("2 traces", lambda: attach_traces(s.prof_dir, s.curve, s.size["prompts"],
                                                              s.size["tokens"]))
        if not ok:
            for name in ("3 estimate", "4 validate"):
                ph.skip(name, "needs the traces of phase 2")
    if ok:
        _estimate_and_validate(s, traces, summary, ph, state)
    if s.args.no_heads:
        ph.skip("5 heads", "--no-heads")
    else:
        _heads(s, ph, state, summary)


def _profile_phase(s: CheckSettings, summary: dict, ph: Phases, state: RunState) -> bool:
    """Phase 1: `ppsd profile` (latency only) of the model on the device; what it measured of the hop
    and the pipeline probe goes into `state`. True when it passed."""
    # the hop and the pipeline probe run on every machine: across GPUs over NCCL, else two
    # processes on the one GPU (or CPU) over gloo, which still goes through spawned CUDA workers,
    # the runtime's transport and the probe's clocks
    size = s.size
    argv = ["profile", "--model", size["model"], "--device", size["device"], "--dtype", size["dtype"],
            "--skip-acceptance", "--n-values", size["n_values"], "--context-values", size["context_values"],
            "--repeats", size["repeats"], "--warmup", size["warmup"], "--corun-max", 1,
            "--batch-sizes", size["batch_sizes"], "--out", s.prof_dir]
    ok, _ = ph.run("1 profile", lambda: ppsd(*argv), _exit_code("profile"))
    if ok:
        from ppsd.profile import load_profile

        prof = load_profile(s.prof_dir)
        state.profile_ok = True
        state.hop, state.pipeline = prof.latency.get("hop"), prof.latency.get("pipeline")
        state.profile_warnings = tuple(w for w in prof.meta.get("warnings", []) if w.startswith(("hop", "pipeline")))
        for w in state.profile_warnings:
            _note(summary, f"profile: {w}")
    if not s.cpu:
        import torch

        torch.cuda.empty_cache()
    return ok


def _estimate_and_validate(s: CheckSettings, traces, summary: dict, ph: Phases, state: RunState) -> None:
    """Phases 3 and 4 on the traced profile: the estimate (the validation goes on without it), then
    the validation of the plans this machine has room for, its tokens fitted to the budget left."""
    from ppsd.profile import load_profile

    df, gens, _ = traces
    measured = load_profile(s.prof_dir)
    ok, est_dir = ph.run("3 estimate", lambda: _estimate(s, measured, df, gens, summary))
    if not ok:  # the validation does not need the estimate: carry on without it
        est_dir = None
    plans, why = choose_plans(measured.num_layers, s.gpus, s.cpu, s.cores)
    if why:
        _note(summary, why)
    summary["plans"] = plans
    reserve = 0.0 if s.args.no_heads else s.size["heads_s"]  # phase 5 comes after: keep its time
    tokens, why = fit_tokens(s.size, plans, measured, ph.elapsed(), s.cpu, reserve)
    if tokens is None:
        ph.skip("4 validate", why)
        _note(summary, f"validate skipped: {why}")
    else:
        if why:
            _note(summary, why)
        _validate(s, tokens, plans, est_dir, ph, state, summary)


def _estimate(s: CheckSettings, measured, df, gens, summary: dict) -> Path | None:
    """Phase 3: the fit of the roofline's efficiency factors to the measured profile, and the
    roofline estimate of the same architecture on this GPU's hardware-table entry, as modelled and
    with the fitted factors, carrying the same traces; returns the estimate's folder (None without
    a hardware-table entry)."""
    if s.hw is None:
        _note(summary, f"estimate skipped: no hardware-table entry matches {s.device_name!r} (give --hardware)")
        return None
    from bench.calibrate import arch_for, calibrate, format_report
    from ppsd.paths import atomic_dir, atomic_write_json
    from ppsd.profile import save_profile
    from profiler.estimated_profile import analytic_profile_meta

    n_layers, gpu_count = measured.num_layers, max(s.gpus, 1)
    fit = calibrate(s.prof_dir, None, s.hw, None)
    print(format_report(fit))
    shape, cut = arch_for(measured, None)
    est_dir = s.out / f"estimate-{slug(shape.name)}{f'-l{n_layers}' if cut else ''}-{s.hw}"
    fit_file = f"calibration-{s.mslug}-{s.dslug}.json"
    meta = analytic_profile_meta(shape, s.hw, fit["dtype"], None, n_values=measured.n_values,
                                 context_values=measured.context_values, gpu_count=gpu_count)
    meta["acceptance"] = dict(measured.meta["acceptance"])
    meta["calibration"] = {"file": fit_file, "measured_profile": s.prof_dir.name}
    with atomic_dir(est_dir) as tmp:
        save_profile(tmp, meta, acceptance=df, generations=gens)
    # the same estimate with the fitted factors (the recommended reading of the fit)
    rec = fit["recommended"]
    cal = analytic_profile_meta(shape, s.hw, fit["dtype"], None, n_values=measured.n_values,
                                context_values=measured.context_values, gpu_count=gpu_count,
                                bandwidth_efficiency=min(max(rec["bandwidth_efficiency"], 1e-4), 1.0),
                                launch_us=max(rec["launch_us"], 0.0))
    cal["acceptance"], cal["calibration"] = meta["acceptance"], dict(meta["calibration"], reading=rec["reading"])
    with atomic_dir(est_dir.with_name(est_dir.name + "-calibrated")) as tmp:
        save_profile(tmp, cal, acceptance=df, generations=gens)
    atomic_write_json(s.out / fit_file, fit)
    summary["estimate"], summary["calibration"] = est_dir.name, fit_file
    summary["roofline_per_layer_mape_pct"] = {"before": round(fit["mape_pct_before"], 2),
                                              "after": round(fit["mape_pct_after"], 2),
                                              "other_reading": round(fit["alternative"]["mape_pct"], 2)}
    return est_dir


def _validate(s: CheckSettings, tokens: int, plans: list[str], est_dir: Path | None, ph: Phases, state: RunState,
              summary: dict) -> None:
    """Phase 4: `ppsd validate --force-trace` of the plans (the traces re-drawn first when the budget
    cut the tokens), then each plan predicted from the estimate beside the measurement."""
    from ppsd.profile import load_profile

    size = s.size

    def validate():
        if tokens != size["tokens"]:  # shorter traces, and the estimates replay the very same ones
            size["tokens"] = tokens
            new_df, new_gens, _ = attach_traces(s.prof_dir, s.curve, size["prompts"], tokens)
            if est_dir is not None:
                from ppsd.paths import atomic_dir
                from ppsd.profile import save_profile

                acc = dict(load_profile(s.prof_dir).meta["acceptance"])
                for d in (est_dir, est_dir.with_name(est_dir.name + "-calibrated")):
                    meta = dict(load_profile(d).meta, acceptance=acc)
                    with atomic_dir(d) as tmp:
                        save_profile(tmp, meta, acceptance=new_df, generations=new_gens)
        return ppsd("validate", "--profile", s.prof_dir, "--plans", ";".join(plans), "--force-trace",
                    "--repeats", size["run_repeats"], "--warmup", size["run_warmup"], "--out", s.val_dir)

    ok, _ = ph.run("4 validate", validate, _exit_code("validate"))
    if not ok:
        return
    summary["validation"] = s.val_dir.name
    doc = json.loads((s.val_dir / "validation.json").read_text())
    state.validated_modes = tuple(sorted({r["mode"] for r in doc["rows"]} | {"ar"}))
    summary["mape_speedup_pct"], summary["mape_tokens_per_s_pct"] = (doc["mape_speedup_pct"],
                                                                     doc["mape_tokens_per_s_pct"])
    if est_dir is not None:
        try:
            rows = estimate_vs_measured(est_dir, s.val_dir)
        except Exception as exc:  # noqa: BLE001 - an extra reading; the validation stands without it
            _note(summary, f"estimate vs measured failed: {one_line(exc)}")
        else:
            summary["estimate_vs_measured"] = rows
            print_estimate_rows(rows)


def _heads(s: CheckSettings, ph: Phases, state: RunState, summary: dict) -> None:
    """Phase 5: `ppsd heads train` and `ppsd heads eval` on the device, briefly: the head code on
    the device (collection, the closed-form fit and distillation, reduced-vocabulary heads, scoring)
    and each head's draft timed with the CUDA-event clock the profiler times the shared head with.
    Its work files and the trained weights go to a private temporary folder (a rerun must not reuse
    an earlier run's collection, and a 7B shape's adapters, 64 MB an exit, would swell the archive
    past what a device call brings back); heads.json, eval.csv and latency.json are kept."""
    size, heads_dir = s.size, s.heads_dir
    latency_json = heads_dir / "latency.json"

    def heads():
        saved = os.environ.get("PPSD_CACHE")
        with tempfile.TemporaryDirectory(prefix="ppsd-gpu-check-cache-") as cache:
            os.environ["PPSD_CACHE"] = cache
            trained = Path(cache) / "heads"
            try:
                common = ["--device", size["device"], "--dtype", size["heads_dtype"], "--quiet"]
                rc = ppsd("heads", "train", "--model", size["heads_model"], "--exits", size["heads_exits"],
                          "--prompts", "builtin", "--per-category", 1, "--heldout-per-category", 1,
                          "--max-new-tokens", size["heads_tokens"], "--epochs", 1,
                          "--vocab-sizes", size["heads_vocab"], "--out", trained, *common)
                if rc != 0:
                    return f"ppsd heads train exited with code {rc} (see the log above)"
                heads_dir.mkdir(parents=True, exist_ok=True)
                from ppsd.paths import atomic_write_text

                atomic_write_text(heads_dir / "heads.json", (trained / "heads.json").read_text())
                rc = ppsd("heads", "eval", "--heads", trained, "--out", heads_dir / "eval.csv",
                          "--latency-out", latency_json, *common)
                if rc != 0:
                    return f"ppsd heads eval exited with code {rc} (see the log above)"
            finally:
                if saved is None:
                    os.environ.pop("PPSD_CACHE", None)
                else:
                    os.environ["PPSD_CACHE"] = saved
        lat = json.loads(latency_json.read_text())
        bad = [k for k, v in {"shared": lat["shared"], **lat["exit_heads"]}.items()
               if not all(m > 0 for m in v["median_ms"])]
        return f"heads eval timed {', '.join(bad)} at 0 ms or less" if bad else None

    ok, _ = ph.run("5 heads", heads, lambda err: err)
    if ok:
        lat = json.loads(latency_json.read_text())
        state.heads_ok, state.heads_latency = True, lat
        summary["heads"] = heads_dir.name
        summary["heads_draft_ms_n1"] = {"shared": lat["shared"]["median_ms"][0],
                                        **{k: v["median_ms"][0] for k, v in lat["exit_heads"].items()}}


def versions() -> dict:
    """What the check ran with, beside the project's pins (torch is the image's, never carried)."""
    import importlib.metadata as md

    from bench.gpu_check_env import pins

    got = {}
    for dist in ("torch", "transformers", "simpy", "numpy", "scipy", "pandas", "huggingface-hub", "tokenizers",
                 "safetensors", "accelerate", "rich"):
        try:
            got[dist] = md.version(dist)
        except md.PackageNotFoundError:
            got[dist] = None
    return {"python": sys.version.split()[0], "installed": got,
            "pinned": {k: v for k, v in pins().items() if k in got}}


def fit_tokens(size: dict, plans: list[str], measured, elapsed: float, cpu: bool,
               reserve_s: float = 0.0) -> tuple[int | None, str | None]:
    """Tokens per prompt for phase 4 within the budget less `reserve_s` (what phase 5, after it,
    needs): (tokens, a note when cut) or (None, why it is skipped). Phase 4 decodes, per plan and
    for AR, prompts × (warm-up + repeats) runs, plus one AR run per plan after it (the bracketing
    AR of `ppsd validate`); each PPSD plan starts its stage processes (GPU: spawned, each loads the
    model, ~40 s; CPU: forked, a few seconds)."""
    step_s = float((measured.latency.get("whole_step") or {}).get("median_ms") or 50.0) / 1e3
    per_token = step_s * 1.3  # EESD / PPSD rounds and Python overhead on top of the measured step
    runs = ((len(plans) + 1) * size["prompts"] * (size["run_warmup"] + size["run_repeats"])
            + len(plans) * size["prompts"])
    fixed = 20.0 + (5.0 if cpu else 40.0) * sum(p.startswith("ppsd") for p in plans)
    budget = size["budget_s"] - reserve_s
    left = budget - elapsed - fixed
    tokens = size["tokens"]
    predicted = runs * tokens * per_token
    print(f"phase 4 predicted: ~{fixed + predicted:.0f} s ({runs} runs × {tokens} tokens at "
          f"{step_s * 1e3:.1f} ms/token + start-up); {budget - elapsed:.0f} s left in the budget"
          + (f" (less {reserve_s:.0f} s kept for phase 5)" if reserve_s else ""))
    least = min(8, tokens)
    if left < runs * least * per_token:
        return None, (f"{elapsed:.0f} s spent; {runs} runs of even {least} tokens and the start-up (~{fixed:.0f} s) "
                      f"would not fit the {size['budget_s']:.0f} s budget"
                      + (f" with {reserve_s:.0f} s kept for phase 5" if reserve_s else "") + " (raise --budget-s)")
    if predicted > left:
        cut = max(least, int(tokens * left / predicted))
        return cut, f"tokens per prompt cut from {tokens} to {cut} to fit the budget"
    return tokens, None


def print_estimate_rows(rows: list[dict]) -> None:
    print("\nplan-level: measured vs predicted from the measured profile vs from the roofline estimate")
    print(f"  {'plan':28} {'meas tok/s':>10} {'sim(meas)':>10} {'sim(est)':>10} {'err %':>8} "
          f"{'sim(calib)':>10} {'err %':>8}")
    for r in rows:
        print(f"  {r['plan']:28} {r['measured_tokens_per_s']:10.2f} "
              f"{r['predicted_from_measured_profile']:10.2f} {r['predicted_from_estimate']:10.2f} "
              f"{r['estimate_error_pct']:8.1f} {r.get('predicted_from_calibrated_estimate', float('nan')):10.2f} "
              f"{r.get('calibrated_estimate_error_pct', float('nan')):8.1f}")


def finish(ph: Phases, summary: dict, path: Path, out: Path) -> int:
    """The final summary; 0 when no phase failed (a validation skipped for the budget is not a
    failure), else 1 with one line naming the failed phases."""
    ph.save()
    print(f"\ngpu_check done in {ph.elapsed():.0f} s: " + ", ".join(f"{k} {v:.0f} s" for k, v in ph.times.items())
          + f" -> {out}")
    failed = ph.failed()
    if summary.get("stopped") and not failed:
        print(f"gpu_check: error: stopped {summary['stopped']}; every phase's status is in {path}",
              file=sys.stderr, flush=True)
        return 1
    if failed:
        first = ph.status[failed[0]]
        print(f"gpu_check: error: phase {', '.join(failed)} failed ({first.get('error')}); every phase's status is "
              f"in {path}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
