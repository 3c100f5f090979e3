"""What a pass of B sequences costs, from a profile: its batch-1 tables (`CostModel`) times the
measured ratio of a pass of B to a pass of one (`Profile.batch`, paired round by round), so that the
batch-1 prices are the ones every other prediction uses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED, TRAINED
from sim.model.cost_model import cost_model, per_profile


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


@dataclass
class BatchCosts:
    """Prices (ms) of the passes of a batch of `batch` sequences at one context (the cache's width)."""

    profile: object
    head_name: str = SHARED  # the exit head that drafts

    def __post_init__(self):
        if self.head_name not in (SHARED, TRAINED):
            raise UserError(f"exit head {self.head_name} is not timed at batch > 1 (only the shared LM head is)",
                            "use the shared or trained head for batched plans")
        self.cm = cost_model(self.profile, self.head_name)
        self.tables = self.profile.batch
        self._memo: dict = {}  # (kind, batch, width, exit layer, γ) -> ms: a replay asks the same rounds often

    def layers(self, batch: float, context: float, lo: int, hi: int, n: int) -> float:
        one = float(self.cm.layers(np.array([float(context)]), lo, hi, n)[0])
        return one * self.tables.layers_ratio(batch, n, context)

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

    def ar_step(self, batch: float, context: float) -> float:
        """One token for every sequence: embedding, every layer, the LM head."""
        key = ("ar", batch, context)
        got = self._memo.get(key)
        if got is None:
            n_layers = self.cm.num_layers
            got = self._memo[key] = self.embed(batch, 1) + self.layers(batch, context, 0, n_layers, 1) \
                + self.head(batch, 1)
        return got

    def eesd_round(self, batch: float, context: float, exit_layer: int, draft_len: int) -> float:
        """γ drafts and a verification for every sequence: γ+1 passes of layers [0, E) one position
        each, γ exit heads, then layers [E, N) and the LM head on γ+1 positions each."""
        key = ("eesd", batch, context, exit_layer, draft_len)
        got = self._memo.get(key)
        if got is None:
            g, n_layers = int(draft_len), self.cm.num_layers
            early = self.embed(batch, 1) + self.layers(batch, context, 0, exit_layer, 1)
            verify = self.layers(batch, context, exit_layer, n_layers, g + 1) + self.head(batch, g + 1)
            got = self._memo[key] = (g + 1) * early + g * self.exit_head(batch) + verify
        return got


_COSTS: dict = {}


def batch_costs(profile, head: str = SHARED) -> BatchCosts:
    """One BatchCosts per (profile object, exit head), so a sweep's replays share their priced rounds."""
    return per_profile(_COSTS, BatchCosts, profile, head, limit=16)
