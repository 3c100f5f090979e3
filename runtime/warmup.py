"""A short warm-up pass: what an untimed pass decodes when a run asks for `warmup_tokens`.

Why: a warm-up only has to bring a process to its steady state (the decode path's code, the
allocator, an exit head's first call, a pipeline's transport between fresh stage processes); a
whole pass over the prompts does that no better than a few tokens of each, and costs as much as the
timed pass. In `ppsd validate --turns` every chunk of a PPSD plan starts its stage processes afresh,
so a whole warm-up pass would double each chunk (docs/design-notes.md). A short pass decodes each prompt's first
`WARMUP_PROMPT_TOKENS` tokens and at most `warmup_tokens` new ones.
"""

from __future__ import annotations

WARMUP_PROMPT_TOKENS = 32  # prompt tokens a short warm-up prefills (a long prompt's prefill warms nothing more)


def warmup_view(prompt: list[int], max_new: int, warmup_tokens: int) -> tuple[list[int], int]:
    """(prompt, new tokens) of a warm-up pass over this sequence: the whole of it when
    `warmup_tokens` is 0, else its first WARMUP_PROMPT_TOKENS prompt tokens and at most
    `warmup_tokens` new ones."""
    if warmup_tokens < 0:
        raise ValueError(f"warmup_tokens {warmup_tokens} must be 0 (whole passes) or more")
    if not warmup_tokens:
        return prompt, max_new
    return list(prompt[:WARMUP_PROMPT_TOKENS]), min(int(max_new), int(warmup_tokens))
