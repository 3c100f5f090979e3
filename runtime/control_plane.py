"""The control plane of a k-stage PPSD pipeline on this machine, measured with zero-time layers.

What a stage pass costs beyond its layers and heads (the host sync, the sends and receives, the
stage loop's Python) and how long a message takes between two stage processes, at each stage count
k: the profile's `latency.control_plane` (ppsd/profile/schema.py), which the PPSD costs add to every
pass and take as the least hop (sim/schemes/ppsd/stage_costs.py).

Method (emulated devices, runtime/emulate.py: the real stage processes and messages):
  pass overhead  every draft accepted, no layer or embedding time, a head of `HEAD_MS` on stage 1
                 (the exit head) and on the last stage: the median of stage 1's pass (from the top
                 of its loop to the draft's send) − the head is the overhead of a pass. Not the
                 period between passes: with k stages in flight and every hop's transit, the
                 in-flight cap can hold stage 1 between passes (at k = 8 with ~0.8 ms transits it
                 did: the period gave 2.76 ms of "overhead"), and the engines model the cap
                 themselves (`PPSDCosts.cap`), so counting its waits as overhead prices them twice.
  by role        the same run: stage 1's overhead splits at the send of its hidden state (the
                 part before it delays the next stage, `send_offset_ms`; the rest, with the draft's
                 send, runs in parallel with it); a middle stage's pass is pure overhead (its
                 layers take no time, `middle_pass_overhead_ms`); the last stage's pass − its head
                 is `last_pass_overhead_ms` (the draft's receipt, the verdict's send). They differ
                 several-fold (CPU, hidden 576: stage 1 0.15-0.26 ms of which 0.03-0.05 before the
                 send, a middle stage 0.022 ms, the last 0.09-0.35 ms), and a rejected token's round
                 trip runs through every one of them, so pricing all passes at stage 1's figure made
                 the chain 0.6 ms long at 6 stages, enough to lose the race of sim/model/restart.py.
  hop jitter     the same run: the robust spread of those transits, the host's scheduling noise on
                 each hand-over (`hop_jitter_ms`). It
                 decides the restart race when stage 1's layers end within it of the commit.
  transit        the same run: zero-time layers behind stage 1's 1 ms head, so each token finds
                 stage 2 idle, and the time from stage 1's send (the end of its layers) to stage
                 2's pass start is a message's transit (the median over tokens). Not a run with
                 every draft rejected: there stage 1 restarts at once and drafts on while the
                 rejection travels back, so at k >= 4 stage 2 meets a queue of stale messages and
                 the "transit" would be their draining.
  reject_all     every draft rejected, all pieces zero-time: the time per token then (reported only).
Both are properties of this machine's gloo and Python at the hidden size given (the bytes a hop
carries), not of any model.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from ppsd.statistics import median

MIN_PASSES = 4  # passes a role needs before its median pass says anything
HEAD_MS = 1.0  # the head that makes stage 1 and the last stage the bottleneck in the overhead run
METHOD = ("emulated zero-time layers: overhead = stage 1's median pass - head with every draft accepted (its part "
          "before the send: send_offset), a middle stage's median pass, the last stage's median pass - head; transit = "
          "stage 2's pass start - stage 1's send in the same run (runtime/control_plane.py)")


def _run(profile_dir: Path, k: int, hidden: int, forced, tokens: int, prompts: int, repeats: int):
    from ppsd.profile import load_profile
    from runtime.emulate import EmulatedModel, emulated_prompts
    from runtime.measure import Job, measure
    from ppsd.modes import Mode
    from sim.plan import Plan

    prof = load_profile(profile_dir)
    model = EmulatedModel(prof, hidden_size=hidden)
    ps = [p.tokens for p in emulated_prompts(prof)][:prompts] or [[1, 2, 3]]
    plan = Plan(Mode.PPSD, exit_layer=1, stage_bounds=tuple(range(k + 1)), hop_ms=0.0)
    return measure(model, Job(plan=plan, prompts=ps, max_new=[tokens] * len(ps), warmup=1, repeats=repeats,
                              forced=[forced] * len(ps), timeout_s=120))


def _stage1_pass_ms(result) -> float | None:
    """Median duration of stage 1's passes (embed, layers, the exit head, the sends; the runtime's
    "draft" events), every draft accepted: a pass's own cost, with no wait for a verdict in it."""
    return median((ev.dur_s * 1e3 for ev in result.timeline if ev.row == "stage 1" and ev.name == "draft"),
                  min_n=MIN_PASSES)


def _stage1_period_ms(result) -> float | None:
    """Median time between consecutive stage-1 pass starts of one sequence, every draft accepted:
    the bottleneck's cycle (head + one pass's fixed cost). A median, because on a shared machine a
    few passes stall for milliseconds (a descheduled process) and a mean rate carries them."""
    starts = sorted(ev.start_s for ev in result.timeline if ev.row == "stage 1" and ev.name == "draft")
    gaps = [(b - a) * 1e3 for a, b in zip(starts, starts[1:])]
    if len(gaps) < 4:
        return None
    med = statistics.median(gaps)
    within = [g for g in gaps if g < 5 * med]  # a gap between two sequences is not a cycle
    return float(statistics.median(within)) if within else None


def _role_overheads(result, k: int) -> dict:
    """Per-role fixed costs of a pass from an accept-all run with zero-time layers and a HEAD_MS head
    on stage 1 and the last stage (see the module doc): stage 1's part before its send, a middle
    stage's pass, the last stage's pass − the head. None where the run has too few passes."""
    tl = result.timeline
    before = median((ev.args.get("layers_ms", 0.0) for ev in tl if ev.row == "stage 1" and ev.name == "draft"),
                    min_n=MIN_PASSES)
    middle = median((ev.dur_s * 1e3 for ev in tl if ev.name == "forward" and ev.row not in ("stage 1", f"stage {k}")),
                    min_n=MIN_PASSES)
    last = median((ev.dur_s * 1e3 for ev in tl if ev.row == f"stage {k}" and ev.name == "verify"), min_n=MIN_PASSES)
    return {"send_offset_ms": None if before is None else round(before, 5),
            "middle_pass_overhead_ms": None if middle is None else round(middle, 5),
            "last_pass_overhead_ms": None if last is None else round(max(last - HEAD_MS, 0.0), 5)}


def _transit_ms(result) -> float:
    """Median time from stage 1's send of a token (the end of its layers) to stage 2's pass start on
    it (`_transit_samples`)."""
    gaps = _transit_samples(result)
    return float(statistics.median(gaps)) if gaps else 0.0


def _hop_jitter_ms(result) -> float:
    """Robust spread (1.4826 × the median absolute deviation) of a message's transit: this host's
    scheduling noise on each hand-over, which makes the restart race of sim/model/restart.py a mix of
    outcomes rather than one (`PPSDCosts.jitter_cv`)."""
    gaps = _transit_samples(result)
    if len(gaps) < 4:
        return 0.0
    med = statistics.median(gaps)
    return 1.4826 * float(statistics.median(abs(g - med) for g in gaps))


def _transit_samples(result) -> list[float]:
    """Stage 1's send of a token (the end of its layers) → stage 2's pass start on it, ms, per token.
    A stage-2 pass is matched with the latest send of its position before it began (the last
    stage's events carry no epoch; with every draft rejected each position is sent again per epoch)."""
    import bisect

    sent: dict = {}
    for ev in result.timeline:
        if ev.row == "stage 1" and ev.name == "draft":
            sent.setdefault(ev.args.get("pos"), []).append(ev.start_s + ev.args.get("layers_ms", 0.0) / 1e3)
    for times in sent.values():
        times.sort()
    gaps = []
    for ev in result.timeline:
        if ev.row != "stage 2" or ev.name not in ("forward", "verify"):
            continue
        times = sent.get(ev.args.get("pos"), [])
        i = bisect.bisect_right(times, ev.start_s) - 1
        if i >= 0:
            gaps.append((ev.start_s - times[i]) * 1e3)
    return gaps


def measure_control_plane(stages=(2, 3, 4, 6, 8), *, hidden_size: int = 4096, tokens: int = 48, prompts: int = 2,
                          repeats: int = 2, workdir: str | Path | None = None, progress=None) -> dict:
    """`latency.control_plane` for each stage count in `stages`, measured on this machine."""
    from ppsd.profile.synthetic import write_synthetic_profile
    from runtime.acceptance import ACCEPT_ALL, REJECT_ALL

    base = Path(workdir or tempfile.mkdtemp(prefix="ppsd-control-plane-"))
    out: dict = {}
    for k in sorted({int(s) for s in stages}):
        head = write_synthetic_profile(base / f"k{k}-head", num_layers=k, layer_ms=0.0, head_ms=HEAD_MS,
                                       embed_ms=0.0, hop_ms=0.0, n_values=(1, 2), context_values=(64, 1024))
        zero = write_synthetic_profile(base / f"k{k}-zero", num_layers=k, layer_ms=0.0, head_ms=0.0,
                                       embed_ms=0.0, hop_ms=0.0, n_values=(1, 2), context_values=(64, 1024))
        acc = _run(head.path, k, hidden_size, ACCEPT_ALL, tokens, prompts, repeats)
        rej = _run(zero.path, k, hidden_size, REJECT_ALL, tokens, prompts, repeats)
        per_token = 1e3 / acc.result.tokens_per_s
        period = _stage1_period_ms(acc.result)  # robust to a stalled pass, unlike the mean rate
        own = _stage1_pass_ms(acc.result)  # a pass alone, no cap wait in it
        pass_ms = own if own else period if period else per_token
        out[str(k)] = {"pass_overhead_ms": round(max(pass_ms - HEAD_MS, 0.0), 5),
                       "stage1_pass_ms": round(own, 5) if own else None,
                       "stage1_period_ms": round(period, 5) if period else None,
                       **_role_overheads(acc.result, k),
                       "transit_ms": round(_transit_ms(acc.result), 5),
                       "hop_jitter_ms": round(_hop_jitter_ms(acc.result), 5),
                       "accept_all_ms_per_token": round(per_token, 5),
                       "reject_all_ms_per_token": round(1e3 / rej.result.tokens_per_s, 5)}
        if progress is not None:
            progress(k, out[str(k)])
    return {"method": METHOD, "hidden_size": int(hidden_size), "head_ms": HEAD_MS, "stages": out}


def with_control_plane(profile_dir: str | Path, out_dir: str | Path, block: dict) -> Path:
    """A copy of a profile folder whose latency carries `block` as `control_plane` (the files
    beside profile.json are copied as they are), written whole: a folder at `out_dir` is replaced only
    by a copy that loads."""
    import json
    import shutil

    from ppsd.paths import atomic_dir, atomic_write_json
    from ppsd.profile import PROFILE_FILE, load_profile

    src, dst = Path(profile_dir), Path(out_dir)
    meta = json.loads((src / PROFILE_FILE).read_text())
    meta.setdefault("latency", {})["control_plane"] = block
    with atomic_dir(dst) as tmp:
        for f in src.iterdir():
            if f.is_file() and f.name != PROFILE_FILE:
                shutil.copy2(f, tmp / f.name)
        atomic_write_json(tmp / PROFILE_FILE, meta)
        load_profile(tmp)  # still a valid profile
    return dst
