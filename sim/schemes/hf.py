"""transformers' own early-exit assisted generation (`generate(..., assistant_early_exit=E)`) and its AR
(plain greedy `generate`), as schemes of plans with `Plan.runtime == "hf"` (runtime/hf_assisted.py runs them).

What transformers 5.x does each round, read from its source and confirmed by counting its forward calls
(`profiler/hf_overhead.py` records what it saw in the profile's `latency.hf` block):

- draft length γ_r: "constant" keeps γ0; "heuristic" adds 2 after a round whose drafts were all
  accepted and otherwise takes 1 away, never below 1 (`update_candidate_strategy`), and the value
  carries over to the next `generate` call (written back into the model's generation config), so a
  stream's generations share it; a round drafts min(γ_r, tokens left − 1) (`_calculate_new_tokens`),
  a round with no room drafts nothing and still counts as "all accepted" (+2).
- drafting: the drafter is the model cut after E layers with its own final norm + LM head (ppsd's
  shared exit head). Its cache is cropped to L − 2 (L = sequence length) each round and the first
  draft pass re-feeds the last 2 tokens (`refeed: "tail"`). Called without an attention mask,
  transformers 5.24 instead re-feeds the *whole sequence* on top of the cropped cache every round (an
  E-layer prefill per round, and drafts that read the text twice: `refeed: "sequence"`); the runtime
  passes the mask, as `generate(**tokenizer(...))` does, and the profiler records which it saw. Later
  drafts are one-token passes at the grown cache.
- verification: the whole model (every layer, from its own cache: no layer-E state is reused) on the
  last token and the γ_r drafts, logits on γ_r + 1 positions; the leading matches and the verifier's
  token are kept.
- host overhead beyond those pieces, measured by the profiler against the profile's own prices:
  `ar_token_overhead_ms` per AR step, `round_overhead_ms` + `draft_overhead_ms` per draft per round.
- a confidence stop (`Plan.draft_stop`, transformers' `assistant_confidence_threshold`; ppsd's runs set
  it to 0 unless a plan gives one): `ConfidenceCriteria` stops the drafter's `generate` after a draft whose
  probability is below it, priced from the traces' confidences. Early exit never adapts it (the adaptation
  runs only in `AssistedCandidateGenerator` itself, with scikit-learn): its default is a fixed 0.4.
- acceptance: the drafter re-reading the sequence on top of a stale cache does not draft what the
  clean exit head does (transformers 5.24: drafts match the full model less often). The profiler
  measures the drafter's match rate per exit along real assisted runs; the scheme thins the profile's
  clean match trace to it (each match kept with probability hf α / clean α, seeded), so which
  positions are easy stays the trace's.

The first round of a generation drafts on the prompt and verifies with the prompt pass: it is the
"prefill" in both the runtime's clock and here (its tokens and time are outside the decode speed;
the schedule still moves). `time_ms` is the decode time scaled to every token, as the runtime's
tokens per second would give it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ppsd.errors import UserError
from sim.model.cost_model import CostModel, cost_model
from sim.model.streams import Stream
from sim.schemes.ar import AR
from sim.schemes.base import PlanLike, RunStats, seg_ends
from sim.model.stops import drafts_before_stop, require_confidence, stop_odds
from sim.schemes.eesd import EESD, stopped_time_per_token
from sim.timeline import Event


HF_BLOCK = "hf"  # profile.json latency.hf
MIN_SHARE = 0.05  # a fitted overhead below −95% of the pieces it sits on is noise: never price a step under this


def hf_block(profile) -> dict:
    """The profile's `latency.hf` block, or a one-line UserError saying how to add it."""
    block = (getattr(profile, "latency", None) or {}).get(HF_BLOCK)
    if not block:
        path = getattr(profile, "path", "the profile")
        raise UserError(f"profile {path} has no latency.hf block (transformers' assisted-generation overheads "
                        "and drafter acceptance)",
                        f"run `ppsd profile add-hf {path}` on the profiled machine, or profile with --hf-exits")
    return block


def acceptance_scale(block: dict, exit_layer: int) -> float:
    """hf α / clean α at `exit_layer`: measured there, else interpolated between measured exits
    (ends held)."""
    acc = {int(k): v for k, v in (block.get("acceptance") or {}).items()}
    if not acc:
        return 1.0
    exits = sorted(acc)
    scales = [float(acc[e].get("scale", 1.0)) for e in exits]
    return float(np.interp(int(exit_layer), exits, scales))


def next_gamma(gamma: int, drafts: int, accepted: int, schedule: str) -> int:
    """transformers' `update_candidate_strategy` for one round."""
    if schedule == "constant":
        return gamma
    return gamma + 2 if accepted == drafts else max(1, gamma - 1)


def thin(stream: Stream, scale: float, seed: int, exit_layer: int) -> Stream:
    """The stream with each match kept with probability `scale` (≥ 1: unchanged); the drafts'
    confidences stay the trace's."""
    if scale >= 1.0:
        return stream
    rng = np.random.default_rng([int(seed), int(exit_layer), 29])
    keep = rng.random(stream.tokens) < scale
    return Stream(stream.match & keep, stream.context, stream.seg_start, stream.source, stream.confidence)


@dataclass
class HFCosts:
    cm: CostModel
    profile: object
    exit_layer: int
    draft_len: int
    schedule: str
    refeed: str
    ar_overhead: float
    round_overhead: float
    draft_overhead: float
    scale: float
    seed: int = 0
    draft_stop: float | None = None  # transformers' assistant_confidence_threshold (None: 0, no stop)
    _rounds: dict = field(default_factory=dict, repr=False, compare=False)  # (context, g) -> ms

    def refeed_ms(self, n: float, cached: float) -> float:
        """The first draft pass: n tokens through layers [0, E) + the head on the last."""
        cm, E = self.cm, self.exit_layer
        if n <= max(cm.n_grid):
            return float(cm.embed(n) + cm.layers(np.array([cached]), 0, E, n)[0] + cm.head(1))
        # a prefill-sized pass: the profile's whole prefill at n tokens, its layers' share cut to E
        pre = float(self.profile.prefill_ms(n)) - cm.embed(n) - cm.head(1)
        c0 = np.array([float(cm.c_grid[0])])
        share = float(cm.layers(c0, 0, E)[0]) / max(float(cm.layers(c0, 0, cm.num_layers)[0]), 1e-12)
        return float(cm.embed(n) + max(pre, 0.0) * share + cm.head(1))

    def draft_ms(self, cached: float) -> float:
        cm = self.cm
        return float(cm.embed(1) + cm.layers(np.array([cached]), 0, self.exit_layer)[0] + cm.head(1))

    def verify_ms(self, context: float, g: int) -> float:
        cm, n = self.cm, g + 1
        return float(cm.embed(n) + cm.layers(np.array([context]), 0, cm.num_layers, n)[0] + cm.head(n))

    def round_ms(self, context: float, g: int) -> float:
        """A round at `context` (tokens in the verifier's cache; the sequence is context + 1 long)
        drafting g tokens (g = 0: no drafter call, a plain step)."""
        key = (context, g)
        hit = self._rounds.get(key)
        if hit is None:
            hit = self._rounds[key] = self._round_ms(context, g)
        return hit

    def _round_ms(self, context: float, g: int) -> float:
        if g == 0:
            t = self.verify_ms(context, 0)
            return max(t + self.ar_overhead, MIN_SHARE * t)
        seq = context + 1
        n1 = seq if self.refeed == "sequence" else min(2.0, seq)
        cached = seq - 2
        t = self.refeed_ms(n1, cached)
        for q in range(2, g + 1):
            t += self.draft_ms(cached + n1 + q - 2)
        t += self.verify_ms(context, g)
        return max(t + self.round_overhead + g * self.draft_overhead, MIN_SHARE * t)


def hf_costs(profile, plan: PlanLike) -> HFCosts:
    block = hf_block(profile)
    return HFCosts(cost_model(profile), profile, int(plan.exit_layer or 0), int(plan.draft_len), plan.schedule,
                   str(block.get("refeed", "sequence")), float(block.get("ar_token_overhead_ms", 0.0)),
                   float(block.get("round_overhead_ms", 0.0)), float(block.get("draft_overhead_ms", 0.0)),
                   acceptance_scale(block, plan.exit_layer or 0), draft_stop=getattr(plan, "draft_stop", None))


def hf_ar_step_ms(profile, context: np.ndarray) -> np.ndarray:
    """transformers' plain greedy generate: a full pass + its per-step host overhead."""
    block = hf_block(profile)
    cm = cost_model(profile)
    pieces = cm.embed(1) + cm.layers(np.asarray(context, float), 0, cm.num_layers) + cm.head(1)
    return np.maximum(pieces + float(block.get("ar_token_overhead_ms", 0.0)), MIN_SHARE * pieces)


def simulate_rounds(stream: Stream, costs: HFCosts, record: bool = False) -> RunStats:
    """The round-by-round model (module doc); exact for the schedule, the same code for both engines."""
    match = stream.match.tolist()
    ctx = stream.context.tolist()
    seg_end = seg_ends(stream).tolist()
    t = stream.tokens
    gamma = costs.draft_len
    tau = costs.draft_stop
    conf = require_confidence(stream).tolist() if tau is not None else None
    stats = RunStats(0.0, t)
    clock = 0.0
    decode_ms, decode_tokens = 0.0, 0
    p = 0
    first = True
    while p < t:
        if stream.seg_start[p]:
            first = True
        g = max(0, min(gamma, seg_end[p] - p - 1))
        if tau is not None:  # ConfidenceCriteria: the drafter stops after a draft less probable than τ
            g = drafts_before_stop(conf, p, g, tau)
        a = 0
        while a < g and match[p + a]:
            a += 1
        dur = costs.round_ms(ctx[p], g)
        if record:
            stats.events.append(Event("round", "device 0", clock / 1e3, dur / 1e3, token=p,
                                      args={"drafts": g, "accepted": a, "prefill_round": first}))
        clock += dur
        if not first:  # the first round is the generation's prefill (module doc)
            decode_ms += dur
            decode_tokens += a + 1
            stats.rounds_a.append(a)
            stats.rounds_rejected.append(a < g)
        gamma = next_gamma(gamma, g, a, costs.schedule)
        first = False
        p += a + 1
    scale = t / decode_tokens if decode_tokens else 1.0
    stats.time_ms = decode_ms * scale
    stats.stage_busy_ms = [stats.time_ms]
    stats.device_busy_ms = {0: stats.time_ms}
    stats.span_ms = clock
    return stats


class HFAssisted(EESD):
    """Plans Mode.EESD with runtime "hf": transformers' assisted generation at an early exit (an EESD
    plan in every other respect: its label, checks, size γ0 and budget are EESD's)."""

    def label(self, plan: PlanLike) -> str:
        return f"{super().label(plan)} [hf{'' if plan.schedule == 'constant' else ' ' + plan.schedule}]"

    def in_words(self, plan: PlanLike) -> str:
        return f"transformers' assisted generation at exit layer {plan.exit_layer}, γ0={plan.draft_len} ({plan.schedule})"

    def check(self, plan: PlanLike, num_layers: int, num_devices: int | None) -> None:
        super().check(plan, num_layers, num_devices)
        if plan.exit_head != "shared":
            raise UserError(f"transformers' early exit drafts with the model's own head, not {plan.exit_head!r}",
                            "drop --exit-head with --runtime hf")

    def unit_costs(self, profile, plan: PlanLike, context: np.ndarray) -> HFCosts:
        if getattr(plan, "draft_stop", None) is not None:
            profile.require_confidence(plan.exit_head)
        return hf_costs(profile, plan)

    def _stream(self, stream: Stream, costs: HFCosts) -> Stream:
        return thin(stream, costs.scale, costs.seed, costs.exit_layer)

    def event_model(self, stream: Stream, costs: HFCosts, record: bool = False) -> RunStats:
        return simulate_rounds(self._stream(stream, costs), costs, record)

    def replay(self, stream: Stream, costs: HFCosts) -> RunStats:
        return simulate_rounds(self._stream(stream, costs), costs, False)

    def closed_forms(self, profile, plan: PlanLike, alphas, context: float) -> list[float]:
        return [self.closed_form(profile, plan, float(a), context) for a in alphas]

    def closed_form(self, profile, plan: PlanLike, alpha: float, context: float) -> float:
        """Constant schedule, i.i.d. acceptance α·scale: a round's time over its expected tokens (with a
        confidence stop, over the profile's i.i.d. odds of it: `sim.schemes.eesd.stopped_time_per_token`)."""
        costs = hf_costs(profile, plan)
        a = min(1.0, alpha * costs.scale)
        g = plan.draft_len
        if costs.draft_stop is not None:
            odds = stop_odds(profile, plan.exit_layer, plan.exit_head, costs.draft_stop)
            return stopped_time_per_token(0.0, lambda n: costs.round_ms(float(context), n), odds.at(a), g)
        tokens = g + 1.0 if a >= 1.0 else (1.0 - a ** (g + 1)) / (1.0 - a)
        return costs.round_ms(float(context), g) / tokens

    def baseline_ms(self, profile, plan: PlanLike, context: np.ndarray) -> np.ndarray:
        return hf_ar_step_ms(profile, context)

    def sweep_plans(self, base, exit_layer, *, num_layers, gammas, devices, draft_stops=()):
        if base.exit_head != "shared":
            return []
        # transformers' assistant_confidence_threshold beside each schedule and γ0 (at a constant γ0 = 1 a
        # stop is the plan without one again; the heuristic schedule grows γ past it)
        return [replace(base, mode=self.mode, exit_layer=exit_layer, draft_len=g, runtime="hf", schedule=s,
                        draft_stop=tau)
                for tau in (None, *draft_stops) for s in ("constant", "heuristic") for g in gammas
                if tau is None or g >= 2 or s == "heuristic"]


class HFAR(AR):
    """Plans Mode.AR with runtime "hf": transformers' plain greedy generate."""

    def label(self, plan: PlanLike) -> str:
        return f"{super().label(plan)} [hf]"

    def unit_costs(self, profile, plan: PlanLike, context: np.ndarray) -> np.ndarray:
        return hf_ar_step_ms(profile, context)

    def closed_form(self, profile, plan: PlanLike, alpha: float, context: float) -> float:
        return float(hf_ar_step_ms(profile, np.array([float(context)]))[0])

    def baseline_ms(self, profile, plan: PlanLike, context: np.ndarray) -> np.ndarray:
        return hf_ar_step_ms(profile, context)
