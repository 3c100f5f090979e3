"""The restart rule of PPSD, shared by the event model, the fast replay and the closed form.

When a correction (flush) reaches stage 1, stage 1 drops its speculative pass between layers, but
an exit head it has started (one matmul) runs to its end first; the corrected token enters after
it. Whether a flush lands in the layers or in the head is a race between two long chains of
passes, often decided by a millisecond or less (with balanced stages, the flush comes back just as
stage 1 finishes the layers of its next pass). Real pass times jitter, so a real run sees a mix of
both outcomes. With the profile's jitter σ (the flush time's spread relative to stage 1's
schedule) the expected entry time is

    fr + Σ_heads ∫_{hs}^{he} (he − x) φ_σ(x − fr) dx
       = fr + Σ_heads (he − fr)[Φ(b) − Φ(a)] − σ[φ(a) − φ(b)],   a = (hs − fr)/σ, b = (he − fr)/σ

over the exit heads [hs, he] of stage 1's passes begun before the flush; with σ = 0 it is the
deterministic rule (wait for the head the flush lands in). σ grows like a random walk over the
cycle: σ = cv · sqrt(2 · w₀ · fr), cv the relative spread of one pass, w₀ stage 1's pass time and fr
the flush's time since the restart (both chains are about fr / w₀ passes long). cv is the timing
model's one pass jitter, or the hand-over's where that is larger (docs/model.md).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr

# A stretch that ends this many σ before the commit adds at most σ·φ(8) ≈ 5e-15 σ: nothing. The
# engines skip such stretches (they are most of a long cycle's passes).
WINDOW_SIGMAS = 8.0
TIE_MS = 1e-7  # a flush this close after stage 1's last layer counts as arriving right at it (float noise)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def begun_by(commit):
    """The latest start of a stage-1 pass that a commit at `commit` can find running: a pass that
    would start after it never does (stage 1 reads the board first)."""
    return commit - TIE_MS


def window_opens(commit, sigma):
    """Where the jitter window of a commit at `commit` opens: a stretch that ends before it adds
    nothing to the wait (every engine skips it)."""
    return commit - WINDOW_SIGMAS * sigma - TIE_MS


def window_closes(commit, sigma):
    """Where that window closes: a stretch that starts after it adds nothing either."""
    return commit + WINDOW_SIGMAS * sigma + TIE_MS


def jitter_sigma(cv: float, first_pass_ms, flush_ms):
    """σ of the flush time against stage 1's schedule (ms); 0 when the profile has no jitter."""
    if cv <= 0.0:
        return np.zeros(np.shape(flush_ms)) if np.ndim(flush_ms) else 0.0
    return cv * np.sqrt(2.0 * np.maximum(first_pass_ms, 0.0) * np.maximum(flush_ms, 0.0))


def head_wait(head_start, head_end, flush, sigma):
    """Expected wait for one exit head [head_start, head_end] caused by a flush at `flush` (see the
    module doc); elementwise over arrays. σ = 0: head_end − flush when the flush lands inside the
    head (strictly after its start, by more than TIE_MS), else 0."""
    hs, he, fr, sg = (np.asarray(v, dtype=float) for v in (head_start, head_end, flush, sigma))
    hard = np.where((hs < fr - TIE_MS) & (fr < he), he - fr, 0.0)
    if not np.any(sg > 0.0):
        return hard
    s = np.where(sg > 0.0, sg, 1.0)
    a, b = (hs - fr) / s, (he - fr) / s
    soft = (he - fr) * (ndtr(b) - ndtr(a)) - s * _INV_SQRT_2PI * (np.exp(-0.5 * a * a) - np.exp(-0.5 * b * b))
    return np.where(sg > 0.0, np.maximum(soft, 0.0), hard)


def board_wait(seg_start, seg_end, commit, hop, sigma):
    """The runtime's restart rule with the local epoch board (elementwise over stage 1's uncuttable
    stretches [seg_start, seg_end]: a layer, the embedding, or the pass's tail of overhead and exit
    head). The last stage posts a rejection on the board at `commit`; stage 1 drops its pass at the
    next place it looks (a stretch's end) and the corrected token enters when the verdict arrives,
    at commit + hop, or when stage 1 leaves the stretch, whichever is later. The wait beyond
    commit + hop for one stretch: (seg_end − hop − commit)⁺ when the commit lands inside it; with
    jitter σ its expectation over the commit time (`head_wait` over [seg_start, seg_end − hop]), so a
    stretch that begins just after the commit still counts a little. 0 for stretches no longer than
    the hop. Callers pass the stretches of stage 1's passes begun before the commit: a pass that
    would start after it never does (stage 1 looks at the board first), as in `head_wait`'s rule."""
    hs, se = np.asarray(seg_start, dtype=float), np.asarray(seg_end, dtype=float)
    he = se - float(hop)
    ok = he > hs
    w = head_wait(hs, np.where(ok, he, hs), commit, sigma)
    return np.where(ok, w, 0.0)
