"""From a `ppsd run` / `ppsd validate` request to a checked, resolved plan (shared by both and by
the benchmarks): stage bounds by the simulator's one rule, exit heads, cores, context lengths."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from ppsd.errors import UserError
from ppsd.machine import available_cores
from ppsd.modes import Mode
from sim.plan import Plan


def parse_bounds(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(","))
    except ValueError:
        raise UserError(f"--stage-bounds {text!r} is not a list of integers", "write e.g. 0,15,30") from None


def make_plan(mode, num_layers: int, exit_layer: int | None = None, draft_len: int = 4, stages: int = 2,
              bounds: tuple[int, ...] | None = None, profile=None) -> Plan:
    """A validated plan. PPSD bounds left open are cut by the simulator's rule
    (`sim.schemes.ppsd.partition.stage_bounds`): balanced by the profile's measured time when a profile of this
    model is given, so `ppsd run` measures the very plan `ppsd simulate` predicts; by layer count
    without one."""
    from sim.schemes.ppsd.partition import stage_bounds

    mode = Mode.parse(mode)
    if mode.speculative and exit_layer is None:
        raise UserError(f"--mode {mode} needs an exit layer", f"add --exit E with 1 <= E <= {num_layers - 1}")
    plan = Plan(mode=mode, exit_layer=exit_layer if mode.speculative else None, draft_len=draft_len,
                stages=stages, stage_bounds=bounds)
    plan.validate(num_layers)
    if plan.scheme.pipelined and plan.stage_bounds is None:
        if profile is not None and profile.num_layers != num_layers:
            raise UserError(f"profile {profile.path} is of a {profile.num_layers}-layer model, this one has "
                            f"{num_layers}", "pass --profile of the same model, or --stage-bounds")
        plan = replace(plan, stage_bounds=stage_bounds(profile, exit_layer, stages, plan.exit_head, num_layers))
    return plan


def default_profile(model_id: str, given: str | None):
    """The profile whose times cut PPSD stages for `ppsd run`: --profile when given; else the
    committed example profile when it is of the same model (the embedded default); else None."""
    from ppsd.paths import EXAMPLES_DIR
    from ppsd.profile import PROFILE_FILE, load_profile

    if given:
        return load_profile(given)
    for folder in sorted(Path(EXAMPLES_DIR).glob("*")):
        if (folder / PROFILE_FILE).is_file():
            try:
                p = load_profile(folder)
            except UserError:
                continue
            if p.model_id == model_id and p.kind == "measured":
                print(f"stage bounds: balanced by the profiled time of {folder} (as `ppsd simulate` does; "
                      f"--profile DIR for another)", file=sys.stderr)
                return p
    return None


def with_exit_head(model, plan: Plan, heads_dir: str | None, name: str | None) -> Plan:
    """The plan drafting with `--exit-head` from `--heads` (checked now: another model's heads, a
    missing exit are a UserError before anything runs)."""
    from runtime.heads import make_drafter, resolve_head_name

    name = resolve_head_name(heads_dir, name)
    make_drafter(model, plan.exit_layer, heads_dir, name)
    return replace(plan, exit_head=name) if plan.mode.speculative else plan


def check_resources(plan: Plan, device: str, oversubscribe: bool = False, command: str = "run") -> None:
    """More stages than cores (CPU) or GPUs (CUDA) is a UserError naming a fix that fits."""
    if not plan.scheme.pipelined:
        return
    check_stage_devices(plan.num_stages, device, oversubscribe, command)


def check_stage_devices(k: int, device: str, oversubscribe: bool = False, command: str = "run") -> None:
    """k PPSD stage processes on `device`: one GPU each on CUDA (NCCL cannot put two ranks on one
    GPU), one core each on CPU. Needs only the stage count, so `ppsd run` asks before loading a model.
    `command` ("run" or "validate") picks the flags the fix names."""
    from ppsd.devices import normalize_device

    device = normalize_device(device)  # "gpu" is "cuda": it must get the GPU count, not the core count
    if device.startswith("cuda"):
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if k <= n:
            return
        if n == 0:
            raise UserError(f"--device {device} was asked for but this machine has no CUDA GPU", "use --device cpu")
        if n >= 2:
            fix = f"use --stages {n}" if command == "run" else f"use PPSD plans of at most {n} stages (ppsd:E:{n})"
        elif command == "run":  # --stages 2 would need 2 GPUs too
            fix = "use --mode eesd (one GPU), or --device cpu for PPSD"
        else:
            fix = "validate EESD plans only (--plans 'eesd:E:3'), or a profile measured with --device cpu"
        raise UserError(f"PPSD with {k} stages needs {k} GPUs (one per stage) but this machine has {n}", fix)
    cores = available_cores()
    if k > cores and not oversubscribe:
        raise UserError(f"{k} stages need {k} CPU cores (one per stage process) but {cores} are available",
                        f"use --stages {max(2, cores)}, or --oversubscribe to run anyway (much slower)")


def check_lengths(model, prompts: list[list[int]], max_new: list[int], plan: Plan) -> None:
    slack = plan.scheme.context_slack(plan)
    for i, (p, t) in enumerate(zip(prompts, max_new)):
        if len(p) + t + slack > model.max_context:
            raise UserError(f"prompt {i + 1} has {len(p)} tokens; with {t} new tokens it exceeds the model's "
                            f"context of {model.max_context}",
                            f"use a shorter prompt or --max-new-tokens {max(model.max_context - len(p) - slack, 0)}")
        if not p:
            raise UserError(f"prompt {i + 1} is empty", "give prompts with text")
