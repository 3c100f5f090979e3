"""What decides a plan's acceptance when the drafts do not: `--plans ...:alpha=A` (seeded
Bernoulli(A) bits, the same bits in the run and in its prediction) or `--force-trace` and emulated
runs (the measured prompts' own recorded traces)."""

from __future__ import annotations

import numpy as np

from sim import intervals as iv
from sim.plan import Plan


def forced_bits(plan: Plan, alpha: float, seed: int, targets: iv.Targets, ids: list, max_new: list[int]
                ) -> iv.PromptTraces:
    """Seeded Bernoulli(α) bits per measured prompt (`max_new` of them each): the seed folds in the
    exit and α, so two forced plans draw apart and a rerun draws alike."""
    rng = np.random.default_rng([seed, int(plan.exit_layer), int(round(alpha * 1e6)), 17])
    bits = [(rng.random(n) < alpha).astype(float) for n in max_new]
    return iv.PromptTraces(int(plan.exit_layer), [str(x) for x in ids], bits, list(targets.start_context))


def run_traces(plan: Plan, alpha: float | None, bits: iv.PromptTraces | None, acceptance, ids: list,
               replay: bool):
    """What forces plan's acceptance in the run (one `ForcedTrace` per measured prompt): its forced
    bits, or with `replay` (--force-trace, emulated runs) the prompts' own traces in `acceptance` (the
    measured profile's table); None: the drafts' real acceptance."""
    from runtime.acceptance import ForcedTrace

    if alpha is not None:
        return [ForcedTrace(tuple(int(b) for b in row) or (0,), f"forced α={alpha:g}") for row in bits.prob]
    if not replay:
        return None
    mine = acceptance[acceptance["head"] == plan.exit_head]
    out = []
    for pid in ids:
        rows = mine[(mine["prompt_id"] == pid) & (mine["exit_layer"] == plan.exit_layer)].sort_values("position")
        out.append(ForcedTrace(tuple(int(m) for m in rows["match"]) or (0,), f"profile {pid}"))
    return out
