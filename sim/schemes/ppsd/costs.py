"""PPSD unit costs: each stage's time per token over a stream's positions, the hop, the device of
each stage and the co-run slowdown, priced once by `CostModel` for every PPSD engine."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.costs import CostModel, corun_factors, cost_model
from sim.plan import Plan


def stage_ms(cm: CostModel, context: np.ndarray, bounds: tuple[int, ...]) -> list[np.ndarray]:
    """Per-stage one-token times: stage 1 adds embed and the exit head (it drafts), the last stage
    adds the final norm + LM head (it verifies). Stage 1's time is its whole occupancy per token;
    its hidden state leaves `exit_head()` earlier (see `PPSDCosts.exit_ms`)."""
    k = len(bounds) - 1
    out = []
    for m in range(k):
        t = cm.layers(context, bounds[m], bounds[m + 1])
        if m == 0:
            t = t + cm.embed(1) + cm.exit_head()
        if m == k - 1:
            t = t + cm.head(1)
        out.append(np.asarray(t, dtype=float))
    return out


@dataclass
class PPSDCosts:
    """Everything the PPSD engines need: per-stage cost arrays over the stream's positions, the hop,
    the device of each stage and the co-run factors.

    `exit_ms` is the exit-head part of `stage[0]` per position (None: 0). Stage 1's pass of a token
    is embed + layers [0, E) (the hidden state leaves for stage 2 then), followed by the exit head
    (the draft for the next token, sent to the last stage on its own channel); both parts get the
    pass's co-run factor."""

    stage: list[np.ndarray]  # [k][T] ms
    hop_ms: float
    placement: tuple[int, ...]
    factors: list[float]  # factors[b]: slowdown with b devices busy
    exit_ms: np.ndarray | None = None  # [T] ms, the exit head's share of stage[0]
    jitter_cv: float = 0.0  # relative spread of a pass: softens the restart race (sim/restart.py)

    def exit_array(self) -> np.ndarray:
        n = len(self.stage[0])
        if self.exit_ms is None:
            return np.zeros(n)
        return np.broadcast_to(np.asarray(self.exit_ms, dtype=float), (n,))

    @property
    def k(self) -> int:
        return len(self.stage)

    @property
    def num_devices(self) -> int:
        return len(set(self.placement))

    def factor(self, index_in_cycle: int, stage: int) -> float:
        """Co-run slowdown of the pass of the i-th token of a cycle at stage m (0-based). Stage 1
        never idles (it drafts ahead), so when that token reaches stage m, stages 1..m are busy
        with it and its successors, and min(i, k-m-1) later stages with its predecessors: the
        pipeline is fully loaded from its k-th token on. Stages sharing a device count once."""
        busy = min(self.num_devices, stage + 1 + index_in_cycle)
        return self.factors[min(busy, len(self.factors) - 1)]


def ppsd_costs(profile, plan: Plan, context: np.ndarray) -> PPSDCosts:
    cm = cost_model(profile, plan.exit_head)
    placement = plan.devices()
    d = len(set(placement))
    return PPSDCosts(stage=stage_ms(cm, context, plan.stage_bounds), hop_ms=float(plan.hop_ms or 0.0),
                     placement=placement, factors=corun_factors(profile, d),
                     exit_ms=np.full(np.shape(context), cm.exit_head(), dtype=float),
                     jitter_cv=float(profile.pass_jitter_cv()))
