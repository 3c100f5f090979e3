"""Which acceptance trace judges each served request's drafts.

A request's drafts are judged by its own prompt's trace at the policy's exit layer, as the profile recorded
it (greedy: position j of a generation matches or not, `sim/model/streams.py`). A prompt the profile never
traced takes a seeded draw among the traced prompts of its category (any traced prompt where its category
has none). Decode position j of a request (the token after the prefill's is position 0, as in the batch
replay) reads the trace at j; positions past the trace's end wrap around to its start, so a request asking
for more tokens than its prompt's generation had repeats that generation's pattern of matches.

For a prediction's replications (`drawn`), every prompt instead takes a trace drawn as `sim/intervals`
draws them (`replay_interval`): its category's traced prompts resampled, one picked, and the whole set's
acceptance moved together by the shift the profile's prompts show (`PromptTraces.shift`): the spread of
traffic of prompts like the profile's, not of the profile's own prompts.
"""

from __future__ import annotations

import numpy as np

from ppsd.exit_heads import SHARED
from sim.intervals.shift import shifted
from sim.intervals.traces import PromptTraces, prompt_traces


def match_runs(match: np.ndarray) -> np.ndarray:
    """run[j]: how many positions from j on match in a row (0 where j misses), within the array."""
    n = len(match)
    idx = np.arange(n)
    miss = np.where(match, n, idx)
    next_miss = np.minimum.accumulate(miss[::-1])[::-1] if n else miss
    return next_miss - idx


class RequestAcceptance:
    """Each prompt's trace (0/1 per position) and, per request, its matches and runs of matches over the
    request's decode positions (tiled from the trace, wrapping round)."""

    def __init__(self, exit_layer: int, by_prompt: dict[str, np.ndarray], alpha: float, source: str):
        self.exit_layer = int(exit_layer)
        self.by_prompt = by_prompt
        self.alpha = float(alpha)  # the profile's acceptance at this exit (the policies' prior)
        self.source = source
        self._runs: dict = {}

    def runs(self, prompt_id: str, positions: int) -> tuple[list[bool], list[int]]:
        """(match, run) lists over `positions` decode positions of a request sending `prompt_id`."""
        key = (prompt_id, int(positions))
        got = self._runs.get(key)
        if got is None:
            match = np.resize(self.by_prompt[prompt_id] >= 0.5, max(int(positions), 0))
            got = self._runs[key] = (match.tolist(), match_runs(match).tolist())
        return got

    def drafted_alpha(self, prompt_ids) -> float:
        """The pooled acceptance of these prompts' traces (what the workload drafts like)."""
        got = [self.by_prompt[p] for p in set(prompt_ids)]
        total = sum(len(p) for p in got)
        return float(sum(p.sum() for p in got) / total) if total else self.alpha


def _same_category(traces: PromptTraces, category: str) -> list[int]:
    mine = [i for i, c in enumerate(traces.categories or []) if c == category]
    return mine or list(range(len(traces)))


def _prompts(requests) -> dict[str, str]:
    """prompt id -> category, in first-seen order."""
    out: dict[str, str] = {}
    for r in requests:
        out.setdefault(r.prompt_id, r.category)
    return out


def load_traces(profile, exit_layer: int, head: str = SHARED) -> PromptTraces:
    return prompt_traces(profile, int(exit_layer), head=head)


def own(traces: PromptTraces, requests, seed: int = 0) -> RequestAcceptance:
    """The point assignment: each prompt its own trace, an untraced prompt a seeded same-category draw."""
    where = {p: i for i, p in enumerate(traces.prompt_ids)}
    rng = np.random.default_rng([int(seed), traces.exit_layer, 17])
    by_prompt, drawn = {}, 0
    for pid, category in _prompts(requests).items():
        i = where.get(pid)
        if i is None:
            pool = _same_category(traces, category)
            i, drawn = int(pool[rng.integers(0, len(pool))]), drawn + 1
        by_prompt[pid] = traces.prob[i]
    source = "own traces" if not drawn else f"own traces; {drawn} untraced prompts drew a same-category trace"
    return RequestAcceptance(traces.exit_layer, by_prompt, traces.alpha, source)


def drawn(traces: PromptTraces, requests, rng: np.random.Generator) -> RequestAcceptance:
    """One replication's assignment (see the module doc): per category stratum its prompts resampled, each
    prompt of the workload a pick from its stratum's resample, the set shifted by one draw of the profile's
    between-group spread."""
    prompts = _prompts(requests)
    sources = {pid: tuple(traces.by_category(cat)) for pid, cat in prompts.items()}
    shifts = {src: traces.shift(src) for src in set(sources.values())}
    z_set = rng.standard_normal()
    pools = {src: np.asarray(src)[rng.integers(0, len(src), len(src))] for src in shifts}
    by_prompt = {}
    for pid, src in sources.items():
        j = int(pools[src][rng.integers(0, len(src))])
        by_prompt[pid] = shifted(traces.prob[j], shifts[src].tau * z_set, rng, traces.sampled)
    return RequestAcceptance(traces.exit_layer, by_prompt, traces.alpha, "drawn")
