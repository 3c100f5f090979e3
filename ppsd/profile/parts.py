"""The typed parts of a profile that the simulator prices beyond its latency tables. Each is always
there: a profile that never measured a block gets the empty part, whose figures are the documented
defaults (no per-pass overhead, no transit, draws unpriced), so readers need no fallbacks."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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


@dataclass(frozen=True)
class ControlPlane:
    """`latency.control_plane`: what a stage pass of a k-stage pipeline costs beyond its layers and
    heads, and a message's transit between stage processes, measured at some stage counts k (linear
    between them, the ends held beyond; 0 where nothing was measured)."""

    stages: dict[int, dict] = field(default_factory=dict)  # k -> {pass_overhead_ms, transit_ms, ...}
    method: str | None = None

    @classmethod
    def from_block(cls, block: dict | None) -> ControlPlane:
        block = block or {}
        return cls({int(k): dict(v) for k, v in (block.get("stages") or {}).items()}, block.get("method"))

    def at(self, stages: int, key: str, default: float = 0.0) -> float:
        """`key` at `stages` stages from the stage counts that measured it; `default` when none did."""
        table = {k: float(v[key]) for k, v in self.stages.items() if v.get(key) is not None}
        if not table:
            return default
        if stages in table:
            return table[stages]
        ks = sorted(table)
        return float(np.interp(float(stages), ks, [table[k] for k in ks]))  # ends held past the measured range

    def pass_overhead_ms(self, stages: int) -> float:
        """Stage 1's fixed cost of one pass in a pipeline of `stages` stages (ms)."""
        return self.at(int(stages), "pass_overhead_ms")

    def pass_overheads_ms(self, stages: int) -> PassOverheads:
        """Each role's fixed cost of a pass at `stages` stages. A control plane measured before the
        roles were told apart gives stage 1's figure to every stage, all of it before the send."""
        first = self.pass_overhead_ms(stages)
        return PassOverheads(first=first, first_before_send=min(self.at(stages, "send_offset_ms", first), first),
                             middle=self.at(stages, "middle_pass_overhead_ms", first),
                             last=self.at(stages, "last_pass_overhead_ms", first))

    def transit_ms(self, stages: int) -> float:
        """A message's transit between stage processes at `stages` stages (ms); a pipeline's hop is
        at least this (`sim/schemes/ppsd/stage_costs.py`)."""
        return self.at(int(stages), "transit_ms")

    def hop_jitter_ms(self, stages: int) -> float:
        """The transit's robust spread at `stages` stages (ms): the control plane's share of the
        restart race's timing noise."""
        return self.at(int(stages), "hop_jitter_ms")


@dataclass(frozen=True)
class DrawCosts:
    """`latency.sampling`: drawing one token at T > 0 from V logits (softmax + seeded multinomial),
    measured at some vocabulary sizes V. Empty: draws are not priced (`sample_ms` is None)."""

    vocab: tuple[float, ...] = ()
    median_ms: tuple[float, ...] = ()

    @classmethod
    def from_block(cls, block: dict | None) -> DrawCosts:
        block = block or {}
        sizes = [float(v) for v in block.get("vocab") or []]
        if not sizes:
            return cls()
        pairs = sorted(zip(sizes, (float(m) for m in block["median_ms"])))
        return cls(tuple(v for v, _ in pairs), tuple(m for _, m in pairs))

    @property
    def measured(self) -> bool:
        return bool(self.vocab)

    def sample_ms(self, vocab: int | None) -> float | None:
        """One draw from `vocab` logits (ms): linear in V between measured sizes, proportional beyond
        them; None when not measured or the vocabulary is unknown."""
        if not self.vocab or vocab is None:
            return None
        sizes, ms, v = np.asarray(self.vocab), np.asarray(self.median_ms), float(vocab)
        if v < sizes[0]:
            return float(ms[0] * v / sizes[0])
        if v > sizes[-1]:
            return float(ms[-1] * v / sizes[-1])
        return float(np.interp(v, sizes, ms))


@dataclass(frozen=True)
class BatchTables:
    """`latency.batch`: passes of B sequences against passes of one, at the batch sizes the profile
    measured. Empty: the profile answers for batch 1 only (`sizes == (1,)`)."""

    sizes: tuple[int, ...] = (1,)
    n_values: tuple[float, ...] = (1.0,)
    context_values: tuple[float, ...] = (0.0,)
    ratio: np.ndarray = field(default_factory=lambda: np.ones((1, 1, 1)))  # [B][n][c]
    head: np.ndarray = field(default_factory=lambda: np.zeros((1, 1)))  # [B][n] ms
    embedding: np.ndarray = field(default_factory=lambda: np.zeros((1, 1)))  # [B][n] ms
    two_threads: np.ndarray | None = None  # [B][c]: a whole decode pass on two threads over one (None: not timed)

    @classmethod
    def from_block(cls, block: dict | None) -> BatchTables:
        if not block or not block.get("batch_sizes"):
            return cls()
        two = block.get("two_threads_ratio")
        return cls(tuple(int(b) for b in block["batch_sizes"]), tuple(float(n) for n in block["n_values"]),
                   tuple(float(c) for c in block["context_values"]), np.asarray(block["layers_ratio"], dtype=float),
                   np.asarray(block["head_ms"], dtype=float), np.asarray(block["embedding_ms"], dtype=float),
                   None if two is None else np.asarray(two, dtype=float))

    @property
    def measured(self) -> bool:
        return len(self.sizes) > 1

    def holds(self, batch: float) -> bool:
        """Whether `batch` lies within the measured batch sizes (between two of them is interpolated)."""
        return self.sizes[0] <= batch <= self.sizes[-1]

    def _at_batch(self, table: np.ndarray, batch: float) -> np.ndarray:
        """`table` at `batch` sequences, linear between the measured sizes (never beyond them)."""
        if not self.holds(batch):
            raise ValueError(f"batch {batch} outside the measured sizes {self.sizes}")
        sizes = np.asarray(self.sizes, dtype=float)
        i = int(np.clip(np.searchsorted(sizes, batch) - 1, 0, max(len(sizes) - 2, 0)))
        if len(sizes) == 1 or batch == sizes[i]:
            return table[i]
        w = (batch - sizes[i]) / (sizes[i + 1] - sizes[i])
        return table[i] * (1 - w) + table[i + 1] * w

    def layers_ratio(self, batch: float, n: float, context: float) -> float:
        """A layer range's time at `batch` sequences over its time at one, n tokens each at `context`
        (linear in n and in context between the measured values, held beyond them)."""
        if batch == 1:
            return 1.0
        at = self._at_batch(self.ratio, batch)  # [n][c]
        by_c = [float(np.interp(n, self.n_values, at[:, j])) for j in range(at.shape[1])]
        return float(np.interp(context, self.context_values, by_c))

    def head_ms(self, batch: float, n: float) -> float:
        """The LM head on `batch` sequences' n positions each (ms)."""
        return float(np.interp(n, self.n_values, self._at_batch(self.head, batch)))

    def embedding_ms(self, batch: float, n: float) -> float:
        return float(np.interp(n, self.n_values, self._at_batch(self.embedding, batch)))

    def two_threads_ratio(self, batch: float, context: float) -> float | None:
        """A decode pass of `batch` sequences on two threads over the same pass on one (linear in context between
        the measured values, held beyond them); None when the profile did not time it."""
        if self.two_threads is None:
            return None
        return float(np.interp(context, self.context_values, self._at_batch(self.two_threads, batch)))
