"""The runtime timing itself: how long each stage of a real PPSD pipeline takes a pass.

The profiler prices a PPSD plan's stages from pieces timed in one process, times a co-run slowdown:
what two stages running at once do to each other's passes. That slowdown is only as good as the
pipeline it was read from. A probe with processes of its own (spawned, each loading the model, a
pipeline loop of its own) reads a different figure from the runtime's (forked stages sharing the
loaded weights, `runtime/pipeline.py`): their passes alone already ran 5-9% over the pieces. So the
slowdown is read from the runtime itself: `stage_pass_ms` runs the real two-stage pipeline with
every draft accepted (both stages busy all the time) and returns each stage's median pass.
"""

from __future__ import annotations

import statistics

from runtime.acceptance import ForcedTrace
from runtime.measure import Job, measure
from ppsd.modes import Mode
from sim.plan import Plan

ACCEPT_ALL = "accept-all (runtime probe)"
WARMUP_TOKENS = 8  # the warm-up pass decodes this many tokens (the stages' first passes are slow)


def stage_passes_ms(model, exit_layer: int, prompt: list[int], tokens: int,
                    timeout_s: float = 120.0) -> tuple[list[float], list[float]]:
    """[stage 1's passes, stage 2's passes] in ms, in time order, over one accept-all run of a two-stage
    pipeline cut at `exit_layer`, decoding `tokens` tokens after `prompt` (stage 1: embedding, its
    layers and the exit head, the shared LM head; stage 2: its layers, the LM head and the verdict)."""
    n = model.num_layers
    plan = Plan(Mode.PPSD, exit_layer=exit_layer, stages=2, stage_bounds=(0, exit_layer, n), launch="local")
    job = Job(plan=plan, prompts=[list(prompt)], max_new=[int(tokens)], forced=[ForcedTrace((1,) * tokens, ACCEPT_ALL)],
              stop_at_eos=False, warmup=1, repeats=1, timeout_s=timeout_s, timeline=True, warmup_tokens=WARMUP_TOKENS)
    events = sorted(measure(model, job).result.timeline, key=lambda e: e.start_s)
    first = [1e3 * e.dur_s for e in events if e.row == "stage 1" and e.name == "draft"]
    last = [1e3 * e.dur_s for e in events if e.row == "stage 2" and e.name == "verify"]
    if not first or not last:
        raise RuntimeError("the runtime probe's pipeline recorded no passes")
    return first, last


def stage_pass_ms(model, exit_layer: int, prompt: list[int], tokens: int, timeout_s: float = 120.0) -> list[float]:
    """[stage 1's, stage 2's] median pass in ms over one accept-all run (`stage_passes_ms`)."""
    return [statistics.median(p) for p in stage_passes_ms(model, exit_layer, prompt, tokens, timeout_s)]
