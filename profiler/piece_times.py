"""The pieces of one decode step timed now, against what a profile measured: how far the machine has
drifted, piece by piece.

A speedup is a ratio, so a machine uniformly faster or slower than when profiled changes no
prediction; what moves speedups is the pieces drifting apart (the memory-bound LM head by another
factor than the layers, which moves every plan that drafts with a small exit head: docs/design-notes.md).
`time_pieces` re-times the pieces with the profiler's own step timer (`profiler.latency.timed_step`:
embedding, the layers one by one, final norm + LM head; n = 1 at the profile's smallest context) and,
given trained exit heads, each head's draft (`profiler.heads.evaluate.measure_latency`, as the
profiler times them). `PieceTimes.scale` is what `Profile.retimed` prices with: `ppsd validate
--retime` takes it right before each plan runs; `python -m bench.piece_drift` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

APART_PCT = 10.0  # head and layers drifting this many points apart moves speedups, not just speed
STEP_PIECES = ("layers", "head", "embedding")


@dataclass(frozen=True)
class PieceScale:
    """Factors (now / profiled) on each priced piece: every layer, the LM head (+ final norm), the
    embedding, and each named exit head's draft (`exit_heads`; a head not named keeps its price)."""

    layers: float = 1.0
    head: float = 1.0
    embedding: float = 1.0
    exit_heads: dict[str, float] = field(default_factory=dict)
    # a co-run slowdown over the profile's, for a what-if pricing (`bench.ppsd_sitting`); `ppsd validate
    # --retime` leaves it at 1: a pipeline's co-run slowdown stays the profile's runtime probe's
    corun: float = 1.0

    def drift_pct(self) -> dict[str, float]:
        """{piece: % now against the profile}, exit heads as `exit_head:<name>`, the co-run slowdown as
        `corun` when it was measured."""
        out = {k: round(100.0 * (getattr(self, k) - 1.0), 2) for k in STEP_PIECES}
        out.update({f"exit_head:{k}": round(100.0 * (v - 1.0), 2) for k, v in sorted(self.exit_heads.items())})
        if self.corun != 1.0:
            out["corun"] = round(100.0 * (self.corun - 1.0), 2)
        return out


@dataclass(frozen=True)
class PieceTimes:
    """Each piece's median ms timed now and as the profile priced it (same n = 1, same context)."""

    context: int
    repeats: int
    now_ms: dict[str, float]
    profile_ms: dict[str, float]

    @property
    def scale(self) -> PieceScale:
        def f(k: str) -> float:
            then = self.profile_ms.get(k) or 0.0
            return float(self.now_ms[k] / then) if then > 0 and k in self.now_ms else 1.0

        heads = {k.split(":", 1)[1]: f(k) for k in self.now_ms if k.startswith("exit_head:")}
        return PieceScale(layers=f("layers"), head=f("head"), embedding=f("embedding"), exit_heads=heads)

    @property
    def step_scale(self) -> float:
        """A whole decode step's pieces (embedding, layers, LM head) timed now over the profile's."""
        return float(sum(self.now_ms[k] for k in STEP_PIECES) / sum(self.profile_ms[k] for k in STEP_PIECES))

    def summary(self) -> dict:
        """{context, repeats, pieces: {name: {profile_ms, now_ms, drift_pct}}, apart_pct, flagged,
        note}: the head and the layers drifting more than APART_PCT points apart is flagged."""
        return summarize(self.profile_ms, self.now_ms, self.context, self.repeats)


def summarize(then: dict, now: dict, context: int, repeats: int) -> dict:
    """The drift of each piece (ms profiled `then`, ms timed `now`; at least layers, head and
    embedding) and whether the head and the layers drifted apart by more than APART_PCT points."""
    pieces = {k: {"profile_ms": round(then[k], 4), "now_ms": round(now[k], 4),
                  "drift_pct": round(100.0 * (now[k] / then[k] - 1.0), 2) if then[k] > 0 else None}
              for k in now if k in then}
    apart = abs(pieces["head"]["drift_pct"] - pieces["layers"]["drift_pct"])
    flagged = apart > APART_PCT
    note = (f"the LM head drifted {pieces['head']['drift_pct']:+.1f}% and the layers {pieces['layers']['drift_pct']:+.1f}% "
            f"since the profile ({apart:.1f} points apart): speedups of plans that run the LM head a different number "
            "of times than AR (small exit heads, EESD) are stale; re-profile, or validate with --retime"
            if flagged else f"the LM head and the layers drifted alike (within {APART_PCT:g} points): speedups hold")
    return {"context": context, "repeats": repeats, "pieces": pieces, "apart_pct": round(apart, 2),
            "flagged": bool(flagged), "note": note}


def time_pieces(profile, adapter, heads=None, repeats: int = 30, warmup: int = 5) -> PieceTimes:
    """The pieces of one decode step timed now (`repeats` steps after `warmup`), and with `heads`
    (trained exit heads, `profiler.heads.profiling.load_for_profile`) each head's one-token draft
    that the profile has a price for."""
    import numpy as np
    import torch

    from profiler.latency import StepClock, filled_cache, timed_step

    context = int(profile.context_values[0])
    clock = StepClock(adapter.device)
    cache = filled_cache(adapter, context, seed=0)
    ids = torch.randint(0, adapter.vocab_size, (1, 1), generator=torch.Generator().manual_seed(0))
    for _ in range(warmup):
        timed_step(adapter, cache, ids, context, clock)
    laps = np.array([timed_step(adapter, cache, ids, context, clock) for _ in range(repeats)])
    # laps columns: embedding, position setup, the layers, head (as the profiler's grid reads them)
    now = {"embedding": float(np.median(laps[:, 0])), "layers": float(np.median(laps[:, 2:-1].sum(axis=1))),
           "head": float(np.median(laps[:, -1]))}
    # the pieces are timed here as the profiler times them, before its calibration to whole steps
    # (latency.whole_step.calibration): compare like with like
    cal = profile.piece_calibration
    then = {"embedding": float(profile.embed_ms(1)) / cal, "head": float(profile.head_ms(1)) / cal,
            "layers": float(sum(profile.layer_ms(layer, 1, context) for layer in range(profile.num_layers))) / cal}
    priced = (profile.latency.get("exit_heads") or {}) if heads is not None else {}
    if priced:
        from profiler.heads.evaluate import measure_latency
        from profiler.heads.profiling import vocab_sizes_of
        from profiler.heads.timing import draft_path_evictor

        mid = heads.exits[len(heads.exits) // 2]
        # timed as the profile timed them: after the draft's layers when its entries say so
        cold = any((h.get("timing") == "after_draft_layers") for h in priced.values())
        timed, _ = measure_latency(heads, mid, vocab_sizes_of(heads), n_values=(1,), repeats=max(repeats, 5),
                                   evict=draft_path_evictor(adapter, mid) if cold else None)
        for name, lat in timed.items():
            if name in priced:
                now[f"exit_head:{name}"] = float(lat["median_ms"][0])
                then[f"exit_head:{name}"] = float(profile.exit_head_ms(name, 1))
    return PieceTimes(context=context, repeats=repeats, now_ms=now, profile_ms=then)
