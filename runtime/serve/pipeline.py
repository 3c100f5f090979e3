"""PPSD under traffic: the batched two-stage pipeline (`runtime/batched_pipeline.py`) taking newcomers into a
running batch and letting finished sequences go, for the serving engine (`runtime/serve/engine.py`).

Stage 1 (a forked process: layers [0, E), the embedding, the exit head) and stage 2 (the engine's thread:
layers [E, N), the LM head) each keep their own cache rectangle. A newcomer is prefilled alone through both:
stage 1 runs its layers over the prompt and hands the layer-E states over, stage 2 finishes them and picks the
first token; then its row joins both rectangles (`join`: left-padded, as in the engine). Its first tick is stage
1's only: stage 1 feeds the first token and drafts the next, while stage 2 has nothing of it yet (its row is
passed with a zero state whose slot is a hole, as a stale row's is). From then on it ticks as in a fixed batch:
each tick commits stage 2's token, and a rejected draft costs the sequence the next tick (stale: nothing
committed). A sequence that leaves is dropped from both rectangles at once, with the leading columns no
remaining row attends to (`keep`); both reset when the batch empties. Greedy, CPU: stage 1 is pinned to its own core and ignores SIGINT (the server stops it).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections import defaultdict

import numpy as np
import torch

from ppsd.errors import UserError
from runtime.batched import BatchState, prefill_layers
from runtime.batched_pipeline import StageOne, StageOneProcess, Tick, commit, stage_two


class JoiningStageOne(StageOne):
    """Stage 1 in its process, with a newcomer's prefill, join and the rows that stay."""

    pending: BatchState | None = None

    def prefill_one(self, prompt: list[int]) -> np.ndarray:
        self.pending, h = prefill_layers(self.model, [prompt], hi=self.exit_layer)
        return h.numpy()

    def join(self, keep: bool) -> None:
        pending, self.pending = self.pending, None
        if not keep:
            return
        if self.state is None:
            self.state, self.draft = pending, [-1]
        else:
            self.state.join(pending)
            self.draft.append(-1)

    def keep(self, rows: list[int]) -> None:
        if not rows:
            self.state, self.draft = None, []
            return
        self.state.keep(rows)
        self.state.crop_common_head()
        self.draft = [self.draft[i] for i in rows]


def _stage_one_main(conn, model, exit_layer: int, drafter, core: int | None) -> None:
    """The stage-1 process: answer prefill, join, keep and tick orders until told to stop."""
    from runtime.launch import _die_with_parent

    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops this process itself
    if core is not None:
        os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    stage = JoiningStageOne(model, exit_layer, drafter)
    with torch.inference_mode():
        while True:
            kind, payload = conn.recv()
            if kind == "stop":
                break
            try:
                if kind == "prefill":
                    answer = stage.prefill_one(payload)
                elif kind == "join":
                    answer = stage.join(payload)
                elif kind == "keep":
                    answer = stage.keep(payload)
                else:
                    answer = stage.tick(payload)
                conn.send(("ok", answer))
            except Exception as exc:  # noqa: BLE001 - handed to the engine, which fails the requests it held
                conn.send(("error", f"{exc.__class__.__name__}: {exc}"))
    conn.close()


class JoiningStageOneProcess(StageOneProcess):
    """The forked stage-1 process of a serving engine (see `StageOneProcess`), pinned to `core`."""

    def __init__(self, model, exit_layer: int, drafter, core: int | None = None, timeout_s: float = 120.0):
        if model.device.type != "cpu":
            raise UserError(f"PPSD serving runs on a CPU (asked on {model.device})", "serve on a CPU")
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.timeout_s = timeout_s
        self.proc = ctx.Process(target=_stage_one_main, args=(child, model, exit_layer, drafter, core), daemon=True,
                                name="ppsd-serve-stage-1")
        self.proc.start()
        child.close()

    def ask(self, kind: str, payload=None):
        self.send(kind, payload)
        return self.receive()


class PipelineBatch:
    """The engine's side of the pipeline: stage 2's view of every row (what to feed stage 1 next, whether its
    last slot turns into a hole, stage 1's last output for it, whether it has any yet), rows as the engine's
    `BatchState.rows`."""

    def __init__(self, model, exit_layer: int, drafter, core: int | None = None):
        from runtime.acceptance import Sampler

        self.model, self.exit_layer = model, exit_layer
        self.stage_one = JoiningStageOneProcess(model, exit_layer, drafter, core)
        self.greedy = Sampler.make(0.0, 0)
        self._clear()

    def _clear(self) -> None:
        self.feed: list[int] = []
        self.hole: list[bool] = []
        self.h: list[np.ndarray] = []  # per row, stage 1's last layer-E state [H]
        self.draft: list[int | None] = []
        self.pos: list[int] = []
        self.fresh: list[bool] = []  # no stage-1 output yet: stage 2 has nothing of it this tick

    def prefill(self, prompt: list[int]) -> tuple[BatchState, int]:
        """Both stages over one prompt -> stage 2's one-row state and the first token (not joined yet)."""
        h = torch.from_numpy(self.stage_one.ask("prefill", prompt))
        one, out = prefill_layers(self.model, [prompt], h, self.exit_layer)
        first = int(self.greedy.choose(self.model.head(out[:, -1:])[0, -1])[0])
        one.tokens[0].append(first)
        return one, first

    def join(self, one: BatchState | None) -> None:
        """The newcomer stage 1 prefilled last joins (its stage-2 row `one` already joined the engine's
        rectangle), or, with None, is dropped (its first token ended it)."""
        self.stage_one.ask("join", one is not None)
        if one is None:
            return
        self.feed.append(one.tokens[0][-1])
        self.hole.append(False)
        self.h.append(np.zeros(self.model.hidden_size, dtype=np.float32))
        self.draft.append(None)
        self.pos.append(int(one.pos[0]))
        self.fresh.append(True)

    def keep(self, rows: list[int]) -> None:
        """Only `rows` (indices into the live rows) stay, in both stages."""
        self.stage_one.ask("keep", rows)
        for name in ("feed", "hole", "h", "draft", "pos", "fresh"):
            setattr(self, name, [getattr(self, name)[i] for i in rows])

    def tick(self, state: BatchState) -> dict[int, bool]:
        """Both stages at once over every row: the tokens stage 2 commits go onto `state.tokens` -> {row id: its
        verdict on the draft stage 2 judged}; a row with nothing to commit this tick (stale, fresh) is absent."""
        self.stage_one.send("tick", Tick(list(self.feed), list(self.hole)))
        fed_draft = [None if f >= 0 else d for f, d in zip(self.feed, self.draft)]
        idle = [h or f for h, f in zip(self.hole, self.fresh)]  # stale or fresh: stage 2 has no work for it
        verified: list[int | None] = [None] * len(state.rows)
        if not all(idle):
            tokens = stage_two(self.model, state, np.stack(self.h)[:, None, :], self.pos, idle, self.exit_layer,
                               self.greedy)
            verified = [None if i else t for t, i in zip(tokens, idle)]
        h, drafts, positions = self.stage_one.receive()
        verdicts: dict[int, list[bool]] = defaultdict(list)
        order = commit(state, fed_draft, verified, verdicts)
        state.crop_common_tail()
        self.feed, self.hole = order.feed, order.hole
        self.h, self.draft, self.pos = [h[b, 0] for b in range(len(drafts))], list(drafts), list(positions)
        self.fresh = [False] * len(drafts)
        return {r: v[-1] for r, v in verdicts.items()}

    def reset(self) -> None:
        """Every row leaves (the batch emptied, or an iteration failed)."""
        try:
            self.stage_one.ask("keep", [])
        finally:
            self._clear()

    def cpu_s(self) -> float | None:
        """Stage 1's CPU seconds so far (Linux's /proc; None once it is gone)."""
        try:
            fields = open(f"/proc/{self.stage_one.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.stage_one.close()
