"""EESD: draft-then-verify early-exit speculation on one device.

A round drafts γ' = min(γ, tokens left in the generation − 1) tokens, each through embed + layers
[0, E) + the exit head at contexts c, c+1, ...; then verifies them in one pass at c: layers [E, N)
and the LM head on γ'+1 positions, plus embed + layers [0, E) for the last draft (the earlier
positions' layer-E states were computed while drafting). It keeps the leading matches a and one
token from the verifier. With i.i.d. acceptance α a round commits (1 − α^(γ+1)) / (1 − α) tokens
(Leviathan et al. 2023).

With a confidence stop τ (`Plan.draft_stop`) a round stops drafting after its first draft whose
confidence (the exit head's top-1 probability) is below τ, γ still the cap: the traces' joint
(match, confidence) sequence decides both how many drafts a round makes and how many it keeps.
A trace holds each draft's confidence with a correct prefix; drafts after a round's first mismatch
are priced with the confidence of the same positions (their own prefix is wrong, so their
confidence is not recorded), which changes only how many drafts that round wastes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import simpy

from ppsd.errors import UserError
from sim.model.cost_model import CostModel, cost_model
from sim.model.stops import StopOdds, drafts_before_stop, require_confidence, stop_odds
from sim.model.streams import Stream
from ppsd.modes import Mode
from sim.schemes.base import PlanLike, PlanSize, RunStats, Scheme, seg_ends
from sim.timeline import Event



# --- unit costs ---------------------------------------------------------------------------------

def draft_ms(cm: CostModel, context: np.ndarray, exit_layer: int) -> np.ndarray:
    """One draft: embed + layers [0, E) + exit head."""
    return cm.embed(1) + cm.layers(context, 0, exit_layer) + cm.exit_head()


def verify_ms(cm: CostModel, context: np.ndarray, last_context: np.ndarray, exit_layer: int, gamma) -> np.ndarray:
    """Verification of γ drafts: layers [E, N) and the head on γ+1 positions at the round's context,
    plus embed + layers [0, E) for the last draft. γ may be an array (shortened final rounds); γ=0
    is a plain AR step."""
    gamma = np.broadcast_to(np.asarray(gamma), np.shape(context))
    out = np.empty(np.shape(context), dtype=float)
    for g in np.unique(gamma):
        sel = gamma == g
        n = int(g) + 1
        out[sel] = (cm.layers(context[sel], exit_layer, cm.num_layers, n) + cm.head(n)
                    + cm.embed(1) + cm.layers(last_context[sel], 0, exit_layer))
    return out


@dataclass
class EESDCosts:
    """A plan's draft and verification prices (every context is priced on demand: a round's drafts
    run at contexts past the stream's own)."""

    cm: CostModel
    exit_layer: int
    draft_len: int
    sampled: bool = False  # T > 0: each draft draws over the exit head's vocabulary, and every round
    # draws one token over the whole vocabulary (the replacement at a rejection, else the bonus token)
    draft_stop: float | None = None  # τ: a round stops drafting after a draft less confident than this

    def draft(self, context: np.ndarray) -> np.ndarray:
        t = draft_ms(self.cm, context, self.exit_layer)
        return t + self.cm.sample_draft() if self.sampled else t

    def verify(self, context: np.ndarray, gamma) -> np.ndarray:
        """Verification of a round at `context` whose last draft ran at context + γ."""
        t = verify_ms(self.cm, context, context + gamma, self.exit_layer, gamma)
        return t + self.cm.sample_full() if self.sampled else t


# --- ideal formulas (the papers') ------------------------------------------------------------------

def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """E[tokens committed by one EESD round] = (1 − α^(γ+1)) / (1 − α)."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def leviathan_speedup(alpha: float, gamma: int, c: float) -> float:
    """Speedup of speculative decoding when a draft costs c full passes and verification one pass."""
    return expected_tokens_per_round(alpha, gamma) / (gamma * c + 1.0)


def time_per_token(draft: float, verify: float, alpha: float, gamma: int) -> float:
    """Expected ms per committed token: a round's γ drafts and one verification over its tokens."""
    return (gamma * draft + verify) / expected_tokens_per_round(alpha, gamma)


def stopped_time_per_token(draft: float, verify_at, odds: StopOdds, gamma: int) -> float:
    """Expected ms per committed token of EESD with a confidence stop under i.i.d. odds: a round makes
    n drafts (n = j < γ when draft j is its first less confident than τ, else γ) and keeps a of them,
    a >= q when its first q − 1 drafts match above τ and its q-th matches; `verify_at(n)` prices a
    verification of n drafts."""
    keep_going = 1.0 - odds.low
    sure = keep_going * odds.match_high  # a draft that matches and lets the round draft on
    tokens = 1.0 + sum(sure ** (q - 1) * odds.alpha for q in range(1, gamma + 1))
    p_n = [keep_going ** (j - 1) * odds.low for j in range(1, gamma)] + [keep_going ** (gamma - 1)]
    time = sum(p * (j * draft + verify_at(j)) for j, p in zip(range(1, gamma + 1), p_n))
    return time / tokens


# --- exact replay: round boundaries without a pointer chase --------------------------------------

def rounds(stream: Stream, gamma: int):
    """(start position, drafts γ', accepted a) of every EESD round, fully vectorised.

    Why no pointer chase is needed: a round from p either stops at its first mismatch j (next
    round at j + 1) or accepts all γ' drafts and takes the verifier's token at p + γ' (next at
    p + γ' + 1, which is j + 1 again when that token is a mismatch j, and the generation's end when
    γ' was shortened there). So every position after a mismatch, and every generation start, begins
    a round (a "reset"); between two resets r < r' the rounds start at r, r + γ + 1, r + 2(γ + 1), …
    (the event model is the pointer chase; the tests compare both)."""
    t = stream.tokens
    seg_end = seg_ends(stream)
    pos = np.arange(t)
    zeros = np.flatnonzero(~stream.match)
    nz = np.append(zeros, t)[np.searchsorted(zeros, pos)]  # first mismatch at or after p
    run = np.minimum(nz, seg_end) - pos  # leading matches from p within the generation
    g = np.minimum(gamma, seg_end - pos - 1)
    a = np.minimum(run, g)
    reset = stream.seg_start.copy()
    reset[0] = True
    reset[zeros[zeros + 1 < t] + 1] = True
    r = np.flatnonzero(reset)
    span = np.append(r[1:], t) - r
    per = -(-span // (gamma + 1))  # rounds between consecutive resets (ceil)
    first = np.repeat(np.cumsum(per) - per, per)
    s = np.repeat(r, per) + (np.arange(int(per.sum())) - first) * (gamma + 1)
    return s.astype(np.int64), g[s], a[s]


def stopped_rounds(stream: Stream, gamma: int, draft_stop: float):
    """(start position, drafts n, accepted a) of every EESD round with a confidence stop: a round from
    p drafts p, p + 1, ... up to γ' and stops after the first draft less confident than τ; it keeps
    the leading matches among its n drafts. Each position's n and a are vectorised; the rounds are a
    pointer chase (a round's length no longer repeats between mismatches)."""
    conf = require_confidence(stream)
    t = stream.tokens
    seg_end = seg_ends(stream)
    pos = np.arange(t)
    zeros = np.flatnonzero(~stream.match)
    nz = np.append(zeros, t)[np.searchsorted(zeros, pos)]
    run = np.minimum(nz, seg_end) - pos
    g = np.minimum(gamma, seg_end - pos - 1)
    lows = np.flatnonzero(conf < draft_stop)
    first_low = np.append(lows, t)[np.searchsorted(lows, pos)]  # first unsure draft at or after p
    n = np.minimum(g, first_low - pos + 1)  # the unsure draft is made, then the round stops drafting
    a = np.minimum(run, n)
    starts, p, step = [], 0, (a + 1).tolist()
    while p < t:
        starts.append(p)
        p += step[p]
    s = np.asarray(starts, dtype=np.int64)
    return s, n[s], a[s]


# --- the scheme ---------------------------------------------------------------------------------

class EESD(Scheme):
    mode = Mode.EESD
    size = PlanSize("γ", "g", "draft_len", default=3)

    def check(self, plan: PlanLike, num_layers: int, num_devices: int | None) -> None:
        super().check(plan, num_layers, num_devices)
        if not 1 <= plan.draft_len <= 64:
            raise UserError(f"draft length {plan.draft_len} is out of range", "choose --draft-len between 1 and 64")

    def resolved(self, plan: PlanLike, profile) -> dict:
        cost_model(profile, plan.exit_head)  # raises UserError for an unknown exit head
        return super().resolved(plan, profile)

    def tokens_per_round(self, plan: PlanLike, alpha: float) -> float:
        return expected_tokens_per_round(alpha, plan.draft_len)

    def context_slack(self, plan: PlanLike) -> int:
        return plan.draft_len + 1  # a round's drafts and the verifier's token

    def without_stop_words(self) -> str:
        return "the best fixed γ"

    def batch_closed_forms(self, costs, batch, context, exit_layer, alpha, gammas):
        # every sequence live, a round costing the same whatever it accepts
        return [(expected_tokens_per_round(alpha, int(g)) * costs.ar_step(batch, context)
                 / costs.eesd_round(batch, context, exit_layer, int(g)), int(g)) for g in gammas]

    def batch_holes(self, draft_len: int | None) -> int:
        return int(draft_len or 1)  # a round's drafts, all rejected

    def batch_acceptance(self, rounds: list[int], draft_len: int | None) -> tuple[float | None, float | None]:
        if not rounds:
            return None, None
        return sum(rounds) / (len(rounds) * int(draft_len or 1)), statistics.fmean(rounds) + 1

    def how_it_pays(self, plan: PlanLike, alpha: float) -> str:
        return (f"Drafting γ = {plan.draft_len} tokens per round commits about "
                f"{self.tokens_per_round(plan, alpha):.2f} tokens per verification. ")

    def unit_costs(self, profile, plan: PlanLike, context: np.ndarray) -> EESDCosts:
        stop = getattr(plan, "draft_stop", None)
        if stop is not None:
            profile.require_confidence(plan.exit_head, plan.temperature)
        return EESDCosts(cost_model(profile, plan.exit_head), plan.exit_layer, plan.draft_len, plan.sampled, stop)

    def event_model(self, stream: Stream, costs: EESDCosts, record: bool = False) -> RunStats:
        """One process on one device: γ' drafts, then a verification; the round keeps the leading
        matches and the verifier's token."""
        @lru_cache(maxsize=None)
        def draft(c):
            return float(costs.draft(np.array([c]))[0])

        @lru_cache(maxsize=None)
        def verify(c, g):
            return float(costs.verify(np.array([c]), g)[0])

        env = simpy.Environment()
        gamma = costs.draft_len
        match = stream.match.tolist()
        tau = costs.draft_stop
        conf = require_confidence(stream).tolist() if tau is not None else None
        ctx = stream.context.tolist()
        seg_end = seg_ends(stream).tolist()
        t = stream.tokens
        stats = RunStats(0.0, 0)
        row = "device 0"

        def decode():
            p = 0
            while p < t:
                g = min(gamma, seg_end[p] - p - 1)  # no drafting past the generation's end
                if tau is not None:  # an unsure draft ends the drafting: verify what there is
                    g = drafts_before_stop(conf, p, g, tau)
                start = env.now
                for q in range(g):
                    c = draft(ctx[p] + q)
                    s = env.now
                    yield env.timeout(c)
                    if record:
                        stats.events.append(Event("draft", row, s / 1e3, c / 1e3, token=p + q))
                v = verify(ctx[p], g)
                s = env.now
                yield env.timeout(v)
                # accept the leading drafts that match the full model's tokens; the first mismatch
                # (or the end of the drafts) is replaced by the verifier's own token
                a = 0
                while a < g and match[p + a]:
                    a += 1
                if record:
                    stats.events.append(Event("verify", row, s / 1e3, v / 1e3, token=p,
                                              args={"drafts": g, "accepted": a, "round_ms": env.now - start}))
                stats.rounds_a.append(a)
                stats.rounds_rejected.append(a < g)
                p += a + 1

        env.process(decode())
        env.run()
        stats.time_ms = env.now
        stats.tokens = t
        stats.stage_busy_ms = [env.now]
        stats.device_busy_ms = {0: env.now}
        return stats

    def replay(self, stream: Stream, costs: EESDCosts) -> RunStats:
        if costs.draft_stop is None:
            s, g, a = rounds(stream, costs.draft_len)
        else:
            s, g, a = stopped_rounds(stream, costs.draft_len, costs.draft_stop)
        c = stream.context[s]
        total = float(np.sum(costs.verify(c, g)))
        if len(g) and g.max() > 0:
            # every round's q-th draft (q < γ') at context c + q, priced in one call
            q = np.arange(int(g.max()), dtype=float)
            total += float(np.sum(costs.draft((c[:, None] + q[None, :])[q[None, :] < g[:, None]])))
        return RunStats(total, stream.tokens, a.tolist(), (a < g).tolist(), [total], {0: total})

    def closed_form(self, profile, plan: PlanLike, alpha: float, context: float) -> float:
        return self.closed_forms(profile, plan, [alpha], context)[0]

    def closed_forms(self, profile, plan: PlanLike, alphas, context: float) -> list[float]:
        c = np.array([float(context)])
        costs = self.unit_costs(profile, plan, c)
        g = plan.draft_len
        draft = float(costs.draft(c)[0])
        if costs.draft_stop is not None:  # i.i.d. odds of the profile's (match, confidence) pairs at α
            odds = stop_odds(profile, plan.exit_layer, plan.exit_head, costs.draft_stop, plan.temperature)
            verify_at = lru_cache(maxsize=None)(lambda n: float(costs.verify(c, n)[0]))
            return [stopped_time_per_token(draft, verify_at, odds.at(float(a)), g) for a in alphas]
        verify = float(costs.verify(c, g)[0])
        return [time_per_token(draft, verify, float(a), g) for a in alphas]

    def sweep_plans(self, base, exit_layer, *, num_layers, gammas, devices, draft_stops=()):
        # a stop shortens only rounds of two drafts or more: at γ = 1 it is the fixed plan again
        return [replace(base, mode=self.mode, exit_layer=exit_layer, draft_len=g, draft_stop=tau)
                for tau in (None, *draft_stops) for g in gammas if tau is None or g >= 2]
