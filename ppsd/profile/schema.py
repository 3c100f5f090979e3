"""The profile folder's schema (torch-free): profile.json as typed, versioned pydantic models whose
validators check every value against its meaning, the checks of the tables the folder holds, the one
upgrade path from older versions. The reference in docs/contracts.md is generated from these models
(`python -m ppsd.profile.reference`).

This module is the one place a profile's values are checked: `load_profile` validates profile.json
here (`validate_meta`), and the acceptance tables and generations are checked here when first read
(`check_acceptance`, `check_sampled`, `check_generations`). A corrupt value is refused with one line
naming its field as a dotted path (`latency.corun.slowdown[1]`) and the fix.

Versions: 1 (no sampled β), 2 (adds `acceptance.sampled`), 3 (this one: every value checked as below,
files inside the folder, physically impossible probe readings refused). Older versions load: `upgrade`
fills the defaults of `UPGRADE_DEFAULTS` in memory (each what readers of that version assumed for an
absent field, so no price changes); `ppsd profile upgrade DIR` writes the result.

A probe reading that cannot be physical (`MIN_PHYSICAL_SLOWDOWN`: two processes faster together than
alone, a stage faster beside another than alone) is measured again by the profiler and, if it persists,
the profiler refuses to write the profile (profiler/latency.py `remeasured`); a profile.json holding one
is refused on load.
"""

from __future__ import annotations

import math
import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from ppsd.exit_heads import SHARED

SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
# A co-run slowdown under this (two processes faster together than alone; a stage faster beside another
# than alone) is not physical: a machine that changed state while it was measured. Readings at 0.95-1.0
# are within the noise of a quiet machine.
MIN_PHYSICAL_SLOWDOWN = 0.95
MAX_MS = 1e7  # one piece's time beyond 10^7 ms (2.8 hours) is not a measurement
MAX_COUNT = 10**9  # no count a profile holds (layers, tokens, cores, sizes) comes near this
SHARED_HEAD = SHARED
ACCEPTANCE_FILE = "acceptance.csv.gz"
GENERATIONS_FILE = "generations.jsonl"
SAMPLED_FILE = "acceptance_sampled.csv.gz"
PROBABILITY_TOL = 1e-6  # β and confidences are written rounded; a sum of probabilities may pass 1 by this

# Defaults an upgrade from an older version writes where a field is absent: each is what every reader
# of that version assumed for the absent field, so an upgraded profile prices as before. 1 -> 2 adds
# nothing (a profile without `acceptance.sampled` prices T > 0 from the legacy β column at
# `acceptance.temperature`, in every version). Every other absent optional block keeps the meaning its
# field's description gives ("absent: ..."), the same in every version.
UPGRADE_DEFAULTS = {
    "kind": "measured",
    "warnings": [],
    "acceptance.sampled.trajectories": 1,
    "latency.exit_heads.<name>.timing": "hot_loop",
}


# --- value types: each says its unit and range once (the generated reference reads them) -----------------

class Doc:
    """Metadata of a value type for the generated reference: its unit and its range in words."""

    def __init__(self, unit: str = "", range_: str = ""):
        self.unit, self.range = unit, range_


def _integral(v):
    """An integer given as 3.0 reads as 3 (hand-edited files); 3.5, strings and booleans do not."""
    return int(v) if isinstance(v, float) and math.isfinite(v) and v.is_integer() else v


def _physical(v: float) -> float:
    if v < MIN_PHYSICAL_SLOWDOWN:
        raise ValueError(f"is {v:g}, under {MIN_PHYSICAL_SLOWDOWN}: faster beside another process than alone is "
                         "not physical (the machine changed state while it was measured)")
    return v


def _relative_file(v: str) -> str:
    p = PurePosixPath(v.replace("\\", "/"))
    if not v or p.is_absolute() or ".." in p.parts or v.startswith("~"):
        raise ValueError(f"is {v!r}: a file the profile names lies inside its folder (a relative name, no '..')")
    return v


def _stage_count_key(v: str) -> str:
    if not (isinstance(v, str) and v.isdigit() and int(v) >= 1):
        raise ValueError(f"has key {v!r}: keys are counts >= 1")
    return v


_FINITE = dict(allow_inf_nan=False)
Ms = Annotated[float, Field(ge=0, le=MAX_MS, **_FINITE), Doc("ms", "finite, 0 to 1e7")]
PositiveMs = Annotated[float, Field(gt=0, le=MAX_MS, **_FINITE), Doc("ms", "finite, > 0, <= 1e7")]
SignedMs = Annotated[float, Field(ge=-MAX_MS, le=MAX_MS, **_FINITE), Doc("ms", "finite (either sign: a fitted offset)")]
Factor = Annotated[float, Field(gt=0, le=1e6, **_FINITE), Doc("x", "finite, > 0")]
Slowdown = Annotated[float, Field(gt=0, le=1e3, **_FINITE), Doc("x", "finite, > 0 (one round's reading)")]
PhysicalSlowdown = Annotated[float, Field(le=1e3, **_FINITE), AfterValidator(_physical),
                             Doc("x", f"finite, >= {MIN_PHYSICAL_SLOWDOWN} (physical)")]
Spread = Annotated[float, Field(ge=0, le=1e3, **_FINITE), Doc("relative", "finite, >= 0")]
Probability = Annotated[float, Field(ge=0, le=1, **_FINITE), Doc("", "0 to 1")]
Temperature = Annotated[float, Field(gt=0, le=100, **_FINITE), Doc("", "finite, > 0")]
LegacyTemperature = Annotated[float, Field(ge=0, le=100, **_FINITE), Doc("", "finite, >= 0 (0: greedy)")]
Count = Annotated[int, BeforeValidator(_integral), Field(ge=1, le=MAX_COUNT), Doc("", "integer, 1 to 1e9")]
Count0 = Annotated[int, BeforeValidator(_integral), Field(ge=0, le=MAX_COUNT), Doc("", "integer, 0 to 1e9")]
Layer = Annotated[int, BeforeValidator(_integral), Field(ge=1, le=MAX_COUNT),
                  Doc("layer", "integer in [1, num_layers)")]
Seed = Annotated[int, BeforeValidator(_integral), Doc("", "integer")]
RelativeFile = Annotated[str, AfterValidator(_relative_file), Doc("", "a file name inside the folder")]
StageCount = Annotated[str, AfterValidator(_stage_count_key), Doc("", "'<k>', k >= 1")]


class Block(BaseModel):
    """A block of profile.json: strict types (no string for a number, no bool for a count), fields a
    block does not name are kept (additive fields; readers must not require them)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


def F(description: str, default: Any = ..., **kw):  # noqa: N802 - a field, as pydantic's Field
    """A field with its meaning (the generated reference prints it)."""
    return Field(default, description=description, **kw)


# --- latency tables -----------------------------------------------------------------------------------------

class StatVector(Block):
    """median / p10 / p90 over the n grid."""

    median_ms: list[Ms] = F("median time per n of `latency.n_values`")
    p10_ms: list[Ms] = F("10th percentile, same shape")
    p90_ms: list[Ms] = F("90th percentile, same shape")


class StatGrid(Block):
    """median / p10 / p90 per layer over (n, context)."""

    median_ms: list[list[list[Ms]]] = F("[num_layers][len(n_values)][len(context_values)] median times")
    p10_ms: list[list[list[Ms]]] = F("10th percentile, same shape")
    p90_ms: list[list[list[Ms]]] = F("90th percentile, same shape")


class ExitHeadCost(Block):
    kind: str | None = F("head kind (trained, vocab)", None)
    params: Count0 | None = F("parameters", None)
    vocab: Count | None = F("tokens its distribution covers (reduced-vocabulary heads)", None)
    n_values: list[Count] | None = F("its n grid (= latency.n_values)", None)
    timing: Literal["hot_loop", "after_draft_layers"] = F(
        "how it was timed: after reading the draft's layers' weights, or in a loop of its own "
        "(absent in older profiles: hot_loop)", "hot_loop")
    median_ms: list[Ms] = F("drafting cost per n of latency.n_values")
    p10_ms: list[Ms] | None = F("10th percentile per n", None)
    p90_ms: list[Ms] | None = F("90th percentile per n", None)


class Hop(Block):
    backend: str | None = F("transport (gloo, nccl, ...)", None)
    bytes: Count0 | None = F("message size, bytes", None)
    median_ms: Ms = F("one-way hidden-state message between two idle processes (hop >= 0)")
    p10_ms: Ms | None = F("10th percentile", None)
    p90_ms: Ms | None = F("90th percentile", None)
    repeats: Count0 | None = F("round trips timed", None)
    method: str | None = F("how it was timed", None)


class Corun(Block):
    processes: list[Count] = F("process counts measured, increasing", min_length=1)
    slowdown: list[PhysicalSlowdown] = F("per-layer time with p processes at once / alone (1 at p = 1)",
                                         min_length=1)
    p10: list[Slowdown] | None = F("10th percentile of the per-layer samples / alone", None)
    p90: list[Slowdown] | None = F("90th percentile of the per-layer samples / alone", None)
    alone_layer_ms: PositiveMs | None = F("a layer's time alone", None)
    context: Count0 | None = F("cached tokens while measured", None)
    threads_per_process: Count | None = F("torch threads per process", None)
    seconds_per_round: Factor | None = F("seconds each process count ran", None)
    method: str | None = F("how it was measured (absent: each p once, over one round alone before them)", None)
    now_over_profile: Factor = F("scale of every co-run figure measured again (in memory only: "
                                 "`Profile.retimed`)", 1.0)


class WholeStep(Block):
    context: Count0 | None = F("cached tokens", None)
    n: Count | None = F("new tokens per step", None)
    median_ms: PositiveMs = F("a whole decode step")
    p10_ms: Ms | None = F("10th percentile", None)
    p90_ms: Ms | None = F("90th percentile", None)
    sum_of_parts_ms: Ms | None = F("the same step's pieces summed", None)
    ratio: Factor | None = F("parts / whole (paired: median of pairs)", None)
    calibration: Factor | None = F("1 / ratio: the factor every table is already scaled by (absent: 1)", None)
    ratio_cv: Spread | None = F("the pairs' robust log spread", None)
    samples_ms: list[PositiveMs] | None = F("the whole steps in time order", None)
    method: str | None = F("'paired': timed right after the same step in pieces", None)
    flagged: bool | None = F("|ratio - 1| > 10%", None)
    note: str | None = F("what the ratio says", None)
    repeats: Count0 | None = F("whole steps timed", None)


class PipelineHop(Block):
    median_ms: Ms = F("one-way message into a waiting stage, message handling included")
    p10_ms: Ms | None = F("10th percentile", None)
    p90_ms: Ms | None = F("90th percentile", None)
    samples: Count0 | None = F("hops pooled over the rounds", None)


class ProbeRound(Block):
    slowdown: Slowdown = F("this round's slowdown")
    alone_vs_tables: list[Slowdown] | None = F("each stage's pass alone / the tables' price", None)


class StageRound(Block):
    slowdown_per_stage: list[Slowdown] = F("each stage's pass in the pipeline / the same pass from the round's "
                                           "pieces")
    pass_ms: list[PositiveMs] | None = F("each stage's median pass", None)
    alone_ms: list[PositiveMs] | None = F("each stage's pass priced from the round's pieces", None)
    pass_jitter_cv: Spread | None = F("each stage's pass-to-pass spread, mean of stages", None)


class WaitingCut(Block):
    exit_layer: Layer = F("the cut where the last stage waits for every draft")
    last_stage_slowdown: PhysicalSlowdown = F("the last stage's pass there / the same pass from the pieces, "
                                              "median over rounds")
    rounds: list[StageRound] | None = F("each round's figures", None)
    method: str | None = F("how it was measured", None)


class RuntimeProbe(Block):
    slowdown: PhysicalSlowdown = F("the runtime's own two-stage pipeline: a stage's pass / alone, mean of "
                                   "stages, median round; sets the 2-process co-run point")
    slowdown_per_stage: list[PhysicalSlowdown] | None = F("the kept round's per-stage slowdowns", None)
    round_kept: Count0 | None = F("index of the kept round", None)
    rounds: list[StageRound] | None = F("each round (their per-stage slowdowns split the co-run cost "
                                        "between the roles, `Profile.corun_stage_bias`)", None)
    slowdown_cv: Spread | None = F("the rounds' log spread", None)
    exit_layer: Layer | None = F("the cut (N // 2)", None)
    tokens: Count0 | None = F("tokens decoded per run", None)
    prompt_len: Count0 | None = F("prompt tokens", None)
    context: Count0 | None = F("cached tokens of the pieces' steps", None)
    method: str | None = F("how it was measured", None)
    pass_jitter_cv: Spread = F("each stage's pass-to-pass spread, mean of stages, median round: prices the "
                               "lock step (absent: 0)", 0.0)
    waiting: WaitingCut | None = F("the cut whose last stage waits (absent: the co-run shares price it)", None)


class Pipeline(Block):
    exit_layer: Layer | None = F("the cut, N // 2", None)
    stage_bounds: list[Count0] | None = F("[0, E, N]", None)
    backend: str | None = F("transport", None)
    passes: Count0 | None = F("passes over every round", None)
    slowdown: PhysicalSlowdown | None = F("a stage's pass in the pipeline / the same pass from the tables "
                                          "(or alone), mean of stages, median round", None)
    slowdown_per_stage: list[PhysicalSlowdown] | None = F("per stage", None)
    slowdown_base: Literal["tables", "alone"] | None = F("what the slowdown divides by", None)
    pass_ms_tables: list[PositiveMs] | None = F("each stage's pass from the tables", None)
    pass_ms_alone: list[PositiveMs] | None = F("each stage's pass alone", None)
    pass_ms_pipeline: list[PositiveMs] | None = F("each stage's pass in the pipeline", None)
    layer_slowdown: Slowdown | None = F("layers in the pipeline / alone", None)
    head_slowdown: Slowdown | None = F("head in the pipeline / alone", None)
    pass_cv: Spread | None = F("a pass's robust relative spread: the restart rule's jitter (absent: 0)", None)
    hop: PipelineHop | None = F("hop into a waiting stage (absent: latency.hop)", None)
    method: str | None = F("how it was measured", None)
    rounds: list[ProbeRound] | None = F("each interleaved round", None)
    round_kept: Count0 | None = F("index of the median round", None)
    round_spread: Spread | None = F("(max - min) / median of the rounds' slowdowns", None)
    passes_per_round: Count0 | None = F("passes per round", None)
    runtime: RuntimeProbe | None = F("the runtime probe (absent: this block's slowdown sets the 2-process "
                                     "point, shares 1, no lock-step jitter)", None)


class ControlPlaneStage(Block):
    pass_overhead_ms: Ms = F("stage 1's fixed cost of a pass beyond layers and heads")
    transit_ms: Ms | None = F("a message's transit between stage processes (absent: 0)", None)
    send_offset_ms: Ms | None = F("stage 1's overhead before its send (absent: all of it)", None)
    middle_pass_overhead_ms: Ms | None = F("a middle stage's (absent: stage 1's)", None)
    last_pass_overhead_ms: Ms | None = F("the last stage's (absent: stage 1's)", None)
    hop_jitter_ms: Ms | None = F("the transit's robust spread (absent: 0)", None)
    stage1_pass_ms: Ms | None = F("stage 1's pass alone", None)
    stage1_period_ms: Ms | None = F("stage 1's cycle", None)
    accept_all_ms_per_token: Ms | None = F("per token, every draft accepted", None)
    reject_all_ms_per_token: Ms | None = F("per token, every draft rejected", None)


class ControlPlane(Block):
    method: str | None = F("how it was measured", None)
    hidden_size: Count0 | None = F("message width", None)
    head_ms: Ms | None = F("the emulated head", None)
    stages: dict[StageCount, ControlPlaneStage] = F("per stage count k")


class Sampling(Block):
    vocab: list[Count] = F("vocabulary sizes V timed", min_length=1)
    median_ms: list[PositiveMs] = F("one draw at T > 0 from V logits, per V")
    p10_ms: list[Ms] | None = F("10th percentile per V", None)
    p90_ms: list[Ms] | None = F("90th percentile per V", None)
    temperature: Temperature | None = F("T of the timed draws", None)
    threads: Count0 | None = F("torch threads", None)
    repeats: Count0 | None = F("draws timed", None)
    method: str | None = F("how it was timed", None)


class Batch(Block):
    format: str | None = F("format tag", None)
    batch_sizes: list[Count] = F("batch sizes B, increasing", min_length=1)
    n_values: list[Count] = F("new tokens per sequence, increasing", min_length=1)
    context_values: list[Count0] = F("cached tokens, increasing", min_length=1)
    repeats: Count0 | None = F("rounds", None)
    layers_ms: list[list[list[Ms]]] | None = F("[B][n][c] the layer stack", None)
    layers_ratio: list[list[list[Factor]]] = F("[B][n][c] the layer stack at B / at batch 1")
    embedding_ms: list[list[Ms]] = F("[B][n] the embedding")
    head_ms: list[list[Ms]] = F("[B][n] the LM head")
    measured: str | None = F("when", None)
    threads: Count | None = F("torch threads", None)
    budget_threads: Count | None = F("threads of the two-thread baseline", None)
    two_threads_ratio: list[list[Factor]] | None = F("[B][c] a decode pass on two threads / one (absent: not "
                                                     "timed)", None)


class Prefill(Block):
    lengths: list[Count] = F("prompt lengths, increasing", min_length=1)
    median_ms: list[PositiveMs] = F("a whole prefill per length")
    p10_ms: list[Ms] | None = F("10th percentile per length", None)
    p90_ms: list[Ms] | None = F("90th percentile per length", None)
    method: str | None = F("how it was timed", None)


class ParallelTables(Block):
    layers: StatGrid = F("the layer tables at this budget")
    embedding: StatVector = F("the embedding")
    head: StatVector = F("the LM head")
    whole_step_ms: PositiveMs | None = F("a whole step at this budget", None)
    speedup_vs_base: Factor | None = F("AR's speedup over the base, round by round", None)
    speedup_cv: Spread | None = F("its spread over the rounds", None)
    calibration: Factor | None = F("the factor these tables were scaled by", None)


class Parallel(Block):
    kind: Literal["threads", "tensor_parallel"] = F("measured threads, or estimated tensor parallelism")
    base: Count | None = F("units of the main tables (absent: timing.threads, else 1)", None)
    method: str | None = F("how it was measured", None)
    tables: dict[StageCount, ParallelTables] = F("per budget '<units>'")


class HFExitAcceptance(Block):
    scale: Factor | None = F("transformers' α / ppsd's α at this exit (absent: 1)", None)
    hf_alpha: Probability | None = F("transformers' α", None)
    clean_alpha: Probability | None = F("ppsd's α", None)
    judged: Count0 | None = F("drafts judged", None)


class HFAssisted(Block):
    refeed: Literal["sequence", "tail"] = F("what transformers' drafter re-reads each round", "sequence")
    ar_token_overhead_ms: SignedMs = F("per AR token beyond the pieces (absent: 0)", 0.0)
    round_overhead_ms: SignedMs = F("per round beyond the pieces (absent: 0)", 0.0)
    draft_overhead_ms: SignedMs = F("per draft beyond the pieces (absent: 0)", 0.0)
    acceptance: dict[StageCount, HFExitAcceptance] | None = F("per exit layer '<E>'", None)
    exits: list[Layer] | None = F("exits probed", None)
    gammas: list[Count] | None = F("draft lengths probed", None)
    confidence_threshold: Probability | None = F("transformers' assistant_confidence_threshold", None)
    piece_scale: Factor | None = F("now / profiled piece times", None)


class Latency(Block):
    n_values: list[Count] = F("new tokens per step, increasing", min_length=1)
    context_values: list[Count0] = F("tokens already in the KV cache, increasing", min_length=1)
    layers: StatGrid = F("each decoder layer over (n, context)")
    embedding: StatVector = F("the embedding per n")
    head: StatVector = F("final norm + LM head per n")
    exit_heads: dict[str, ExitHeadCost] | None = F("drafting cost of each exit head besides the shared one "
                                                   "(absent: the shared head only)", None)
    hop: Hop | None = F("idle ping-pong hop (absent: 0)", None)
    corun: Corun | None = F("co-run slowdown table (absent: 1, no slowdown)", None)
    whole_step: WholeStep | None = F("a whole decode step (absent: calibration 1, the noise floor)", None)
    pipeline: Pipeline | None = F("two-stage pipeline probe (absent: hop and co-run table)", None)
    control_plane: ControlPlane | None = F("per-pass overhead and transit per stage count (absent: 0)", None)
    sampling: Sampling | None = F("one draw at T > 0 (absent: draws priced at 0, with a warning)", None)
    batch: Batch | None = F("passes of B sequences (absent: batch 1 only)", None)
    prefill: Prefill | None = F("whole prefills (absent: extrapolated from the tables)", None)
    parallel: Parallel | None = F("the tables on more threads or GPUs (absent: the main tables only)", None)
    hf: HFAssisted | None = F("transformers' assisted generation (absent: --runtime hf refused)", None)


# --- acceptance, machine, provenance ---------------------------------------------------------------------

class Sampled(Block):
    file: RelativeFile = F("β along sampled trajectories (columns: files.SAMPLED_COLUMNS)", SAMPLED_FILE)
    temperatures: list[Temperature] = F("temperatures recorded", min_length=1)
    seed: Seed | None = F("seed of the first trajectory", None)
    max_new_tokens: Count | None = F("tokens sampled per prompt", None)
    tokens: dict[str, Count0] | None = F("tokens per temperature", None)
    heads: list[str] | None = F("heads with rows (shared)", None)
    trajectory: str | None = F("how trajectories were sampled", None)
    trajectories: Count = F("sampled continuations per prompt and T, averaged (absent: 1)", 1)


class AlphaCurve(Block):
    file: str | None = F("the curve the traces were drawn from (provenance; never opened)", None)
    kind: str | None = F("curve kind", None)
    x: list[float] | None = F("its points", None)
    alpha: list[Probability] | None = F("α at each point", None)
    seed: Seed | None = F("draw seed", None)


class Acceptance(Block):
    file: RelativeFile = F("the greedy match table (columns: files.ACCEPTANCE_COLUMNS)", ACCEPTANCE_FILE)
    generations_file: RelativeFile = F("one JSON object per prompt", GENERATIONS_FILE)
    dir: str | None = F("the profile folder holding these files (absent: this one); a view's", None)
    from_profile: str | None = F("the profile whose prompts a view prices", None)
    temperature: LegacyTemperature | None = F("T of the legacy β column along the greedy trajectory", None)
    max_new_tokens: Count | None = F("greedy tokens per prompt", None)
    prompt_set: str | None = F("prompt source", None)
    num_prompts: Count0 | None = F("prompts traced", None)
    categories: list[str] | None = F("prompt categories", None)
    heads: list[str] | None = F("exit heads with rows (absent: any)", None)
    tokens: Count0 | None = F("tokens generated", None)
    teacher_forced_agree: Count0 | None = F("positions where the teacher-forced pass agreed", None)
    per_category: Count | None = F("--per-category", None)
    limit: Count | None = F("--limit", None)
    excluded_training_prompts: Count0 | None = F("heads' training prompts dropped", None)
    sampled: Sampled | None = F("β along sampled trajectories (absent: the legacy β at `temperature`)", None)
    alpha_curve: AlphaCurve | None = F("traces drawn from an α curve, not traced", None)


class ModelInfo(Block):
    id: str = F("model id", min_length=1)
    source: str | None = F("where it was loaded from", None)
    architecture: str | None = F("architecture", None)
    num_layers: Annotated[int, BeforeValidator(_integral), Field(ge=2, le=MAX_COUNT), Doc("", "integer, 2 to 1e9")] = F(
        "decoder layers (early exit needs 2)")
    hidden_size: Count0 | None = F("hidden size (0: not said)", None)
    vocab_size: Count0 | None = F("vocabulary (0: not said)", None)
    dtype: str | None = F("weights' dtype", None)
    max_context: Count | None = F("longest context", None)


class Hardware(Block):
    device: str | None = F("cpu, cuda, synthetic", None)
    device_name: str | None = F("the device's name", None)
    cores: Count0 | None = F("CPU cores (0: not said)", None)
    threads: Count0 | None = F("torch threads", None)
    gpu_count: Count0 | None = F("GPUs", None)


class Timing(Block):
    method: str | None = F("perf_counter, cuda_event, roofline, synthetic", None)
    warmup: Count0 | None = F("untimed rounds", None)
    repeats: Count0 | None = F("timed rounds", None)
    threads: Count | None = F("torch threads of the main tables (absent: 1)", None)
    whole_step_repeats: Count0 | None = F("whole steps timed", None)
    quick: bool | None = F("latency skipped: an n = 1 table only", None)


class Estimate(Block):
    gpu_count: Count | None = F("GPUs the estimate plans for", None)
    min_gpus_for_weights: Count | None = F("GPUs the weights need", None)


class ProfileDoc(Block):
    """profile.json."""

    schema_version: Literal[3] = F("this schema's version (older ones are upgraded on load)")
    kind: Literal["measured", "estimated"] = F("measured, or estimated (roofline, synthetic)", "measured")
    created: str | None = F("ISO-8601 UTC time", None)
    model: ModelInfo = F("the model")
    hardware: Hardware = F("the machine")
    versions: dict[str, str | None] | None = F("package versions", None)
    timing: Timing | None = F("how the tables were timed", None)
    latency: Latency = F("the latency tables and probes")
    acceptance: Acceptance | None = F("the acceptance traces (null: none)", None)
    warnings: list[str] = F("what a reader should know", [])
    profiling: dict[str, Any] | None = F("wall time per phase", None)
    exit_heads: dict[str, Any] | None = F("the exit-head folder profiled (provenance)", None)
    estimate: Estimate | None = F("an estimated profile's inputs", None)
    calibration: dict[str, Any] | None = F("the calibration an estimate carries (provenance)", None)


def unphysical(block: dict | None, path: str) -> list[tuple[str, float]]:
    """A probe block's kept readings under MIN_PHYSICAL_SLOWDOWN as (dotted field, value): the
    slowdowns of `latency.corun`, `latency.pipeline` (and its `runtime`, `runtime.waiting`) that price a
    plan. Per-round readings are not kept figures and are left alone. The profiler measures a block
    again while this is not empty (profiler/latency.py `remeasured`)."""
    found = []
    for key, value in (block or {}).items():
        where = f"{path}.{key}"
        if key in ("runtime", "waiting") and isinstance(value, dict):
            found += unphysical(value, where)
        elif key in ("slowdown", "slowdown_per_stage", "last_stage_slowdown") and value is not None:
            values = value if isinstance(value, list) else [value]
            found += [(f"{where}[{i}]" if isinstance(value, list) else where, float(v))
                      for i, v in enumerate(values) if float(v) < MIN_PHYSICAL_SLOWDOWN]
    return found


# --- the checks across fields: shapes, order, layers ------------------------------------------------------

class FieldError(Exception):
    """A value that breaks its field's meaning: `path` the dotted field, `problem` the rule."""

    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path} {problem}")


def _array(values, path: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=float)
    except ValueError:
        raise FieldError(path, "is ragged (rows of different lengths)") from None


GRID3 = "model.num_layers x latency.n_values x latency.context_values"
GRID1 = "latency.n_values"


def _shape(values, shape: tuple, path: str, grids: str) -> np.ndarray:
    a = _array(values, path)
    if a.shape != shape:
        raise FieldError(path, f"has shape {list(a.shape)}; {grids} give {list(shape)}")
    return a


def _increasing(values, path: str, strictly: bool = True) -> None:
    a = _array(values, path)
    steps = np.diff(a)
    if np.any(steps <= 0 if strictly else steps < 0):
        raise FieldError(path, f"is {list(values)[:8]}: it must be increasing")


def _stats(block, shape: tuple, path: str, positive: bool, grids: str = "") -> None:
    """median / p10 / p90 of `shape` (the sizes of `grids`); every time > 0 where `positive`. (Their order
    is not checked: a retimed profile and some synthetic ones scale the median alone.)"""
    for name in ("median_ms", "p10_ms", "p90_ms"):
        values = getattr(block, name, None)
        if values is None:
            continue
        q = _shape(values, shape, f"{path}.{name}", grids)
        if positive and np.any(q <= 0):
            raise FieldError(f"{path}.{name}", "holds a time of 0: a measured time is > 0")


def _same_length(path: str, base: list, **others) -> None:
    for name, values in others.items():
        if values is not None and len(values) != len(base):
            raise FieldError(f"{path}.{name}", f"has {len(values)} values for {len(base)} points")


def _exit_layer(value, n: int, path: str) -> None:
    if value is not None and not 1 <= value < n:
        raise FieldError(path, f"is {value}: an exit layer lies in [1, {n}) (model.num_layers {n})")


def check_tables(doc: ProfileDoc) -> None:
    """The main tables and the blocks tied to their grids: shapes, order, positivity."""
    lat, n = doc.latency, doc.model.num_layers
    _increasing(lat.n_values, "latency.n_values")
    _increasing(lat.context_values, "latency.context_values")
    nn, nc = len(lat.n_values), len(lat.context_values)
    measured = doc.kind == "measured"
    _stats(lat.layers, (n, nn, nc), "latency.layers", measured, GRID3)
    _stats(lat.embedding, (nn,), "latency.embedding", measured, GRID1)
    _stats(lat.head, (nn,), "latency.head", measured, GRID1)
    for name, head in (lat.exit_heads or {}).items():
        _stats(head, (nn,), f"latency.exit_heads.{name}", measured, GRID1)
    if lat.parallel:
        for units, t in lat.parallel.tables.items():
            where = f"latency.parallel.tables.{units}"
            _stats(t.layers, (n, nn, nc), f"{where}.layers", measured, GRID3)
            _stats(t.embedding, (nn,), f"{where}.embedding", measured, GRID1)
            _stats(t.head, (nn,), f"{where}.head", measured, GRID1)


def check_blocks(doc: ProfileDoc) -> None:
    """The optional blocks' own grids and lengths."""
    lat = doc.latency
    if lat.corun:
        _increasing(lat.corun.processes, "latency.corun.processes")
        _same_length("latency.corun", lat.corun.processes, slowdown=lat.corun.slowdown, p10=lat.corun.p10,
                     p90=lat.corun.p90)
    if lat.sampling:
        if len(set(lat.sampling.vocab)) != len(lat.sampling.vocab):
            raise FieldError("latency.sampling.vocab", "repeats a vocabulary size")
        _stats(lat.sampling, (len(lat.sampling.vocab),), "latency.sampling", True, "latency.sampling.vocab")
    if lat.prefill:
        _increasing(lat.prefill.lengths, "latency.prefill.lengths")
        _stats(lat.prefill, (len(lat.prefill.lengths),), "latency.prefill", True, "latency.prefill.lengths")
    if lat.batch:
        b = lat.batch
        for name in ("batch_sizes", "n_values", "context_values"):
            _increasing(getattr(b, name), f"latency.batch.{name}")
        nb, nn, nc = len(b.batch_sizes), len(b.n_values), len(b.context_values)
        _shape(b.layers_ratio, (nb, nn, nc), "latency.batch.layers_ratio", "latency.batch grids")
        for name, shape in (("layers_ms", (nb, nn, nc)), ("embedding_ms", (nb, nn)), ("head_ms", (nb, nn)),
                            ("two_threads_ratio", (nb, nc))):
            if getattr(b, name) is not None:
                a = _shape(getattr(b, name), shape, f"latency.batch.{name}", "latency.batch grids")
                if doc.kind == "measured" and name.endswith("_ms") and np.any(a <= 0):
                    raise FieldError(f"latency.batch.{name}", "holds a time of 0: a measured time is > 0")


def check_layers(doc: ProfileDoc) -> None:
    """Exit layers and cuts within the model; a kept round among the rounds."""
    n, pipe = doc.model.num_layers, doc.latency.pipeline
    if pipe:
        _exit_layer(pipe.exit_layer, n, "latency.pipeline.exit_layer")
        if pipe.stage_bounds is not None and (pipe.stage_bounds[:1] != [0] or pipe.stage_bounds[-1:] != [n]):
            raise FieldError("latency.pipeline.stage_bounds", f"is {pipe.stage_bounds}: it runs from 0 to {n}")
        if pipe.stage_bounds is not None:
            _increasing(pipe.stage_bounds, "latency.pipeline.stage_bounds")
        if pipe.rounds and pipe.round_kept is not None and pipe.round_kept >= len(pipe.rounds):
            raise FieldError("latency.pipeline.round_kept", f"is {pipe.round_kept} of {len(pipe.rounds)} rounds")
        run = pipe.runtime
        if run:
            _exit_layer(run.exit_layer, n, "latency.pipeline.runtime.exit_layer")
            if run.rounds and run.round_kept is not None and run.round_kept >= len(run.rounds):
                raise FieldError("latency.pipeline.runtime.round_kept",
                                 f"is {run.round_kept} of {len(run.rounds)} rounds")
            if run.waiting:
                _exit_layer(run.waiting.exit_layer, n, "latency.pipeline.runtime.waiting.exit_layer")
    hf = doc.latency.hf
    if hf:
        for e in hf.exits or []:
            _exit_layer(e, n, "latency.hf.exits")
        for e in hf.acceptance or {}:
            _exit_layer(int(e), n, f"latency.hf.acceptance.{e}")


def check_doc(doc: ProfileDoc) -> None:
    """Every check across fields (FieldError on the first broken one)."""
    check_tables(doc)
    check_blocks(doc)
    check_layers(doc)


# --- loading: upgrade, validate, one line --------------------------------------------------------------------

def upgrade(meta: dict) -> dict:
    """An older profile.json (READABLE_VERSIONS) as this version: `UPGRADE_DEFAULTS` filled where absent;
    a copy, `meta` untouched. The current version comes back as it is (a copy)."""
    out = {**meta}
    if out.get("schema_version") == SCHEMA_VERSION:
        return out
    for key in ("kind", "warnings"):
        out.setdefault(key, UPGRADE_DEFAULTS[key])
    acc = out.get("acceptance")
    if isinstance(acc, dict) and isinstance(acc.get("sampled"), dict):
        sampled = dict(acc["sampled"])
        sampled.setdefault("trajectories", UPGRADE_DEFAULTS["acceptance.sampled.trajectories"])
        out["acceptance"] = {**acc, "sampled": sampled}
    lat = out.get("latency")
    if isinstance(lat, dict) and isinstance(lat.get("exit_heads"), dict):
        heads = {k: dict(v) if isinstance(v, dict) else v for k, v in lat["exit_heads"].items()}
        for head in heads.values():
            if isinstance(head, dict):
                head.setdefault("timing", UPGRADE_DEFAULTS["latency.exit_heads.<name>.timing"])
        out["latency"] = {**lat, "exit_heads": heads}
    out["schema_version"] = SCHEMA_VERSION
    return out


def absent_defaults(meta: dict) -> list[str]:
    """The fields of UPGRADE_DEFAULTS that `upgrade(meta)` fills (absent from an older `meta`)."""
    if meta.get("schema_version") == SCHEMA_VERSION:
        return []
    sampled = (meta.get("acceptance") or {}).get("sampled") if isinstance(meta.get("acceptance"), dict) else None
    heads = (meta.get("latency") or {}).get("exit_heads") if isinstance(meta.get("latency"), dict) else None
    absent = {"kind": "kind" not in meta, "warnings": "warnings" not in meta,
              "acceptance.sampled.trajectories": isinstance(sampled, dict) and "trajectories" not in sampled,
              "latency.exit_heads.<name>.timing": isinstance(heads, dict) and any(
                  isinstance(h, dict) and "timing" not in h for h in heads.values())}
    return [k for k in UPGRADE_DEFAULTS if absent[k]]


_TYPE_TAG = re.compile(r"^(str|int|float|bool|(list|dict|function-\w+|constrained-\w+|nullable)\[.*)$")


def dotted(loc: tuple) -> str:
    """('latency', 'corun', 'slowdown', 1) -> 'latency.corun.slowdown[1]' (a union member's type tag left out)."""
    out = ""
    for part in loc:
        if isinstance(part, str) and _TYPE_TAG.match(part):
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def first_error(exc: ValidationError) -> FieldError:
    """The first of a ValidationError's errors as one FieldError."""
    err = exc.errors(include_url=False)[0]
    path, kind, msg = dotted(err["loc"]), err["type"], err["msg"]
    if kind == "missing":
        return FieldError(path, "is missing")
    if kind == "value_error":
        return FieldError(path, msg.removeprefix("Value error, "))
    rule = msg.removeprefix("Input should be ").removeprefix("Input ")
    return FieldError(path, f"is {shown(err.get('input'))}: it should be {rule}")


def validate_meta(meta: dict) -> ProfileDoc:
    """profile.json (already upgraded) as a ProfileDoc; FieldError naming the first broken field."""
    try:
        doc = ProfileDoc.model_validate(meta)
    except ValidationError as exc:
        raise first_error(exc) from None
    check_doc(doc)
    return doc


FIX = "correct that field in profile.json or re-create the profile with `ppsd profile --out DIR`"
PHYSICAL_FIX = "re-profile on an idle machine (`ppsd profile --out DIR`): the profiler measures such a reading again"


def fix_for(error: FieldError) -> str:
    return PHYSICAL_FIX if "not physical" in error.problem else FIX


# --- the tables the folder holds -------------------------------------------------------------------------------

def _numeric(df, column: str, where: str):
    import pandas as pd

    values = pd.to_numeric(df[column], errors="coerce")
    bad = values.isna() & df[column].notna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise FieldError(f"{where} column {column}",
                         f"holds {shown(df[column].iloc[row])} at row {row + 2}: not a number")
    return values


def _refuse_rows(mask, df, column: str, where: str, rule: str) -> None:
    mask = np.asarray(mask, dtype=bool)
    if mask.any():
        row = int(np.flatnonzero(mask)[0])
        raise FieldError(f"{where} column {column}", f"holds {shown(df[column].iloc[row])} at row {row + 2}: {rule}")


def _check_common(df, where: str, num_layers: int, heads) -> None:
    """head, prompt_id, exit_layer and position, the columns both tables share."""
    _refuse_rows(df["prompt_id"].isna(), df, "prompt_id", where, "every row names its prompt")
    if heads is not None:
        known = {SHARED_HEAD, *heads}
        _refuse_rows(~df["head"].isin(known), df, "head", where, f"heads are {sorted(known)} (acceptance.heads)")
    exits = _numeric(df, "exit_layer", where).to_numpy(dtype=float)
    _refuse_rows(~((exits >= 1) & (exits < num_layers) & (exits == np.round(exits))), df, "exit_layer", where,
                 f"an exit layer is an integer in [1, {num_layers})")
    pos = _numeric(df, "position", where).to_numpy(dtype=float)
    _refuse_rows(~((pos >= 0) & (pos == np.round(pos))), df, "position", where, "a position is an integer >= 0")


def _check_probability(df, column: str, where: str, missing_ok: bool = False) -> None:
    v = _numeric(df, column, where).to_numpy(dtype=float)
    ok = (v >= -PROBABILITY_TOL) & (v <= 1 + PROBABILITY_TOL)
    _refuse_rows(~(ok | (np.isnan(v) & missing_ok)), df, column, where, "a probability lies in [0, 1]")


def _check_confidence(df, where: str) -> None:
    """Each head's confidences all recorded or none (a head traced before they were recorded)."""
    if "confidence" not in df.columns:
        return
    _check_probability(df, "confidence", where, missing_ok=True)
    missing = df["confidence"].isna()
    partial = missing.groupby(df["head"]).transform(lambda m: bool(m.any()) and not bool(m.all()))
    _refuse_rows(missing & partial, df, "confidence", where, "a head's confidences are all recorded or none")


def check_acceptance(df, where: str, num_layers: int, heads=None) -> None:
    """The greedy match table (files.ACCEPTANCE_COLUMNS): match in {0, 1}, β and confidence in [0, 1],
    exit layers in [1, num_layers), positions >= 0, heads among `heads` (+ shared) when given."""
    _check_common(df, where, num_layers, heads)
    m = _numeric(df, "match", where).to_numpy(dtype=float)
    _refuse_rows(~np.isin(m, (0.0, 1.0)), df, "match", where, "a match is 0 or 1")
    _check_probability(df, "beta", where)
    _check_confidence(df, where)


def check_sampled(df, where: str, num_layers: int, temperatures, tol: float) -> None:
    """The sampled-trajectory β table (files.SAMPLED_COLUMNS): as `check_acceptance`, and every row's
    temperature one of `temperatures` (acceptance.sampled.temperatures), trajectories integers >= 0."""
    _check_common(df, where, num_layers, None)
    _check_probability(df, "beta", where)
    _check_confidence(df, where)
    t = _numeric(df, "temperature", where).to_numpy(dtype=float)
    recorded = np.asarray(sorted(float(x) for x in temperatures))
    near = np.min(np.abs(t[:, None] - recorded[None, :]), axis=1) <= tol if len(t) else np.zeros(0, bool)
    _refuse_rows(~near, df, "temperature", where, f"temperatures are those recorded, {recorded.tolist()}")
    if "trajectory" in df.columns:
        k = _numeric(df, "trajectory", where).to_numpy(dtype=float)
        _refuse_rows(~((k >= 0) & (k == np.round(k))), df, "trajectory", where, "a trajectory is an integer >= 0")


class Generation(Block):
    """One line of generations.jsonl."""

    prompt_id: str | int = F("the prompt's id")
    category: str | None = F("its category", None)
    prompt: str | None = F("its text", None)
    prompt_tokens: list[Count0] | Count0 | None = F("its token ids (or their count)", None)
    prompt_len: Count0 | None = F("its length", None)
    token_ids: list[Count0] = F("the greedy continuation's token ids")


def check_generations(records: list, where: str) -> None:
    """Every line of generations.jsonl a `Generation`."""
    for i, rec in enumerate(records):
        try:
            Generation.model_validate(rec)
        except ValidationError as exc:
            err = first_error(exc)
            raise FieldError(f"{where}:{i + 1}.{err.path}" if err.path else f"{where}:{i + 1}", err.problem) from None
