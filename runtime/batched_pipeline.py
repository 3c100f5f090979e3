"""Batched PPSD: a two-stage pipeline that drafts and verifies B sequences at once, in lock step.

Stage 1 (a forked process) holds layers [0, E), the embedding and the exit head; stage 2 (the calling
process) holds layers [E, N) and the LM head. Every tick both run one pass over every live sequence at
the same time: stage 1 feeds each sequence one token (its own draft from the previous tick, or the
verifier's token after a rejection) through its layers and drafts the next; stage 2 runs the layer-E
states stage 1 produced one tick earlier through the rest of the model, and its token decides the draft
stage 1 is feeding meanwhile.

  prefill      stage 1 runs its layers over the left-padded prompts and hands the layer-E states over;
               stage 2 finishes them and picks every sequence's first token
  stage_one    one tick of stage 1 (in its process): holes, then one pass, then the exit head's drafts
  stage_two    one tick of stage 2: one pass over the previous tick's layer-E states
  commit       each sequence keeps stage 2's token; a draft that differs from it is rejected, and stage
               1 feeds the verifier's token at the same position next tick
  generate_ppsd_batch   prefill, then ticks until every sequence has left the batch

A rejected draft costs its sequence one tick: stage 1 learns of it after the tick it spent feeding the
wrong draft, and stage 2's next pass for that sequence works on that wrong draft's state. Both slots
turn into holes (masked, as in runtime/batched.py), so every sequence's committed tokens are the full
model's greedy tokens after a committed prefix: lossless up to the arithmetic of batched passes.
Greedy only, on a CPU (two processes, one thread each).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass

import numpy as np
import torch

from ppsd.errors import UserError
from runtime.acceptance import Sampler
from runtime.batched import BatchRecord, BatchState, _ids, _leave, _positions, pass_mask, prefill_layers


@dataclass
class Tick:
    """What stage 1 is told before a tick. `feed[b]`: the token sequence b feeds (-1: its own draft);
    `hole[b]`: its last slot held a rejected draft (it turns into a hole and the position steps back);
    `keep`: the live rows that stay (None: all)."""

    feed: list[int]
    hole: list[bool]
    keep: list[int] | None = None


class StageOne:
    """Stage 1's state in its own process: its cache, each sequence's next position and pending draft."""

    def __init__(self, model, exit_layer: int, drafter):
        self.model, self.exit_layer, self.drafter = model, exit_layer, drafter
        self.greedy = Sampler.make(0.0, 0)
        self.state: BatchState | None = None
        self.draft: list[int] = []

    def prefill(self, prompts: list[list[int]]) -> np.ndarray:
        self.state, h = prefill_layers(self.model, prompts, hi=self.exit_layer)
        self.draft = [-1] * len(prompts)
        return h.numpy()

    def tick(self, order: Tick) -> tuple[np.ndarray, list[int], list[int]]:
        """One pass -> (layer-E states [B, 1, H], the drafts for the next position, the positions fed)."""
        st = self.state
        if order.keep is not None:
            st.keep(order.keep)
            self.draft = [self.draft[i] for i in order.keep]
        for b, hole in enumerate(order.hole):
            if hole:  # the draft fed last tick was rejected: its slot is a hole, its position comes again
                st.valid[b, -1] = False
                st.pos[b] -= 1
        st.crop_common_tail()
        fed = [f if f >= 0 else d for f, d in zip(order.feed, self.draft)]
        positions = st.pos.tolist()
        h = self.model.forward_layers(self.model.embed(_ids(fed)), 0, self.exit_layer, st.cache, 0,
                                      attention_mask=pass_mask(st.valid, 0, 1), positions=_positions(st.pos, 1))
        st.valid = torch.cat([st.valid, torch.ones_like(st.valid[:, :1])], dim=1)
        st.pos += 1
        logits = self.drafter.logits(h)[:, -1]
        self.draft = [int(self.drafter.choose_logits(self.greedy, logits[b])[0]) for b in range(len(fed))]
        return h.numpy(), self.draft, positions


def _stage_one_main(conn, model, exit_layer: int, drafter) -> None:
    """The stage-1 process: answer prefill and tick orders until told to stop."""
    from runtime.launch import _die_with_parent

    _die_with_parent()
    torch.set_num_threads(1)
    stage = StageOne(model, exit_layer, drafter)
    with torch.inference_mode():
        while True:
            kind, payload = conn.recv()
            if kind == "stop":
                break
            try:
                conn.send(("ok", stage.prefill(payload) if kind == "prefill" else stage.tick(payload)))
            except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it in its words
                conn.send(("error", f"{exc.__class__.__name__}: {exc}"))
    conn.close()


class StageOneProcess:
    """Stage 1 forked off the loaded model (CPU: it inherits the weights, nothing is re-read); one per
    plan, reused by every batch the plan decodes. Use as a context manager."""

    def __init__(self, model, exit_layer: int, drafter, timeout_s: float = 120.0):
        if model.device.type != "cpu":
            raise UserError(f"batched PPSD runs on a CPU (asked on {model.device})", "use --device cpu with --batch")
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.timeout_s = timeout_s
        self.proc = ctx.Process(target=_stage_one_main, args=(child, model, exit_layer, drafter), daemon=True,
                                name="ppsd-batch-stage-1")
        self.proc.start()
        child.close()

    def send(self, kind: str, payload=None) -> None:
        self.conn.send((kind, payload))

    def receive(self):
        if not self.conn.poll(self.timeout_s):
            raise UserError(f"batched PPSD stage 1 gave no answer in {self.timeout_s:.0f} s", "rerun; if it repeats, "
                            "report it")
        status, payload = self.conn.recv()
        if status != "ok":
            raise UserError(f"batched PPSD stage 1 failed: {payload}", "rerun; if it repeats, report it")
        return payload

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.send("stop")
            except (BrokenPipeError, OSError):
                pass
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(2)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def prefill(model, stage_one: StageOneProcess, prompts, exit_layer: int, greedy: Sampler):
    """Both stages over the prompts -> stage 2's state with every sequence's first token."""
    stage_one.send("prefill", prompts)
    h = torch.from_numpy(stage_one.receive())
    state, h = prefill_layers(model, prompts, h, exit_layer)
    logits = model.head(h[:, -1:])[:, -1]
    for b in range(len(prompts)):
        state.tokens[b].append(int(greedy.choose(logits[b])[0]))
    return state


def stage_two(model, state: BatchState, h: np.ndarray, positions: list[int], stale: list[bool], exit_layer: int,
              greedy: Sampler) -> list[int]:
    """Layers [E, N) and the LM head on the previous tick's layer-E states -> each sequence's next token. A
    stale row (its state came from a rejected draft) is computed with the others and its slot is a hole."""
    pos = torch.tensor(positions, dtype=torch.long, device=model.device)
    out = model.forward_layers(torch.from_numpy(h), exit_layer, model.num_layers, state.cache, 0,
                               attention_mask=pass_mask(state.valid, 0, 1), positions=_positions(pos, 1))
    state.valid = torch.cat([state.valid, torch.tensor(stale, device=model.device).logical_not().unsqueeze(1)], dim=1)
    logits = model.head(out)[:, -1]
    return [int(greedy.choose(logits[b])[0]) for b in range(len(positions))]


def commit(state: BatchState, fed_draft: list[int | None], verified: list[int | None], verdicts: list[list[bool]]
           ) -> Tick:
    """Each sequence keeps stage 2's token; the order for stage 1's next tick. `fed_draft[b]`: the draft
    stage 1 fed this tick (None: it fed a committed token); `verified[b]`: stage 2's token (None: stale
    or no pass yet)."""
    feed, hole = [], []
    for b, (draft, token) in enumerate(zip(fed_draft, verified)):
        if token is None:  # no verdict this tick: stage 1 goes on with its own draft
            feed.append(-1)
            hole.append(False)
            continue
        state.tokens[b].append(token)
        # the acceptance decision: the draft stage 1 is feeding stands only if it is the verifier's token
        accepted = draft is not None and draft == token
        verdicts[state.rows[b]].append(accepted)
        feed.append(-1 if accepted else token)
        hole.append(not accepted and draft is not None)
    return Tick(feed, hole)


@torch.inference_mode()
def generate_ppsd_batch(model, stage_one: StageOneProcess, prompts: list[list[int]], max_new: list[int],
                        exit_layer: int, eos: set[int] | None = None) -> BatchRecord:
    """Greedy PPSD over a batch (see the module doc). `BatchRecord.rounds[b]`: 1 per accepted draft, 0 per
    rejected one; `passes`: ticks."""
    greedy = Sampler.make(0.0, 0)
    t0 = time.perf_counter()
    state = prefill(model, stage_one, prompts, exit_layer, greedy)
    t1 = time.perf_counter()
    done: dict[int, list[int]] = {}
    finish = [0.0] * len(prompts)
    verdicts: list[list[bool]] = [[] for _ in prompts]
    _leave(state, max_new, eos, done, finish, t1)
    order = Tick([t[-1] for t in state.tokens], [False] * len(state.rows), keep=list(state.rows))
    previous, ticks = None, 0  # previous: stage 1's last output (states, drafts, positions), rows as `state`
    while state.rows:
        stage_one.send("tick", order)
        fed_draft = [None if f >= 0 else previous[1][b] for b, f in enumerate(order.feed)]
        verified: list[int | None] = [None] * len(state.rows)
        if previous is not None:  # stage 2 works on the previous tick while stage 1 runs this one
            tokens = stage_two(model, state, previous[0], previous[2], order.hole, exit_layer, greedy)
            verified = [None if stale else t for t, stale in zip(tokens, order.hole)]
        previous = stage_one.receive()
        ticks += 1
        order = commit(state, fed_draft, verified, verdicts)
        rows_before = list(state.rows)
        _leave(state, max_new, eos, done, finish, t1)
        order.keep = [rows_before.index(r) for r in state.rows]
        previous = (previous[0][order.keep], [previous[1][i] for i in order.keep], [previous[2][i] for i in order.keep])
        order.feed = [order.feed[i] for i in order.keep]
        order.hole = [order.hole[i] for i in order.keep]
        state.crop_common_tail()
    t2 = time.perf_counter()
    rounds = [[int(v) for v in seq] for seq in verdicts]
    return BatchRecord([done[r] for r in range(len(prompts))], t1 - t0, t2 - t1, rounds, finish, ticks, 0)
