"""PPSD unit costs: each stage's time per token over a stream's positions, the hop, the device of
each stage and the co-run slowdown, priced once by `CostModel` for every PPSD engine (the terms and
their formulas: docs/model.md, "A PPSD pass at batch 1")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ppsd.errors import UserError
from ppsd.statistics import expected_max_of
from sim.model.cost_model import CostModel, corun_factors, cost_model, pass_jitter_cv
from sim.model.stops import require_confidence
from sim.model.streams import Stream
from sim.schemes.base import PlanLike, StagePart



def corun_factor(factors: Sequence, devices: int, index_in_cycle: int, stage: int, ahead: int | None = None) -> float:
    """Co-run slowdown of the pass of the i-th token of a cycle at stage m (0-based; factors[b]: the
    slowdown with b devices busy, or factors[m][b] per stage: `loaded_factors`). Stage 1 never idles
    (it drafts ahead), so when that token reaches stage m, stages 1..m are busy with it and its
    successors, and min(i, k-m-1) later stages with its predecessors: the pipeline is fully loaded
    from its k-th token on. Stages sharing a device count once. `ahead`: how many of the stages
    before m are busy when that is fewer than m (a cycle that a confidence stop ends: stage 1 idles
    after its last token, so that token's later passes find the stages before them empty; one device
    per stage). The one rule every PPSD engine prices a pass's slowdown by."""
    row = factors[stage] if isinstance(factors[0], (list, tuple, np.ndarray)) else factors
    if ahead is None or ahead >= stage:
        busy = min(devices, stage + 1 + index_in_cycle)
    else:
        busy = min(devices, max(ahead, 0) + 1 + min(index_in_cycle, devices - stage - 1))
    return float(row[min(busy, len(row) - 1)])


def lockstep_factor(stage_means: Sequence[float], jitter_cv: float) -> float:
    """What the lock step of a loaded pipeline adds to its period, as a factor on every co-running pass:
    with its tokens in flight capped at its stage count, each stage's next pass waits for the others'
    current ones, so a period lasts the slowest of k jittery passes, whose expectation exceeds the
    slowest mean (`ppsd.statistics.expected_max_of`): most when the stages balance, nothing when one
    stage is far the slowest or the passes do not jitter."""
    means = [float(m) for m in stage_means]
    top = max(means) if means else 0.0
    if top <= 0.0 or jitter_cv <= 0.0 or len(means) < 2:
        return 1.0
    return expected_max_of(means, float(jitter_cv)) / top


def corun_table(factors: Sequence[float], devices: int, stages: int, cycle_len: int) -> np.ndarray:
    """`corun_factor` for every stage (rows) and index in cycle below `cycle_len` (columns)."""
    return np.array([[corun_factor(factors, devices, i, m) for i in range(cycle_len)] for m in range(stages)])


def stage_ms(cm: CostModel, context: np.ndarray, bounds: tuple[int, ...], overhead_ms: Sequence[float] | float = 0.0,
             sampled: bool = False) -> list[np.ndarray]:
    """Per-stage one-token times (docs/model.md): stage 1 adds the embedding and the exit head (it
    drafts), the last stage the LM head (it verifies), every stage its role's fixed cost of a pass
    (`overhead_ms`, one per stage or one for all). Stage 1's hidden state leaves `PPSDCosts.exit_ms`
    before its pass ends. At T > 0 stage 1 draws each draft and the verifier one token over the whole
    vocabulary (it draws only at a rejection: an accepted verification is over-priced by one draw);
    a rejection's residual recomputes q with the exit head (`reject_ms`, added by the engines)."""
    return [np.asarray(t, dtype=float) for t in
            _stages(cm, bounds, lambda lo, hi: cm.layers(context, lo, hi), 1, overhead_ms, sampled)]


def stage_prefill_ms(cm: CostModel, prompt_len: float, bounds: tuple[int, ...], overhead_ms: Sequence[float] | float = 0.0,
                     sampled: bool = False) -> list[float]:
    """Per-stage times of a generation's first pass, the prefill: each stage runs its layers over
    the whole prompt (`CostModel.prefill_layers`), stage 1 after embedding it and before drafting
    from its last position, the last stage then verifies that draft with the head on the last
    position. The runtime hands the prompt on stage by stage (runtime/pipeline.py: PREFILL), and
    stage 1 drafts on from the end of its own part, up to its in-flight cap, while later stages
    are still in the prompt: so when the decode clock starts (the first token, clock.py) the
    pipeline already holds up to k drafted tokens, which a one-token first pass never shows (a deep
    pipeline's short generations are mispriced without it: docs/design-notes.md)."""
    return [float(t) for t in _stages(cm, bounds, lambda lo, hi: cm.prefill_layers(prompt_len, lo, hi), prompt_len,
                                      overhead_ms, sampled)]


def _stages(cm: CostModel, bounds: tuple[int, ...], layers_of, embed_n: float, overhead_ms: Sequence[float] | float,
            sampled: bool):
    """One pass per stage: its layers (`layers_of(lo, hi)`), stage 1 also the embedding of `embed_n`
    tokens and the draft from the last one, the last stage the head on one position (and at T > 0
    the verifier's draw), every stage its fixed cost of a pass."""
    k = len(bounds) - 1
    over = [float(overhead_ms)] * k if np.ndim(overhead_ms) == 0 else [float(o) for o in overhead_ms]
    out = []
    for m in range(k):
        t = layers_of(bounds[m], bounds[m + 1])
        if m == 0:
            t = t + cm.embed(embed_n) + draft_tail_ms(cm, sampled)
        if m == k - 1:
            t = t + cm.head(1)
            if sampled:
                t = t + cm.sample_full()
        out.append(t + over[m])
    return out


def stage_parts(cm: CostModel, plan: PlanLike, context: float) -> list[StagePart]:
    """Where one token's time goes in each stage of a resolved plan at one context, before co-run
    slowdown: the pieces `stage_ms` adds up (its layers; stage 1 the embedding and the exit head;
    the last stage the LM head; at T > 0 the draws; every stage its fixed cost of a pass), and the
    hop to the next stage as `ppsd_costs` prices it. A stage's parts but the hop sum to its
    `stage_ms`; the slowest stage bounds the pipeline's rate while drafts are accepted."""
    bounds, k = plan.stage_bounds, len(plan.stage_bounds) - 1
    roles, c = cm.pass_overheads(k), np.array([float(context)])
    hop = max(float(plan.hop_ms or 0.0), cm.transit(k))
    parts = []
    for m in range(k):
        name = f"stage {m + 1} (L{bounds[m]}–L{bounds[m + 1] - 1})"
        pieces = [("layers", float(cm.layers(c, bounds[m], bounds[m + 1])[0]))]
        if m == 0:
            pieces += [("embedding", cm.embed(1)), ("exit head", cm.exit_head())]
            if plan.sampled:
                pieces.append(("draw", cm.sample_draft()))
        if m == k - 1:
            pieces.append(("head", cm.head(1)))
            if plan.sampled:
                pieces.append(("draw", cm.sample_full()))
        pieces.append(("overhead", roles.of_stage(m, k)))
        if m < k - 1:
            pieces.append(("hop", hop))
        parts += [StagePart(name, part, float(ms)) for part, ms in pieces]
    return parts


def draft_tail_ms(cm: CostModel, sampled: bool = False) -> float:
    """What stage 1 does after its hidden state has left: the exit head, and at T > 0 the draw."""
    return cm.exit_head() + (cm.sample_draft() if sampled else 0.0)


def stage1_checkpoints(cm: CostModel, context: np.ndarray, exit_layer: int) -> np.ndarray:
    """Where stage 1 looks at the epoch board during its pass, as offsets (ms, before co-run
    slowdown) from the pass's start: after the embedding and after each of layers [0, E) (the
    runtime asks before each layer and once after the last, `runtime/pipeline.py`). [E + 1][T]."""
    ctx = np.asarray(context, dtype=float)
    rows = [np.full(ctx.shape, cm.embed(1), dtype=float)]
    for layer in range(exit_layer):
        rows.append(rows[-1] + cm.layers(ctx, layer, layer + 1))
    return np.stack(rows)


@dataclass
class PPSDCosts:
    """Everything the PPSD engines need (docs/model.md): per-stage cost arrays over the stream's positions,
    the hop, each stage's device and the co-run factors. Stage 1's pass is embed + layers [0, E) + the
    overhead before its send, then its tail (`exit_ms`: the exit head and the rest of the overhead), both
    at the pass's co-run factor. It can drop a stale pass only at its `checkpoints` (the pass start too):
    with the "local" launch it hears of a rejection on the epoch board at the commit, under "torchrun"
    only from the verdict its in-flight cap makes it read. Either way it starts the i-th pass of a cycle
    (i >= cap) only once the verdict on the (i − cap)-th is in (`inflight_cap`: k; 0 = none)."""

    stage: list[np.ndarray]  # [k][T] ms
    hop_ms: float
    placement: tuple[int, ...]
    factors: list  # factors[b]: slowdown with b devices busy, or factors[m][b] per stage (`loaded_factors`)
    exit_ms: np.ndarray | None = None  # [T] ms, stage[0]'s tail after the send (exit head, overhead)
    jitter_cv: float = 0.0  # relative spread of a pass: softens the restart race (sim/model/restart.py)
    # [P][T] ms from stage 1's pass start where it may abandon a stale pass (`stage1_checkpoints`); between two
    # of them, and from the last to the pass's end, it cannot. None: anywhere before the exit head
    checkpoints: np.ndarray | None = None
    launch: str = "local"
    inflight_cap: int | None = None  # None: k (the runtime's); 0: no cap
    overhead_ms: float = 0.0  # stage 1's fixed cost per pass, already in `stage` (reported, not added again)
    # a generation's first pass per stage for a prompt of L tokens (`stage_prefill_ms`); None: a
    # one-token pass like the others
    first_pass: Callable[[float], list[float]] | None = None
    # what the last stage adds to a pass whose draft it rejects (T > 0: all of q, the exit head again)
    reject_ms: float = 0.0
    # τ: after a draft less confident than this, stage 1 waits for its verdict instead of running it
    # (`halts`; a cycle ends there, and no stale pass follows it)
    draft_stop: float | None = None

    def stage_for(self, stream: Stream) -> list[np.ndarray]:
        """`stage` with each generation's first token priced as its prefill (`first_pass` at the
        prompt length, the context that token sees) and `reject_ms` on the last stage's passes
        whose draft the stream rejects: what the engines run."""
        if self.first_pass is None and not self.reject_ms:
            return self.stage
        t = len(stream.context)
        out = [np.array(np.broadcast_to(s, (t,)), dtype=float) for s in self.stage]
        if self.first_pass is not None:
            for j in np.flatnonzero(stream.seg_start).tolist():
                for m, ms in enumerate(self.first_pass(float(stream.context[j]))):
                    out[m][j] = ms
        if self.reject_ms:
            out[-1][~np.asarray(stream.match, dtype=bool)] += self.reject_ms
        return out

    def expected_last(self, alpha: float) -> np.ndarray:
        """The last stage's expected pass at i.i.d. acceptance α (closed forms): `reject_ms` at 1 − α."""
        return self.stage[-1] + (1.0 - float(alpha)) * self.reject_ms

    @property
    def cap(self) -> int:
        return self.k if self.inflight_cap is None else int(self.inflight_cap)

    def segments(self, j) -> np.ndarray:
        """Stage 1's uncuttable stretches of the pass of token(s) j: offsets [S + 1][...] from the
        pass's start (before co-run slowdown); stretch s runs from row s to row s + 1."""
        j = np.asarray(j)
        end = self.stage[0][j]
        if self.checkpoints is None:
            return np.stack([end - self.exit_array()[j], end])
        return np.concatenate([np.zeros((1, *np.shape(j))), np.asarray(self.checkpoints)[:, j], end[None]])

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

    def factor(self, index_in_cycle: int, stage: int, ahead: int | None = None) -> float:
        """Co-run slowdown of the pass of the i-th token of a cycle at stage m (`corun_factor`)."""
        return corun_factor(self.factors, self.num_devices, index_in_cycle, stage, ahead)

    def halts(self, stream: Stream) -> np.ndarray:
        """halt[j]: stage 1 waits for the verdict on token j's draft before its next pass (the draft is
        less confident than the plan's stop τ); all False without a stop."""
        if self.draft_stop is None:
            return np.zeros(stream.tokens, dtype=bool)
        return require_confidence(stream) < self.draft_stop


def ppsd_costs(profile, plan: PlanLike, context: np.ndarray) -> PPSDCosts:
    """The costs of `plan` on `profile`: with the profile's control plane at k stages (each role's
    `Profile.pass_overheads_ms(k)` added to its stage's passes, stage 1's after its send in its
    tail, the hop at least `Profile.transit_ms(k)`)."""
    cm = cost_model(profile, plan.exit_head)
    placement = plan.devices()
    d = len(set(placement))
    k = len(plan.stage_bounds) - 1
    roles, transit = cm.pass_overheads(k), cm.transit(k)
    over = [roles.of_stage(m, k) for m in range(k)]
    # what stage 1 does after its hidden state has left (the draft's send, the loop) runs while
    # stage 2 works: it belongs to the tail, with the exit head, not to the hand-over
    tail = draft_tail_ms(cm, plan.sampled) + max(roles.first - roles.first_before_send, 0.0)
    first_pass = lru_cache(maxsize=None)(
        lambda prompt_len: stage_prefill_ms(cm, prompt_len, plan.stage_bounds, over, plan.sampled))
    stage = stage_ms(cm, context, plan.stage_bounds, over, plan.sampled)
    # the restart race's noise (sim/model/restart.py): the pass jitter, or the host's on each hand-over (an
    # absolute spread per message, relative to stage 1's pass), whichever is larger (docs/model.md)
    w0 = float(np.median(stage[0])) if np.size(stage[0]) else 0.0
    jitter = max(pass_jitter_cv(profile), cm.hop_jitter(k) / w0 if w0 > 0 else 0.0)
    return PPSDCosts(stage=stage,
                     hop_ms=max(float(plan.hop_ms or 0.0), transit),
                     placement=placement, factors=loaded_factors(profile, stage, d),
                     exit_ms=np.full(np.shape(context), tail, dtype=float),
                     jitter_cv=jitter,
                     checkpoints=stage1_checkpoints(cm, context, plan.stage_bounds[1]),
                     launch=plan.launch, overhead_ms=roles.first, first_pass=first_pass,
                     reject_ms=cm.exit_head() if plan.sampled else 0.0,
                     draft_stop=_checked_stop(profile, plan, k, d))


def _checked_stop(profile, plan: PlanLike, k: int, devices: int) -> float | None:
    """The plan's confidence stop, where the engines price one: traces with confidences (greedy, or
    sampled at the plan's temperature) and one device per stage (the local launch a `Plan` with a
    stop already has)."""
    stop = plan.draft_stop
    if stop is None:
        return None
    profile.require_confidence(plan.exit_head, plan.temperature)
    if devices < k:
        raise UserError("a PPSD confidence stop is priced with one device per stage",
                        "drop --draft-stop-confidence or the shared placement")
    return float(stop)


def loaded_factors(profile, stage: list[np.ndarray], devices: int) -> list[list[float]]:
    """factors[m][b]: stage m's co-run slowdown with b devices busy: the profile's (`corun_factors`) and,
    while the pipeline is loaded on one device per stage, the lock step's wait (`lockstep_factor` at the
    stages' median passes); a two-stage pipeline whose last stage is the shorter prices that stage at the
    waiting cut (`waiting_last_stage`). Stages sharing a device queue instead (the event model
    serialises them): no lock step. docs/model.md."""
    base = corun_factors(profile, devices)
    k = len(stage)
    lock = 1.0
    if devices == k:
        loaded = base[min(devices, len(base) - 1)]
        lock = lockstep_factor([float(np.median(s)) * loaded for s in stage], pass_jitter_cv(profile))
    factors = [[float(f) * (lock if b >= 2 else 1.0) for b, f in enumerate(base)] for _ in range(k)]
    return waiting_last_stage(profile, factors, stage, devices, lock)


def waiting_last_stage(profile, factors: list[list[float]], stage: list[np.ndarray], devices: int,
                       lock: float) -> list[list[float]]:
    """`factors` with the last stage's row at the profile's `waiting_last_stage_slowdown` where a two-stage
    pipeline on two devices has its last stage the shorter: that stage then sleeps on each hidden state
    before its pass, and the runtime probe's cut where it does so measures what its pass costs. The same
    figure holds when stage 1 sits idle beside it (the pass that ends a cycle a confidence stop cut): the
    runtime's timelines show such passes no faster than co-running ones. Unchanged without that
    measurement."""
    wait = profile.waiting_last_stage_slowdown()
    if wait is None or len(stage) != 2 or devices != 2 or np.median(stage[1]) >= np.median(stage[0]):
        return factors
    out = [list(row) for row in factors]
    out[1] = [1.0] + [wait * (lock if b >= 2 else 1.0) for b in range(1, len(out[1]))]
    return out
