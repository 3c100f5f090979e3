"""`ppsd profile` and `ppsd profile show DIR`.

Torch is imported inside the handlers only, so `ppsd --help` and the other parts start fast.

A run goes through its phases (load, latency, co-run + hop, generate, trace) keeping finished work
in a folder under the cache (`<cache>/work/profile-<key>`, the key hashing everything that decides
the result). The profile folder appears only at the end, all at once (temp folder + rename);
an interrupted run leaves the work folder, and `--resume` with the same arguments picks it up.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import shutil
import signal
import time
from pathlib import Path

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from ppsd.profile import MEASURED_N_VALUES  # torch-free; profiler.latency.DEFAULT_N_VALUES is this

DEFAULT_MODEL = "smollm2-135m"


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like '1,2,4', got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def parse_temperatures(text: str | None) -> list[float]:
    """'0.3,0.7,1.0' -> [0.3, 0.7, 1.0] (sorted, unique, each > 0); UserError otherwise."""
    if text is None or not str(text).strip():
        return []
    try:
        values = sorted({round(float(v), 6) for v in str(text).replace(",", " ").split()})
    except ValueError:
        raise UserError(f"--temperatures {text!r} is not a list of numbers", "write e.g. --temperatures 0.3,0.7,1.0") \
            from None
    if any(not math.isfinite(v) or v <= 0 for v in values):
        raise UserError(f"--temperatures {text!r} must all be > 0 (greedy is always recorded)",
                        "write e.g. --temperatures 0.3,0.7,1.0")
    return values


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "profile", help="measure a model on this device: per-layer latency and per-exit acceptance",
        description="Profile a model: per-layer latency over (new tokens x context), head, embedding, hop "
                    "and co-run slowdown, then per-exit match traces and beta on a prompt set. Writes one "
                    "profile folder; `ppsd profile show DIR` prints its summary.")
    _add_model_and_prompts(p)
    _add_latency_options(p)
    p.add_argument("--heads", default=None, metavar="DIR",
                   help="exit-head folder from `ppsd heads train`: also record its heads' drafting latency and "
                        "acceptance")
    p.add_argument("--heldout", action="store_true",
                   help="with --heads: profile only prompts the heads were not trained on (out of sample)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run with the same arguments")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="profile folder to write (default runs/profile-<model>-<device>-<time>)")
    p.add_argument("--force", action="store_true",
                   help="replace the profile folder --out names (it stays intact until the new one is complete)")
    from profiler.analytic_cli import add_analytic_arguments  # torch-free

    add_analytic_arguments(p)
    p.set_defaults(func=run_profile)
    _register_subcommands(p)


def _add_model_and_prompts(p) -> None:
    """What is profiled: the model, where, and the prompts its acceptance is traced on."""
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="smollm2-135m (embedded, default), tiny-llama, random:ARCH, a Hugging Face folder, a .gguf "
                        "or a cached hub id")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda (or its alias gpu) or cuda:N")
    p.add_argument("--dtype", default="float32", help="float32 (default), bfloat16, float16")
    p.add_argument("--prompts", default=None, metavar="FILE|spec-bench",
                   help="Spec-Bench-format JSONL, or `spec-bench` for the copy beside the checkout "
                        "(default: the 26 built-in prompts)")
    p.add_argument("--per-category", type=int, default=None, metavar="K", help="keep K prompts per category")
    p.add_argument("--limit", type=int, default=None, metavar="K", help="keep at most K prompts")
    p.add_argument("--max-new-tokens", type=int, default=48, help="greedy tokens generated per prompt (48)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="temperature of the legacy beta column along the greedy trajectory (1.0; 0 = greedy)")
    p.add_argument("--temperatures", default=None, metavar="0.7,1.0",
                   help="also record β sampled at these temperatures (> 0), for `--temperature T` in simulate, plan "
                        "and validate")
    p.add_argument("--sample-seed", type=int, default=0, help="seed of the sampled continuations (0)")
    p.add_argument("--sampled-trajectories", type=int, default=1, metavar="N",
                   help="sampled continuations per prompt and temperature, averaged (seeds --sample-seed, +1, ...; 1)")
    p.add_argument("--batch-size", type=int, default=32, help="prompts generated at once (32)")
    p.add_argument("--skip-acceptance", action="store_true", help="latency only (no prompts, no traces)")
    p.add_argument("--skip-latency", action="store_true",
                   help="acceptance only; latency shrinks to a quick n=1 table so the profile stays usable")


def _add_latency_options(p) -> None:
    """How the latency tables, the co-run slowdown, the hop and the control plane are measured."""
    p.add_argument("--n-values", type=_int_list, default=None, metavar="1,2,...,9,16",
                   help="new tokens per timed step (default 1-9 and 16)")
    p.add_argument("--context-values", type=_int_list, default=[64, 256, 1024], metavar="64,256,1024",
                   help="tokens already in the KV cache per timed step")
    p.add_argument("--repeats", type=int, default=10,
                   help="timed rounds of the latency grid, each timing every cell once at every thread count (10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds of the latency grid first (2)")
    p.add_argument("--corun-max", type=int, default=None, metavar="K",
                   help="measure the co-run slowdown with 2..K concurrent processes (default: cores, at most 4; "
                        "1 turns it off)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (1, recorded)")
    p.add_argument("--thread-counts", type=_int_list, default=None, metavar="1,2",
                   help="also time the tables at these thread counts, for same-budget baselines (default on a CPU: "
                        "1..cores; 1 = off)")
    p.add_argument("--batch-sizes", type=_int_list, default=[1, 2, 4, 8], metavar="1,2,4,8",
                   help="also time passes of B sequences at once, what `ppsd plan --batch` prices (default 1,2,4,8; "
                        "1 = off)")
    p.add_argument("--no-hop", action="store_true",
                   help="do not measure the inter-process hop (nor the pipeline probes)")
    p.add_argument("--control-plane-stages", type=_int_list, default=None, metavar="2,4,8",
                   help="also measure the PPSD control plane (pass cost, message transit) at these stage counts "
                        "(default: off)")


def _register_subcommands(p) -> None:
    sub = p.add_subparsers(dest="profile_command", metavar="show|add-sampling|add-hf|add-batch|upgrade")
    show = sub.add_parser("show", help="print the summary of a profile folder")
    show.add_argument("dir", help="profile folder")
    show.set_defaults(func=run_show)
    add = sub.add_parser("add-sampling", help="measure what drawing a token at T > 0 costs on this machine and add it "
                                              "to a profile made without it (latency.sampling)")
    add.add_argument("dir", help="measured profile folder (rewritten in place, atomically)")
    add.add_argument("--threads", type=int, default=None,
                     help="torch threads (default: the profile's timing.threads)")
    add.add_argument("--device", default=None, help="cpu or cuda[:N] (default: the profile's device)")
    add.add_argument("--force", action="store_true", help="replace a sampling table the profile already has")
    add.set_defaults(func=run_add_sampling)
    from profiler.hf_overhead import register_add_hf  # torch-free at import

    register_add_hf(sub, p)
    from profiler.batch_cli import register_add_batch  # torch-free at import

    register_add_batch(sub)
    from ppsd.profile.upgrade import register_upgrade  # torch-free

    register_upgrade(sub)


# --- checks that need no model ----------------------------------------------------------------------

def _check_args(args) -> None:
    from ppsd.devices import normalize_device

    # "gpu" becomes "cuda" before anything reads it (folder names, cache keys, the worker backends)
    args.device = normalize_device(args.device)

    def positive(name, value, minimum=1):
        if value < minimum:
            raise UserError(f"--{name} must be at least {minimum} (got {value})", f"give --{name} {minimum} or more")

    if args.n_values is None:  # torch-free default (profiler/latency.py imports torch)
        args.n_values = list(MEASURED_N_VALUES)
    positive("max-new-tokens", args.max_new_tokens)
    positive("repeats", args.repeats)
    positive("warmup", args.warmup, 0)
    positive("threads", args.threads)
    for t in args.thread_counts or []:
        positive("thread-counts", t)
    positive("batch-size", args.batch_size)
    for b in args.batch_sizes:
        positive("batch-sizes", b)
    if args.corun_max is not None:
        positive("corun-max", args.corun_max)
    if not (args.temperature >= 0):
        raise UserError(f"--temperature must be 0 or more (got {args.temperature})", "give e.g. --temperature 1.0")
    args.temperature_list = parse_temperatures(getattr(args, "temperatures", None))
    if int(getattr(args, "sampled_trajectories", 1) or 0) < 1:
        raise UserError(f"--sampled-trajectories {args.sampled_trajectories} samples nothing",
                        "give --sampled-trajectories 1 or more (e.g. 3)")
    if args.temperature_list and args.skip_acceptance:
        raise UserError("--temperatures needs acceptance measurement", "drop --skip-acceptance")
    for name, values in (("n-values", args.n_values), ("context-values", args.context_values)):
        if min(values) < 1:
            raise UserError(f"--{name} must all be at least 1 (got {values})", f"give e.g. --{name} 1,2,4")
    if getattr(args, "heldout", False) and not getattr(args, "heads", None):
        raise UserError("--heldout drops the prompts exit heads were trained on", "add --heads DIR, or drop --heldout")
    for k in getattr(args, "control_plane_stages", None) or []:
        positive("control-plane-stages", k, 2)
    if args.skip_acceptance and args.skip_latency:
        raise UserError("--skip-acceptance and --skip-latency together leave nothing to profile",
                        "drop one of them")
    _check_model_args(args)


def _check_model_args(args) -> None:
    """The model spec, dtype and the flags that name its layers, from its shape or config.json (no weights)."""
    from runtime.model_shape import check_dtype, layer_count

    check_dtype(args.dtype)
    layers = layer_count(args.model)  # refuses a spec nothing could load
    if getattr(args, "hf_exits", None) is not None:
        from profiler.hf_overhead import check_hf_args

        check_hf_args(args, added_later=False, num_layers=layers)


def _check_out(out: Path, force: bool) -> None:
    """--out before any work: a new folder, or an earlier profile folder with --force."""
    from ppsd.paths import check_output_folder
    from ppsd.profile import PROFILE_FILE

    check_output_folder(out, "--out", force=force, marker=PROFILE_FILE, what="profile folder")


def _default_out(model: str, device: str) -> Path:
    from ppsd.paths import RUNS_DIR

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(model).name.removesuffix(".gguf"))
    return RUNS_DIR / f"profile-{name}-{device}-{stamp}"


def _heads_fingerprint(folder: str) -> str:
    from profiler.heads.profiling import fingerprint
    from runtime.heads.store import read_meta

    read_meta(folder)  # a missing or foreign folder is a UserError before any work
    return fingerprint(folder)


def _work_key(args, prompts, corun_max: int) -> str:
    blob = json.dumps({
        "model": args.model, "model_path": str(Path(args.model).expanduser().resolve()) if os.sep in args.model else "",
        "device": args.device, "dtype": args.dtype,
        "prompts": [[p.prompt_id, p.category, p.text] for p in prompts],
        "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
        **({"temperatures": args.temperature_list, "sample_seed": args.sample_seed,
            **({"trajectories": args.sampled_trajectories}
               if getattr(args, "sampled_trajectories", 1) != 1 else {})}
           if getattr(args, "temperature_list", None) else {}),
        "n": args.n_values, "c": args.context_values, "repeats": args.repeats, "warmup": args.warmup,
        "corun": corun_max, "threads": args.threads, "thread_counts": args.thread_counts, "skip": [args.skip_acceptance, args.skip_latency, args.no_hop],
        **({"heads": _heads_fingerprint(args.heads)} if getattr(args, "heads", None) else {}),
    }, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --- the profile command ------------------------------------------------------------------------------

def run_profile(args) -> int:
    if getattr(args, "analytic", False):
        from profiler.analytic_cli import run_analytic

        return run_analytic(args)
    _check_args(args)
    out = Path(args.out).expanduser() if args.out else _default_out(args.model, args.device)
    _check_out(out, bool(getattr(args, "force", False)))
    from ppsd.prompts import load_prompts

    exclude = _heads_training_prompts(args.heads) if getattr(args, "heldout", False) else None
    prompts = [] if args.skip_acceptance else load_prompts(args.prompts, args.per_category, args.limit,
                                                           exclude=exclude)
    cores = os.cpu_count() or 1
    corun_max = args.corun_max if args.corun_max is not None else max(1, min(cores, 4))
    if args.skip_latency:
        corun_max = 1

    from ppsd.paths import cache_dir

    work = cache_dir() / "work" / f"profile-{_work_key(args, prompts, corun_max)}"
    if not args.resume and work.exists():
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)

    # SIGTERM (a killed job, a closed terminal) ends the run like Ctrl-C: work kept, no output.
    old_term = signal.signal(signal.SIGTERM, _raise_interrupt) if _main_thread() else None
    try:
        meta, results, head_rows, sampled = _profile(args, prompts, corun_max, work)
    except KeyboardInterrupt:
        raise UserError(f"profiling was interrupted; finished work is kept in {work} and no profile was written",
                        "rerun the same command with --resume to continue") from None
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)

    if exclude and meta.get("acceptance"):
        # additive: the heads' training prompts were left out, so their rows are out of sample
        meta["acceptance"]["heldout_from_heads"] = True
        meta["acceptance"]["excluded_training_prompts"] = len(exclude)
    _write_profile(out, meta, results, head_rows, sampled)
    shutil.rmtree(work, ignore_errors=True)
    from ppsd.profile import load_profile

    profile = load_profile(out)
    print_summary(profile)
    print(f"\nprofile written to {out}  ({meta['profiling']['wall_s']:.0f} s)")
    if getattr(args, "hf_exits", None):  # transformers' assisted generation, right after the tables
        from profiler.hf_overhead import run_hf_block

        run_hf_block(out, args, added_later=False)
    return 0


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _quiet_transformers() -> None:
    # Its weight-loading bar would interleave with ours (and repeat once per worker process).
    from transformers.utils import logging

    logging.disable_progress_bar()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _heads_training_prompts(heads_dir: str) -> set[str]:
    """The prompt ids a head folder was trained on (its heads.json), for --heldout."""
    from runtime.heads.store import HEADS_FILE

    f = Path(heads_dir).expanduser() / HEADS_FILE
    try:
        ids = (json.loads(f.read_text()).get("training") or {}).get("train_prompt_ids")
    except (OSError, json.JSONDecodeError):
        raise UserError(f"--heads {heads_dir} has no readable {HEADS_FILE}", "give a folder from `ppsd heads train`") \
            from None
    if not ids:
        raise UserError(f"--heads {heads_dir} does not list its training prompts", "re-train it with `ppsd heads train`")
    return {str(i) for i in ids}


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _profile(args, prompts, corun_max: int, work: Path) -> tuple[dict, list | None, object, dict | None]:
    """All the measuring, phase by phase; returns profile.json content, the per-prompt acceptance
    results, the trained heads' acceptance rows (None without --heads) and the sampled-trajectory
    results {T: [PromptResult]} (None without --temperatures)."""
    # Imported before the clock starts, so `load` and `wall_s` time the model and the measuring,
    # not the import of torch and transformers.
    import profiler.acceptance  # noqa: F401
    import profiler.latency  # noqa: F401
    import runtime.llm  # noqa: F401
    from ppsd.progress import PhaseBars

    t_start = time.perf_counter()
    phases: dict[str, float] = {}
    adapter = _load_model(args)
    phases["load"] = time.perf_counter() - t_start
    heads = _load_exit_heads(args, adapter) if args.heads else None
    _check_latency_context(args, adapter)
    encoded = _encode_prompts(args, adapter, prompts)
    cfg, warnings = _latency_config(args, corun_max)

    head_rows = head_info = None
    with PhaseBars(enabled=True) as bar:
        latency, warnings = _latency(args, adapter, cfg, work, bar, phases, warnings)
        if not args.skip_latency and max(args.batch_sizes) > 1:
            latency["batch"] = _batch_tables(args, adapter, cfg, bar, phases)
        results = _acceptance(args, adapter, prompts, encoded, work, bar, phases)
        sampled = _sampled_acceptance(args, adapter, prompts, encoded, work, bar, phases)
        if heads is not None:
            head_rows, latency["exit_heads"], head_info = _exit_heads(args, adapter, heads, results, cfg, bar, phases)
        if getattr(args, "control_plane_stages", None) and not args.skip_latency:
            latency["control_plane"] = _control_plane(args, adapter, bar, phases, warnings)
        latency["sampling"] = _sampling(adapter, latency, args.threads, phases)

    meta = _meta(args, adapter, cfg, latency, prompts, results, warnings)
    if sampled is not None and meta["acceptance"] is not None:
        from profiler.acceptance_sampled import sampled_meta

        meta["acceptance"]["sampled"] = sampled_meta(sampled, args.sample_seed, args.max_new_tokens)
    if heads is not None:
        _record_exit_heads(meta, head_info, len(prompts))
    meta["profiling"] = {"wall_s": round(time.perf_counter() - t_start, 2),
                         "phases_s": {k: round(v, 2) for k, v in phases.items()}}
    return meta, results, head_rows, sampled


# --- the phases of a run, in order ----------------------------------------------------------------------

def _load_model(args):
    import torch

    from runtime.llm import load_model

    torch.set_num_threads(args.threads)
    _quiet_transformers()
    return load_model(args.model, device=args.device, dtype=args.dtype)


def _load_exit_heads(args, adapter):
    """--heads: another model's heads, a missing weight file: refused before any measuring."""
    from profiler.heads.profiling import load_for_profile

    return load_for_profile(args.heads, adapter)


def _check_latency_context(args, adapter) -> None:
    need_ctx = max(args.context_values) + max(args.n_values)
    if not args.skip_latency and need_ctx > adapter.max_context:
        raise UserError(f"--context-values {max(args.context_values)} plus {max(args.n_values)} new tokens exceeds "
                        f"the model's context of {adapter.max_context} tokens",
                        "give smaller --context-values / --n-values")


def _encode_prompts(args, adapter, prompts) -> list:
    """Every prompt's token ids; a prompt that leaves no room for its generation is refused."""
    encoded = [adapter.encode_prompt(p.text) for p in prompts]
    for p, ids in zip(prompts, encoded):
        if len(ids) + args.max_new_tokens > adapter.max_context:
            raise UserError(f"prompt {p.prompt_id} ({p.category}) has {len(ids)} tokens; with --max-new-tokens "
                            f"{args.max_new_tokens} it exceeds the model's context of {adapter.max_context}",
                            "drop it from the prompt file, subsample with --per-category/--limit, "
                            "or lower --max-new-tokens")
    return encoded


def _thread_counts(args) -> tuple[int, ...]:
    """Thread counts besides --threads to measure the tables at: what the same-budget baselines
    need (AR and EESD on every core). Default on a CPU: 1 up to the cores; none on a GPU (its
    same-budget baseline is tensor parallelism, which a single-process profile cannot measure)."""
    if args.skip_latency:
        return ()
    if args.thread_counts is not None:
        wanted = args.thread_counts
    elif str(args.device).startswith("cpu"):
        from ppsd.machine import available_cores

        wanted = range(1, available_cores() + 1)
    else:
        wanted = ()
    return tuple(sorted({int(t) for t in wanted} - {int(args.threads)}))


def _latency_config(args, corun_max: int):
    """The latency measurement's settings, and the warnings list the run starts with."""
    from profiler import latency as lat

    warnings: list[str] = []
    cfg = lat.LatencyConfig(n_values=tuple(sorted(set(args.n_values))),
                            context_values=tuple(sorted(set(args.context_values))),
                            warmup=args.warmup, repeats=args.repeats, corun_max=corun_max,
                            threads=args.threads, measure_hop=not args.no_hop and not args.skip_latency,
                            thread_counts=_thread_counts(args))
    if not cfg.measure_hop:
        cfg.pipeline_repeats = 0  # the pipeline probe measures a hop too
    if args.skip_latency:
        # Keep the profile usable by the simulator: a quick n=1 table at the smallest context.
        cfg.n_values, cfg.context_values, cfg.repeats, cfg.whole_step_repeats = (1,), (min(cfg.context_values),), 3, 3
        cfg.prefill_lengths = ()
        warnings.append("latency was skipped (--skip-latency): the tables hold a quick n=1 measurement only")
    return cfg, warnings


def _latency(args, adapter, cfg, work: Path, bar, phases: dict[str, float],
             warnings: list[str]) -> tuple[dict, list[str]]:
    """The latency block: read back from the work folder (--resume), or measured (the tables, then
    co-run + hop + pipeline probe) and kept there. Returns it and the warnings to carry on (a
    resumed run's are the ones saved with its latency)."""
    from ppsd.paths import atomic_write_json

    lat_file = work / "latency.json"
    if lat_file.exists():
        latency = json.loads(lat_file.read_text())
    else:
        grid = _latency_tables(adapter, cfg, bar, phases, warnings)
        in_runtime = grid.pop("pipeline_runtime", None)
        corun, hop, pipeline = _corun_hop_and_probe(args.model, adapter, cfg, grid, bar, phases, warnings)
        if in_runtime is not None:
            pipeline = {**(pipeline or {}), "runtime": in_runtime}
        latency = {"n_values": list(cfg.n_values), "context_values": list(cfg.context_values), **grid,
                   "hop": hop, "corun": corun, "pipeline": pipeline, "phases": dict(phases), "warnings": warnings}
        atomic_write_json(lat_file, latency)
    phases.update(latency.pop("phases", {}))
    warnings = latency.pop("warnings", warnings)
    if latency.get("whole_step") and latency["whole_step"].get("flagged"):
        warnings.append("whole step: " + latency["whole_step"]["note"])
    return latency, warnings


def _batch_tables(args, adapter, cfg, bar, phases: dict[str, float]) -> dict:
    """`latency.batch`: passes of B sequences against one (profiler/batch_latency.py), at the grid's two
    smallest contexts."""
    from profiler.batch_latency import cell_count, measure_batch_block

    t0 = time.perf_counter()
    contexts = list(cfg.context_values)[:2]
    repeats = max(2, min(int(cfg.repeats), 5))
    bar.phase("batch passes", cell_count(adapter, args.batch_sizes, context_values=contexts) * repeats)
    block = measure_batch_block(adapter, args.batch_sizes, context_values=contexts, repeats=repeats, seed=cfg.seed,
                                tick=lambda: bar.advance("batch passes"))
    block["threads"] = int(cfg.threads)
    phases["batch"] = time.perf_counter() - t0
    return block


def _runtime_probe(adapter, cfg):
    """The runtime probe whose rounds run between the grid's (`profiler/runtime_probe.py`), where a PPSD
    pipeline of two CPU stage processes is priced (the pipeline probe is on); else None."""
    from profiler.runtime_probe import RuntimeProbe

    if not cfg.pipeline_repeats or adapter.device.type != "cpu" or adapter.num_layers < 2:
        return None
    return RuntimeProbe(adapter)


def _runtime_summary(probe, warnings: list[str]) -> dict | None:
    """The runtime probe's block, or None with a warning where its reading stays unphysical over every
    try: load would refuse the figure, and without it PPSD is priced from the co-run table."""
    from profiler.latency import UnphysicalReading

    try:
        return probe.physical_summary()
    except UnphysicalReading as exc:
        warnings.append(f"pipeline runtime probe dropped ({exc.problem}); PPSD stages are priced from the co-run table "
                        "instead; profile again on an idle machine to keep it")
        return None


def _latency_tables(adapter, cfg, bar, phases: dict[str, float], warnings: list[str]) -> dict:
    """Every layer, the head and the embedding over (new tokens x context), and the whole step;
    then the same at each of `cfg.thread_counts` (the `parallel` block); between the grid's rounds,
    the runtime probe's (the co-run slowdown a PPSD plan's stages see; dropped, with a line in
    `warnings`, where its reading stays unphysical)."""
    from profiler import latency as lat
    from profiler import runtime_probe

    t0 = time.perf_counter()
    cells = len(cfg.n_values) * len(cfg.context_values)
    bar.phase("latency grid", cells * (1 + len(cfg.thread_counts)))
    # every thread count in the same interleaved rounds: the same-budget tables then see the machine
    # in the same states as the main ones (profiler/latency.py, "the grid")
    probe = _runtime_probe(adapter, cfg)
    every = max(1, int(cfg.repeats) // runtime_probe.ROUNDS)
    grids = lat.measure_grids(adapter, cfg, (cfg.threads, *cfg.thread_counts),
                              tick=lambda: bar.advance("latency grid"),
                              between_rounds=lambda i: probe.round() if probe and (i + 1) % every == 0
                              and len(probe.rounds) < runtime_probe.ROUNDS else None)
    grid = dict(grids[int(cfg.threads)])
    grid["pipeline_runtime"] = _runtime_summary(probe, warnings) if probe else None
    if cfg.thread_counts:
        grid["parallel"] = lat.thread_tables_block(grids, cfg.threads)
    grid["prefill"] = lat.measure_prefill(adapter, cfg)
    phases["latency"] = time.perf_counter() - t0
    return grid


def _corun_hop_and_probe(model_spec: str, adapter, cfg, grid: dict, bar, phases: dict[str, float],
                         warnings: list[str]) -> tuple[dict | None, dict | None, dict | None]:
    """Co-run slowdown, the idle hop and the two-stage pipeline probe: (corun, hop, pipeline).
    The three share one pool of worker processes, so they are one phase here."""
    from profiler import latency as lat

    rounds = ((cfg.corun_max if cfg.corun_max >= 2 else 0) + (1 if cfg.measure_hop else 0)
              + (1 if cfg.pipeline_repeats else 0))
    if not rounds:
        return None, None, None
    corun = hop = pipeline = None
    t0 = time.perf_counter()
    bar.phase("co-run + hop", rounds)
    try:
        # a failed hop or pipeline probe lands in `warnings` and keeps the co-run (and hop) measured
        corun, hop, pipeline = lat.measure_corun_and_hop(model_spec, adapter, cfg,
                                                         tick=lambda: bar.advance("co-run + hop"), grid=grid,
                                                         warnings=warnings)
    except RuntimeError as exc:
        # A profile without these is still useful; the simulator then assumes none.
        warnings.append(f"co-run / hop measurement failed: {str(exc).splitlines()[0]}")
    bar.finish("co-run + hop")
    phases["corun_hop"] = time.perf_counter() - t0
    return corun, hop, pipeline


def _control_plane(args, adapter, bar, phases: dict[str, float], warnings: list[str]) -> dict | None:
    """--control-plane-stages: the fixed cost of a stage pass and a message's transit at each stage
    count, from the real stage processes with zero-time emulated layers at this model's hidden size."""
    from runtime.control_plane import measure_control_plane

    ks = sorted(set(args.control_plane_stages))
    t0 = time.perf_counter()
    bar.phase("control plane (stage counts)", len(ks))
    try:
        block = measure_control_plane(ks, hidden_size=adapter.hidden_size, tokens=96, repeats=3,
                                      progress=lambda k, v: bar.advance("control plane (stage counts)"))
    except (RuntimeError, OSError) as exc:
        warnings.append(f"control-plane measurement failed: {str(exc).splitlines()[0]}")
        block = None
    bar.finish("control plane (stage counts)")
    phases["control_plane"] = time.perf_counter() - t0
    return block


def _acceptance(args, adapter, prompts, encoded, work: Path, bar, phases: dict[str, float]) -> list | None:
    """Greedy generations on every prompt and every exit's match trace along them (None without prompts)."""
    if not prompts:
        return None
    from profiler.acceptance import profile_acceptance

    t0 = time.perf_counter()
    bar.phase("generate (tokens)", len(prompts) * args.max_new_tokens)
    bar.phase("trace (prompts)", len(prompts))
    results = profile_acceptance(adapter, prompts, encoded, args.max_new_tokens, args.temperature,
                                 work_dir=work / "acceptance", max_batch=args.batch_size,
                                 on_generate=lambda k: bar.advance("generate (tokens)", k),
                                 on_prompt=lambda: bar.advance("trace (prompts)"))
    bar.finish("generate (tokens)")
    phases["acceptance"] = time.perf_counter() - t0
    return results


def _sampled_acceptance(args, adapter, prompts, encoded, work: Path, bar, phases: dict[str, float]) -> dict | None:
    """--temperatures: a sampled continuation of every prompt at each temperature and beta along it."""
    temps = getattr(args, "temperature_list", None)
    if not prompts or not temps:
        return None
    from profiler.acceptance_sampled import profile_sampled

    t0 = time.perf_counter()
    n = int(getattr(args, "sampled_trajectories", 1) or 1)
    bar.phase("sample (tokens)", len(prompts) * args.max_new_tokens * len(temps) * n)
    bar.phase("sampled beta (prompts)", len(prompts) * len(temps) * n)
    out = []
    for j in range(n):  # trajectory j samples with seed + j (the first is what one trajectory always was)
        out.append(profile_sampled(adapter, prompts, encoded, args.max_new_tokens, temps, seed=args.sample_seed + j,
                                   work_dir=work / ("sampled" if j == 0 else f"sampled-{j}"), max_batch=args.batch_size,
                                   on_generate=lambda k: bar.advance("sample (tokens)", k),
                                   on_prompt=lambda: bar.advance("sampled beta (prompts)")))
    bar.finish("sample (tokens)")
    phases["sampled_acceptance"] = time.perf_counter() - t0
    return out


def _exit_heads(args, adapter, heads, results, cfg, bar, phases: dict[str, float]) -> tuple:
    """Trained exit heads: their drafting latency (stage 1's time) and traces on the same generations.
    Returns (acceptance rows, the latency block's `exit_heads`, the meta's `exit_heads`)."""
    from profiler.heads.profiling import profile_heads

    t0 = time.perf_counter()
    bar.phase("exit heads (prompts)", len(results or []))
    rows, latency_block, info = profile_heads(adapter, heads, results, args.temperature, cfg.n_values, cfg.repeats,
                                              progress=lambda: bar.advance("exit heads (prompts)"))
    phases["exit_heads"] = time.perf_counter() - t0
    return rows, latency_block, info


def _sampling(adapter, latency: dict, threads: int, phases: dict[str, float]) -> dict:
    """One token's draw at T > 0 over the model's vocabulary and each exit head's (a second or two)."""
    from profiler import sampling

    t0 = time.perf_counter()
    sizes = sampling.vocab_sizes(adapter.vocab_size, latency.get("exit_heads"))
    table = sampling.measure(sizes, device=adapter.device, threads=threads)
    phases["sampling"] = time.perf_counter() - t0
    return table


def _record_exit_heads(meta: dict, head_info: dict, num_prompts: int) -> None:
    meta["exit_heads"] = head_info
    if head_info["trained_on_profile_prompts"]:
        meta["warnings"].append(f"the exit heads were trained on {head_info['trained_on_profile_prompts']} of the "
                                f"{num_prompts} profiled prompts: their acceptance here is optimistic")
    if meta["acceptance"]:
        meta["acceptance"]["heads"] = [SHARED, *head_info["names"]]


def _write_profile(out: Path, meta: dict, results, head_rows, sampled=None) -> None:
    """profile.json, the acceptance table (shared head, then the trained heads' rows) and the
    generations, written all at once (temp folder + rename) after a read-back check."""
    from ppsd.paths import atomic_dir
    from ppsd.profile import load_profile, save_profile

    acceptance = generations = None
    if results is not None:
        from profiler.acceptance import acceptance_table

        acceptance = acceptance_table(results)
        if head_rows is not None:
            import pandas as pd

            acceptance = pd.concat([acceptance, head_rows], ignore_index=True)
        generations = [r.generation_record() for r in results]
    with atomic_dir(out) as tmp:
        tmp.chmod(0o777 & ~_umask())  # a temp folder is private; the profile should not be
        sampled_df = None
        if sampled is not None:
            from profiler.acceptance_sampled import sampled_table

            sampled_df = sampled_table(sampled)
        save_profile(tmp, meta, acceptance=acceptance, generations=generations, sampled=sampled_df)
        load_profile(tmp)  # never hand out a folder this ppsd cannot read back


def _meta(args, adapter, cfg, latency: dict, prompts, results, warnings: list[str]) -> dict:
    import platform

    import torch
    import transformers

    from ppsd import __version__
    from profiler import latency as lat

    acc = None
    if results is not None:
        tokens = sum(len(r.token_ids) for r in results)
        acc = {"temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
               "prompt_set": args.prompts or "builtin", "per_category": args.per_category, "limit": args.limit,
               "num_prompts": len(results), "categories": sorted({r.category for r in results}),
               "heads": [SHARED], "tokens": tokens,
               "teacher_forced_agree": sum(r.teacher_forced_agree for r in results),
               "chat_template": bool(getattr(adapter.tokenizer, "chat_template", None)),
               "generation": "greedy, batched with left padding, stops after an end-of-sequence token"}
        if acc["teacher_forced_agree"] < tokens:
            warnings.append(f"the teacher-forced full model disagreed with the generated token at "
                            f"{tokens - acc['teacher_forced_agree']} of {tokens} positions (float near-ties)")
    method = "cuda_event" if adapter.device.type == "cuda" else "perf_counter"
    return {
        "kind": "measured",
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "model": {"id": adapter.model_id, "source": adapter.source, "architecture": adapter.architecture,
                  "num_layers": adapter.num_layers, "hidden_size": adapter.hidden_size,
                  "vocab_size": adapter.vocab_size, "dtype": str(adapter.dtype).removeprefix("torch."),
                  "max_context": adapter.max_context},
        "hardware": lat.machine_info(adapter, args.threads),
        "versions": {"ppsd": __version__, "python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "timing": {"method": method, "warmup": cfg.warmup, "repeats": cfg.repeats, "threads": cfg.threads,
                   "whole_step_repeats": cfg.whole_step_repeats, "quick": bool(args.skip_latency)},
        "latency": latency,
        "acceptance": acc,
        "warnings": warnings,
    }


# --- the summary ---------------------------------------------------------------------------------------

def summary_rows(profile) -> list[dict]:
    """Per exit layer: alpha, beta (None without acceptance data) and the draft cost relative to a
    full pass (embedding + layers [0, E) + shared head, over embedding + all layers + head; n = 1,
    smallest context)."""
    N = profile.num_layers
    layer = [profile.layer_ms(i, 1) for i in range(N)]
    emb, head = profile.embed_ms(1), profile.head_ms(1)
    full = emb + sum(layer) + head
    alpha = beta = {}
    if profile.has_acceptance:
        df = profile.acceptance
        df = df[df["head"] == SHARED]
        g = df.groupby("exit_layer")
        alpha = g["match"].mean().to_dict()
        beta = g["beta"].mean().to_dict()
    return [{"exit": e, "alpha": alpha.get(e), "beta": beta.get(e),
             "draft_cost": (emb + sum(layer[:e]) + head) / full if full > 0 else float("nan")}
            for e in range(1, N)]


def _print_runtime_probe(console, profile, run: dict) -> None:
    """The runtime probe's lines of `print_summary`: the co-run slowdown, each stage's share, the jitter."""
    each = " / ".join(f"{sum(r['slowdown_per_stage']) / 2:.3f}" for r in run["rounds"])
    console.print(f"runtime probe (stages [0, {run['exit_layer']}, {profile.num_layers}], every draft accepted): pass "
                  f"slowdown {run['slowdown']:.3f}x (median of rounds {each}; spread {100 * run['slowdown_cv']:.1f}%), "
                  "the co-run slowdown the simulator uses")
    shares = " / ".join(f"{b:.3f}" for b in profile.corun_stage_bias(2))
    jitter = (f"pass-to-pass jitter {100 * profile.lockstep_jitter_cv():.1f}% (the lock step's wait and the restart "
              "race's noise)" if "pass_jitter_cv" in run else "no pass-to-pass jitter recorded (the lock step and the "
              "restart race read the pipeline probe's pass spread)")
    console.print(f"  stage shares of it {shares} (shown, not priced: docs/model.md), {jitter}")
    waiting = run.get("waiting")
    if waiting:
        each = " / ".join(f"{r['slowdown_per_stage'][1]:.3f}" for r in waiting["rounds"])
        console.print(f"  cut at {waiting['exit_layer']}, where the last stage waits for every draft: its pass "
                      f"{waiting['last_stage_slowdown']:.3f}x its pieces (rounds {each}), what a two-stage plan "
                      "whose last stage is the shorter prices that stage at")


def print_summary(profile) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    meta = profile.meta
    lat = profile.latency
    N = profile.num_layers
    layer_ms = [profile.layer_ms(i, 1) for i in range(N)]
    c0 = int(profile.context_values[0])
    console.print(f"[bold]{profile.model_id}[/] on {profile.device_name}  ({N} layers, "
                  f"{meta['model'].get('dtype', '?')}, {meta['hardware'].get('threads', '?')} thread(s), "
                  f"{meta['timing'].get('method', '?')})")
    console.print(f"decoder layer {sum(layer_ms) / N:.2f} ms (n=1, context {c0}; min {min(layer_ms):.2f}, "
                  f"max {max(layer_ms):.2f}), head {profile.head_ms(1):.2f} ms, embedding {profile.embed_ms(1):.3f} ms")
    whole = lat.get("whole_step")
    if whole:
        if whole.get("method") == "paired":  # the tables are already scaled to the whole step
            spread = (f", p10-p90 {whole['p10_ms']:.1f}-{whole['p90_ms']:.1f} ms over the grid"
                      if whole.get("p10_ms") is not None else "")
            console.print(f"whole step {whole['median_ms']:.1f} ms{spread}; timed in pieces beside it "
                          f"{whole['sum_of_parts_ms']:.1f} ms (ratio {whole['ratio']:.3f}): tables scaled by "
                          f"{whole['calibration']:.3f}")
        else:
            flag = "  [red]FLAGGED[/]" if whole.get("flagged") else ""
            console.print(f"whole step {whole['median_ms']:.1f} ms; sum of parts {whole['sum_of_parts_ms']:.1f} ms "
                          f"(ratio {whole['ratio']:.3f}){flag}")
        for units, t in sorted(((lat.get("parallel") or {}).get("tables") or {}).items()):
            if t.get("speedup_vs_base"):
                console.print(f"AR at {units} threads: {t['speedup_vs_base']:.2f}x one thread, round by round "
                              f"(spread {100 * (t.get('speedup_cv') or 0):.1f}%)")
    hop, corun = lat.get("hop"), lat.get("corun")
    if hop:
        console.print(f"hop ({hop['backend']}, {hop['bytes']} B) {hop['median_ms']:.3f} ms "
                      f"(p10 {hop['p10_ms']:.3f}, p90 {hop['p90_ms']:.3f})")
    if corun:
        pairs = ", ".join(f"{p}: {s:.2f}x" for p, s in zip(corun["processes"], corun["slowdown"]))
        console.print(f"co-run slowdown by concurrent processes: {pairs}")
    pipe = lat.get("pipeline")
    run = (pipe or {}).get("runtime")
    if run:
        _print_runtime_probe(console, profile, run)
    if pipe and pipe.get("stage_bounds"):
        ph = pipe.get("hop") or {}
        hop_text = (f"hop into a waiting stage {ph['median_ms']:.3f} ms" if ph.get("median_ms") is not None else
                    f"no hop into a waiting stage seen (the simulator uses the idle hop, {profile.hop_ms():.3f} ms)")
        rounds = pipe.get("rounds") or []
        each = " / ".join(f"{r['slowdown']:.3f}" for r in rounds)
        round_text = f" (median of rounds {each})" if len(rounds) > 1 else ""
        console.print(f"pipeline probe (stages {pipe['stage_bounds']}): pass slowdown {pipe['slowdown']:.3f}x"
                      f"{round_text}, {hop_text}, pass spread {100 * pipe.get('pass_cv', 0.0):.1f}% "
                      + ("(the simulator uses its hop and spread)" if run else "(the simulator uses these)"))
    acc = meta.get("acceptance")
    if acc:
        console.print(f"acceptance: {acc.get('num_prompts')} prompts ({acc.get('prompt_set')}), "
                      f"{acc.get('tokens', '?')} generated tokens, beta at T={acc.get('temperature')} (greedy path)")
        if profile.sampled_meta:
            means = {t: profile.beta_by_exit(t) for t in profile.beta_temperatures()}
            console.print("sampled decoding: beta along sampled trajectories at T = "
                          + ", ".join(f"{t:g}" for t in means) + " (mean over exits: "
                          + ", ".join(f"{sum(m.values()) / max(len(m), 1):.3f}" for m in means.values()) + ")")
    for w in meta.get("warnings") or []:
        console.print(f"[yellow]warning:[/] {w}")
    from profiler.heads.profiling import summary_lines  # torch-free

    for line in summary_lines(profile):
        console.print(line, highlight=False)

    table = Table(title="per exit layer (shared head)", show_edge=False)
    for col in ("exit", "alpha", "beta", "draft cost / full pass"):
        table.add_column(col, justify="right")
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for row in summary_rows(profile):
        table.add_row(str(row["exit"]), fmt(row["alpha"]), fmt(row["beta"]), f"{row['draft_cost']:.3f}")
    console.print(table)


def run_add_sampling(args) -> int:
    """`ppsd profile add-sampling DIR`: time one draw per vocabulary size the profile's plans draw
    from, on this machine now, and write profile.json back with `latency.sampling` (marked
    `added_later`: a later sitting than the other tables)."""
    import sys

    from ppsd.paths import check_rewritable
    from ppsd.profile import PROFILE_FILE, add_latency_block, load_profile

    profile = load_profile(args.dir)
    check_rewritable(Path(args.dir) / PROFILE_FILE, "DIR")
    if profile.meta.get("kind") != "measured":
        raise UserError(f"profile {args.dir} is {profile.meta.get('kind')!r}, not measured",
                        "add-sampling times this machine: use it on a profile measured here")
    if profile.sampling and not args.force:
        raise UserError(f"profile {args.dir} already has latency.sampling",
                        "add --force to measure it again")
    from profiler.sampling import vocab_sizes

    sizes = vocab_sizes(profile.meta["model"].get("vocab_size"), profile.latency.get("exit_heads"))
    if not sizes:
        raise UserError(f"profile {args.dir} names no vocabulary size (model.vocab_size)",
                        "re-create it with this ppsd's `ppsd profile`")
    threads = args.threads if args.threads is not None else int(profile.meta.get("timing", {}).get("threads") or 1)
    if threads < 1:
        raise UserError(f"--threads {threads} must be at least 1", "give --threads 1 or more")
    from ppsd.devices import normalize_device

    device = normalize_device(args.device or str(profile.meta.get("hardware", {}).get("device") or "cpu"))
    import torch

    from profiler import sampling

    torch.set_num_threads(threads)
    table = sampling.stamp_added_later(sampling.measure(sizes, device=device, threads=threads))
    path = add_latency_block(args.dir, "sampling", table)
    parts = ", ".join(f"V={v}: {m:.3f} ms" for v, m in zip(table["vocab"], table["median_ms"]))
    print(f"one draw at T > 0 ({threads} thread{'s' if threads != 1 else ''}, {device}): {parts} -> {path}",
          file=sys.stderr)
    return 0


def run_show(args) -> int:
    from ppsd.profile import load_profile

    print_summary(load_profile(args.dir))
    return 0
