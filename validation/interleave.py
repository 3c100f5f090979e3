"""AR and a plan measured prompt by prompt, in turns: the speedup of a plan against AR run seconds
apart, not minutes.

Why: a shared machine's speed moves in bursts that outlast a prompt but not a plan, so a plan's minute
and a half between two AR runs is long enough for the machine to change state and change back
(docs/design-notes.md). Taking turns (AR on prompt 1, the plan on prompt 1, AR on prompt 2, ...) puts
the two within a few seconds of each other on every prompt, at the same cost as bracketing (each
prompt decoded once by AR and warmed up + timed once by the plan).

`Turns` splits a `Job` into per-chunk jobs; `combine` sums the chunks back into one `Measurement`
(tokens/s is every chunk's decode tokens over their decode time, as one run of the whole set would
report it; the timeline has the chunks end to end).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from runtime.measure import Job, Measurement, summarize

# what `summarize` works out from the records; every other MeasuredDetails field is a fact of the run
_SUMMARY_FIELDS = ("tokens_per_s_p10", "tokens_per_s_p90", "tokens_per_s_min", "tokens_per_s_max",
                   "tokens_per_s_reps", "repeats", "prefill_s", "host_cpu_share")


@dataclass(frozen=True)
class Turns:
    """The prompts of a job in chunks of `size` (the last may be shorter)."""

    prompts: int
    size: int = 1

    def __post_init__(self):
        if self.size < 1:
            raise ValueError(f"chunk size {self.size} must be at least 1")

    @property
    def chunks(self) -> list[range]:
        return [range(s, min(s + self.size, self.prompts)) for s in range(0, self.prompts, self.size)]

    def job(self, job: Job, chunk: range) -> Job:
        """`job` on the prompts of `chunk` only (their lengths and forced traces with them)."""
        pick = list(chunk)
        return replace(job, prompts=[job.prompts[i] for i in pick], max_new=[job.max_new[i] for i in pick],
                       forced=None if job.forced is None else [job.forced[i] for i in pick])


def combine(measurements: list[Measurement]) -> Measurement:
    """Chunks measured one after another -> the Measurement of the whole prompt set. Repetition r
    of the whole is repetition r of every chunk; the first chunk's run facts are kept (model,
    warmup, temperature, ...), load time is summed."""
    if not measurements:
        raise ValueError("nothing to combine")
    if len(measurements) == 1:
        return measurements[0]
    repeats = min(len(m.records) for m in measurements)
    reps = [[rec for m in measurements for rec in m.records[r]] for r in range(repeats)]
    _end_to_end(measurements)
    first = measurements[0].result
    whole = summarize(first.plan, reps, load_s=sum(m.result.details.load_s for m in measurements))
    kept = {f.name: getattr(first.details, f.name) for f in fields(first.details) if f.name not in _SUMMARY_FIELDS}
    kept["load_s"] = whole.result.details.load_s
    whole.result.details = replace(whole.result.details, **kept)
    return whole


def _end_to_end(measurements: list[Measurement]) -> None:
    """Shift each chunk's timeline events (seconds from that chunk's own start) to begin where the
    previous chunk's ended, so the combined timeline reads as one run."""
    offset = 0.0
    for m in measurements:
        events = [e for rec in (m.records[0] if m.records else []) for e in rec.events]
        for e in events:
            e.start_s += offset
        if events:
            offset = max(e.start_s + e.dur_s for e in events)
