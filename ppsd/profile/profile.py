"""A loaded profile: the timings, the machine facts and the acceptance tables the simulator and the
dashboard read (torch-free). The optional blocks the simulator prices come as typed parts
(`ppsd/profile/parts.py`), always present, empty when the profile never measured them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ppsd import exit_heads
from ppsd.errors import UserError
from ppsd.profile.files import (GENERATIONS_FILE, SHARED_HEAD, TEMPERATURE_TOL, read_acceptance,
                                read_sampled)
import ppsd.profile.schema as schema
from ppsd.profile.parts import BatchTables, ControlPlane, DrawCosts, PassOverheads
from ppsd.profile.schema import ProfileDoc
from ppsd.profile.tables import StatTable
from ppsd.profile.tables import interp as _interp
from ppsd.statistics import mad_log_sd


@dataclass
class Profile:
    """A loaded, validated profile folder. `meta` is profile.json as a dict (upgraded to this schema
    version), `doc` the same validated and typed (`schema.ProfileDoc`). The accessors read `doc`, except
    those of the co-run, pipeline and whole-step blocks: callers adjust these in `meta` for a what-if
    (`retimed`, tests of the stage costs and the noise band), so they read `meta`, as validated on load."""

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
    doc: ProfileDoc | None = field(default=None, repr=False)  # None: validated from `meta` here

    def __post_init__(self):
        if self.doc is None:
            try:
                self.doc = schema.validate_meta(schema.upgrade(self.meta))
            except schema.FieldError as err:
                raise UserError(f"profile {self.path} is malformed: {err}", schema.fix_for(err)) from None

    # --- metadata -------------------------------------------------------------------------
    @property
    def model_id(self) -> str:
        return self.doc.model.id

    @property
    def num_layers(self) -> int:
        return int(self.doc.model.num_layers)

    @property
    def kind(self) -> str:
        return self.doc.kind

    @property
    def device_name(self) -> str:
        hw = self.doc.hardware
        return hw.device_name if hw.device_name is not None else hw.device if hw.device is not None else "?"

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
        heads = self.doc.latency.exit_heads or {}
        if head not in heads:
            raise UserError(f"profile {self.path} has no exit head named {head!r}",
                            f"use one of: {', '.join([SHARED_HEAD, *heads])}")
        return _interp(n, self.n_values, np.asarray(heads[head].median_ms, dtype=float))

    def head_vocab(self, head: str = SHARED_HEAD) -> int | None:
        """How many tokens an exit head's distribution covers: a reduced-vocabulary head its own
        size, the shared and trained heads the model's vocabulary (None when the profile says not)."""
        size = exit_heads.vocab_size(head)
        if size is not None:
            return int(size)
        v = self.doc.model.vocab_size
        return int(v) if v else None

    @property
    def sampling(self) -> dict:
        """The cost of drawing one token at T > 0 (`latency.sampling`), or {} when not measured."""
        return self.latency.get("sampling") or {}

    @cached_property
    def draws(self) -> DrawCosts:
        """The cost of a draw at T > 0 (`latency.sampling`), typed; empty when not measured."""
        return DrawCosts.from_block(self.sampling)

    @cached_property
    def batch(self) -> BatchTables:
        """Passes of B sequences against passes of one (`latency.batch`); batch 1 only when not measured."""
        return BatchTables.from_block(self.latency.get("batch"))

    def sample_ms(self, vocab: int | None) -> float | None:
        """One token drawn from `vocab` logits at T > 0 (softmax + seeded multinomial, ms), linear in
        the vocabulary between measured sizes and proportional beyond them; None when not measured."""
        return self.draws.sample_ms(vocab)

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
        hw = self.doc.hardware
        if hw.device != "cpu":
            return None
        cores = int(hw.cores or 0)
        return cores if cores > 0 else None

    def corun_slowdown(self, processes: int) -> float:
        """Factor by which each of `processes` concurrently working stages slows down on this
        machine (1.0 alone). Past the measured range the last factor holds. With a pipeline probe,
        its two-stage figure (layers and heads, as stages run them; the runtime probe's, read from
        the runtime's own pipeline, where the profile has one) sets the 2-process point and the
        co-run table only the shape beyond it."""
        if processes <= 1:
            return 1.0
        corun = self.latency.get("corun") or {}
        procs = corun.get("processes") or [1]
        slow = corun.get("slowdown") or [1.0]
        table = lambda p: float(_interp(p, np.asarray(procs, float), np.asarray(slow, float)))  # noqa: E731
        now = float(corun.get("now_over_profile", 1.0))  # `retimed` with a co-run measured again
        piped = (self.pipeline.get("runtime") or {}).get("slowdown") or self.pipeline.get("slowdown")
        if piped is None:
            return now * table(processes)
        return now * float(piped) * table(processes) / table(2)

    def pipeline_slowdown_cv(self) -> float | None:
        """How much the co-run slowdown of a pipeline's stages moved over the profile's runtime-probe
        rounds (their log spread by the median absolute deviation, `ppsd.statistics.mad_log_sd`): what
        a PPSD plan's price may be off by in another minute of the same sitting. None without the
        runtime probe."""
        rounds = (self.pipeline.get("runtime") or {}).get("rounds")
        if not rounds:
            return None
        return mad_log_sd([float(np.mean(r["slowdown_per_stage"])) for r in rounds])

    def corun_stage_bias(self, stages: int) -> list[float]:
        """How the co-run slowdown splits between a pipeline's roles: each stage's multiplier of
        `corun_slowdown` while it co-runs, from the runtime probe's per-stage slowdowns (each round's
        stage over the round's mean, median over rounds): stage 1 its own, the last stage the
        verifier's, stages between 1. All 1 without the runtime probe."""
        rounds = (self.pipeline.get("runtime") or {}).get("rounds") or []
        per = [r["slowdown_per_stage"] for r in rounds if len(r.get("slowdown_per_stage") or []) == 2]
        out = [1.0] * max(int(stages), 1)
        if not per or stages < 2:
            return out
        out[0] = float(np.median([s[0] / np.mean(s) for s in per]))
        out[-1] = float(np.median([s[1] / np.mean(s) for s in per]))
        return out

    def waiting_last_stage_slowdown(self) -> float | None:
        """The last stage's pass in a two-stage pipeline whose last stage waits for every draft, over the
        same pass priced from the tables (the runtime probe's `waiting` cut): it sleeps on each hidden
        state, then runs beside stage 1, and runs slower than its share of a balanced pipeline's co-run
        slowdown says; a `retimed` profile scales it as every co-run figure. None without that measurement
        (profiles before it price as they did)."""
        waiting = (self.pipeline.get("runtime") or {}).get("waiting") or {}
        value = waiting.get("last_stage_slowdown")
        if not value:
            return None
        return float(value) * float((self.latency.get("corun") or {}).get("now_over_profile", 1.0))

    def lockstep_jitter_cv(self) -> float:
        """Pass-to-pass relative jitter of a stage in the runtime's own pipeline (the runtime probe's
        `pass_jitter_cv`): with its tokens in flight capped, each period of a PPSD pipeline waits for
        the slowest of its co-running passes, whose expected maximum exceeds the slowest mean by this
        jitter's share (`sim/schemes/ppsd/stage_costs.lockstep_factor`). 0 without a measurement: the
        lock step is then priced at the slowest mean."""
        return float((self.pipeline.get("runtime") or {}).get("pass_jitter_cv") or 0.0)


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
        pre = self.doc.latency.prefill
        L = float(prompt_len)
        if pre:
            return _interp(L, np.asarray(pre.lengths, float), np.asarray(pre.median_ms, float))
        layers = sum(self.layer_ms(layer, L) for layer in range(self.num_layers))
        return float(self.embed_ms(L) + layers + self.head_ms(1))

    @property
    def prefill_source(self) -> str:
        return "measured" if self.doc.latency.prefill else "extrapolated from the tables"

    # --- the same tables on more of the machine (same-budget baselines) ------------------------
    @property
    def parallel_kind(self) -> str | None:
        """"threads" (CPU: measured at more torch threads), "tensor_parallel" (GPUs: estimated), or
        None when the profile holds the main tables only."""
        par = self.doc.latency.parallel
        return par.kind if par else None

    @property
    def parallel_base(self) -> int:
        """The units (threads or GPUs) the main tables were measured with."""
        par, timing = self.doc.latency.parallel, self.doc.timing
        return int((par.base if par else None) or (timing.threads if timing else None) or 1)

    def parallel_units(self) -> list[int]:
        """Every budget the profile has tables for, the main tables' first."""
        par = self.doc.latency.parallel
        return sorted({self.parallel_base, *(int(u) for u in (par.tables if par else {}))})

    def at_parallel(self, units: int) -> Profile:
        """This profile with the latency tables measured (or estimated) at `units` threads or GPUs;
        hop, co-run and acceptance stay. UserError when the profile has no such tables."""
        units = int(units)
        if units == self.parallel_base:
            return self
        view = self._views.get(units)
        if view is None:
            tables = self._parallel_tables(units)
            if tables is None:
                have = ", ".join(map(str, self.parallel_units()))
                raise UserError(f"profile {self.path} has no latency tables at {units} "
                                f"{'GPUs' if self.parallel_kind == 'tensor_parallel' else 'threads'} (it has {have})",
                                "re-profile with `ppsd profile --thread-counts 1,...` (CPU) or give a budget it has")
            factor = self.whole_step_consistency(units)
            view = Profile(path=self.path, meta=self.meta, doc=self.doc, layers=tables["layers"].scaled(factor),
                           embedding=tables["embedding"].scaled(factor), head=tables["head"].scaled(factor),
                           n_values=self.n_values, context_values=self.context_values, _acceptance=self._acceptance)
            self._views[units] = view
        return view

    def _parallel_tables(self, units) -> dict | None:
        """`latency.parallel.tables.<units>` with its tables as StatTables (read once); None when absent."""
        key = ("parallel", str(int(units)))
        if key not in self._views:
            par = self.doc.latency.parallel
            t = par.tables.get(key[1]) if par else None
            self._views[key] = None if t is None else {
                "layers": StatTable.from_block(t.layers), "embedding": StatTable.from_block(t.embedding),
                "head": StatTable.from_block(t.head), "whole_step_ms": t.whole_step_ms,
                "speedup_vs_base": t.speedup_vs_base, "speedup_cv": t.speedup_cv}
        return self._views[key]

    def retimed(self, scale) -> Profile:
        """This profile with its pieces priced as timed now (`profiler.piece_times.PieceScale`: each
        layer, the LM head, the embedding and each named exit head scaled by now / profiled, at every
        n, context and thread count alike; with `scale.corun`, every co-run slowdown of 2 or more
        processes scaled by it); acceptance, hop and control plane stay.
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
                old = self._parallel_tables(u)
                new = pieces(old)
                tables[u] = {**t, **{k: {s: getattr(v, s).tolist() for s in ("median_ms", "p10_ms", "p90_ms")}
                                     for k, v in new.items()}}
                if t.get("whole_step_ms"):
                    tables[u]["whole_step_ms"] = whole(float(t["whole_step_ms"]), old, new)
            lat["parallel"] = {**par, "tables": tables}
        if scale.corun != 1.0:  # in memory only, never written: `corun_slowdown` multiplies k >= 2 by it
            corun = dict(lat.get("corun") or {"processes": [1], "slowdown": [1.0]})  # absent: no slowdown
            corun["now_over_profile"] = float(corun.get("now_over_profile", 1.0)) * scale.corun
            lat["corun"] = corun
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
        beside them (`latency.whole_step.calibration`); 1.0 for profiles without it (estimated ones
        among them), whose tables are the pieces as timed."""
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
        the base and for tables without round-by-round speedups (`speedup_cv`)."""
        if int(units) == self.parallel_base:
            return 0.0
        tables = self._parallel_tables(units) or {}
        return float(tables.get("speedup_cv") or 0.0)

    def whole_step_consistency(self, units: int) -> float:
        """How much the tables measured at `units` threads are scaled so that, against the main
        tables, they price a whole decode step as the profiler measured it at each thread count:
        (whole / parts at `units`) / (whole / parts on the main tables). 1.0 when a whole step is
        missing at either count (estimated tables are consistent by construction).

        Why: each piece is timed alone in a hot loop, and that distorts it differently at each
        thread count (a layer repeated in place keeps more of its weights in cache at 1 thread than
        at 2), so summed pieces misprice AR's thread speedup that whole steps measure. The main tables
        keep their own pricing (the pipeline's slowdown is measured against them), so only the ratio
        is carried over."""
        tables = self._parallel_tables(units)
        whole_main = (self.latency.get("whole_step") or {}).get("median_ms")
        if units == self.parallel_base or tables is None or not tables.get("whole_step_ms") or not whole_main:
            return 1.0
        if tables.get("speedup_vs_base"):
            # Paired rounds: AR at `units` threads costs the main tables' step over the round-by-round
            # speedup, a ratio of neighbours in time (the ratio of the two series' medians would carry
            # the machine's drift between samples).
            parts = self._parts_ms(tables["layers"], tables["embedding"], tables["head"])
            return float(self._parts_ms(self.layers, self.embedding, self.head)
                         / float(tables["speedup_vs_base"]) / parts) if parts > 0 else 1.0
        parts_main = self._parts_ms(self.layers, self.embedding, self.head)
        parts = self._parts_ms(tables["layers"], tables["embedding"], tables["head"])
        if parts_main <= 0 or parts <= 0:  # zero-time tables (an emulated profile) have nothing to carry over
            return 1.0
        return float((float(tables["whole_step_ms"]) / parts) / (whole_main / parts_main))

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

    @cached_property
    def overheads(self) -> ControlPlane:
        """The control plane (`latency.control_plane`), typed: per-pass overheads by role, transit and
        its jitter at any stage count; every figure 0 without a measurement."""
        return ControlPlane.from_block(self.control_plane)

    def pass_overhead_ms(self, stages: int) -> float:
        """Fixed cost of one stage pass in a pipeline of `stages` stages (ms; 0 without a measurement;
        linear between measured stage counts, the ends held beyond)."""
        return self.overheads.pass_overhead_ms(stages)

    def pass_overheads_ms(self, stages: int) -> PassOverheads:
        """Each role's fixed cost of a pass at `stages` stages (`ControlPlane.pass_overheads_ms`)."""
        return self.overheads.pass_overheads_ms(stages)

    def hop_jitter_ms(self, stages: int) -> float:
        """This host's spread of a message's transit at `stages` stages (ms, robust; 0 without a measurement)."""
        return self.overheads.hop_jitter_ms(stages)

    def transit_ms(self, stages: int) -> float:
        """A message's transit between stage processes at `stages` stages (ms; 0 without a measurement).
        The pipeline's hop is at least this (`sim/schemes/ppsd/stage_costs.py`)."""
        return self.overheads.transit_ms(stages)

    # --- acceptance -----------------------------------------------------------------------
    @property
    def acceptance_dir(self) -> Path:
        """Where the acceptance files are: this folder, or the profile named by `acceptance.dir` (a view
        or a folder that prices another profile's prompts: `with_acceptance_from`)."""
        where = self.doc.acceptance.dir if self.doc.acceptance else None
        return self.path if not where else (self.path / where if not Path(where).is_absolute() else Path(where))

    @property
    def acceptance_source(self) -> str | None:
        """The profile whose prompts' acceptance this one prices with, when not its own (None: its own)."""
        return self.doc.acceptance.from_profile if self.doc.acceptance else None

    def with_acceptance_from(self, other: Profile) -> Profile:
        """This profile's latency with `other`'s acceptance (its traces, β and generations): a plan priced
        on this machine for the prompts `other` traced (`ppsd plan --acceptance-from DIR`, made with
        `ppsd profile --prompts FILE --skip-latency`). UserError for another model, for a profile without
        traces, or for exit heads `other` traced that this profile has no price for."""
        where = f"--acceptance-from {other.path}"
        if not other.has_acceptance:
            raise UserError(f"{where} has no acceptance traces",
                            "trace your prompts first: `ppsd profile --prompts FILE --skip-latency --out DIR`")
        if other.model_id != self.model_id or other.num_layers != self.num_layers:
            raise UserError(f"{where} traced {other.model_id} ({other.num_layers} layers), but {self.path} "
                            f"times {self.model_id} ({self.num_layers} layers)",
                            "trace your prompts on the model this profile times (`ppsd profile --model ...`)")
        priced = {SHARED_HEAD, *((self.latency.get("exit_heads") or {}).keys())}
        unpriced = sorted(set(other.heads()) - priced)
        if unpriced:
            raise UserError(f"{where} traced exit head(s) {', '.join(unpriced)} that {self.path} has no latency for",
                            f"trace with the heads this profile was made with, or profile them: `ppsd profile "
                            f"--heads HEADS --out DIR`")
        acc = {**other.meta["acceptance"], "dir": str(other.acceptance_dir.resolve()),
               "from_profile": str(other.path)}
        return Profile(path=self.path, meta={**self.meta, "acceptance": acc}, layers=self.layers,
                       embedding=self.embedding, head=self.head, n_values=self.n_values,
                       context_values=self.context_values)

    @property
    def has_acceptance(self) -> bool:
        return bool(self.meta.get("acceptance")) and (self.acceptance_dir / self.doc.acceptance.file).exists()

    @property
    def acceptance_drawn(self) -> bool:
        """True when the acceptance table was drawn from an α curve (a random-weight model, `python -m bench.gpu_check`)
        rather than traced from the model's own drafts: replaying it commits drafts the model would reject."""
        return bool((self.meta.get("acceptance") or {}).get("alpha_curve"))

    @property
    def acceptance(self):
        """pandas DataFrame with ACCEPTANCE_COLUMNS (loaded on first use)."""
        if self._acceptance is None:
            if not self.has_acceptance:
                raise UserError(f"profile {self.path} has no acceptance data",
                                "re-run `ppsd profile` without --skip-acceptance, or use --acceptance bernoulli --alpha A")
            file = self.acceptance_dir / self.doc.acceptance.file
            df = read_acceptance(file)
            self._checked(schema.check_acceptance, df, file.name, self.num_layers, self.doc.acceptance.heads)
            self._acceptance = df
        return self._acceptance

    def _checked(self, check, *args) -> None:
        """`check(*args)` (a table check of ppsd/profile/schema.py) as a one-line UserError."""
        try:
            check(*args)
        except schema.FieldError as err:
            raise UserError(f"profile {self.path} is malformed: {err}", schema.FIX) from None

    @cached_property
    def confident_heads(self) -> frozenset[str]:
        """The exit heads whose every acceptance trace row carries the draft's confidence (read once)."""
        if not self.has_acceptance or "confidence" not in self.acceptance.columns:
            return frozenset()
        known = self.acceptance.groupby("head")["confidence"].apply(lambda c: bool(c.notna().all()))
        return frozenset(str(h) for h, ok in known.items() if ok)

    def has_confidence(self, head: str = SHARED_HEAD, temperature: float = 0.0) -> bool:
        """True when the acceptance traces of `head` carry each draft's confidence (the top-1 probability
        of the exit head's distribution), which a confidence stop is priced from: the greedy traces, or
        at T > 0 the trajectories sampled at T."""
        if not temperature or temperature <= 0:
            return head in self.confident_heads
        if self.beta_trajectory != "sampled":
            return False
        key = ("confident", float(temperature), head)  # read once: every plan priced at T asks
        if key not in self._views:
            try:
                rows = self.beta_rows(temperature, head)
            except UserError:
                rows = None
            self._views[key] = rows is not None and "confidence" in rows.columns and bool(
                rows["confidence"].notna().all())
        return self._views[key]

    def require_confidence(self, head: str = SHARED_HEAD, temperature: float = 0.0) -> None:
        """UserError unless `has_confidence(head, temperature)`, with the command that records them."""
        if self.has_confidence(head, temperature):
            return
        if temperature and temperature > 0:
            raise UserError(f"profile {self.path} has no draft confidences along trajectories sampled at "
                            f"T = {temperature:g} (exit head {head!r}), so a confidence stop cannot be priced "
                            "there", "profile the sampled acceptance again with this version: `ppsd profile "
                            f"--skip-latency --temperatures {temperature:g} --prompts FILE --out DIR`, or decode greedy")
        raise UserError(f"profile {self.path} has no draft confidences for exit head {head!r}, so a "
                        "confidence stop cannot be priced from it",
                        "trace the prompts again with this version: `ppsd profile --skip-latency --prompts "
                        "FILE --out DIR` (with --heads H for trained heads), then --acceptance-from DIR")

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
        acc = self.doc.acceptance
        if self.sampled_meta:
            return sorted(float(t) for t in acc.sampled.temperatures)
        t = float((acc.temperature if acc else None) or 0.0)
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
            file = self.acceptance_dir / self.doc.acceptance.sampled.file
            df = read_sampled(file)
            self._checked(schema.check_sampled, df, file.name, self.num_layers, self.doc.acceptance.sampled.temperatures,
                          TEMPERATURE_TOL)
            self._sampled = df
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
            # (and its confidence the mean too: a stop reads it against τ, an approximation where the
            # trajectories part ways)
            keys = ["head", "prompt_id", "category", "temperature", "exit_layer", "position"]
            df = df.groupby(keys, sort=False, as_index=False)[[c for c in ("beta", "confidence")
                                                              if c in df.columns]].mean()
        self._views[key] = df
        return df

    def beta_by_exit(self, temperature: float, category: str | None = None, head: str = SHARED_HEAD) -> dict[int, float]:
        """{exit layer: mean beta} at a temperature the profile holds (see `beta_rows`)."""
        df = self.beta_rows(temperature, head)
        if category is not None:
            df = df[df["category"] == category]
        return {int(k): float(v) for k, v in df.groupby("exit_layer")["beta"].mean().items()}

    def generations(self) -> list[dict]:
        acc = self.doc.acceptance
        path = self.acceptance_dir / (acc.generations_file if acc else GENERATIONS_FILE)
        if not path.exists():
            return []
        key = ("generations", path)
        if key not in self._views:  # read and checked once; each caller gets its own list
            try:
                records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise UserError(f"profile {self.path} is malformed: {path.name} is not JSON lines "
                                f"({exc.__class__.__name__})", schema.FIX) from None
            self._checked(schema.check_generations, records, path.name)
            self._views[key] = records
        return [dict(g) for g in self._views[key]]
