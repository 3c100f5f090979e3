"""The co-run slowdown a PPSD plan's stages really see, read from the runtime (`runtime/probe.py`).

In rounds: the pieces of a decode step timed in this process (and a whole step beside them, so the
pieces are scaled to it as the latency tables are), then the real two-stage pipeline with every draft
accepted. Each stage's pass in the pipeline over the same pass priced from this round's pieces is
what running beside the other stage costs it; a round's slowdown is the mean over the two stages, the
profile keeps the median round, and the rounds' spread says how much that figure moves over a
sitting (`latency.pipeline.runtime`, `Profile.corun_slowdown`, `Profile.pipeline_slowdown_cv`). Each
stage's slowdown against the mean is recorded (`Profile.corun_stage_bias`; shown, not priced), and each
stage's pass-to-pass jitter is the timing model's pass jitter (`Profile.lockstep_jitter_cv`): what the
lock step of two tokens in flight waits out and the restart race's noise (docs/model.md).

Each round also runs the pipeline cut where its last stage waits for every draft (`waiting_exit_layer`:
stage 1 the longer, as in the plans users run): a last stage that sleeps on each hidden state and then
runs beside stage 1 runs its pass slower than in a balanced pipeline, and what it costs there is the
verifier's slowdown in such plans (`latency.pipeline.runtime.waiting`, `Profile.waiting_last_stage_slowdown`).
"""

from __future__ import annotations

import statistics

import numpy as np
import torch

from ppsd.statistics import mad_log_sd, short_jitter_cv
from profiler.latency import StepClock, filled_cache, remeasured, timed_step, whole_step_ms

ROUNDS = 5
TOKENS = 48       # decoded per pipeline run (~1.7 s for SmolLM2-135M on a CPU core)
PROMPT_LEN = 64
STEPS = 8         # decode steps timed piece by piece (and whole) per round


def waiting_exit_layer(num_layers: int) -> int | None:
    """Where to cut a two-stage pipeline so that its last stage waits for every draft: a fifth of the
    layers (at least one) after the cut, so stage 1's pass is the longer; None where no cut past the
    middle leaves the last stage a layer."""
    n = int(num_layers)
    cut = n - max(1, round(n / 5))
    return cut if n // 2 < cut < n else None


def stage_prices(laps: np.ndarray, exit_layer: int, scale: float) -> list[float]:
    """Each stage's pass alone from one step's pieces ([embedding, position setup, layer 0..N-1, head],
    ms), scaled by `scale`: stage 1 embeds, runs layers [0, E) and the exit head (the LM head); stage 2
    runs layers [E, N) and the LM head; each sets up its positions."""
    embed, setup, layers, head = laps[0], laps[1], laps[2:-1], laps[-1]
    return [scale * float(embed + setup + layers[:exit_layer].sum() + head),
            scale * float(setup + layers[exit_layer:].sum() + head)]


def _against_pieces(series: list[list[float]], alone: list[float]) -> dict:
    """One pipeline run's figures: each stage's median pass, its price from the round's pieces, and the ratio."""
    passes = [statistics.median(p) for p in series]
    return {"slowdown_per_stage": [round(p / q, 4) for p, q in zip(passes, alone)],
            "pass_ms": [round(p, 3) for p in passes], "alone_ms": [round(q, 3) for q in alone]}


class RuntimeProbe:
    """The probe's rounds, taken one at a time (`round`), e.g. between the latency grid's rounds so that
    they see the same mix of a shared machine's states as the tables; `summary()` is the block."""

    def __init__(self, adapter, tokens: int = TOKENS, prompt_len: int = PROMPT_LEN):
        self.adapter, self.tokens, self.prompt_len = adapter, int(tokens), int(prompt_len)
        self.exit_layer = adapter.num_layers // 2
        self.waiting_exit = waiting_exit_layer(adapter.num_layers)
        gen = torch.Generator().manual_seed(0)
        self.prompt = torch.randint(0, adapter.vocab_size, (self.prompt_len,), generator=gen).tolist()
        self.context = self.prompt_len + self.tokens // 2
        self.cache = filled_cache(adapter, self.context, seed=0)
        self.ids = torch.randint(0, adapter.vocab_size, (1, 1), generator=gen).to(adapter.device)
        self.clock = StepClock(adapter.device)
        self.rounds: list[dict] = []
        self.waiting: list[dict] = []

    @torch.inference_mode()
    def round(self) -> None:
        """Pieces and whole steps in this process, then the pipeline; one round's ratios."""
        from runtime.probe import stage_passes_ms

        a, c = self.adapter, self.context
        laps = np.median([timed_step(a, self.cache, self.ids, c, self.clock) for _ in range(STEPS)], axis=0)
        whole = statistics.median(whole_step_ms(a, self.cache, self.ids, c) for _ in range(STEPS))
        scale = whole / float(laps.sum())
        series = stage_passes_ms(a, self.exit_layer, self.prompt, self.tokens)
        self.rounds.append({**_against_pieces(series, stage_prices(laps, self.exit_layer, scale)),
                            "pass_jitter_cv": round(float(np.mean([short_jitter_cv(p) for p in series])), 5)})
        if self.waiting_exit is not None:  # the same pieces price the cut where the last stage waits
            series = stage_passes_ms(a, self.waiting_exit, self.prompt, self.tokens)
            self.waiting.append(_against_pieces(series, stage_prices(laps, self.waiting_exit, scale)))

    def summary(self) -> dict | None:
        if not self.rounds:
            return None
        slow = [float(np.mean(r["slowdown_per_stage"])) for r in self.rounds]
        kept = sorted(range(len(slow)), key=slow.__getitem__)[len(slow) // 2]
        return {"slowdown": slow[kept], "slowdown_per_stage": self.rounds[kept]["slowdown_per_stage"],
                "round_kept": kept, "rounds": self.rounds, "slowdown_cv": mad_log_sd(slow),
                "pass_jitter_cv": float(np.median([r["pass_jitter_cv"] for r in self.rounds])),
                "exit_layer": self.exit_layer, "tokens": self.tokens, "prompt_len": self.prompt_len,
                "context": self.context, "method": METHOD, **self._waiting_block()}

    def physical_summary(self) -> dict | None:
        """`summary()`; while it holds a reading that cannot be physical (a stage faster beside the other
        than alone), every round is run again back to back (`profiler.latency.remeasured`: UserError if it
        persists)."""
        def again() -> dict | None:
            n = max(len(self.rounds), 1)
            self.rounds, self.waiting = [], []
            for _ in range(n):
                self.round()
            return self.summary()

        first = self.summary()
        return remeasured(again, "latency.pipeline.runtime", first=first) if first is not None else None

    def _waiting_block(self) -> dict:
        """{"waiting": ...} where the rounds ran the cut whose last stage waits: its median over the rounds
        of the last stage's pass over the same pass priced from the round's pieces."""
        if not self.waiting:
            return {}
        last = float(np.median([r["slowdown_per_stage"][1] for r in self.waiting]))
        return {"waiting": {"exit_layer": self.waiting_exit, "last_stage_slowdown": round(last, 4),
                            "rounds": self.waiting, "method": WAITING_METHOD}}


METHOD = ("the runtime's own two-stage pipeline (forked stage processes, runtime/pipeline.py) with every draft "
          "accepted; each stage's median pass over the same pass priced from pieces timed in this process in the "
          "same round and scaled to a whole step timed beside them; mean over the stages, median round kept; "
          "slowdown_cv: the rounds' log spread by their median absolute deviation (a burst in one round moves "
          "neither); pass_jitter_cv: each stage's pass-to-pass spread (ppsd.statistics.short_jitter_cv), mean of "
          "the stages, median round: the independent jitter a lock step waits out")


WAITING_METHOD = ("the same pipeline cut at waiting_exit_layer (a fifth of the layers in the last stage), so the last "
                  "stage waits for every draft; last_stage_slowdown: the median over the rounds of its pass over the "
                  "same pass priced from the round's pieces")


def measure_runtime_probe(adapter, rounds: int = ROUNDS, tokens: int = TOKENS, prompt_len: int = PROMPT_LEN,
                          tick=lambda: None) -> dict | None:
    """`latency.pipeline.runtime` from `rounds` rounds back to back (see the module doc)."""
    probe = RuntimeProbe(adapter, tokens, prompt_len)
    for _ in range(rounds):
        probe.round()
        tick()
    return probe.physical_summary()
