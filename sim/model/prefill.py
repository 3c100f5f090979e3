"""Prefill: the prompt's pass before the first token, for time to first token and end-to-end times.

Every generation of a stream starts with a prefill of its prompt (in trace replay the prompt
lengths the profile recorded; else `prompt_len`). The whole-model prefill comes from the profile
(`Profile.prefill_ms`: measured per prompt length, or extrapolated from the tables); each scheme
says what its prefill adds (`Scheme.first_token_ms`: PPSD hands the prompt through its stages).
Decode figures (`speedup_vs_ar`) leave prefill out; end-to-end ones include it.
"""

from __future__ import annotations

import numpy as np

from sim.model.streams import Stream

_CACHE: dict = {}


def prompt_lengths(stream: Stream, prompt_len: int | None = None) -> np.ndarray:
    """Each generation's prompt length: `prompt_len` for all, else the context its first token saw."""
    starts = np.flatnonzero(stream.seg_start)
    if prompt_len is not None:
        return np.full(len(starts), float(prompt_len))
    return stream.context[starts].astype(float)


def whole_prefill_ms(profile, lengths: np.ndarray) -> np.ndarray:
    """The whole model's prefill per prompt length (ms), cached per profile and length."""
    key = id(profile)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not profile:
        if len(_CACHE) > 16:
            _CACHE.clear()
        hit = _CACHE[key] = (profile, {})
    table = hit[1]
    out = np.empty(len(lengths))
    for i, L in enumerate(lengths.tolist()):
        v = table.get(L)
        if v is None:
            v = table[L] = float(profile.prefill_ms(L))
        out[i] = v
    return out


def check_prompt_len(prompt_len) -> int | None:
    from ppsd.errors import UserError

    if prompt_len is None:
        return None
    if int(prompt_len) < 1:
        raise UserError(f"--prompt-len {prompt_len} must be at least 1", "give the prompt length in tokens, e.g. 512")
    return int(prompt_len)
