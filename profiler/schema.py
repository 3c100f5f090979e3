"""The profile folder: the one contract between the profiler and everything else.

Torch-free on purpose: `sim/` and `dashboard/` read profiles through this module.

A profile folder holds
  profile.json        metadata + latency tables (schema below, versioned by `schema_version`)
  acceptance.csv.gz   long table, one row per (head, prompt, exit layer, position):
                      head, prompt_id, category, exit_layer, position, match (0/1), beta (float)
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
               optional (profiles from 2026-12-04, `method: "paired"`): the whole step is timed right
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
              timing jitter of its restart rule (sim/restart.py).
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
              in V. Sampled plans pay it per drawn token (sim/costs.py `CostModel.sample`);
              `ppsd profile add-sampling DIR` measures it into an existing profile (then
              `added_later` holds when)
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
  with `--heads DIR`: latency.exit_heads.<name>.{n_values (= latency.n_values), vocab}; acceptance
  rows with head "trained" / "vocab<V>" for the exits the folder has (acceptance.heads lists them);
  exit_heads: {path, model_id, kind, exits, params_per_exit, bytes_per_exit, vocab_sizes, names, training}
  with `--heads DIR --heldout`: acceptance.{heldout_from_heads: true, excluded_training_prompts: n}
  (the heads' training prompts were dropped before subsampling: every head row is out of sample)
  with `--control-plane-stages 2,4,8`: latency.control_plane (see above)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ppsd import exit_heads
from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from ppsd.paths import atomic_write_json, atomic_write_text

SCHEMA_VERSION = 2
# 1: no sampled beta (read as before: beta along the greedy trajectory at acceptance.temperature);
# 2: adds the optional acceptance.sampled block. Both load.
READABLE_VERSIONS = (1, 2)
SAMPLED_FILE = "acceptance_sampled.csv.gz"
SAMPLED_COLUMNS = ["head", "prompt_id", "category", "temperature", "exit_layer", "position", "beta"]
SAMPLED_BETA_DECIMALS = 3  # beta is written rounded to this many decimals (see save_profile)
SAMPLED_OPTIONAL = ["trajectory"]  # absent in older files: read as 0 (one trajectory per prompt)
TEMPERATURE_TOL = 1e-6  # a requested temperature matches a recorded one within this
PROFILE_FILE = "profile.json"
ACCEPTANCE_FILE = "acceptance.csv.gz"
GENERATIONS_FILE = "generations.jsonl"
ACCEPTANCE_COLUMNS = ["head", "prompt_id", "category", "exit_layer", "position", "match", "beta"]
# The n grid `ppsd profile` measures by default: every n an EESD verification uses (γ + 1 for
# γ = 1..8) is measured, not interpolated, since on a CPU the cost is far from smooth in n (SmolLM2, 1
# thread: 30 layers take 88 ms at n = 2, 111 ms at n = 3 and 76 ms at n = 4, the LM head 21, 33 and
# 17 ms; the matmul kernels change with the row count), and a table over 1, 2, 4, 8 priced γ = 2
# verifications 25-40% short. 16 bounds longer verifications.
MEASURED_N_VALUES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 16)

SHARED_HEAD = SHARED  # the model's own norm + LM head as exit head (ppsd/exit_heads.py)


def _bad(path: Path, what: str) -> UserError:
    return UserError(
        f"profile {path} is malformed: {what}",
        "re-create it with `ppsd profile --out DIR` (or pick another folder)",
    )


@dataclass
class StatTable:
    """median / p10 / p90 in ms over some grid; arrays keep the grid's shape."""

    median_ms: np.ndarray
    p10_ms: np.ndarray
    p90_ms: np.ndarray

    @classmethod
    def from_json(cls, obj: dict, shape: tuple[int, ...], path: Path, name: str) -> StatTable:
        try:
            arrays = [np.asarray(obj[k], dtype=float) for k in ("median_ms", "p10_ms", "p90_ms")]
        except (KeyError, TypeError, ValueError) as exc:
            raise _bad(path, f"latency.{name} lacks median_ms/p10_ms/p90_ms ({exc})") from None
        for a in arrays:
            if a.shape != shape:
                raise _bad(path, f"latency.{name} has shape {a.shape}, expected {shape}")
            if not np.all(np.isfinite(a)) or np.any(a < 0):
                raise _bad(path, f"latency.{name} has negative or non-finite times")
        return cls(*arrays)

    def to_json(self) -> dict:
        return {k: np.round(getattr(self, k), 6).tolist() for k in ("median_ms", "p10_ms", "p90_ms")}

    def scaled(self, factor: float) -> StatTable:
        return self if factor == 1.0 else StatTable(self.median_ms * factor, self.p10_ms * factor, self.p90_ms * factor)


def _interp(x: float, grid: np.ndarray, values: np.ndarray) -> float:
    """Linear in x between grid points; linear extrapolation past the ends (context keeps growing),
    never below zero."""
    if len(grid) == 1:
        return float(values[0])
    if x <= grid[0]:
        i = 0
    elif x >= grid[-1]:
        i = len(grid) - 2
    else:
        i = int(np.searchsorted(grid, x)) - 1
    x0, x1 = grid[i], grid[i + 1]
    y0, y1 = values[i], values[i + 1]
    y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return float(max(y, 0.0))


@dataclass(frozen=True)
class PassOverheads:
    """The fixed cost of one pass of each stage of a k-stage pipeline (ms; `latency.control_plane`):
    stage 1's whole overhead and its part before the hidden state leaves (the rest runs while the
    next stage works), a middle stage's, the last stage's."""

    first: float
    first_before_send: float
    middle: float
    last: float

    def of_stage(self, m: int, stages: int) -> float:
        """Stage m's (0-based) overhead in a `stages`-stage pipeline."""
        return self.first if m == 0 else self.last if m == stages - 1 else self.middle


@dataclass
class Profile:
    """A loaded, validated profile folder. `meta` is the raw profile.json."""

    path: Path
    meta: dict
    layers: StatTable
    embedding: StatTable
    head: StatTable
    n_values: np.ndarray
    context_values: np.ndarray
    _acceptance: Any = field(default=None, repr=False)
    _sampled: Any = field(default=None, repr=False)  # the sampled-trajectory beta table (lazy)
    _views: dict = field(default_factory=dict, repr=False)  # units -> Profile (`at_parallel`); beta_rows

    # --- metadata -------------------------------------------------------------------------
    @property
    def model_id(self) -> str:
        return self.meta["model"]["id"]

    @property
    def num_layers(self) -> int:
        return int(self.meta["model"]["num_layers"])

    @property
    def kind(self) -> str:
        return self.meta.get("kind", "measured")

    @property
    def device_name(self) -> str:
        return self.meta["hardware"].get("device_name", self.meta["hardware"].get("device", "?"))

    @property
    def latency(self) -> dict:
        return self.meta["latency"]

    # --- timings (ms) ---------------------------------------------------------------------
    def layer_ms(self, layer: int, n: float = 1, context: float | None = None, stat: str = "median_ms") -> float:
        """Time of decoder layer `layer` (0-based) for n new tokens at context length `context`
        (default: the smallest profiled context), interpolated over the profiled grid."""
        table = getattr(self.layers, stat)[layer]
        ctx = self.context_values[0] if context is None else context
        per_n = np.array([_interp(ctx, self.context_values, table[i]) for i in range(len(self.n_values))])
        return _interp(n, self.n_values, per_n)

    def head_ms(self, n: float = 1, stat: str = "median_ms") -> float:
        return _interp(n, self.n_values, getattr(self.head, stat))

    def embed_ms(self, n: float = 1, stat: str = "median_ms") -> float:
        return _interp(n, self.n_values, getattr(self.embedding, stat))

    def exit_head_ms(self, head: str = SHARED_HEAD, n: float = 1) -> float:
        """Drafting cost of an exit head; the shared head costs what the final norm + LM head cost."""
        if head == SHARED_HEAD:
            return self.head_ms(n)
        heads = self.latency.get("exit_heads") or {}
        if head not in heads:
            raise UserError(f"profile {self.path} has no exit head named {head!r}",
                            f"use one of: {', '.join([SHARED_HEAD, *heads])}")
        return _interp(n, self.n_values, np.asarray(heads[head]["median_ms"], dtype=float))

    def head_vocab(self, head: str = SHARED_HEAD) -> int | None:
        """How many tokens an exit head's distribution covers: a reduced-vocabulary head its own
        size, the shared and trained heads the model's vocabulary (None when the profile says not)."""
        size = exit_heads.vocab_size(head)
        if size is not None:
            return int(size)
        v = self.meta.get("model", {}).get("vocab_size")
        return int(v) if v else None

    @property
    def sampling(self) -> dict:
        """The cost of drawing one token at T > 0 (`latency.sampling`), or {} when not measured."""
        return self.latency.get("sampling") or {}

    def sample_ms(self, vocab: int | None) -> float | None:
        """One token drawn from `vocab` logits at T > 0 (softmax + seeded multinomial, ms), linear in
        the vocabulary between measured sizes and proportional beyond them; None when not measured."""
        table = self.sampling
        sizes = np.asarray(table.get("vocab") or [], dtype=float)
        if not len(sizes) or vocab is None:
            return None
        ms = np.asarray(table["median_ms"], dtype=float)
        order = np.argsort(sizes)
        sizes, ms = sizes[order], ms[order]
        v = float(vocab)
        if v < sizes[0]:
            return float(ms[0] * v / sizes[0])
        if v > sizes[-1]:
            return float(ms[-1] * v / sizes[-1])
        return float(np.interp(v, sizes, ms))

    @property
    def pipeline(self) -> dict:
        """The two-stage pipeline probe (`latency.pipeline`), or {} when the profile has none."""
        return self.latency.get("pipeline") or {}

    def hop_ms(self) -> float:
        """One-way stage-to-stage message time as a pipeline sees it: the pipeline probe's hop into
        a waiting stage when the profile has one, else the idle ping-pong's."""
        hop = self.pipeline.get("hop") or self.latency.get("hop") or {}
        return float(hop.get("median_ms", 0.0))

    def idle_hop_ms(self) -> float:
        """The idle ping-pong hop (`latency.hop`), whatever the pipeline probe found."""
        return float((self.latency.get("hop") or {}).get("median_ms", 0.0))

    @property
    def cpu_cores(self) -> int | None:
        """Cores of the CPU a CPU profile was measured on (`hardware.cores`); None for GPU profiles
        and profiles that do not say."""
        hw = self.meta.get("hardware") or {}
        if hw.get("device") != "cpu":
            return None
        try:
            cores = int(hw.get("cores") or 0)
        except (TypeError, ValueError):
            return None
        return cores if cores > 0 else None

    def corun_slowdown(self, processes: int) -> float:
        """Factor by which each of `processes` concurrently working stages slows down on this
        machine (1.0 alone). Past the measured range the last factor holds. With a pipeline probe,
        its two-stage figure (layers and heads, as stages run them) sets the 2-process point and
        the co-run table only the shape beyond it."""
        if processes <= 1:
            return 1.0
        corun = self.latency.get("corun") or {}
        procs = corun.get("processes") or [1]
        slow = corun.get("slowdown") or [1.0]
        table = lambda p: float(_interp(p, np.asarray(procs, float), np.asarray(slow, float)))  # noqa: E731
        piped = self.pipeline.get("slowdown")
        if piped is None:
            return table(processes)
        return float(piped) * table(processes) / table(2)

    def corun_table(self) -> dict | None:
        """The co-run measurement's 2-process figure as the profiler took it, without the pipeline
        probe: {slowdown, context, threads_per_process, seconds_per_round} (what a later check,
        `ppsd validate`'s `corun_drift`, repeats to compare with); None without a 2-process figure."""
        corun = self.latency.get("corun") or {}
        procs, slow = corun.get("processes") or [], corun.get("slowdown") or []
        if 2 not in procs or len(slow) != len(procs):
            return None
        return {"slowdown": float(slow[procs.index(2)]), "context": int(corun.get("context") or 64),
                "threads_per_process": int(corun.get("threads_per_process") or 1),
                "seconds_per_round": float(corun.get("seconds_per_round") or 1.5)}

    def prefill_ms(self, prompt_len: float) -> float:
        """A whole prefill of `prompt_len` tokens (ms): the measured `latency.prefill` interpolated
        over prompt lengths (linear past its ends); without it, embed + every layer for n = L new
        tokens at the smallest context + the head, the tables extrapolated linearly in n."""
        pre = self.latency.get("prefill") or {}
        L = float(prompt_len)
        if pre.get("lengths"):
            return _interp(L, np.asarray(pre["lengths"], float), np.asarray(pre["median_ms"], float))
        layers = sum(self.layer_ms(layer, L) for layer in range(self.num_layers))
        return float(self.embed_ms(L) + layers + self.head_ms(1))

    @property
    def prefill_source(self) -> str:
        return "measured" if (self.latency.get("prefill") or {}).get("lengths") else "extrapolated from the tables"

    # --- the same tables on more of the machine (same-budget baselines) ------------------------
    @property
    def parallel_kind(self) -> str | None:
        """"threads" (CPU: measured at more torch threads), "tensor_parallel" (GPUs: estimated), or
        None when the profile holds the main tables only."""
        return (self.latency.get("parallel") or {}).get("kind")

    @property
    def parallel_base(self) -> int:
        """The units (threads or GPUs) the main tables were measured with."""
        par = self.latency.get("parallel") or {}
        return int(par.get("base") or self.meta.get("timing", {}).get("threads") or 1)

    def parallel_units(self) -> list[int]:
        """Every budget the profile has tables for, the main tables' first."""
        par = self.latency.get("parallel") or {}
        return sorted({self.parallel_base, *(int(u) for u in (par.get("tables") or {}))})

    def at_parallel(self, units: int) -> Profile:
        """This profile with the latency tables measured (or estimated) at `units` threads or GPUs;
        hop, co-run and acceptance stay. UserError when the profile has no such tables."""
        units = int(units)
        if units == self.parallel_base:
            return self
        view = self._views.get(units)
        if view is None:
            tables = ((self.latency.get("parallel") or {}).get("tables") or {}).get(str(units))
            if tables is None:
                have = ", ".join(map(str, self.parallel_units()))
                raise UserError(f"profile {self.path} has no latency tables at {units} "
                                f"{'GPUs' if self.parallel_kind == 'tensor_parallel' else 'threads'} (it has {have})",
                                "re-profile with `ppsd profile --thread-counts 1,...` (CPU) or give a budget it has")
            factor = self.whole_step_consistency(units)
            view = Profile(path=self.path, meta=self.meta, layers=tables["layers"].scaled(factor),
                           embedding=tables["embedding"].scaled(factor), head=tables["head"].scaled(factor),
                           n_values=self.n_values, context_values=self.context_values, _acceptance=self._acceptance)
            self._views[units] = view
        return view

    def retimed(self, scale) -> Profile:
        """This profile with its pieces priced as timed now (`profiler.piece_times.PieceScale`: each
        layer, the LM head, the embedding and each named exit head scaled by now / profiled, at every
        n, context and thread count alike); acceptance, hop, co-run and control plane stay.
        Why: a shared machine's pieces drift apart over minutes (the memory-bound LM head most), and
        `ppsd validate --retime` prices each plan on the machine it ran on."""
        lat = dict(self.latency)
        if lat.get("exit_heads"):
            lat["exit_heads"] = {
                name: {**h, **{k: (np.asarray(h[k], dtype=float) * scale.exit_heads.get(name, 1.0)).tolist()
                               for k in ("median_ms", "p10_ms", "p90_ms") if k in h}}
                for name, h in lat["exit_heads"].items()}
        def pieces(t: dict) -> dict:
            return {"layers": t["layers"].scaled(scale.layers), "embedding": t["embedding"].scaled(scale.embedding),
                    "head": t["head"].scaled(scale.head)}

        def whole(ms, old: dict, new: dict):
            # a whole step moves with its pieces, so `whole_step_consistency` stays what was measured
            return ms * self._parts_ms(new["layers"], new["embedding"], new["head"]) / \
                self._parts_ms(old["layers"], old["embedding"], old["head"])

        main_old = {"layers": self.layers, "embedding": self.embedding, "head": self.head}
        main_new = pieces(main_old)
        if (lat.get("whole_step") or {}).get("median_ms"):
            lat["whole_step"] = {**lat["whole_step"], "median_ms": whole(lat["whole_step"]["median_ms"], main_old,
                                                                         main_new)}
        par = lat.get("parallel") or {}
        if par.get("tables"):
            tables = {}
            for u, t in par["tables"].items():
                tables[u] = {**t, **pieces(t)}
                if t.get("whole_step_ms"):
                    tables[u]["whole_step_ms"] = whole(float(t["whole_step_ms"]), t, tables[u])
            lat["parallel"] = {**par, "tables": tables}
        return Profile(path=self.path, meta={**self.meta, "latency": lat}, n_values=self.n_values,
                       context_values=self.context_values, _acceptance=self._acceptance, _sampled=self._sampled,
                       **main_new)

    def _parts_ms(self, layers: StatTable, embedding: StatTable, head: StatTable) -> float:
        """Embedding + every layer + LM head at n = 1 (else the smallest n) and the smallest context:
        the pieces a whole step is compared with (as `latency.whole_step` does)."""
        n1 = int(np.argmin(np.abs(self.n_values - 1)))
        return float(embedding.median_ms[n1] + head.median_ms[n1] + layers.median_ms[:, n1, 0].sum())

    @property
    def piece_calibration(self) -> float:
        """The factor the main tables were scaled by so that their pieces sum to a whole step timed
        beside them (`latency.whole_step.calibration`, profiles measured from 2026-12-04); 1.0 for
        older and estimated profiles, whose tables are the pieces as timed."""
        return float((self.latency.get("whole_step") or {}).get("calibration") or 1.0)

    def calibration_doubt(self) -> float:
        """How far a plan's price may be off because the tables were scaled uniformly to the whole
        step (`piece_calibration`): the distortion the scaling removes may sit in some pieces only,
        so any share of it, either way, is as likely: uniform on ±|log ratio|, whose sd is
        |log ratio| / √3. 0 for profiles without a paired whole step."""
        ws = self.latency.get("whole_step") or {}
        ratio = ws.get("ratio")
        if ws.get("method") != "paired" or not ratio or ratio <= 0:
            return 0.0
        return float(abs(np.log(float(ratio))) / np.sqrt(3.0))

    def thread_speedup_cv(self, units: int) -> float:
        """How unsteady AR's speedup from `units` threads was over the profile's interleaved rounds
        (robust log spread of each round's whole step at the base over the one at `units`); 0 for
        the base, for estimated tables and for profiles measured before 2026-12-04."""
        if int(units) == self.parallel_base:
            return 0.0
        tables = ((self.latency.get("parallel") or {}).get("tables") or {}).get(str(int(units))) or {}
        return float(tables.get("speedup_cv") or 0.0)

    def whole_step_consistency(self, units: int) -> float:
        """How much the tables measured at `units` threads are scaled so that, against the main
        tables, they price a whole decode step as the profiler measured it at each thread count:
        (whole / parts at `units`) / (whole / parts on the main tables). 1.0 when a whole step is
        missing at either count (estimated tables are consistent by construction).

        Why: each piece is timed alone in a hot loop, and that distorts it differently at each
        thread count — at 1 thread a layer repeated in place keeps more of its weights in cache
        (the pieces sum to 0.87 of the whole step on the example profile), at 2 threads they sum to
        0.97 of it. Summed pieces then put AR on 2 threads at 1.32x AR on 1 thread where
        whole steps measure 1.47x (validation: 1.44x). The main tables keep their own pricing (the
        pipeline probe's slowdown is measured against them), so only the ratio is carried over."""
        par_tables = (self.latency.get("parallel") or {}).get("tables") or {}
        tables = par_tables.get(str(int(units)))
        whole_main = (self.latency.get("whole_step") or {}).get("median_ms")
        if units == self.parallel_base or tables is None or not tables.get("whole_step_ms") or not whole_main:
            return 1.0
        if tables.get("speedup_vs_base"):
            # Paired rounds (profiles from 2026-12-04): AR at `units` threads costs the main tables' step
            # over the round-by-round speedup, a ratio of neighbours in time. The ratio of the two series'
            # medians carries the machine's drift between samples (AMD VM, 2026-12-04: 1.05x from the
            # medians, 1.006x paired, 0.97x measured by the validation that followed).
            parts = self._parts_ms(tables["layers"], tables["embedding"], tables["head"])
            return float(self._parts_ms(self.layers, self.embedding, self.head)
                         / float(tables["speedup_vs_base"]) / parts) if parts > 0 else 1.0
        main = whole_main / self._parts_ms(self.layers, self.embedding, self.head)
        other = float(tables["whole_step_ms"]) / self._parts_ms(tables["layers"], tables["embedding"], tables["head"])
        return float(other / main)

    def pass_jitter_cv(self) -> float:
        """Relative spread (robust std / median) of a stage pass in the pipeline probe; 0 without one."""
        return float(self.pipeline.get("pass_cv") or 0.0)

    @property
    def control_plane(self) -> dict:
        """The control plane of a k-stage pipeline (`latency.control_plane`), or {} when none:
        `{"method": str, "stages": {"k": {"pass_overhead_ms": o, "transit_ms": g}, ...}}`, what each
        stage pass costs beyond its layers and heads (the host sync, sends and receives, the stage
        loop) and a message's transit on this machine, measured at each stage count k."""
        return self.latency.get("control_plane") or {}

    def _control_plane_at(self, stages: int, key: str, default: float = 0.0) -> float:
        """`key` at `stages` stages from the stage counts that measured it (linear between them, the
        ends held beyond); `default` when none did."""
        table = {int(k): float(v[key]) for k, v in (self.control_plane.get("stages") or {}).items()
                 if v.get(key) is not None}
        if not table:
            return default
        ks = sorted(table)
        if stages in table:
            return table[stages]
        return float(np.interp(float(stages), ks, [table[k] for k in ks]))  # ends held past the measured range

    def pass_overhead_ms(self, stages: int) -> float:
        """Fixed cost of one stage pass in a pipeline of `stages` stages (ms; 0 without a measurement;
        linear between measured stage counts, the ends held beyond)."""
        return self._control_plane_at(int(stages), "pass_overhead_ms")

    def pass_overheads_ms(self, stages: int) -> PassOverheads:
        """Each role's fixed cost of a pass at `stages` stages (`PassOverheads`). A control plane
        measured before the roles were told apart gives stage 1's figure to every stage, all of it
        before the send (what the engines priced then)."""
        first = self.pass_overhead_ms(stages)
        at = self._control_plane_at
        return PassOverheads(first=first, first_before_send=min(at(stages, "send_offset_ms", first), first),
                             middle=at(stages, "middle_pass_overhead_ms", first),
                             last=at(stages, "last_pass_overhead_ms", first))

    def hop_jitter_ms(self, stages: int) -> float:
        """This host's spread of a message's transit at `stages` stages (ms, robust; 0 without a
        measurement): the control plane's share of the restart race's timing noise."""
        return self._control_plane_at(int(stages), "hop_jitter_ms")

    def transit_ms(self, stages: int) -> float:
        """A message's transit between stage processes at `stages` stages (ms; 0 without a measurement).
        The pipeline's hop is at least this (`sim/schemes/ppsd/costs.py`)."""
        return self._control_plane_at(int(stages), "transit_ms")

    # --- acceptance -----------------------------------------------------------------------
    @property
    def has_acceptance(self) -> bool:
        return bool(self.meta.get("acceptance")) and (self.path / self.meta["acceptance"]["file"]).exists()

    @property
    def acceptance(self):
        """pandas DataFrame with ACCEPTANCE_COLUMNS (loaded on first use)."""
        if self._acceptance is None:
            if not self.has_acceptance:
                raise UserError(f"profile {self.path} has no acceptance data",
                                "re-run `ppsd profile` without --skip-acceptance, or use --acceptance bernoulli --alpha A")
            self._acceptance = read_acceptance(self.path / self.meta["acceptance"]["file"])
        return self._acceptance

    def categories(self) -> list[str]:
        return sorted(self.acceptance["category"].unique().tolist())

    def heads(self) -> list[str]:
        return sorted(self.acceptance["head"].unique().tolist())

    def alpha_by_exit(self, category: str | None = None, head: str = SHARED_HEAD) -> dict[int, float]:
        df = self.acceptance
        df = df[df["head"] == head]
        if category is not None:
            df = df[df["category"] == category]
        return {int(k): float(v) for k, v in df.groupby("exit_layer")["match"].mean().items()}

    # --- acceptance under sampling (temperature > 0) ------------------------------------------
    @property
    def sampled_meta(self) -> dict:
        """`acceptance.sampled` (beta along sampled trajectories), or {} when the profile has none."""
        return (self.meta.get("acceptance") or {}).get("sampled") or {}

    def beta_temperatures(self) -> list[float]:
        """The temperatures > 0 at which this profile holds beta: its sampled ones; without them, the
        legacy beta along the greedy trajectory at `acceptance.temperature` (when > 0)."""
        if self.sampled_meta:
            return sorted(float(t) for t in self.sampled_meta["temperatures"])
        t = float((self.meta.get("acceptance") or {}).get("temperature") or 0.0)
        return [t] if t > 0 and self.has_acceptance else []

    def temperatures(self) -> list[float]:
        """Every temperature a prediction can be made at from this profile: 0 (greedy: the match
        traces) and `beta_temperatures()`; [] without acceptance data."""
        return [0.0, *self.beta_temperatures()] if self.has_acceptance else []

    @property
    def beta_trajectory(self) -> str:
        """Where the beta at T > 0 was measured: "sampled" (schema 2) or "greedy" (legacy)."""
        return "sampled" if self.sampled_meta else "greedy"

    def match_temperature(self, temperature: float) -> float:
        """The recorded temperature equal to `temperature` (within TEMPERATURE_TOL); UserError (one
        line) naming the temperatures the profile has otherwise. No interpolation: beta at one T
        says nothing exact about beta at another."""
        t = float(temperature)
        if not math.isfinite(t) or t < 0:
            raise UserError(f"temperature {temperature} is not a number >= 0", "give a temperature >= 0 (0 = greedy)")
        have = self.temperatures()
        for h in have:
            if abs(h - t) <= TEMPERATURE_TOL:
                return h
        listed = ", ".join("0 (greedy)" if h == 0 else f"{h:g}" for h in have) or "none (no acceptance data)"
        raise UserError(f"profile {self.path} holds acceptance at temperature(s) {listed}, not at {t:g}",
                        f"use one of those, or re-profile with `ppsd profile --temperatures {t:g}` "
                        "(beta along sampled trajectories at that temperature)")

    @property
    def sampled_acceptance(self):
        """DataFrame with SAMPLED_COLUMNS (loaded on first use); UserError without one."""
        if self._sampled is None:
            if not self.sampled_meta:
                raise UserError(f"profile {self.path} has no beta along sampled trajectories",
                                "re-profile with `ppsd profile --temperatures 0.7,1.0`")
            self._sampled = read_sampled(self.path / self.sampled_meta.get("file", SAMPLED_FILE))
        return self._sampled

    def beta_rows(self, temperature: float, head: str = SHARED_HEAD):
        """The acceptance rows that price sampled decoding at `temperature` (> 0): columns head,
        prompt_id, category, exit_layer, position, beta (+ match for the legacy rows). From the
        sampled table when the profile has one, else the legacy greedy-trajectory beta; UserError
        for a temperature the profile does not hold or a head it has no sampled rows for."""
        t = self.match_temperature(temperature)
        if t == 0:
            raise ValueError("beta_rows is for temperatures > 0; greedy decoding uses the match traces")
        if not self.sampled_meta:
            df = self.acceptance
            return df[df["head"] == head]
        key = ("beta_rows", t, head)
        if key in self._views:
            return self._views[key]
        df = self.sampled_acceptance
        df = df[(df["head"] == head) & (np.abs(df["temperature"].to_numpy(dtype=float) - t) <= TEMPERATURE_TOL)]
        if df.empty:
            heads = sorted(self.sampled_acceptance["head"].unique().tolist())
            raise UserError(f"profile {self.path} has no sampled beta for exit head {head!r} at T = {t:g}",
                            f"use exit head {' or '.join(heads)}, or greedy decoding (temperature 0)")
        if "trajectory" in df.columns and df["trajectory"].nunique() > 1:
            # several sampled continuations of each prompt: a position's acceptance probability is the
            # mean over them (one trajectory alone moves a plan's acceptance by up to 0.08 by its seed)
            keys = ["head", "prompt_id", "category", "temperature", "exit_layer", "position"]
            df = df.groupby(keys, sort=False, as_index=False)["beta"].mean()
        self._views[key] = df
        return df

    def beta_by_exit(self, temperature: float, category: str | None = None, head: str = SHARED_HEAD) -> dict[int, float]:
        """{exit layer: mean beta} at a temperature the profile holds (see `beta_rows`)."""
        df = self.beta_rows(temperature, head)
        if category is not None:
            df = df[df["category"] == category]
        return {int(k): float(v) for k, v in df.groupby("exit_layer")["beta"].mean().items()}

    def generations(self) -> list[dict]:
        acc = self.meta.get("acceptance") or {}
        path = self.path / acc.get("generations_file", GENERATIONS_FILE)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_acceptance(path: Path):
    import pandas as pd

    try:
        # ids are names, not numbers: Spec-Bench ids would otherwise come back as ints
        df = pd.read_csv(path, dtype={"prompt_id": str, "category": str, "head": str})
    except Exception as exc:  # noqa: BLE001 - any parse failure is the same user problem
        raise _bad(path.parent, f"cannot read {path.name} ({exc})") from None
    if "head" not in df.columns:
        df.insert(0, "head", SHARED_HEAD)
    missing = [c for c in ACCEPTANCE_COLUMNS if c not in df.columns]
    if missing:
        raise _bad(path.parent, f"{path.name} lacks columns {missing}")
    return df


def read_sampled(path: Path):
    """The sampled-trajectory beta table (SAMPLED_COLUMNS)."""
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype={"prompt_id": str, "category": str, "head": str})
    except Exception as exc:  # noqa: BLE001 - any parse failure is the same user problem
        raise _bad(path.parent, f"cannot read {path.name} ({exc})") from None
    missing = [c for c in SAMPLED_COLUMNS if c not in df.columns]
    if missing:
        raise _bad(path.parent, f"{path.name} lacks columns {missing}")
    if "trajectory" not in df.columns:
        df["trajectory"] = 0
    return df


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile folder (or its profile.json); raise UserError on any problem."""
    path = Path(path)
    if path.is_file() and path.name == PROFILE_FILE:
        path = path.parent
    file = path / PROFILE_FILE
    if not path.exists():
        raise UserError(f"profile folder {path} does not exist", "give a folder written by `ppsd profile --out DIR`")
    if not file.exists():
        raise UserError(f"{path} is not a profile folder (no {PROFILE_FILE})",
                        "give a folder written by `ppsd profile --out DIR`")
    try:
        meta = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _bad(path, f"{PROFILE_FILE} is not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(meta, dict):
        raise _bad(path, f"{PROFILE_FILE} is not a JSON object")
    version = meta.get("schema_version")
    if version is None:
        raise UserError(f"profile {path} has no schema_version",
                        f"re-create it with this ppsd's `ppsd profile` (schema {SCHEMA_VERSION})")
    if version not in READABLE_VERSIONS:
        raise UserError(f"profile {path} has schema_version {version!r}, this ppsd reads "
                        f"{' or '.join(map(str, READABLE_VERSIONS))}",
                        "re-create it with this ppsd's `ppsd profile`")
    try:
        model = meta["model"]
        num_layers = int(model["num_layers"])
        lat = meta["latency"]
        n_values = np.asarray(lat["n_values"], dtype=float)
        ctx_values = np.asarray(lat["context_values"], dtype=float)
        meta["hardware"]
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(path, f"missing or invalid field {exc}") from None
    if num_layers < 2:
        raise _bad(path, f"num_layers is {num_layers}; early exit needs at least 2 layers")
    for name, grid in (("n_values", n_values), ("context_values", ctx_values)):
        if grid.ndim != 1 or len(grid) == 0 or np.any(np.diff(grid) <= 0):
            raise _bad(path, f"latency.{name} must be a non-empty increasing list")
    shape3 = (num_layers, len(n_values), len(ctx_values))
    shape1 = (len(n_values),)
    for key in ("layers", "embedding", "head"):
        if key not in lat:
            raise _bad(path, f"latency.{key} is missing")
    profile = Profile(
        path=path,
        meta=meta,
        layers=StatTable.from_json(lat["layers"], shape3, path, "layers"),
        embedding=StatTable.from_json(lat["embedding"], shape1, path, "embedding"),
        head=StatTable.from_json(lat["head"], shape1, path, "head"),
        n_values=n_values,
        context_values=ctx_values,
    )
    _load_parallel_tables(lat, shape3, shape1, path)
    acc = meta.get("acceptance")
    if acc and not (path / acc.get("file", ACCEPTANCE_FILE)).exists():
        raise _bad(path, f"profile.json names {acc.get('file')} but the file is missing")
    sampled = (acc or {}).get("sampled")
    if sampled:
        temps = sampled.get("temperatures")
        if not isinstance(temps, list) or not temps or not all(
                isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in temps):
            raise _bad(path, "acceptance.sampled.temperatures must be a non-empty list of temperatures > 0")
        if not (path / sampled.get("file", SAMPLED_FILE)).exists():
            raise _bad(path, f"profile.json names {sampled.get('file', SAMPLED_FILE)} but the file is missing")
    return profile


def _load_parallel_tables(lat: dict, shape3, shape1, path: Path) -> None:
    """Validate `latency.parallel` and turn its tables into StatTables in place (the raw dict
    keeps them as objects, so `Profile.at_parallel` needs no second parse)."""
    par = lat.get("parallel")
    if not par:
        return
    if par.get("kind") not in ("threads", "tensor_parallel") or not isinstance(par.get("tables"), dict):
        raise _bad(path, "latency.parallel needs kind (threads | tensor_parallel) and tables")
    parsed = {}
    for units, t in par["tables"].items():
        if not str(units).isdigit() or int(units) < 1:
            raise _bad(path, f"latency.parallel.tables has a bad budget {units!r}")
        parsed[str(int(units))] = {
            "layers": StatTable.from_json(t["layers"], shape3, path, f"parallel.{units}.layers"),
            "embedding": StatTable.from_json(t["embedding"], shape1, path, f"parallel.{units}.embedding"),
            "head": StatTable.from_json(t["head"], shape1, path, f"parallel.{units}.head"),
            "whole_step_ms": t.get("whole_step_ms"),
            "speedup_vs_base": t.get("speedup_vs_base"),
            "speedup_cv": t.get("speedup_cv"),
        }
    lat["parallel"] = {**par, "tables": parsed}


def save_profile(out_dir: str | Path, meta: dict, acceptance=None, generations: list[dict] | None = None,
                 sampled=None) -> Path:
    """Write a profile folder's files atomically (each file via temp + rename). `meta` must follow
    the schema above; `acceptance` is a DataFrame with ACCEPTANCE_COLUMNS; `sampled` one with
    SAMPLED_COLUMNS (beta along sampled trajectories; meta's `acceptance.sampled` gets its file and
    temperatures)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(meta)
    meta["schema_version"] = SCHEMA_VERSION
    if acceptance is not None:
        import io
        import gzip

        df = acceptance[ACCEPTANCE_COLUMNS]
        buf = io.StringIO()
        df.to_csv(buf, index=False, float_format="%.4g")
        data = gzip.compress(buf.getvalue().encode(), mtime=0)
        from ppsd.paths import atomic_write_bytes

        atomic_write_bytes(out / ACCEPTANCE_FILE, data)
        meta.setdefault("acceptance", {})
        meta["acceptance"] = {**(meta["acceptance"] or {}), "file": ACCEPTANCE_FILE}
    if sampled is not None:
        import gzip
        import io

        from ppsd.paths import atomic_write_bytes

        buf = io.StringIO()
        columns = SAMPLED_COLUMNS + [c for c in SAMPLED_OPTIONAL if c in sampled.columns]
        # beta to SAMPLED_BETA_DECIMALS: 44 prompts x 3 trajectories x 2 temperatures at 4 significant
        # digits made a 2.5 MB file; 3 decimals move any exit's mean beta by < 3e-5
        sampled = sampled.assign(beta=sampled["beta"].astype(float).round(SAMPLED_BETA_DECIMALS))
        sampled[columns].to_csv(buf, index=False, float_format="%.6g")
        atomic_write_bytes(out / SAMPLED_FILE, gzip.compress(buf.getvalue().encode(), mtime=0))
        acc = dict(meta.get("acceptance") or {})
        temps = sorted({round(float(t), 6) for t in sampled["temperature"].unique()})
        acc["sampled"] = {**(acc.get("sampled") or {}), "file": SAMPLED_FILE, "temperatures": temps}
        meta["acceptance"] = acc
    if generations is not None:
        atomic_write_text(out / GENERATIONS_FILE, "".join(json.dumps(g) + "\n" for g in generations))
        meta["acceptance"] = {**(meta.get("acceptance") or {}), "generations_file": GENERATIONS_FILE}
    atomic_write_json(out / PROFILE_FILE, _jsonable(meta))
    return out


def _jsonable(obj):
    if isinstance(obj, StatTable):
        return obj.to_json()
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
