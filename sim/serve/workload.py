"""Workloads: when requests arrive, which prompt each sends and how many tokens it asks for.

Arrivals are open loop, as `vllm bench serve` makes them: gaps drawn from a Gamma distribution with
shape = burstiness and mean 1 / rate (burstiness 1 is a Poisson process; below 1 burstier, above 1 more
regular), or read from a trace of arrival times with input and output lengths (the Azure LLM-inference
trace's CSV, or JSONL). A trace replay takes a window of it, stretches its clock to a target rate and
scales its output lengths to what the machine serves, and says by how much (`TraceScaling`).

Each request sends a prompt of a prompt set, so the simulator prices its drafts with that prompt's own
acceptance trace; with a trace, the prompt is drawn among those whose length is nearest the trace's
scaled input length. One seed makes a workload reproducible.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from ppsd.errors import UserError
from ppsd.paths import atomic_write_json
from sim.serve.requests import ServeRequest

NEAREST_PROMPTS = 3  # a trace request draws its prompt among this many of the nearest length


@dataclass(frozen=True)
class PromptInfo:
    """A prompt a workload can send: its tokens as the model encodes it, and the length of its own
    generation where known (the profile's recorded generation)."""

    prompt_id: str
    category: str
    prompt_tokens: int
    text: str = ""
    own_output_tokens: int | None = None


def profile_prompts(profile) -> list[PromptInfo]:
    """The prompts a profile traced (its generations), each with its own generation's length: the prompt set
    the simulator serves when none is given."""
    out = []
    for g in profile.generations():
        tokens = g.get("prompt_tokens")
        length = len(tokens) if isinstance(tokens, (list, tuple)) else (tokens or g.get("prompt_len") or 0)
        out.append(PromptInfo(str(g.get("prompt_id")), str(g.get("category", "")), max(int(length), 1),
                              str(g.get("prompt", "")), len(g.get("token_ids") or []) or None))
    if not out:
        raise UserError(f"profile {profile.path} recorded no generations to take prompts from",
                        "give a profile made by `ppsd profile` with acceptance traces")
    return out


@dataclass(frozen=True)
class TraceRow:
    arrival_s: float
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class TraceScaling:
    """How a trace window became a workload: the window, its clock stretch, the length scales and caps."""

    source: str
    first_row: int
    rows: int
    trace_span_s: float  # the window's span on the trace's own clock
    time_scale: float  # workload seconds per trace second
    trace_rate: float  # the window's mean arrival rate on the trace's clock (requests/s)
    rate: float  # the workload's mean arrival rate
    output_scale: float
    output_cap: int
    outputs_capped: int  # requests whose scaled output length hit the cap
    input_scale: float
    trace_output_median: float
    output_median: float

    def describe(self) -> str:
        return (f"{self.source} rows {self.first_row}..{self.first_row + self.rows - 1}: time × {self.time_scale:.3g} "
                f"({self.trace_rate:.3g} → {self.rate:.3g} req/s), output lengths × {self.output_scale:.3g} "
                f"(median {self.trace_output_median:g} → {self.output_median:g}), {self.outputs_capped} of "
                f"{self.rows} capped at {self.output_cap}; input lengths × {self.input_scale:.3g}")


@dataclass
class Workload:
    """The requests in arrival order, and how they were made."""

    requests: list[ServeRequest]
    source: str  # "poisson", "gamma" or the trace's description
    seed: int
    rate: float
    burstiness: float = 1.0
    scaling: TraceScaling | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return self.requests[-1].arrival_s if self.requests else 0.0

    def to_json_dict(self) -> dict:
        return {"source": self.source, "seed": self.seed, "rate": self.rate, "burstiness": self.burstiness,
                "scaling": asdict(self.scaling) if self.scaling else None, "notes": self.notes,
                "requests": [r.to_json_dict() for r in self.requests]}

    def save(self, path: str | Path) -> None:
        atomic_write_json(path, self.to_json_dict())

    @classmethod
    def from_json_dict(cls, d: dict) -> "Workload":
        scaling = TraceScaling(**d["scaling"]) if d.get("scaling") else None
        return cls([ServeRequest.from_json_dict(r) for r in d["requests"]], str(d["source"]), int(d["seed"]),
                   float(d["rate"]), float(d.get("burstiness", 1.0)), scaling, list(d.get("notes", [])))

    @classmethod
    def load(cls, path: str | Path) -> "Workload":
        try:
            return cls.from_json_dict(json.loads(Path(path).read_text()))
        except FileNotFoundError:
            raise UserError(f"workload file {path} does not exist", "give a file `ppsd` wrote with --workload-out")
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"workload file {path} is not a ppsd workload ({e})",
                            "give a file `ppsd` wrote with --workload-out")


# --- arrivals ----------------------------------------------------------------------------------

def check_rate(rate: float, flag: str = "--request-rate") -> float:
    r = float(rate)
    if not r > 0 or math.isnan(r):
        raise UserError(f"{flag} {rate} must be a positive number of requests a second", f"give e.g. {flag} 0.5")
    return r


def check_burstiness(burstiness: float) -> float:
    b = float(burstiness)
    if not 0 < b < math.inf:
        raise UserError(f"--burstiness {burstiness} must be positive (1 = Poisson, < 1 burstier)",
                        "give e.g. --burstiness 1")
    return b


def arrival_times(rate: float, burstiness: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` arrival times (s) of an open-loop process: Gamma gaps, shape `burstiness`, mean 1 / `rate`;
    the first request arrives at 0. An infinite rate sends every request at 0."""
    if count < 1:
        raise UserError(f"--num-prompts {count} must be at least 1", "give e.g. --num-prompts 100")
    if math.isinf(rate):
        return np.zeros(count)
    rate, burstiness = check_rate(rate), check_burstiness(burstiness)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=count - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def _pick_prompts(prompts: list[PromptInfo], count: int, rng: np.random.Generator,
                  wanted_lengths: np.ndarray | None = None) -> list[PromptInfo]:
    """Prompts drawn with replacement; with `wanted_lengths`, among the nearest in length to each."""
    if not prompts:
        raise UserError("the workload has no prompts to send", "give a prompt set with at least one prompt")
    if wanted_lengths is None:
        return [prompts[i] for i in rng.integers(0, len(prompts), size=count)]
    lengths = np.array([p.prompt_tokens for p in prompts], dtype=float)
    k = min(NEAREST_PROMPTS, len(prompts))
    picked = []
    for want in wanted_lengths:
        nearest = np.argsort(np.abs(lengths - want), kind="stable")[:k]
        picked.append(prompts[int(rng.choice(nearest))])
    return picked


def _output_len(prompt: PromptInfo, output_tokens: int | None) -> int:
    if output_tokens is not None:
        return int(output_tokens)
    if not prompt.own_output_tokens:
        raise UserError(f"prompt {prompt.prompt_id} has no recorded generation to take its output length from",
                        "give --output-len N")
    return int(prompt.own_output_tokens)


def synthetic_workload(prompts: list[PromptInfo], *, rate: float, count: int, seed: int, burstiness: float = 1.0,
                       output_tokens: int | None = None) -> Workload:
    """Gamma (Poisson at burstiness 1) arrivals; each request a seeded draw of the prompt set; output length
    `output_tokens`, or None for each prompt's own generation length."""
    if output_tokens is not None and int(output_tokens) < 1:
        raise UserError(f"--output-len {output_tokens} must be at least 1", "give e.g. --output-len 64")
    rng = np.random.default_rng(seed)
    times = arrival_times(rate, burstiness, count, rng)
    picked = _pick_prompts(prompts, count, rng)
    requests = [ServeRequest(i, float(t), p.prompt_id, p.category, p.prompt_tokens, _output_len(p, output_tokens),
                             p.text) for i, (t, p) in enumerate(zip(times, picked))]
    source = "poisson" if burstiness == 1.0 else "gamma"
    return Workload(requests, source, seed, float(rate), float(burstiness))


# --- traces ------------------------------------------------------------------------------------

def _azure_rows(path: Path) -> list[TraceRow]:
    rows, t0 = [], None
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        need = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}
        if not need <= set(reader.fieldnames or ()):
            raise UserError(f"trace {path} lacks the Azure columns {sorted(need)} (has {reader.fieldnames})",
                            "give the Azure LLM-inference CSV or a JSONL of arrival_s, input_tokens, output_tokens")
        for n, rec in enumerate(reader, start=2):
            try:
                t = datetime.fromisoformat(rec["TIMESTAMP"].strip()[:26]).timestamp()
                t0 = t if t0 is None else t0
                rows.append(TraceRow(t - t0, int(rec["ContextTokens"]), int(rec["GeneratedTokens"])))
            except (ValueError, TypeError) as e:
                raise UserError(f"trace {path} line {n} is malformed ({e})", "fix or drop that line")
    return rows


def _jsonl_rows(path: Path) -> list[TraceRow]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            t = rec["arrival_s"] if "arrival_s" in rec else rec["timestamp"]
            rows.append(TraceRow(float(t), int(rec["input_tokens"]), int(rec["output_tokens"])))
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"trace {path} line {n} is malformed ({e!r})",
                            'each line needs {"arrival_s": S, "input_tokens": N, "output_tokens": N}')
    return rows


def read_trace(path: str | Path) -> list[TraceRow]:
    """A trace's rows in arrival order (times from its first arrival): the Azure CSV or JSONL."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"trace {path} does not exist", "give the path of a CSV (Azure layout) or JSONL trace")
    rows = _azure_rows(path) if path.suffix.lower() == ".csv" else _jsonl_rows(path)
    if not rows:
        raise UserError(f"trace {path} holds no requests", "give a trace with at least one request")
    bad = [r for r in rows if not (math.isfinite(r.arrival_s) and r.input_tokens >= 1 and r.output_tokens >= 1)]
    if bad:
        raise UserError(f"trace {path} has {len(bad)} rows with a non-finite time or a length below 1 "
                        f"(first: {bad[0]})", "fix or drop those rows")
    rows.sort(key=lambda r: r.arrival_s)
    t0 = rows[0].arrival_s
    return [TraceRow(r.arrival_s - t0, r.input_tokens, r.output_tokens) for r in rows]


def trace_workload(prompts: list[PromptInfo], rows: list[TraceRow], *, count: int, seed: int,
                   rate: float | None = None, start_s: float = 0.0, output_cap: int = 64,
                   output_median: float | None = None, source: str = "trace") -> Workload:
    """A window of `count` trace rows from `start_s`, its clock stretched to a mean `rate` (None: as
    recorded), output lengths scaled so their median is `output_median` (default half the cap) and capped
    at `output_cap`, input lengths scaled onto the prompt set's range (median to median)."""
    first = next((i for i, r in enumerate(rows) if r.arrival_s >= start_s), None)
    if first is None or count < 1:
        raise UserError(f"the trace has no requests at or after {start_s} s", "give an earlier --trace-start")
    window = rows[first: first + count]
    if len(window) < 2:
        raise UserError("a trace window needs at least two requests", "give a larger --num-prompts")
    t = np.array([r.arrival_s for r in window]) - window[0].arrival_s
    span = float(t[-1])
    trace_rate = (len(window) - 1) / span if span > 0 else math.inf
    time_scale = 1.0 if rate is None else trace_rate / check_rate(rate)
    out = np.array([r.output_tokens for r in window], dtype=float)
    cap = int(output_cap)
    if cap < 1:
        raise UserError(f"--output-cap {output_cap} must be at least 1", "give e.g. --output-cap 64")
    target = float(output_median) if output_median else cap / 2.0
    out_scale = target / float(np.median(out))
    scaled_out = np.clip(np.rint(out * out_scale), 1, cap).astype(int)
    inputs = np.array([r.input_tokens for r in window], dtype=float)
    prompt_median = float(np.median([p.prompt_tokens for p in prompts])) if prompts else 1.0
    in_scale = prompt_median / float(np.median(inputs))
    rng = np.random.default_rng(seed)
    picked = _pick_prompts(prompts, len(window), rng, inputs * in_scale)
    requests = [ServeRequest(i, float(ti * time_scale), p.prompt_id, p.category, p.prompt_tokens, int(o), p.text)
                for i, (ti, p, o) in enumerate(zip(t, picked, scaled_out))]
    scaling = TraceScaling(source, first, len(window), span, time_scale, trace_rate,
                           trace_rate / time_scale, out_scale, cap, int(np.sum(out * out_scale >= cap)), in_scale,
                           float(np.median(out)), float(np.median(scaled_out)))
    return Workload(requests, source, seed, scaling.rate, 1.0, scaling, [scaling.describe()])
