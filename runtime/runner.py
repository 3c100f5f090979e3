"""`ppsd run`: checks the request, loads the model once, measures AR and the chosen plan in one
session, prints the comparison. Also the checks `ppsd validate` and the benchmark share."""

from __future__ import annotations

import os
import sys

from ppsd.errors import UserError
from sim.plan import Plan


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def parse_bounds(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(","))
    except ValueError:
        raise UserError(f"--stage-bounds {text!r} is not a list of integers", "write e.g. 0,15,30") from None


def make_plan(mode: str, num_layers: int, exit_layer: int | None = None, draft_len: int = 4, stages: int = 2,
              bounds: tuple[int, ...] | None = None) -> Plan:
    """A validated plan; PPSD bounds default to a partition balanced by layer count."""
    from sim.partition import balanced_bounds

    if mode != "ar" and exit_layer is None:
        raise UserError(f"--mode {mode} needs an exit layer", f"add --exit E with 1 <= E <= {num_layers - 1}")
    plan = Plan(mode=mode, exit_layer=exit_layer if mode != "ar" else None, draft_len=draft_len,
                stages=stages, stage_bounds=bounds)
    plan.validate(num_layers)
    if mode == "ppsd" and plan.stage_bounds is None:
        plan = Plan(mode="ppsd", exit_layer=exit_layer, stages=stages,
                    stage_bounds=balanced_bounds(exit_layer, num_layers, stages))
    return plan


def with_exit_head(model, plan: Plan, heads_dir: str | None, name: str | None) -> Plan:
    """The plan drafting with `--exit-head` from `--heads` (checked now: another model's heads, a
    missing exit are a UserError before anything runs)."""
    from dataclasses import replace

    from runtime.heads import make_drafter, resolve_head_name

    name = resolve_head_name(heads_dir, name)
    make_drafter(model, plan.exit_layer, heads_dir, name)
    return replace(plan, exit_head=name) if plan.mode != "ar" else plan


def check_resources(plan: Plan, device: str, oversubscribe: bool = False) -> None:
    """More stages than cores (CPU) or GPUs (CUDA) is a UserError naming a k that fits."""
    if plan.mode != "ppsd":
        return
    k = plan.num_stages
    if device.startswith("cuda"):
        import torch

        n = torch.cuda.device_count()
        if k > n:
            raise UserError(f"{k} stages need {k} GPUs but this machine has {n}",
                            f"use --stages {max(min(n, k), 2)}" + (" or --device cpu" if n < 2 else ""))
        return
    cores = available_cores()
    if k > cores and not oversubscribe:
        raise UserError(f"{k} stages need {k} CPU cores (one per stage process) but {cores} are available",
                        f"use --stages {max(2, cores)}, or --oversubscribe to run anyway (much slower)")


def check_lengths(model, prompts: list[list[int]], max_new: list[int], plan: Plan) -> None:
    slack = plan.draft_len + 1 if plan.mode == "eesd" else plan.num_stages + 1
    for i, (p, t) in enumerate(zip(prompts, max_new)):
        if len(p) + t + slack > model.max_context:
            raise UserError(f"prompt {i + 1} has {len(p)} tokens; with {t} new tokens it exceeds the model's "
                            f"context of {model.max_context}",
                            f"use a shorter prompt or --max-new-tokens {max(model.max_context - len(p) - slack, 0)}")
        if not p:
            raise UserError(f"prompt {i + 1} is empty", "give prompts with text")


def run_command(args) -> int:
    import torch

    from profiler.model import load_model
    from profiler.prompts import load_prompts
    from runtime.acceptance import load_forced_trace
    from runtime.measure import Job, measure
    from sim.timeline import write_chrome_trace

    if args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens {args.max_new_tokens} must be at least 1", "use e.g. 64")
    if args.repeats < 1 or args.warmup < 0:
        raise UserError("--repeats must be >= 1 and --warmup >= 0", "use e.g. --warmup 1 --repeats 3")
    torch.set_num_threads(1)  # one thread per decoding process, the stages' setting too
    forced = load_forced_trace(args.force_trace)
    model = load_model(args.model, args.device, args.dtype)
    plan = make_plan(args.mode, model.num_layers, args.exit_layer, args.draft_len, args.stages,
                     parse_bounds(args.stage_bounds))
    plan = with_exit_head(model, plan, getattr(args, "heads", None), getattr(args, "exit_head", None))
    check_resources(plan, args.device, args.oversubscribe)
    prompt_set = load_prompts(args.prompts, limit=args.limit)
    prompts = [model.encode_prompt(p.text) for p in prompt_set]
    max_new = [args.max_new_tokens] * len(prompts)
    check_lengths(model, prompts, max_new, plan)

    def job(p: Plan, f=None) -> Job:
        return Job(plan=p, prompts=prompts, max_new=max_new, temperature=args.temperature, seed=args.seed,
                   forced=[f] * len(prompts) if f else None, stop_at_eos=not args.ignore_eos, warmup=args.warmup,
                   repeats=args.repeats, timeout_s=args.stage_timeout, port=args.port,
                   heads_dir=getattr(args, "heads", None))

    from runtime.launch import under_torchrun

    if plan.mode == "ppsd" and under_torchrun():
        return _run_torchrun(args, model, plan, job(plan, forced))
    extra = {"model": model.model_id, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens}
    ar = None
    if plan.mode == "ar" or not args.no_ar:
        ar = measure(model, job(make_plan("ar", model.num_layers)), load_s=model.load_s, extra=extra)
    m = ar if plan.mode == "ar" else measure(model, job(plan, forced), load_s=model.load_s, extra=extra)
    res = m.result
    if ar is not None:
        res.speedup_vs_ar = res.tokens_per_s / ar.result.tokens_per_s
        res.extra["ar_tokens_per_s"] = ar.result.tokens_per_s
        if plan.mode != "ar":
            res.extra["outputs_match_ar"] = m.outputs == ar.outputs
    if args.timeline:
        write_chrome_trace(args.timeline, res.timeline, f"ppsd {plan.label()} (measured)")
    if args.json:
        from runtime.cli import print_json

        print_json(res.to_json_dict())
    else:
        print(format_result(res))
    return 0


def _run_torchrun(args, model, plan, job) -> int:
    from runtime.launch import run_torchrun
    from runtime.measure import _pipeline_job, records_from_logs, summarize

    pjob = _pipeline_job(model, job)
    logs = run_torchrun(pjob, model)
    if logs is None:
        return 0  # not rank 0: rank 0 reports
    res = summarize(plan, records_from_logs(pjob, logs), load_s=model.load_s).result
    if args.json:
        from runtime.cli import print_json

        print_json(res.to_json_dict())
    else:
        print(format_result(res))
    return 0


def format_result(res) -> str:
    ex = res.extra
    lines = [f"{res.plan.label()} on {ex.get('model', '?')}: {res.tokens_per_s:.2f} tokens/s "
             f"(median of {ex.get('repeats')}; p10 {ex['tokens_per_s_p10']:.2f}, p90 {ex['tokens_per_s_p90']:.2f})"]
    if res.speedup_vs_ar is not None and res.plan.mode != "ar":
        lines.append(f"  vs AR {ex['ar_tokens_per_s']:.2f} tokens/s: speedup {res.speedup_vs_ar:.3f}×; "
                     f"outputs match AR: {ex.get('outputs_match_ar')}")
    lines.append(f"  {res.tokens} decode tokens in {res.time_s:.3f} s; prefill {ex['prefill_s']:.3f} s; "
                 f"model load {ex['load_s']:.2f} s")
    if res.plan.mode != "ar":
        rate = "n/a" if res.acceptance_rate is None else f"{res.acceptance_rate:.3f}"
        lines.append(f"  acceptance {rate}; mean tokens per round {res.mean_accepted:.2f}; "
                     f"accepted-length histogram {dict(res.accepted_hist)}")
        if ex.get("forced_trace"):
            lines.append(f"  acceptance forced by trace: {ex['forced_trace']} (outputs are not lossless)")
    lines.append("  stage busy: " + ", ".join(f"stage {i + 1} {b:.0%}" for i, b in enumerate(res.stage_busy)))
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `ppsd run`")
