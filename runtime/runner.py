"""`ppsd run`: checks the request, loads the model once, measures AR and the chosen plan in one
session, prints the comparison (the request checks live in runtime/request.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

from ppsd.devices import normalize_device
from ppsd.errors import UserError
from ppsd.output import print_json
from runtime.request import (check_lengths, check_resources, check_stage_devices, default_profile, make_plan,
                           parse_bounds, with_exit_head)
from runtime.same_budget import budget_cores
from ppsd.modes import Mode
from sim.plan import Plan
from sim.schemes import scheme


@dataclass
class _Request:
    """What `ppsd run` was asked, checked before a model is loaded."""

    emulate: str | None   # a profile: every device a wait of its times (runtime/emulate.py)
    forced: object        # --force-trace, loaded
    bounds: tuple | None  # --stage-bounds, parsed
    torchrun: bool        # one PPSD stage per torchrun rank
    cuda: bool
    pipelined: bool       # stage processes (PPSD) rather than one decoding process


def run_command(args) -> int:
    """Check the request, load the model, make the plan and its inputs, then measure AR and the plan in
    one session (and, within a budget of cores, both on every core) and print the comparison."""
    import torch

    from runtime.measure import Job

    req = _check_request(args)
    torch.set_num_threads(1)  # one thread per decoding process, the stages' setting too
    model = _load(args, req)
    plan = _plan(args, req, model)
    prompts, max_new, forced = _inputs(args, req, model, plan)

    def job(p: Plan, f=None) -> Job:
        return Job(plan=p, prompts=prompts, max_new=max_new, temperature=args.temperature, seed=args.seed,
                   forced=(f if isinstance(f, list) else [f] * len(prompts)) if f else None,  # per prompt
                   stop_at_eos=not args.ignore_eos, warmup=args.warmup,
                   repeats=args.repeats, timeout_s=args.stage_timeout, port=args.port,
                   heads_dir=getattr(args, "heads", None))

    run_facts = {"model": model.model_id, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens}
    cores = 1 if req.emulate else budget_cores(args, req.cuda)  # threads do not speed up a wait
    if req.pipelined and req.torchrun:
        return _run_torchrun(args, model, plan, job, forced, run_facts, cores)
    _report(args, plan, _measure_with_ar(args, model, plan, job, forced, run_facts, cores))
    return 0


def _check_request(args) -> _Request:
    """The request's options, refused with a one-line error before anything heavy starts."""
    from runtime.acceptance import load_forced_trace
    from runtime.launch import check_torchrun_world, torchrun_world, under_torchrun

    if args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens {args.max_new_tokens} must be at least 1", "use e.g. 64")
    if args.repeats < 1 or args.warmup < 0:
        raise UserError("--repeats must be >= 1 and --warmup >= 0", "use e.g. --warmup 1 --repeats 3")
    args.device = normalize_device(args.device)  # "gpu" is "cuda" from here on (the GPU-count check too)
    emulate = getattr(args, "emulate", None)
    if emulate and args.device != "cpu":
        raise UserError(f"--emulate waits instead of computing: --device {args.device} does not apply",
                        "drop --device (the emulated stages are processes on this machine)")
    req = _Request(emulate, load_forced_trace(args.force_trace), parse_bounds(args.stage_bounds), under_torchrun(),
                   args.device.startswith("cuda"), scheme(args.mode).pipelined)
    stages = len(req.bounds) - 1 if req.bounds else args.stages
    if req.torchrun:  # one PPSD stage per rank: asked before a model is loaded
        if req.pipelined:
            check_torchrun_world(stages)
        elif torchrun_world() > 1:
            raise UserError(f"under torchrun every rank is one PPSD stage, and --mode {Mode.parse(args.mode)} "
                            "runs in one process", "run it without torchrun")
    if req.cuda and not req.torchrun and req.pipelined:
        # before a (7B) model is loaded: a PPSD run that cannot fit these GPUs fails in seconds
        check_stage_devices(stages, args.device, args.oversubscribe)
    return req


def _load(args, req: _Request):
    """The model, or the emulated one. Under torchrun each rank is one stage: on CUDA its device is
    cuda:{LOCAL_RANK}, made current before anything touches CUDA and before loading, so every rank's
    weights land on its own GPU."""
    from runtime.launch import torchrun_device
    from runtime.llm import load_model

    if req.emulate:
        from runtime import emulate as em

        return em.load_emulated(req.emulate)
    return load_model(args.model, torchrun_device(args.device) if req.torchrun else args.device, args.dtype)


def _plan(args, req: _Request, model) -> Plan:
    """The plan to run: PPSD stages cut as the simulator cuts them (by a profile of this model when
    there is one), the exit head, the launch rules, and the resources it needs checked."""
    from runtime import emulate as em

    profile = None
    if req.pipelined and req.bounds is None:
        profile = (model.profile if req.emulate and not getattr(args, "profile", None)
                   else default_profile(model.model_id, getattr(args, "profile", None)))
    plan = make_plan(args.mode, model.num_layers, args.exit_layer, args.draft_len, args.stages, req.bounds, profile)
    if getattr(args, "draft_stop_confidence", None) is not None:
        plan = replace(plan, draft_stop=args.draft_stop_confidence)  # checked by `check_draft_stop_args`
    plan = (em.with_emulated_head if req.emulate else with_exit_head)(model, plan, getattr(args, "heads", None),
                                                                      getattr(args, "exit_head", None))
    if req.pipelined:  # under torchrun the torchrun rules, whatever --launch says
        plan = replace(plan, launch="torchrun" if req.torchrun else getattr(args, "launch", None) or "local")
    if req.emulate and req.pipelined and plan.hop_ms is None:
        plan = replace(plan, hop_ms=float(model.profile.hop_ms()))  # the emulated stages wait for it too
    if not (req.torchrun and req.cuda):  # torchrun on GPUs: one stage per rank, maybe across nodes
        check_resources(plan, args.device, args.oversubscribe or bool(req.emulate))  # waits use no core
    return plan


def _inputs(args, req: _Request, model, plan: Plan) -> tuple[list, list, object]:
    """(prompts as token ids, new tokens each, forced acceptance): --prompts encoded, or with --emulate
    synthetic prompts of the profile's lengths and its traces' acceptance (unless --force-trace)."""
    from ppsd.prompts import load_prompts

    if req.emulate:
        from runtime import emulate as em

        if args.prompts:
            raise UserError("--prompts does not apply with --emulate (prompts are synthetic, of the profile's "
                            "prompt lengths)", "drop --prompts; --limit picks how many")
        prompts, max_new, forced = em.run_inputs(model, plan, args.limit, args.max_new_tokens, args.force_trace)
    else:
        prompts = [model.encode_prompt(p.text) for p in load_prompts(args.prompts, limit=args.limit)]
        max_new, forced = [args.max_new_tokens] * len(prompts), req.forced
    check_lengths(model, prompts, max_new, plan)
    return prompts, max_new, forced


def _measure_with_ar(args, model, plan: Plan, job, forced, run_facts: dict, cores: int):
    """The plan's Result, measured beside AR in the same session (unless --no-ar), and within a budget
    of cores AR (and EESD) on every core, PPSD's stages sharing them (runtime/same_budget.py)."""
    from runtime.measure import measure

    ar = None
    is_ar = not plan.scheme.speculative  # the plan is the baseline itself
    if is_ar or not args.no_ar:
        ar = measure(model, job(make_plan(Mode.AR, model.num_layers)), load_s=model.load_s, facts=run_facts)
    m = ar if is_ar else measure(model, job(plan, forced), load_s=model.load_s, facts=run_facts)
    res = m.result
    if ar is not None:
        compare_with_ar(m, ar)
    if ar is not None and cores > 1:
        from runtime.same_budget import SameBudget, measure_ar_in_budget, measure_plan_in_budget

        ar_tp = measure_ar_in_budget(model, job(make_plan(Mode.AR, model.num_layers)), cores, measure)
        plan_tp = ar_tp if is_ar else measure_plan_in_budget(model, job(plan, forced), cores, res.tokens_per_s, measure)
        SameBudget(cores, plan_tp, ar_tp).fill(res)
    return res


def compare_with_ar(m, ar) -> None:
    """Fill measurement `m`'s comparison with AR's measurement `ar` (same prompts, same session)."""
    res = m.result
    res.speedup_vs_ar = res.tokens_per_s / ar.result.tokens_per_s
    res.details.ar_tokens_per_s = ar.result.tokens_per_s
    if res.plan.mode.speculative:
        res.details.outputs_match_ar = m.outputs == ar.outputs
    ar_e2e = ar.result.details.prefill_s + ar.result.time_s
    res.details.speedup_vs_ar_e2e = ar_e2e / (res.details.prefill_s + res.time_s)


def _report(args, plan, res) -> None:
    """What `ppsd run` prints on stdout, all of it: the result (one JSON document with --json)."""
    from sim.timeline import write_chrome_trace

    if args.timeline:
        write_chrome_trace(args.timeline, res.timeline, f"ppsd {plan.label()} (measured)")
    warning = host_warning(res)
    if warning:
        print(f"ppsd run: warning: {warning}", file=sys.stderr)
    if args.json:
        print_json(res.to_json_dict())
    else:
        print(format_result(res))


def host_warning(res) -> str | None:
    """One line when an emulated pipeline loaded this machine's cores so much that the stages queued
    for them: the measurement is then this machine's contention, not the plan's control plane."""
    from runtime.measure import HOST_BUSY_WARN

    d = res.details
    share = getattr(d, "host_cpu_share", None)
    if not getattr(d, "emulated", False) or share is None or share < HOST_BUSY_WARN:
        return None
    return (f"the emulated stages kept this machine's cores {share:.0%} busy with messages and Python, so they "
            f"waited for cores: the run measures this machine's contention, not the plan's control plane "
            f"(fewer stages, slower pieces, or a machine with a core per stage)")


def _run_torchrun(args, model, plan, job, forced, facts: dict, cores: int) -> int:
    """`ppsd run` as one rank of torchrun, one PPSD stage. Rank 0 first measures AR (and, on `cores`
    > 1, AR on all of them) in-process with the whole model while the other ranks wait, idle; then
    every rank runs its stage and rank 0 reports. The other ranks print nothing on stdout."""
    from runtime.launch import run_torchrun, torchrun_one_node, torchrun_rank
    from runtime.measure import _pipeline_job, details_facts, measure, records_from_logs, summarize
    from runtime.same_budget import SameBudget, measure_ar_in_budget, threads_for

    pjob = _pipeline_job(model, job(plan, forced))
    rank0 = torchrun_rank() == 0
    if args.no_ar or not rank0:
        cores = 1
    if cores > 1:
        # only this one run of the pipeline is measured: the budget must give its stages the threads
        # they run with here, and the stages must share this node's cores
        why = None if torchrun_one_node() else "its stages are on several nodes"
        if why is None and threads_for(plan, cores) != pjob.threads:
            why = f"{cores} cores would give each stage {threads_for(plan, cores)} threads, not {pjob.threads}"
        if why:
            print(f"same budget: not measured under torchrun ({why}); `ppsd run` without torchrun measures it",
                  file=sys.stderr)
            cores = 1
    base = {}

    def baseline() -> None:  # rank 0, before the stages drop their layers, the other ranks waiting
        ar_job = job(make_plan(Mode.AR, model.num_layers))
        base["ar"] = measure(model, ar_job, load_s=model.load_s, facts=facts)
        if cores > 1:
            base["ar_tp"] = measure_ar_in_budget(model, ar_job, cores, measure)

    logs = run_torchrun(pjob, model, rank0_first=None if args.no_ar else baseline)
    if logs is None:
        return 0  # not rank 0: rank 0 reports
    m = summarize(plan, records_from_logs(pjob, logs), load_s=model.load_s,
                  facts=details_facts(model, job(plan, forced), facts))
    res = m.result
    if "ar" in base:
        compare_with_ar(m, base["ar"])
    if "ar_tp" in base:
        SameBudget(cores, res.tokens_per_s, base["ar_tp"]).fill(res)
    _report(args, plan, res)
    return 0


def format_result(res) -> str:
    d = res.details
    lines = [f"{res.plan.label()} on {d.model or '?'}: {res.tokens_per_s:.2f} tokens/s "
             f"(median of {d.repeats}; p10 {d.tokens_per_s_p10:.2f}, p90 {d.tokens_per_s_p90:.2f})"]
    if res.speedup_vs_ar is not None and res.plan.mode.speculative:
        lines.append(f"  vs AR {d.ar_tokens_per_s:.2f} tokens/s: speedup {res.speedup_vs_ar:.3f}×; "
                     f"outputs match AR: {d.outputs_match_ar}")
    lines.append(f"  {res.tokens} decode tokens in {res.time_s:.3f} s; prefill {d.prefill_s:.3f} s; "
                 f"model load {d.load_s:.2f} s")
    if d.speedup_vs_ar_e2e is not None and res.plan.mode.speculative:
        lines.append(f"  end to end (prefill + decode): {d.speedup_vs_ar_e2e:.3f}× AR")
    if res.speedup_vs_ar_tp is not None:
        lines.append(f"  same budget ({d.budget}): {d.budget_tokens_per_s:.2f} tokens/s vs AR on all of them "
                     f"{d.ar_tp_tokens_per_s:.2f} tokens/s: {res.speedup_vs_ar_tp:.3f}×"
                     + ("  (AR on the whole budget wins)" if res.speedup_vs_ar_tp < 1.0 else ""))
    if d.emulated:
        lines.append("  emulated devices: every layer, head and embedding waited for its profiled time; "
                     "what the run adds beyond them is this machine's control plane (messages, Python)")
    if d.host_cpu_share is not None:
        lines.append(f"  stage processes kept this machine's cores {d.host_cpu_share:.0%} busy")
    if res.plan.mode.speculative:
        rate = "n/a" if res.acceptance_rate is None else f"{res.acceptance_rate:.3f}"
        lines.append(f"  acceptance {rate}; mean tokens per round {res.mean_accepted:.2f}; "
                     f"accepted-length histogram {dict(res.accepted_hist)}")
        if d.forced_trace:
            lines.append(f"  acceptance forced by trace: {d.forced_trace} (outputs are not lossless)")
    lines.append("  stage busy: " + ", ".join(f"stage {i + 1} {b:.0%}" for i, b in enumerate(res.stage_busy)))
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `ppsd run`")
