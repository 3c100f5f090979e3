"""Run a plan for real, several times, and turn what happened into a `Result` (source "measured").

Protocol: `warmup` untimed passes over the prompts, then `repeats` timed ones. Each repetition's
speed is its decode tokens (after the first token) over its decode time (after the first token);
prefill and model loading are reported separately. tokens_per_s is the median over repetitions,
with p10/p90 and min/max as the spread. The timeline holds the first measured repetition.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from runtime.acceptance import ForcedTrace, Sampler
from runtime.decoding import SeqRecord, generate_ar, generate_eesd
from runtime.warmup import warmup_view
from sim.plan import MeasuredDetails, Plan, Result
from sim.timeline import Event


@dataclass
class Job:
    """A plan plus what to decode and how to time it."""

    plan: Plan
    prompts: list[list[int]]
    max_new: list[int]
    temperature: float = 0.0
    seed: int = 0
    forced: list[ForcedTrace | None] | None = None  # per prompt
    stop_at_eos: bool = True
    warmup: int = 1
    repeats: int = 3
    timeout_s: float = 60.0
    port: int | None = None
    timeline: bool = True
    heads_dir: str | None = None  # exit-head folder when plan.exit_head is not "shared"
    threads: int = 1  # torch threads of the decoding process (AR, EESD) or of each stage process (PPSD)
    warmup_tokens: int = 0  # > 0: a warm-up pass decodes this many tokens of each prompt's start (runtime/warmup.py)


@dataclass
class Measurement:
    result: Result
    outputs: list[list[int]]  # tokens per prompt (first measured repetition)
    records: list[list[SeqRecord]] = field(default_factory=list)  # [repetition][prompt]


def _seq_seed(seed: int, seq: int) -> int:
    return seed * 1_000_003 + seq * 2 + 1


def _decode_ar(model, job: Job, i: int, sampler, eos, origin, record: bool, drafter, warm: bool) -> SeqRecord:
    prompt, max_new = _sequence(job, i, warm)
    return generate_ar(model, prompt, max_new, sampler, eos, origin, record)


def _decode_eesd(model, job: Job, i: int, sampler, eos, origin, record: bool, drafter, warm: bool) -> SeqRecord:
    forced = job.forced[i] if job.forced else None
    prompt, max_new = _sequence(job, i, warm)
    return generate_eesd(model, prompt, max_new, sampler, job.plan.exit_layer, job.plan.draft_len, eos,
                         forced, origin, record, drafter, job.plan.draft_stop)


def _sequence(job: Job, i: int, warm: bool) -> tuple[list[int], int]:
    """Prompt i and its new tokens: as given in a timed pass, cut short in a warm-up (`warmup_tokens`)."""
    if warm:
        return warmup_view(job.prompts[i], job.max_new[i], job.warmup_tokens)
    return job.prompts[i], job.max_new[i]




def _run_in_process(model, job: Job) -> list[list[SeqRecord]]:
    plan, eos = job.plan, (model.eos_token_ids if job.stop_at_eos else None)
    decode = _decode_eesd if plan.scheme.speculative else _decode_ar  # pipelines decode in `_run_pipeline`
    reps: list[list[SeqRecord]] = []
    seq = 0
    origin = None
    drafter = None
    if plan.scheme.speculative:
        from runtime.heads import make_drafter

        drafter = make_drafter(model, plan.exit_layer, job.heads_dir, plan.exit_head)
    for rep in range(-job.warmup, job.repeats):
        recs = []
        for i in range(len(job.prompts)):
            sampler = Sampler.make(job.temperature, _seq_seed(job.seed, seq), model.device)
            seq += 1
            record = job.timeline and rep == 0
            if record and origin is None:
                origin = time.perf_counter()
            recs.append(decode(model, job, i, sampler, eos, origin, record, drafter, rep < 0))
        if rep >= 0:
            reps.append(recs)
    return reps


def _run_pipeline(model, job: Job) -> list[list[SeqRecord]]:
    from runtime.launch import run_local
    from runtime.pipeline import PipelineJob

    pjob = _pipeline_job(model, job)
    logs = run_local(pjob, model=model, port=job.port)
    return records_from_logs(pjob, logs)


def _pipeline_job(model, job: Job):
    from runtime.pipeline import PipelineJob

    return PipelineJob(
        model_spec=getattr(model, "load_spec", None) or model.model_id,  # emulated models have no load spec
        bounds=tuple(job.plan.stage_bounds), prompts=job.prompts, max_new=job.max_new,
        temperature=job.temperature, seed=job.seed, forced=job.forced,
        eos=tuple(sorted(model.eos_token_ids)) if job.stop_at_eos else (), warmup=job.warmup, repeats=job.repeats,
        warmup_tokens=job.warmup_tokens,
        timeline_rep=0 if job.timeline else -(10 ** 9), timeout_s=job.timeout_s,
        device=str(model.device.type), dtype=str(model.dtype).replace("torch.", ""),
        heads_dir=job.heads_dir, exit_head=job.plan.exit_head, threads=job.threads, launch=job.plan.launch,
        # emulated devices wait for the plan's hop too (a real run's messages take what they take)
        hop_ms=float(job.plan.hop_ms or 0.0) if getattr(model, "emulated", False) else 0.0,
        draft_stop=job.plan.draft_stop)


def records_from_logs(pjob, logs) -> list[list[SeqRecord]]:
    """Stage logs -> per-repetition, per-prompt SeqRecords (events on one clock from the timeline
    repetition's start)."""
    first, last = logs[0], logs[-1]
    sched = pjob.schedule
    origin = min((first.seq_start[s] for s, (rep, _) in enumerate(sched) if rep == pjob.timeline_rep), default=0.0)
    events = sorted((e for log in logs for e in log.events), key=lambda e: e.start_s)
    for e in events:
        e.start_s -= origin
    reps: dict[int, list[SeqRecord]] = {}
    for s, (rep, _) in enumerate(sched):
        if rep < 0:
            continue
        info = last.seqs[s]
        rec = SeqRecord(tokens=info["tokens"], prefill_s=info["t_first"] - first.seq_start[s],
                        decode_s=info["t_last"] - info["t_first"], rounds=info["rounds"], verified=info["verified"],
                        busy_s=[log.busy.get(s, 0.0) for log in logs],
                        cpu_s=[log.cpu.get(s, 0.0) for log in logs])
        if rep == pjob.timeline_rep and not any(reps.values()):
            rec.events = events
        reps.setdefault(rep, []).append(rec)
    return [reps[r] for r in sorted(reps)]


def summarize(plan: Plan, reps: list[list[SeqRecord]], *, load_s: float = 0.0, facts: dict | None = None) -> Measurement:
    """Per-repetition records -> Result with median and spread. `facts`: further MeasuredDetails
    fields (the model, the job's settings)."""
    tps, times, prefill, toks = [], [], [], []
    for recs in reps:
        n = sum(r.decode_tokens for r in recs)
        t = sum(r.decode_s for r in recs)
        toks.append(n)
        times.append(t)
        tps.append(n / t if t > 0 else 0.0)
        prefill.append(sum(r.prefill_s for r in recs))
    first = reps[0]
    rounds = [a for r in first for a in r.rounds]
    verified = sum(r.verified for r in first)
    hist = dict(sorted(Counter(rounds).items()))
    k = len(first[0].busy_s) if first and first[0].busy_s else 1
    busy = [sum(r.busy_s[i] for recs in reps for r in recs) / max(sum(times), 1e-12) for i in range(k)]
    med = statistics.median(tps)
    events: list[Event] = [e for r in first for e in r.events]
    host = host_cpu_share(reps)
    res = Result(
        plan=plan, source="measured", tokens=int(statistics.median(toks)), time_s=float(statistics.median(times)),
        tokens_per_s=float(med), speedup_vs_ar=None,
        mean_accepted=(float(np.mean([a + 1 for a in rounds])) if rounds else 1.0),
        accepted_hist=hist,
        acceptance_rate=(sum(rounds) / verified if verified else None) if plan.mode.speculative else None,
        stage_busy=[round(b, 4) for b in busy], device_busy=[round(b, 4) for b in busy],
        timeline=events,
        details=MeasuredDetails(
            tokens_per_s_p10=float(np.percentile(tps, 10)), tokens_per_s_p90=float(np.percentile(tps, 90)),
            tokens_per_s_min=float(min(tps)), tokens_per_s_max=float(max(tps)),
            tokens_per_s_reps=[round(x, 4) for x in tps], repeats=len(reps),
            prefill_s=float(statistics.median(prefill)), load_s=round(load_s, 3),
            host_cpu_share=None if host is None else round(host, 4), **(facts or {})),
    )
    return Measurement(res, [r.tokens for r in first], reps)


HOST_BUSY_WARN = 0.5  # two cores half busy: a stage that wakes finds both taken a third of the time (Erlang C)


def host_cpu_share(reps: list[list[SeqRecord]], cores: int | None = None) -> float | None:
    """The share of this machine's cores the PPSD stage processes kept busy while they decoded: their
    CPU seconds (every thread: Python, gloo) over the sequences' wall time × the cores. None when no
    stage recorded any (AR, EESD; a pipeline whose stages ran on other nodes report their own).

    Emulated stages wait without using a core, so what they use is the control plane alone; near 1
    the stages queue for the cores on every message, and the run measures this machine's contention,
    not the plan's control plane (docs/design-notes.md)."""
    import os

    cpu = sum(sum(r.cpu_s) for recs in reps for r in recs)
    wall = sum(r.prefill_s + r.decode_s for recs in reps for r in recs)
    if cpu <= 0.0 or wall <= 0.0:
        return None
    return cpu / (wall * (cores or os.cpu_count() or 1))


def _run_threaded(model, job: Job) -> list[list[SeqRecord]]:
    """`_run_in_process` with this process's torch threads set to the job's for its duration."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(job.threads)
    try:
        return _run_in_process(model, job)
    finally:
        torch.set_num_threads(before)


def measure(model, job: Job, *, load_s: float = 0.0, facts: dict | None = None) -> Measurement:
    """Run `job` where its scheme runs (a pipeline in its stage processes, else in this process) and
    summarise it."""
    reps = (_run_pipeline if job.plan.scheme.pipelined else _run_threaded)(model, job)
    return summarize(job.plan, reps, load_s=load_s, facts=details_facts(model, job, facts))


def details_facts(model, job: Job, facts: dict | None = None) -> dict:
    """The MeasuredDetails fields a run of `job` on `model` settles, plus `facts`."""
    return {"warmup": job.warmup, "warmup_tokens": job.warmup_tokens or None, "temperature": job.temperature,
            "forced_trace": (job.forced[0].label if job.forced and job.forced[0] else None),
            "emulated": True if getattr(model, "emulated", False) else None, **(facts or {})}
