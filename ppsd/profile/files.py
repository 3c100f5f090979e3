"""The profile folder on disk: its files, their columns, the schema versions, and the readers of its tables.

Torch-free on purpose: `sim/` and `dashboard/` read profiles through this module.

A profile folder holds
  profile.json        metadata + latency tables (schema below, versioned by `schema_version`)
  acceptance.csv.gz   long table, one row per (head, prompt, exit layer, position):
                      head, prompt_id, category, exit_layer, position, match (0/1), beta (float),
                      optional confidence (float: the draft's top-1 probability under its exit head)
  generations.jsonl   one object per prompt: prompt_id, category, prompt, prompt_tokens, token_ids
  acceptance_sampled.csv.gz   optional (schema 2): beta along sampled trajectories per temperature

profile.json (schema_version 2; 1 still loads: it only lacks acceptance.sampled):
  schema_version: 2
  kind: "measured" | "estimated"
  created: ISO-8601 UTC time
  model: {id, source, architecture, num_layers, hidden_size, vocab_size, dtype, max_context}
  hardware: {device ("cpu"|"cuda"), device_name, cores, threads, gpu_count}
  versions: {ppsd, python, torch, transformers}
  timing: {method ("perf_counter"|"cuda_event"|"roofline"), warmup, repeats}
  latency:
    n_values: [1, 2, ..., 9, 16]        new tokens per step (measured profiles; every EESD verification γ ≤ 8)
    context_values: [64, 256, 1024]     tokens already in the KV cache
    layers:  {median_ms, p10_ms, p90_ms}: [num_layers][len(n_values)][len(context_values)]
    embedding: {median_ms, p10_ms, p90_ms}: [len(n_values)]
    head:      {median_ms, p10_ms, p90_ms}: [len(n_values)]   final norm + LM head
    exit_heads: {name: {kind, params, median_ms, p10_ms, p90_ms}}  optional; drafting cost of an
                exit head other than the shared one (the shared one costs `head`)
    hop: {backend, bytes, median_ms, p10_ms, p90_ms, repeats}  one-way hidden-state message
    corun: {processes: [1, 2, ...], slowdown: [1.0, ...], p10: [...], p90: [...]}
           per-layer time with p processes working at once / time alone
    whole_step: {context, median_ms, sum_of_parts_ms, ratio, note}
               optional (with `method: "paired"`): the whole step is timed right
               after the same step timed piece by piece, in every round of the interleaved grid;
               ratio = the median paired parts / whole, calibration = 1 / ratio, and every table
               (layers, embedding, head, at this and at each parallel thread count, each by its own
               factor) is already scaled by it; ratio_cv (the pairs' robust log spread), samples_ms
               (the whole steps in time order: the machine's speed over the profiling window)
    pipeline: optional (null or absent: the simulator falls back to hop and corun). Two stage
              processes run as a 2-stage PPSD pipeline split at E = N // 2:
              {exit_layer, stage_bounds, backend, passes, slowdown (median pass time in the pipeline
              / the same pass priced from the tables, or / the pass alone when slowdown_base is
              "alone"; mean of both stages), slowdown_per_stage, slowdown_base, pass_ms_tables,
              pass_ms_alone, pass_ms_pipeline, layer_slowdown, head_slowdown (against the pieces
              alone), pass_cv (robust relative spread of a pass), hop: {median_ms, p10_ms, p90_ms,
              samples} (one-way, into a waiting stage), method; optional: rounds [{slowdown,
              alone_vs_tables}], round_kept, round_spread, passes_per_round (the probe runs in
              interleaved rounds: slowdowns, pieces, pass times and pass_cv are the median round's,
              hops are pooled over rounds, passes counts every round)}
              When present it sets the hop and the 2-process slowdown the simulator uses, and the
              timing jitter of its restart rule (sim/model/restart.py).
              Optional runtime: the runtime probe (profiler/runtime_probe.py: the runtime's own
              pipeline, every draft accepted) {slowdown, slowdown_per_stage, round_kept, rounds
              [{slowdown_per_stage, pass_ms, alone_ms, pass_jitter_cv}], slowdown_cv, exit_layer,
              tokens, prompt_len, context, method, pass_jitter_cv}; when present its slowdown sets the
              2-process point, its rounds' per-stage slowdowns split it between the roles
              (Profile.corun_stage_bias) and pass_jitter_cv (each stage's pass-to-pass spread, absent
              in older profiles: 0) prices the lock step's wait (Profile.lockstep_jitter_cv).
              Its optional waiting {exit_layer, last_stage_slowdown, rounds [{slowdown_per_stage,
              pass_ms, alone_ms}], method}: the same pipeline cut where its last stage waits for every
              draft (profiler/runtime_probe.waiting_exit_layer); a two-stage plan whose last stage is
              the shorter prices that stage's passes at last_stage_slowdown
              (Profile.waiting_last_stage_slowdown; absent in older profiles: the co-run shares).
    control_plane: optional (absent: no fixed cost per pass, the hop alone) {method, stages:
              {"<k>": {pass_overhead_ms, transit_ms, ...}}}: what a stage pass of a k-stage PPSD
              pipeline costs beyond its layers and heads (host sync, sends and receives, the stage
              loop) and a message's transit between stage processes, measured at each stage count
              (`runtime/control_plane.py`: the emulated runtime with zero-time layers). Per stage
              count also, optional, by role: send_offset_ms (the part of stage 1's overhead before
              its hidden state leaves), middle_pass_overhead_ms, last_pass_overhead_ms (absent:
              stage 1's figure for every stage, all of it before the send), hop_jitter_ms (the
              transit's robust spread; absent: 0). The PPSD costs add
              each stage's overhead to its passes and take max(hop, transit) as the hop.
    sampling: optional (absent: sampled plans are priced without the draw, with a warning)
              {vocab: [V, ...], median_ms, p10_ms, p90_ms, temperature, threads, method}: one
              token drawn at T > 0 from V logits (softmax at T in fp32 + a seeded multinomial), for
              the full vocabulary and each exit head's; `Profile.sample_ms(V)` interpolates linearly
              in V. Sampled plans pay it per drawn token (sim/model/cost_model.py `CostModel.sample`);
              `ppsd profile add-sampling DIR` measures it into an existing profile (then
              `added_later` holds when)
    batch: optional (absent: the profile answers for one sequence at a time) {format, batch_sizes:
              [1, 2, 4, 8], n_values, context_values, repeats, layers_ms, layers_ratio:
              [len(batch_sizes)][len(n_values)][len(context_values)], embedding_ms, head_ms:
              [len(batch_sizes)][len(n_values)], measured}: a pass of B sequences of n tokens each
              after c cached ones, as the batched runtime runs it (profiler/batch_latency.py), timed
              with batch 1 in the same interleaved rounds; layers_ratio = the whole layer stack's time
              at B over batch 1's, paired round by round; optional budget_threads (2) and
              two_threads_ratio [len(batch_sizes)][len(context_values)]: a whole decode pass on two threads
              over the same pass on one, paired round by round (CPU, two cores or more: AR's baseline
              on the cores a two-stage batched PPSD plan uses). `ppsd profile add-batch DIR` measures it
              into an existing profile
    prefill: optional {lengths: [32, 128, 512], median_ms, p10_ms, p90_ms, method}: a whole prefill
             (embed + every layer over the prompt + the head on its last position) per prompt length;
             absent: time to first token is estimated from the tables (n extrapolated)
    parallel: optional (absent: the main tables are the only budget) {kind, base, tables}: the same
              latency tables with the work spread over more of the machine, for same-budget
              baselines (AR and EESD on all cores or GPUs):
              kind "threads" (measured: torch threads in one process) or "tensor_parallel"
              (estimated: weights split K ways, an all-reduce per layer); base = the units of the
              main tables (timing.threads, or 1 GPU); tables: {"<units>": {layers, embedding, head
              (StatTable objects, the main tables' shapes), whole_step_ms (optional)}};
              `at_parallel(u)` scales table u by `whole_step_consistency(u)` when both whole
              steps are recorded, so AR at u relates to AR at base as the whole steps measured
  acceptance: null or {file, generations_file, temperature, max_new_tokens, prompt_set,
                       num_prompts, categories: [...], heads: [...]}
              `temperature` is the one at which the main table's beta was computed, along the
              GREEDY trajectory (a legacy figure: a sampled generation wanders where the exit head
              agrees less, so it over-predicts acceptance under sampling)
  acceptance.sampled (schema 2, optional): {file, temperatures: [T, ...] (each > 0), seed,
              max_new_tokens, tokens: {"<T>": n}, heads: ["shared"], trajectory}: beta along
              trajectories SAMPLED from the full model at each T (one teacher-forced pass per
              trajectory), in `acceptance_sampled.csv.gz`:
              head, prompt_id, category, temperature, exit_layer, position, beta[, trajectory]
              `trajectories` (additive; absent = 1): sampled continuations per prompt and T, told
              apart by the optional `trajectory` column (0, 1, ...); predictions use each
              position's mean beta over a prompt's trajectories (`Profile.beta_rows`).
              When present, sampled decoding at T uses exactly these rows; `Profile.temperatures()`
              lists what a profile holds and `Profile.beta_rows(T)` refuses any other T (UserError).

Additive fields written by `ppsd profile` (readers must not require them):
  timing.threads, timing.whole_step_repeats, timing.quick (latency skipped: n=1 table only)
  latency.whole_step.{n, p10_ms, p90_ms, repeats, flagged (|ratio - 1| > 10%)}
  latency.hop.method; latency.corun.{alone_layer_ms, context, threads_per_process, seconds_per_round}
  acceptance.{tokens, teacher_forced_agree, chat_template, generation, per_category, limit}
  warnings: [str]   things a reader should know (a flagged whole-step ratio, a failed hop, ...)
  profiling: {wall_s, phases_s: {phase: seconds}}
  generations.jsonl: prompt_tokens is the list of prompt token ids; prompt_len its length
  with `--heads DIR`: latency.exit_heads.<name>.{n_values (= latency.n_values), vocab, timing}
  (timing "after_draft_layers": each call timed after reading the draft's layers' weights, the caches
  as a decode leaves them; absent or "hot_loop" in older profiles: timed in a loop of its own); acceptance
  rows with head "trained" / "vocab<V>" for the exits the folder has (acceptance.heads lists them);
  exit_heads: {path, model_id, kind, exits, params_per_exit, bytes_per_exit, vocab_sizes, names, training}
  with `--heads DIR --heldout`: acceptance.{heldout_from_heads: true, excluded_training_prompts: n}
  (the heads' training prompts were dropped before subsampling: every head row is out of sample)
  with `--control-plane-stages 2,4,8`: latency.control_plane (see above)
  acceptance.{dir, from_profile}: the acceptance files lie in `dir` (absolute, or relative to this folder),
  traced by the profile `from_profile`: this folder's latency priced for another profile's prompts
  (`Profile.with_acceptance_from`, `ppsd plan --acceptance-from`, the dashboard's acceptance source)
"""

from __future__ import annotations

from pathlib import Path

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED

SCHEMA_VERSION = 2
# 1: no sampled beta (read as before: beta along the greedy trajectory at acceptance.temperature);
# 2: adds the optional acceptance.sampled block. Both load.
READABLE_VERSIONS = (1, 2)
SAMPLED_FILE = "acceptance_sampled.csv.gz"
SAMPLED_COLUMNS = ["head", "prompt_id", "category", "temperature", "exit_layer", "position", "beta"]
SAMPLED_BETA_DECIMALS = 3  # beta is written rounded to this many decimals (see save_profile)
# trajectory: absent in older files, read as 0 (one trajectory per prompt); confidence: each draft's
# confidence along the sampled trajectory (as the acceptance table's), absent in older files
SAMPLED_OPTIONAL = ["trajectory", "confidence"]
SAMPLED_CONFIDENCE_DECIMALS = 3
TEMPERATURE_TOL = 1e-6  # a requested temperature matches a recorded one within this
PROFILE_FILE = "profile.json"
ACCEPTANCE_FILE = "acceptance.csv.gz"
GENERATIONS_FILE = "generations.jsonl"
ACCEPTANCE_COLUMNS = ["head", "prompt_id", "category", "exit_layer", "position", "match", "beta"]
# optional: the draft's confidence, the top-1 probability of the exit head's own distribution (softmax
# of its logits over its vocabulary) with a correct prefix; what a confidence stop reads (absent in
# profiles made before it: such a stop cannot be priced from them)
ACCEPTANCE_OPTIONAL = ["confidence"]


def acceptance_columns(df) -> list[str]:
    """The acceptance table's columns to store: the required ones and the optional ones `df` has."""
    return ACCEPTANCE_COLUMNS + [c for c in ACCEPTANCE_OPTIONAL if c in df.columns]
# The n grid `ppsd profile` measures by default: every n an EESD verification uses (γ + 1 for
# γ = 1..8) is measured, not interpolated, since on a CPU the cost is far from smooth in n (SmolLM2, 1
# thread: 30 layers take 88 ms at n = 2, 111 ms at n = 3 and 76 ms at n = 4, the LM head 21, 33 and
# 17 ms; the matmul kernels change with the row count), and a table over 1, 2, 4, 8 priced γ = 2
# verifications 25-40% short. 16 bounds longer verifications.
MEASURED_N_VALUES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 16)

SHARED_HEAD = SHARED  # the model's own norm + LM head as exit head (ppsd/exit_heads.py)


def malformed(path: Path, what: str) -> UserError:
    return UserError(
        f"profile {path} is malformed: {what}",
        "re-create it with `ppsd profile --out DIR` (or pick another folder)",
    )


def read_acceptance(path: Path):
    import pandas as pd

    try:
        # ids are names, not numbers: Spec-Bench ids would otherwise come back as ints
        df = pd.read_csv(path, dtype={"prompt_id": str, "category": str, "head": str})
    except Exception as exc:  # noqa: BLE001 - any parse failure is the same user problem
        raise malformed(path.parent, f"cannot read {path.name} ({exc})") from None
    if "head" not in df.columns:
        df.insert(0, "head", SHARED_HEAD)
    missing = [c for c in ACCEPTANCE_COLUMNS if c not in df.columns]
    if missing:
        raise malformed(path.parent, f"{path.name} lacks columns {missing}")
    return df


def read_sampled(path: Path):
    """The sampled-trajectory beta table (SAMPLED_COLUMNS)."""
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype={"prompt_id": str, "category": str, "head": str})
    except Exception as exc:  # noqa: BLE001 - any parse failure is the same user problem
        raise malformed(path.parent, f"cannot read {path.name} ({exc})") from None
    missing = [c for c in SAMPLED_COLUMNS if c not in df.columns]
    if missing:
        raise malformed(path.parent, f"{path.name} lacks columns {missing}")
    if "trajectory" not in df.columns:
        df["trajectory"] = 0
    return df
