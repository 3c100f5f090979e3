"""What a pass of B sequences costs, from a profile: its batch-1 tables (`CostModel`) times the
measured ratio of a pass of B to a pass of one (`Profile.batch`, paired round by round), so that the
batch-1 prices are the ones every other prediction uses (docs/model.md, "Batched")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED, TRAINED
from ppsd.statistics import expected_max
from sim.intervals.spread import step_cv
from sim.model.cost_model import corun_factors, cost_model, per_profile


def check_batch(profile, batch: int) -> None:
    """UserError unless the profile's batch tables hold `batch` (between two measured sizes is fine)."""
    tables = profile.batch
    if int(batch) < 1:
        raise UserError(f"batch size {batch} must be at least 1", "give --batch 1 or more")
    if batch == 1:
        return
    if not tables.measured:
        raise UserError(f"profile {profile.path} answers for one sequence at a time (no latency.batch)",
                        f"measure batches into it: ppsd profile add-batch {profile.path}")
    if not tables.holds(batch):
        raise UserError(f"batch size {batch} is outside the sizes profile {profile.path} measured "
                        f"({', '.join(map(str, tables.sizes))}); it is not extrapolated",
                        f"ppsd profile add-batch {profile.path} --batch-sizes "
                        f"{','.join(map(str, sorted(set(tables.sizes) | {int(batch)})))} --force")


WIDTH_GRID = 8  # slots: a round is priced at the cache's width rounded to this (a pass moves < 0.5% over it)


def grid_width(width: float) -> float:
    """The cache width a round is priced at (`WIDTH_GRID`); callers that memoise prices key them by it."""
    return float(WIDTH_GRID * round(float(width) / WIDTH_GRID))


@dataclass
class BatchCosts:
    """Prices (ms) of the passes of a batch of `batch` sequences at one context (the cache's width, rounded to
    `WIDTH_GRID` slots so that a sweep's replays share their priced rounds)."""

    profile: object
    head_name: str = SHARED  # the exit head that drafts

    def __post_init__(self):
        if self.head_name not in (SHARED, TRAINED):
            raise UserError(f"exit head {self.head_name} is not timed at batch > 1 (only the shared LM head is)",
                            "use the shared or trained head for batched plans")
        self.cm = cost_model(self.profile, self.head_name)
        self.tables = self.profile.batch
        self._memo: dict = {}  # (kind, batch, width, exit layer, γ) -> ms: a replay asks the same rounds often
        self._ratios: dict = {}  # (batch, n) -> the layers' batch ratio at each measured context
        self.corun = corun_factors(self.profile, 2)[2]  # each of two processes' slowdown while both compute
        self.pass_cv = step_cv(self.profile)  # a pass's relative spread, which a lock-step tick waits out

    def layers(self, batch: float, context, lo: int, hi: int, n: int):
        """Σ layers [lo, hi) for n tokens a sequence, `batch` sequences: up to the batch tables' widest context
        the batch-1 price times the measured batch ratio; past it, each sequence's attention over the further
        columns as one sequence's alone (the batch-1 tables' increment, times `batch`): the weights are read
        once for the batch, each sequence's cache by itself. `context` a number (-> float) or an array of cache
        widths (-> array, elementwise the same arithmetic)."""
        ctx = np.asarray(context, dtype=float)
        flat = np.atleast_1d(ctx)
        inside = np.minimum(flat, self.tables.context_values[-1])
        at_inside = self.cm.layers(inside, lo, hi, n)
        out = at_inside * np.interp(inside, self.tables.context_values, self._ratio(batch, n))
        # more columns never cost less: a noisy table that dips past its widest batch width adds nothing
        out = out + batch * np.maximum(self.cm.layers(flat, lo, hi, n) - at_inside, 0.0)
        return float(out[0]) if ctx.ndim == 0 else out

    def _ratio(self, batch: float, n: float) -> np.ndarray:
        """The batch ratio of a layer pass at each context the batch tables measured (between them linear:
        `BatchTables.layers_ratio`)."""
        key = (batch, n)
        got = self._ratios.get(key)
        if got is None:
            got = self._ratios[key] = np.array([self.tables.layers_ratio(batch, n, c)
                                                for c in self.tables.context_values], dtype=float)
        return got

    def head(self, batch: float, n: int) -> float:
        if batch == 1:
            return self.cm.head(n)
        return self.cm.head(n) * self.tables.head_ms(batch, n) / self.tables.head_ms(1, n)

    def embed(self, batch: float, n: int) -> float:
        if batch == 1:
            return self.cm.embed(n)
        return self.cm.embed(n) * self.tables.embedding_ms(batch, n) / max(self.tables.embedding_ms(1, n), 1e-9)

    def exit_head(self, batch: float) -> float:
        """A draft's exit head for every sequence: the batch-1 price scaled as the LM head scales."""
        if batch == 1:
            return self.cm.exit_head()
        return self.cm.exit_head() * self.tables.head_ms(batch, 1) / self.tables.head_ms(1, 1)

    # --- the passes of a round, over one width or an array of widths (`grid_width`'s) ---------------
    def ar_steps(self, batch: float, widths):
        """One token for every sequence: embedding, every layer, the LM head."""
        return self.embed(batch, 1) + self.layers(batch, widths, 0, self.cm.num_layers, 1) + self.head(batch, 1)

    def eesd_rounds(self, batch: float, widths, exit_layer: int, draft_len: int):
        """γ drafts and a verification for every sequence: γ+1 passes of layers [0, E) one position
        each, γ exit heads, then layers [E, N) and the LM head on γ+1 positions each."""
        g, n_layers = int(draft_len), self.cm.num_layers
        early = self.embed(batch, 1) + self.layers(batch, widths, 0, exit_layer, 1)
        verify = self.layers(batch, widths, exit_layer, n_layers, g + 1) + self.head(batch, g + 1)
        return (g + 1) * early + g * self.exit_head(batch) + verify

    def ppsd_stages_at(self, batch: float, widths, exit_layer: int):
        """A tick of batched PPSD, each stage alone: stage 1 feeds one token a sequence through the embedding,
        layers [0, E) and the exit head; stage 2 one layer-E state a sequence through layers [E, N) and the
        LM head."""
        first = self.embed(batch, 1) + self.layers(batch, widths, 0, exit_layer, 1) + self.exit_head(batch)
        second = self.layers(batch, widths, exit_layer, self.cm.num_layers, 1) + self.head(batch, 1)
        return first, second

    def ppsd_ticks(self, batch: float, widths, exit_layer: int, both: bool = True, second_batch: float | None = None):
        """A tick: both stages slowed by running at once (the profile's two-process co-run slowdown), and the
        tick ends when the slower one does: the expected maximum of the two, each pass spread as a decode
        step is (`step_cv`), which costs most when the stages are balanced. `both` False: stage 1 alone (the
        first tick, before stage 2 has work). `second_batch`: stage 2 passes fewer sequences than stage 1
        (under continuous batching a sequence that just joined has no stage-2 work in its first tick)."""
        first, second = self.ppsd_stages_at(batch, widths, exit_layer)
        if not both:
            return first
        if second_batch is not None and second_batch != batch:
            second = self.ppsd_stages_at(second_batch, widths, exit_layer)[1]
        if np.ndim(first) == 0:
            return self._lock_step(first, second)
        return np.array([self._lock_step(a, b) for a, b in zip(first, second)])

    def _lock_step(self, first: float, second: float) -> float:
        return expected_max(first * self.corun, second * self.corun, self.pass_cv)

    # --- one round at one width, memoised (what the replays ask) --------------------------------------
    def ar_step(self, batch: float, context: float) -> float:
        context = grid_width(context)
        key = ("ar", batch, context)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self.ar_steps(batch, context)
        return got

    @property
    def prices_both_cores(self) -> bool:
        """Whether the profile timed AR's pass on two threads (`ar_step_both_cores`)."""
        return self.tables.two_threads is not None

    def ar_step_both_cores(self, batch: float, context: float) -> float:
        """AR's step on two threads, the cores a two-stage PPSD plan uses: the one-thread step times the
        measured two-thread ratio (and never slower than one thread: a user would run the faster)."""
        ratio = self.tables.two_threads_ratio(batch, grid_width(context))
        if ratio is None:
            raise ValueError("the profile did not time passes on two threads")
        return self.ar_step(batch, context) * min(ratio, 1.0)

    def eesd_round(self, batch: float, context: float, exit_layer: int, draft_len: int) -> float:
        context = grid_width(context)
        key = ("eesd", batch, context, exit_layer, draft_len)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self.eesd_rounds(batch, context, exit_layer, draft_len)
        return got

    def ppsd_stages(self, batch: float, context: float, exit_layer: int) -> tuple[float, float]:
        context = grid_width(context)
        key = ("ppsd", batch, context, exit_layer)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self.ppsd_stages_at(batch, context, exit_layer)
        return got

    def ppsd_tick(self, batch: float, context: float, exit_layer: int, both: bool = True,
                  second_batch: float | None = None) -> float:
        first, second = self.ppsd_stages(batch, context, exit_layer)
        if not both:
            return first
        if second_batch is not None and second_batch != batch:
            second = self.ppsd_stages(second_batch, context, exit_layer)[1]
        return self._lock_step(first, second)


_COSTS: dict = {}


def batch_costs(profile, head: str = SHARED) -> BatchCosts:
    """One BatchCosts per (profile object, exit head), so a sweep's replays share their priced rounds."""
    return per_profile(_COSTS, BatchCosts, profile, head, limit=16)
