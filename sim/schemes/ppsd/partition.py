"""Where to cut the layers into PPSD pipeline stages (no torch, no SimPy)."""

from __future__ import annotations

from collections.abc import Sequence

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from sim.model.cost_model import cost_model


def balanced_bounds(exit_layer: int, num_layers: int, stages: int,
                    layer_cost: Sequence[float] | None = None, head_cost: float = 0.0) -> tuple[int, ...]:
    """Stage bounds (0, E, b2, ..., N) for `stages` PPSD stages.

    Stage 1 always ends at the exit layer. Layers [E, N) are cut into stages - 1 contiguous stages
    that minimise the slowest stage's time, counting `head_cost` (final norm + LM head) in the last
    stage; with no costs given every layer counts 1 (balanced by layer count)."""
    if not 1 <= exit_layer <= num_layers - 1:
        raise UserError(f"exit layer {exit_layer} is out of range for a {num_layers}-layer model",
                        f"choose an exit layer between 1 and {num_layers - 1}")
    rest = num_layers - exit_layer
    if not 2 <= stages <= rest + 1:
        raise UserError(f"{stages} stages do not fit after exit layer {exit_layer} ({rest} layers remain)",
                        f"use between 2 and {rest + 1} stages")
    cost = [1.0] * num_layers if layer_cost is None else [float(c) for c in layer_cost]
    if len(cost) != num_layers:
        raise ValueError(f"layer_cost has {len(cost)} entries for {num_layers} layers")
    m = stages - 1
    # prefix sums over the remaining layers
    pre = [0.0]
    for c in cost[exit_layer:]:
        pre.append(pre[-1] + c)

    def seg(i: int, j: int) -> float:  # cost of remaining layers [i, j), plus the head if j is the end
        return pre[j] - pre[i] + (head_cost if j == rest else 0.0)

    inf = float("inf")
    # best[s][j]: min over cuts of the max stage time covering the first j remaining layers with s stages
    best = [[inf] * (rest + 1) for _ in range(m + 1)]
    cut = [[0] * (rest + 1) for _ in range(m + 1)]
    best[0][0] = 0.0
    for s in range(1, m + 1):
        for j in range(s, rest - (m - s) + 1):
            for i in range(s - 1, j):
                v = max(best[s - 1][i], seg(i, j))
                # ties go to the later cut, so earlier stages take the extra layer
                if v < best[s][j] - 1e-12 or (abs(v - best[s][j]) <= 1e-12 and i > cut[s][j]):
                    best[s][j], cut[s][j] = v, i
    bounds = [rest]
    j = rest
    for s in range(m, 0, -1):
        j = cut[s][j]
        bounds.append(j)
    bounds = [exit_layer + b for b in reversed(bounds)]  # starts with exit_layer + 0
    return (0, *bounds)


def stage_bounds(profile, exit_layer: int, stages: int, exit_head: str = SHARED,
                 num_layers: int | None = None) -> tuple[int, ...]:
    """PPSD stage bounds balanced by profiled time: stage 1 ends at the exit layer; layers [E, N)
    are cut to minimise the slowest later stage, one-token times at the smallest profiled context,
    the LM head counted in the last stage. Without a profile (`profile=None`, `num_layers` given)
    every layer counts the same and the head nothing: the best a runtime can do unprofiled."""
    if profile is None:
        return balanced_bounds(exit_layer, num_layers, stages)
    cm = cost_model(profile, exit_head)
    key = (exit_layer, stages)
    if key not in cm.bounds:  # a sweep resolves each (E, k) for every setting: cut once
        cm.bounds[key] = balanced_bounds(exit_layer, profile.num_layers, stages, cm.layer_costs(), cm.head(1))
    return cm.bounds[key]
