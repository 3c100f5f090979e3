"""GPU counts for multi-GPU PPSD plans (torch-free).

PPSD wants one pipeline stage per GPU. An analytic (estimated) profile says how many GPUs it plans
for (`ppsd profile --analytic --gpus G`, stored as `hardware.gpu_count`); `ppsd simulate` and
`ppsd plan` refuse plans that need more, and `ppsd plan` answers "how many GPUs and which exit
layer" for GPU profiles.
"""

from __future__ import annotations

from ppsd.errors import UserError
from sim.planner.sweep_spec import DEFAULT_DEVICES, MAX_DEVICES


def gpu_count(profile) -> int | None:
    """GPUs an analytic profile plans for (`estimate.gpu_count`, else `hardware.gpu_count`); None
    for measured and synthetic profiles, which set no limit here."""
    meta = profile.meta
    est = meta.get("estimate")
    if meta.get("kind") != "estimated" or not isinstance(est, dict):
        return None
    n = est.get("gpu_count") or (meta.get("hardware") or {}).get("gpu_count")
    try:
        return int(n) if n else None
    except (TypeError, ValueError):
        return None


def is_gpu_profile(profile) -> bool:
    return (profile.meta.get("hardware") or {}).get("device") == "cuda"


def _fix(option: str, n: int, want: int) -> str:
    return f"give {option} {n} or fewer, or re-estimate with `ppsd profile --analytic ... --gpus {want}`"


def check_plan(profile, plan) -> None:
    """UserError when a plan needs more GPUs (its stages' distinct devices: PPSD's) than the estimate has."""
    n = gpu_count(profile)
    used = len(set(plan.devices()))
    if n is not None and used > n:
        raise UserError(f"{plan.mode.name} with {plan.num_stages} stages needs {used} GPUs but the estimated profile "
                        f"plans for {n} (hardware.gpu_count)", _fix("--stages", n, used))


def default_devices(profile) -> int:
    """The most PPSD stages a plan sweep goes to by default: every GPU of an estimated profile; on a
    CPU profile its cores (at least 2, at most 8), since a stage is a process that wants a core of
    its own; else 4. More stages than cores are priced as if each had one (`shared_cores_note`), not
    as time-sharing them: the engines charge a whole pass the co-run factor of the stages busy when it
    starts, so c/b of a core over-charges a long pass that overlaps short ones only briefly
    (docs/design-notes.md)."""
    n = gpu_count(profile)
    if n is not None:
        return n
    cores = profile.cpu_cores
    if cores is not None:
        return max(2, min(int(cores), MAX_DEVICES))
    return DEFAULT_DEVICES


def shared_cores_note(profile, devices: int) -> str | None:
    """A line for plans of more stages than a CPU profile's cores (priced as a core each), else None."""
    cores = profile.cpu_cores
    if cores is None or devices <= cores:
        return None
    return (f"note: PPSD plans of more than {cores} stages share this CPU's {cores} cores but are priced as if each "
            "stage had a core of its own (optimistic); `ppsd run` needs --oversubscribe for them")


def devices_for(profile, devices: int | None) -> int:
    """`ppsd plan --devices`: default `default_devices(profile)`; above an estimated profile's GPU
    count is a UserError."""
    n = gpu_count(profile)
    if devices is None:
        return default_devices(profile)
    if n is not None and devices > n:
        raise UserError(f"--devices {devices} is above the estimated profile's {n} GPUs (hardware.gpu_count)",
                        _fix("--devices", n, devices))
    return devices


def recommendation(profile, best, reason: str) -> str:
    """The planner's answer in GPU terms for GPU profiles ("k GPUs, exit layer E: k stages on k
    GPUs ..."); the simulator's reason unchanged for CPU and synthetic profiles."""
    if not is_gpu_profile(profile):
        return reason
    p = best.plan
    d = best.details
    speed = f"{best.speedup_vs_ar:.2f}× AR, {best.tokens_per_s:.1f} tokens/s"
    budget = getattr(d, "budget", None) if best.speedup_vs_ar_tp is not None else None
    if budget and p.num_stages == 1:
        # same budget: a single-process plan (AR, EESD) runs tensor-parallel over every GPU of it (sim/model/budget.py)
        return (f"use all {budget} tensor-parallel: {p.scheme.in_words(p)}, {d.budget_tokens_per_s:.1f} tokens/s "
                f"({best.speedup_vs_ar_tp:.2f}× AR on the same GPUs) — {reason}")
    head = p.scheme.gpu_advice(p, speed, best.tokens_per_s)
    est = profile.meta.get("estimate") or {}
    need = int(est.get("min_gpus_for_weights") or 1)
    used = len(set(p.devices()))
    if need > used:
        head += (f"; the weights need ≥ {need} GPUs, so spread its layers over {need} "
                 "(a plain layer split; the extra hops are not simulated)")
    return f"{head} — {reason}"


def round_robin(stages: int, devices: int) -> tuple[int, ...] | None:
    """Placement of k stages on d devices: one each when they fit (None), else stage i on device i mod d."""
    if stages <= devices:
        return None
    return tuple(i % devices for i in range(stages))
