"""The decode clock of a PPSD run, as the runtime keeps it (`runtime/pipeline.py`, `runtime/measure.py`).

The runtime times a generation from its first token (the last stage's end of the prefill, t_first)
to its last commit (t_last), and counts the tokens after the first: decode tokens/s is
(L − 1) / (t_last − t_first). Meanwhile stage 1 has not waited for t_first: it drafts on from the
end of its own part of the prefill, so when the clock starts the pipeline is already full. A model
that starts the clock when stage 1 starts the first token pays the pipeline's fill (one trip through
every stage, about k passes long) once per generation, which the runtime never shows: on 32-token
generations at k = 8 that alone under-predicted the emulated runtime by 10-20%.

Stage 1 gets further ahead because a generation's first pass is its prefill (stage_costs.py:
`stage_prefill_ms`): later stages spend a whole prompt's time on it, while stage 1 drafts on up to
its in-flight cap.

So the PPSD engines stop their clock per generation as the runtime does: from the generation's
first commit to its last, for L − 1 tokens, and report the generation's time scaled to all L of its
tokens (time × L / (L − 1)), so that tokens over time is the runtime's decode rate while the token
count stays the stream's. AR priced the same way is unchanged (L − 1 steps for L − 1 tokens), so
`speedup_vs_ar` compares like with like. A one-token generation has no decode interval: its single
pass counts, from stage 1's start to the commit.
"""

from __future__ import annotations

import numpy as np


def decode_time_ms(first_commit, last_commit, lengths, single_ms) -> float:
    """Σ over generations of (last − first commit) · L / (L − 1); `single_ms` for L = 1 (the pass
    from stage 1's start to the commit). All arrays per generation, times in ms."""
    first, last = np.asarray(first_commit, dtype=float), np.asarray(last_commit, dtype=float)
    n, single = np.asarray(lengths, dtype=float), np.asarray(single_ms, dtype=float)
    many = n > 1
    scaled = np.where(many, (last - first) * n / np.where(many, n - 1, 1.0), single)
    return float(np.sum(scaled))


def decode_busy_scale(lengths) -> float:
    """The factor that puts the stages' decode-phase busy time (prefill passes left out, as the
    runtime does) on the scaled decode clock: Σ L / Σ (L − 1) over generations of more than one
    token, so that busy / time is the runtime's busy over its decode interval."""
    n = np.asarray(lengths, dtype=float)
    n = n[n > 1]
    return float(n.sum() / (n - 1).sum()) if n.size else 1.0
