"""Single-process decoders: AR (the baseline) and EESD (draft-then-verify), gpt-fast style.

Both read top to bottom: prefill, then a loop that commits tokens until `max_new` or EOS.
EESD's draft and its remainder are two small functions over ONE KV cache: the draft runs layers
[0, E) + the exit head one token at a time; the verification runs layers [0, E) for the last draft
only, then layers [E, N) for all γ+1 positions at once from the cached layer-E states, and the
longest matching prefix plus the verifier's token is kept; the cache is cropped past it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from runtime.acceptance import ForcedTrace, Sampler
from sim.timeline import Event


@dataclass
class SeqRecord:
    """What one decoded sequence did. Times in seconds; decode excludes prefill (the first token)."""

    tokens: list[int]
    prefill_s: float
    decode_s: float
    rounds: list[int] = field(default_factory=list)  # accepted drafts per verification round
    verified: int = 0  # drafts checked by the verifier
    busy_s: list[float] = field(default_factory=list)  # per stage, compute time in the decode phase
    events: list[Event] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)  # per stage process (PPSD), its CPU seconds over the sequence

    @property
    def decode_tokens(self) -> int:
        return max(len(self.tokens) - 1, 0)


class _Clock:
    """perf_counter relative to a run origin, plus optional timeline events (one row per stage)."""

    def __init__(self, origin: float, record: bool):
        self.origin, self.record = origin, record
        self.events: list[Event] = []

    def add(self, name: str, row: str, start: float, end: float, token: int | None = None, **args) -> None:
        if self.record:
            self.events.append(Event(name, row, start - self.origin, end - start, token, args))


def _done(tokens: list[int], max_new: int, eos: set[int] | None) -> bool:
    return len(tokens) >= max_new or (bool(eos) and tokens[-1] in eos)


def _trim(tokens: list[int], max_new: int, eos: set[int] | None) -> list[int]:
    tokens = tokens[:max_new]
    if eos:
        for i, t in enumerate(tokens):
            if t in eos:
                return tokens[: i + 1]
    return tokens


def prefill(model, cache, prompt: list[int]) -> torch.Tensor:
    """Whole model on the prompt; returns the last position's logits [V]."""
    ids = torch.tensor([prompt], dtype=torch.long)
    h = model.forward_layers(model.embed(ids), 0, model.num_layers, cache, 0)
    return model.head(h[:, -1:])[0, -1]


def _start(model, prompt: list[int], sampler: Sampler, clock):
    """Prefill a fresh cache and choose the first token (timed as "prefill"); both decoders start here."""
    cache = model.new_cache()
    t0 = time.perf_counter()
    tok, _ = sampler.choose(prefill(model, cache, prompt))
    t1 = time.perf_counter()
    clock.add("prefill", "stage 1", t0, t1, tok)
    return cache, [tok], t0, t1


@torch.inference_mode()
def generate_ar(model, prompt: list[int], max_new: int, sampler: Sampler, eos: set[int] | None = None,
                origin: float | None = None, timeline: bool = False) -> SeqRecord:
    """Plain autoregressive decoding with a KV cache: one full pass per token."""
    clock = _Clock(time.perf_counter() if origin is None else origin, timeline)
    n_layers = model.num_layers
    cache, tokens, t0, t1 = _start(model, prompt, sampler, clock)
    pos = len(prompt)
    step = torch.empty((1, 1), dtype=torch.long)
    while not _done(tokens, max_new, eos):
        s = time.perf_counter()
        step[0, 0] = tokens[-1]
        h = model.forward_layers(model.embed(step), 0, n_layers, cache, pos)
        tok, _ = sampler.choose(model.head(h)[0, -1])
        tokens.append(tok)
        pos += 1
        clock.add("forward", "stage 1", s, time.perf_counter(), tok)
    t2 = time.perf_counter()
    return SeqRecord(tokens, t1 - t0, t2 - t1, busy_s=[t2 - t1], events=clock.events)


def draft(model, cache, token: int, pos: int, exit_layer: int, sampler: Sampler, drafter=None,
          confident: list[float] | None = None):
    """Layers [0, E) + exit head on one token at `pos` -> (layer-E state [1,1,H], draft token, q).
    The exit head is the shared one, or `drafter`'s (runtime/heads/: trained / reduced vocabulary).
    With `confident` (a list), the draft's confidence is appended to it: the top-1 probability of the
    exit head's distribution (`draft_confidence`), what a confidence stop reads."""
    ids = torch.tensor([[token]], dtype=torch.long)
    h_exit = model.forward_layers(model.embed(ids), 0, exit_layer, cache, pos)
    if confident is None:
        d, q = drafter.choose(sampler, h_exit) if drafter is not None else sampler.choose(model.head(h_exit)[0, -1])
        return h_exit, d, q
    logits = drafter.logits(h_exit)[0, -1] if drafter is not None else model.head(h_exit)[0, -1]
    d, q = drafter.choose_logits(sampler, logits) if drafter is not None else sampler.choose(logits)
    confident.append(float(draft_confidence(logits)))
    return h_exit, d, q


def draft_confidence(logits: torch.Tensor) -> torch.Tensor:
    """The top-1 probability of the distribution each position's logits [..., V] define (softmax at
    T = 1), from the largest logit and the log-sum-exp: no softmax over the vocabulary is kept. The
    profiler records it along the traces, the runtime's confidence stop reads it per draft."""
    x = logits.float()
    return torch.exp(x.max(-1).values - torch.logsumexp(x, -1))


def verify(model, cache, h_exits: list[torch.Tensor], last_draft: int, pos: int, exit_layer: int) -> torch.Tensor:
    """The remainder: layers [0, E) for the last draft (at pos + len(h_exits)), then layers [E, N) on
    all γ+1 layer-E states at once starting at `pos`. Returns the full model's logits [γ+1, V]."""
    gamma = len(h_exits)
    if gamma:
        ids = torch.tensor([[last_draft]], dtype=torch.long)
        h_exits = h_exits + [model.forward_layers(model.embed(ids), 0, exit_layer, cache, pos + gamma)]
    hs = torch.cat(h_exits, dim=1) if len(h_exits) > 1 else h_exits[0]
    h = model.forward_layers(hs, exit_layer, model.num_layers, cache, pos)
    return model.head(h)[0]


@torch.inference_mode()
def generate_eesd(model, prompt: list[int], max_new: int, sampler: Sampler, exit_layer: int, gamma: int,
                  eos: set[int] | None = None, forced: ForcedTrace | None = None, origin: float | None = None,
                  timeline: bool = False, drafter=None, draft_stop: float | None = None) -> SeqRecord:
    """Early-exit self-speculative decoding (draft γ, then verify γ+1 positions at once). With
    `draft_stop` τ a round stops drafting after its first draft less confident than τ."""
    clock = _Clock(time.perf_counter() if origin is None else origin, timeline)
    cache, tokens, t0, t1 = _start(model, prompt, sampler, clock)
    rounds: list[int] = []
    verified = 0
    pos = len(prompt)  # position of tokens[-1], which the cache does not hold yet
    while not _done(tokens, max_new, eos):
        # never draft past what can still be committed (a round commits at most γ+1 tokens)
        g = min(gamma, max_new - len(tokens) - 1)
        s = time.perf_counter()
        h_exits, drafts, qs = [], [], []
        confident = [] if draft_stop is not None else None
        cur = tokens[-1]
        for i in range(g):
            h_exit, cur, q = draft(model, cache, cur, pos + i, exit_layer, sampler, drafter, confident)
            h_exits.append(h_exit)
            drafts.append(cur)
            qs.append(q)
            if confident is not None and confident[-1] < draft_stop:  # unsure: verify what there is
                g = i + 1
                break
        if g == 0:  # last token: a plain step through layers [0, E) then [E, N)
            ids = torch.tensor([[tokens[-1]]], dtype=torch.long)
            h_exits = [model.forward_layers(model.embed(ids), 0, exit_layer, cache, pos)]
        m = time.perf_counter()
        clock.add("draft", "stage 1", s, m, drafts=g)
        logits = verify(model, cache, h_exits, cur, pos, exit_layer)
        accepted = 0
        for i, d in enumerate(drafts):
            gen_pos = len(tokens)  # generated index of the token this draft proposes
            ok, tok = sampler.verify(d, qs[i], logits[i], None if forced is None else forced.accept(gen_pos))
            tokens.append(tok)
            verified += 1
            if not ok:
                break
            accepted += 1
        else:
            tok, _ = sampler.choose(logits[g])
            tokens.append(tok)
        rounds.append(accepted)
        pos += accepted + 1
        cache.crop(pos)  # keep the tokens committed before the new last one
        clock.add("verify", "stage 1", m, time.perf_counter(), tok, accepted=accepted)
        if eos and any(t in eos for t in tokens[-(accepted + 1):]):
            break
    t2 = time.perf_counter()
    return SeqRecord(_trim(tokens, max_new, eos), t1 - t0, t2 - t1, rounds, verified, [t2 - t1], clock.events)
