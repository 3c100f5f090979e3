"""What a served iteration costs: the one price list the serving engine reads.

Decode work goes through the batch cost model (`sim/batch/costs.py: BatchCosts`, the prices `ppsd plan
--batch` and the batch replay use): an AR step, an EESD round or a PPSD tick of the live batch at the
cache's width, between the batch sizes the profile measured. Prefill is priced as the real loop runs it
(`ppsd serve`, prefill first): each admitted prompt alone, whole, one after another, at the profile's
batch-1 prefill (`Profile.prefill_ms`). Chunked prefill exists in the simulator only: a chunk of n
prompt tokens is priced from the profile's tables at n new tokens at the context already prefilled (and
the LM head when it completes the prompt), after the iteration's decode.

`scale` multiplies every price: the machine's speed now against the profile's (`predict_serving(speed=)`)
times one draw of the profile's cost doubt in a prediction's replications.
"""

from __future__ import annotations

import numpy as np

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from sim.batch.costs import WIDTH_GRID, BatchCosts, batch_costs, check_batch, grid_width
from sim.serve.policies.base import Speculation


def check_serving_profile(profile, max_batch: int) -> None:
    """UserError unless the profile has batch tables (`latency.batch`) that reach `max_batch`."""
    if not profile.batch.measured:
        raise UserError(f"profile {profile.path} answers for one sequence at a time (no latency.batch), and serving "
                        "batches requests", f"measure batches into it: ppsd profile add-batch {profile.path}")
    check_batch(profile, int(max_batch))


BLOCK = 64  # grid widths a price table grows by at least (priced at once, as arrays)


class ServeCosts:
    """Prices (ms) of a served engine's work, through one `BatchCosts` (see the module doc). Implements the
    `IterationCost` protocol the policies read (`ar_step`, `eesd_round`).

    A decode price depends on the kind of pass, the live count and the cache's width on `BatchCosts`'s grid
    (`WIDTH_GRID` slots); each (kind, live count) keeps a table over grid widths that grows in blocks priced
    as arrays by `BatchCosts`'s own formulas, so a long served run (whose width keeps moving) pays a list
    lookup an iteration. Copies made by `scaled` share the tables."""

    def __init__(self, profile, head: str = SHARED, scale: float = 1.0, costs: BatchCosts | None = None,
                 tables: dict | None = None):
        self.profile = profile
        self.batch = costs if costs is not None else batch_costs(profile, head)
        self.scale = float(scale)
        self._tables: dict = tables if tables is not None else {}  # (kind, live, stage two) -> ms by grid width

    def scaled(self, scale: float) -> "ServeCosts":
        """The same price list with every price times `scale` more (sharing the price tables)."""
        return ServeCosts(self.profile, self.batch.head_name, self.scale * float(scale), self.batch, self._tables)

    # --- what a policy asks (IterationCost) ---------------------------------------------------
    def ar_step(self, batch: float, context: float) -> float:
        return self._price(None, 0, False, batch, None, context)

    def eesd_round(self, batch: float, context: float, exit_layer: int, draft_len: int) -> float:
        return self._price(exit_layer, draft_len, False, batch, None, context)

    # --- prefill -------------------------------------------------------------------------------
    def prefill(self, prompt_tokens: int) -> float:
        """One whole prompt prefilled alone (batch 1), as the real loop prefills each admitted prompt."""
        key = ("prefill", int(prompt_tokens))
        got = self._tables.get(key)
        if got is None:
            got = self._tables[key] = float(self.profile.prefill_ms(int(prompt_tokens)))
        return got * self.scale

    def chunk(self, tokens: int, done: int, completes: bool) -> float:
        """A prefill chunk of `tokens` prompt tokens after `done` are in the cache (simulated chunked prefill):
        embedding and every layer at n = `tokens`, the LM head when it completes the prompt."""
        key = ("chunk", int(tokens), grid_width(done), bool(completes))
        got = self._tables.get(key)
        if got is None:
            cm = self.batch.cm
            ms = cm.embed(float(tokens)) + float(cm.layers(np.array([grid_width(done)]), 0, cm.num_layers,
                                                           float(tokens))[0])
            got = self._tables[key] = ms + (cm.head(1) if completes else 0.0)
        return got * self.scale

    # --- decode --------------------------------------------------------------------------------
    def decode(self, spec: Speculation, live: int, width: float, stage_two: int | None = None) -> float:
        """One decode iteration of `live` sequences at cache width `width`: an AR step, an EESD round of
        `spec.draft_len` drafts (γ 0: one pass through the split model, as a round that drafts nothing), or a
        PPSD tick in which `stage_two` of them have stage-2 work (0: stage 1 alone; None: all)."""
        return self._price(spec.exit_layer, spec.draft_len, spec.pipelined, live, stage_two, width)

    def _price(self, exit_layer, draft_len, pipelined, live, stage_two, width) -> float:
        index = round(float(width) / WIDTH_GRID)  # grid_width(width) / WIDTH_GRID
        key = (exit_layer, draft_len if exit_layer is not None else 0, pipelined, live, stage_two)
        table = self._tables.get(key)
        if table is None or index >= len(table):
            table = self._grow(key, index, table or [])
        return table[index] * self.scale

    def _grow(self, key, index: int, table: list) -> list:
        exit_layer, draft_len, pipelined, live, stage_two = key
        widths = WIDTH_GRID * np.arange(len(table), max(index + 1, 2 * len(table), BLOCK), dtype=float)
        b = self.batch
        if exit_layer is None:
            ms = b.ar_steps(live, widths)
        elif pipelined:
            ms = b.ppsd_ticks(live, widths, exit_layer, both=stage_two != 0, second_batch=stage_two)
        else:
            ms = b.eesd_rounds(live, widths, exit_layer, draft_len)
        table = self._tables[key] = table + np.asarray(ms, dtype=float).tolist()
        return table
