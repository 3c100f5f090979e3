"""A batch as SimPy processes: the event view of batched AR, EESD and PPSD, beside the replay and the closed forms.

AR and EESD: one device (a `Resource`); each step or round requests it, holds it for the round's price at
the live count and the cache's width, and releases it to the commit (`Sequences.commit_round`).
PPSD: stage 1 and stage 2 are processes on their own devices, each looping on `yield inbox.get()` →
`yield env.timeout(its pass)` → `yield done.put(...)`; the coordinator hands both their orders for a tick
and commits (`Sequences.commit_tick`) once both are done, so a tick ends with the slower stage. A stage's
pass is its price, slowed by the other one's running beside it, and with `jitter` drawn with the pass
spread (`BatchCosts.pass_cv`, seeded): over many ticks the event view then finds the expected slower stage
that `BatchCosts.ppsd_tick` prices in closed form.
"""

from __future__ import annotations

import numpy as np
import simpy

from sim.batch.costs import BatchCosts
from sim.batch.replay import BatchRun, Sequences, generations


def _round_group(costs: BatchCosts, group, exit_layer: int | None, draft_len: int, out: BatchRun) -> None:
    env = simpy.Environment()
    device = simpy.Resource(env, capacity=1)
    seqs = Sequences(group)

    def decode():
        while seqs.live:
            g = 0 if exit_layer is None else seqs.draft_len(draft_len)
            with device.request() as turn:
                yield turn
                yield env.timeout(costs.ar_step(len(seqs.live), seqs.width) if exit_layer is None else
                                  costs.eesd_round(len(seqs.live), seqs.width, exit_layer, g))
            seqs.commit_round(exit_layer, g, out)
            seqs.leave(env.now, out)

    env.process(decode())
    env.run()
    seqs.finish(env.now, out)


def _ppsd_group(costs: BatchCosts, group, exit_layer: int, out: BatchRun, rng: np.random.Generator | None) -> None:
    env = simpy.Environment()
    inbox = [simpy.Store(env), simpy.Store(env)]
    done = simpy.Store(env)
    seqs = Sequences(group)

    def stage(index: int):
        device = simpy.Resource(env, capacity=1)
        while True:
            order = yield inbox[index].get()
            if order is None:
                return
            batch, width, both = order
            ms = costs.ppsd_stages(batch, width, exit_layer)[index] * (costs.corun if both else 1.0)
            if rng is not None:
                ms *= max(0.0, 1.0 + costs.pass_cv * rng.standard_normal())
            with device.request() as turn:
                yield turn
                yield env.timeout(ms)
            yield done.put(index)

    def coordinator():
        yield inbox[0].put((len(seqs.live), seqs.width, False))  # the first tick: stage 1 alone
        yield done.get()
        seqs.width += 1
        while seqs.live:
            for index in (0, 1):
                yield inbox[index].put((len(seqs.live), seqs.width, True))
            yield done.get()
            yield done.get()  # the tick ends with the slower stage
            seqs.commit_tick(out)
            seqs.leave(env.now, out)
        for box in inbox:
            yield box.put(None)

    env.process(stage(0))
    env.process(stage(1))
    env.process(coordinator())
    env.run()
    seqs.finish(env.now, out)


def simulate_batches(costs: BatchCosts, stream, batch: int, exit_layer: int | None, draft_len: int = 1,
                     pipelined: bool = False, jitter: bool = False, seed: int = 0) -> BatchRun:
    """Every generation of `stream`, `batch` at a time, as events (`replay.replay_batches`'s arguments; `jitter`
    draws each PPSD pass with the pass spread, seeded by `seed`)."""
    gens = generations(stream)
    rng = np.random.default_rng(seed) if jitter else None
    out = BatchRun()
    for k in range(0, len(gens), batch):
        if pipelined:
            _ppsd_group(costs, gens[k: k + batch], exit_layer, out, rng)
        else:
            _round_group(costs, gens[k: k + batch], exit_layer, draft_len, out)
    return out
