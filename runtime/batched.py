"""Batched decoders: AR and EESD over B sequences at once, gpt-fast style.

Each pass carries every live sequence: AR one token each, an EESD draft one token each through
layers [0, E) and the exit head, the verification γ+1 positions each through layers [E, N). Every
sequence keeps its own position and commits its own accepted prefix, so acceptance is ragged.

The KV cache stays one rectangle [B, heads, slots, dim]: every sequence appends the same slots each
pass, and `BatchState.valid` marks which slots a sequence still attends to. A prompt shorter than the
longest is left-padded with invalid slots; a rejected draft's slot turns invalid (a hole) instead of
being cropped, except the trailing slots every sequence rejected, which are cropped. A sequence that
finishes (its token budget or EOS) leaves the batch: its row is dropped from the cache and the state.
A sequence that joins a running batch (the serving loop, `runtime/serve/engine.py`) is prefilled alone,
then stacked onto the rectangle: the narrower of the two is left-padded with invalid slots (`join`).

Greedy output equals each sequence's own AR output up to the arithmetic of batched passes: `ppsd run
--batch B` compares it with AR at the same batch size and at batch 1 (`runtime/batch_run.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from runtime.acceptance import Sampler
from runtime.decoding import _done, _trim


@dataclass
class BatchRecord:
    """What one batch did. Times in seconds; decode excludes the prefill and the first token."""

    tokens: list[list[int]]  # per sequence, in the order given
    prefill_s: float
    decode_s: float
    rounds: list[list[int]] = field(default_factory=list)  # per sequence: accepted drafts per round
    finish_s: list[float] = field(default_factory=list)  # per sequence: decode time until it left the batch
    passes: int = 0  # forward passes of the decode phase (AR steps, or EESD rounds)
    slots: int = 0  # KV-cache slots per sequence at the end (committed tokens plus holes and padding)

    @property
    def decode_tokens(self) -> int:
        return sum(max(len(t) - 1, 0) for t in self.tokens)


@dataclass
class BatchState:
    """The live sequences of a batch: their cache rows, slot masks, positions and tokens."""

    cache: object
    valid: torch.Tensor  # [B, slots] bool: slots each sequence attends to
    pos: torch.Tensor  # [B] long: the position of each sequence's last token (not yet in the cache)
    rows: list[int]  # each live row's index in the caller's list of sequences
    tokens: list[list[int]]  # per live row

    def keep(self, rows: list[int]) -> None:
        """Drop every live row not in `rows` (indices into the live rows)."""
        if len(rows) == len(self.rows):
            return
        index = torch.tensor(rows, dtype=torch.long, device=self.valid.device)
        for layer in list(self.cache.keys):
            self.cache.keys[layer] = self.cache.keys[layer].index_select(0, index)
            self.cache.values[layer] = self.cache.values[layer].index_select(0, index)
        self.valid, self.pos = self.valid.index_select(0, index), self.pos.index_select(0, index)
        self.rows = [self.rows[r] for r in rows]
        self.tokens = [self.tokens[r] for r in rows]

    def pad_left(self, slots: int) -> None:
        """Widen every row by `slots` invalid slots on the left (zeros no query attends to): a joining
        sequence's cache meets the rectangle's width, or the rectangle meets a longer newcomer's."""
        if slots <= 0:
            return
        for layer in list(self.cache.keys):
            k, v = self.cache.keys[layer], self.cache.values[layer]
            pad = (k.shape[0], k.shape[1], slots, k.shape[3])
            self.cache.keys[layer] = torch.cat([k.new_zeros(pad), k], dim=2)
            self.cache.values[layer] = torch.cat([v.new_zeros(pad), v], dim=2)
        self.valid = torch.cat([self.valid.new_zeros((self.valid.shape[0], slots)), self.valid], dim=1)

    def join(self, other: "BatchState") -> None:
        """Append `other`'s rows (a sequence joining a running batch): the narrower of the two is
        left-padded with invalid slots to the wider one's width, then the rows are stacked."""
        width, theirs = self.valid.shape[1], other.valid.shape[1]
        self.pad_left(theirs - width)
        other.pad_left(width - theirs)
        for layer in list(self.cache.keys):
            self.cache.keys[layer] = torch.cat([self.cache.keys[layer], other.cache.keys[layer]], dim=0)
            self.cache.values[layer] = torch.cat([self.cache.values[layer], other.cache.values[layer]], dim=0)
        self.valid = torch.cat([self.valid, other.valid], dim=0)
        self.pos = torch.cat([self.pos, other.pos])
        self.rows = self.rows + other.rows
        self.tokens = self.tokens + other.tokens

    @property
    def width(self) -> int:
        """Slots every row holds (committed tokens, holes and padding): the cache's width."""
        return int(self.valid.shape[1])

    def crop_common_head(self) -> int:
        """Drop the leading columns no row attends to (a departed row's older slots; each row's prompt starts
        valid, so what stays starts at the oldest row's prompt) -> how many."""
        attended = self.valid.any(dim=0).nonzero()
        first = int(attended.min()) if len(attended) else 0
        if first:
            for layer in list(self.cache.keys):
                self.cache.keys[layer] = self.cache.keys[layer][..., first:, :]
                self.cache.values[layer] = self.cache.values[layer][..., first:, :]
            self.valid = self.valid[:, first:]
        return first

    def crop_common_tail(self) -> None:
        """Crop the trailing slots no sequence attends to (every sequence rejected them)."""
        attended = self.valid.any(dim=0).nonzero()
        length = int(attended.max()) + 1 if len(attended) else 0
        if length < self.valid.shape[1]:
            self.cache.crop(length)
            self.valid = self.valid[:, :length]


def pass_mask(valid: torch.Tensor, pending: int, n: int) -> torch.Tensor:
    """Boolean [B, 1, n, slots + pending + n] mask (True = attend) for n new tokens a sequence: its
    valid slots, `pending` slots this round already appended (all attended), and its new tokens causally.
    Every query also attends to its own slot, so a padding row never attends to nothing (no NaN)."""
    b = valid.shape[0]
    new = torch.ones((b, pending + n), dtype=torch.bool, device=valid.device)
    keys = torch.cat([valid, new], dim=1).unsqueeze(1).expand(b, n, -1).clone()  # [B, n, K]
    past = keys.shape[-1] - n
    q = torch.arange(n, device=valid.device).unsqueeze(1) + past
    k = torch.arange(keys.shape[-1], device=valid.device).unsqueeze(0)
    keys &= k <= q
    keys |= k == q
    return keys.unsqueeze(1)


def _positions(pos: torch.Tensor, n: int) -> torch.Tensor:
    return pos.unsqueeze(1) + torch.arange(n, device=pos.device).unsqueeze(0)


def prefill_layers(model, prompts: list[list[int]], hidden: torch.Tensor | None = None, lo: int = 0,
                   hi: int | None = None) -> tuple[BatchState, torch.Tensor]:
    """Layers [lo, hi) over the left-padded prompts, from the embedding when `hidden` is None (else from those
    states, one per padded position) -> (the state, the layer-hi states [B, width, H]). The pipeline's stages
    each prefill their own layers with it."""
    width = max(len(p) for p in prompts)
    pad = [width - len(p) for p in prompts]
    dev = model.device
    valid = torch.tensor([[False] * k + [True] * len(p) for k, p in zip(pad, prompts)], dtype=torch.bool, device=dev)
    positions = (torch.arange(width, device=dev).unsqueeze(0) - torch.tensor(pad, device=dev).unsqueeze(1)).clamp(min=0)
    mask = pass_mask(valid[:, :0], 0, width) & valid.unsqueeze(1).unsqueeze(1)
    mask |= torch.eye(width, dtype=torch.bool, device=dev).unsqueeze(0).unsqueeze(0)
    cache = model.new_cache()
    if hidden is None:
        hidden = model.embed(torch.tensor([[0] * k + p for k, p in zip(pad, prompts)], dtype=torch.long))
    h = model.forward_layers(hidden, lo, model.num_layers if hi is None else hi, cache, 0, attention_mask=mask,
                             positions=positions)
    state = BatchState(cache, valid, torch.tensor([len(p) for p in prompts], device=dev), list(range(len(prompts))),
                       [[] for _ in prompts])
    return state, h


def batch_prefill(model, prompts: list[list[int]]) -> tuple[BatchState, torch.Tensor]:
    """Whole model on the left-padded prompts -> the state and each sequence's last logits [B, V]."""
    state, h = prefill_layers(model, prompts)
    return state, model.head(h[:, -1:])[:, -1]


def _choose_rows(samplers: list[Sampler], state: BatchState, logits: torch.Tensor) -> list[int]:
    return [samplers[r].choose(logits[i])[0] for i, r in enumerate(state.rows)]


def _start(model, prompts, samplers):
    t0 = time.perf_counter()
    state, logits = batch_prefill(model, prompts)
    for i, tok in enumerate(_choose_rows(samplers, state, logits)):
        state.tokens[i].append(tok)
    return state, t0, time.perf_counter()


def _leave(state: BatchState, max_new: list[int], eos, done: dict, finish: list[float], t1: float) -> None:
    """Sequences that reached their budget or EOS leave the batch (their tokens are kept in `done`)."""
    stay = []
    for i, r in enumerate(state.rows):
        if _done(state.tokens[i], max_new[r], eos) or (eos and any(t in eos for t in state.tokens[i])):
            done[r] = _trim(state.tokens[i], max_new[r], eos)
            finish[r] = time.perf_counter() - t1
        else:
            stay.append(i)
    state.keep(stay)


def _ids(column: list[int]) -> torch.Tensor:
    return torch.tensor(column, dtype=torch.long).unsqueeze(1)


def ar_step(model, state: BatchState, samplers) -> None:
    """One full pass of every live sequence on its last token: each commits one token (samplers indexed by
    `state.rows`)."""
    ids = _ids([t[-1] for t in state.tokens])
    mask = pass_mask(state.valid, 0, 1)
    h = model.forward_layers(model.embed(ids), 0, model.num_layers, state.cache, 0, attention_mask=mask,
                             positions=_positions(state.pos, 1))
    for i, tok in enumerate(_choose_rows(samplers, state, model.head(h)[:, -1])):
        state.tokens[i].append(tok)
    state.valid = torch.cat([state.valid, torch.ones_like(state.valid[:, :1])], dim=1)
    state.pos += 1


@torch.inference_mode()
def generate_ar_batch(model, prompts: list[list[int]], max_new: list[int], samplers: list[Sampler],
                      eos: set[int] | None = None) -> BatchRecord:
    """Plain autoregressive decoding of a batch: one full pass per token of every live sequence."""
    state, t0, t1 = _start(model, prompts, samplers)
    done: dict[int, list[int]] = {}
    finish = [0.0] * len(prompts)
    passes = slots = 0
    _leave(state, max_new, eos, done, finish, t1)
    while state.rows:
        ar_step(model, state, samplers)
        passes += 1
        slots = state.valid.shape[1]
        _leave(state, max_new, eos, done, finish, t1)
    t2 = time.perf_counter()
    return BatchRecord([done[r] for r in range(len(prompts))], t1 - t0, t2 - t1, finish_s=finish, passes=passes,
                       slots=slots)


def draft_round(model, state: BatchState, exit_layer: int, gamma: int, samplers, drafter):
    """Layers [0, E) on each sequence's last token and on γ drafts, one position a pass; the exit head
    drafts after every pass but the last. -> (layer-E states [B, γ+1, H], drafts [B][γ], q [B][γ])."""
    states, drafts, qs = [], [[] for _ in state.rows], [[] for _ in state.rows]
    current = [t[-1] for t in state.tokens]
    for i in range(gamma + 1):
        mask = pass_mask(state.valid, i, 1)
        h = model.forward_layers(model.embed(_ids(current)), 0, exit_layer, state.cache, 0,
                                 attention_mask=mask, positions=_positions(state.pos + i, 1))
        states.append(h)
        if i == gamma:
            break
        logits = drafter.logits(h)[:, -1] if drafter is not None else model.head(h)[:, -1]
        for b, r in enumerate(state.rows):
            d, q = (drafter.choose_logits(samplers[r], logits[b]) if drafter is not None
                    else samplers[r].choose(logits[b]))
            drafts[b].append(d)
            qs[b].append(q)
        current = [d[-1] for d in drafts]
    return torch.cat(states, dim=1), drafts, qs


def verify_round(model, state: BatchState, h_exits: torch.Tensor, exit_layer: int) -> torch.Tensor:
    """Layers [E, N) on every sequence's γ+1 layer-E states at once -> the full model's logits [B, γ+1, V]."""
    n = h_exits.shape[1]
    mask = pass_mask(state.valid, 0, n)
    h = model.forward_layers(h_exits, exit_layer, model.num_layers, state.cache, 0, attention_mask=mask,
                             positions=_positions(state.pos, n))
    return model.head(h)


def commit_round(state: BatchState, drafts, qs, logits, samplers, rounds: list[list[int]]) -> None:
    """Each sequence keeps its longest accepted prefix plus the verifier's token; its rejected slots
    turn into holes, and the slots every sequence rejected are cropped."""
    gamma = len(drafts[0]) if drafts else 0
    kept = torch.zeros((len(state.rows), gamma + 1), dtype=torch.bool, device=state.valid.device)
    for b, r in enumerate(state.rows):
        accepted = 0
        for i, d in enumerate(drafts[b]):
            # the verifier's rule decides each draft in order; the first rejection ends the round
            ok, tok = samplers[r].verify(d, qs[b][i], logits[b, i])
            state.tokens[b].append(tok)
            if not ok:
                break
            accepted += 1
        else:  # every draft stood: the verifier's token after the last one is free
            state.tokens[b].append(samplers[r].choose(logits[b, gamma])[0])
        rounds[r].append(accepted)
        kept[b, : accepted + 1] = True  # the inputs of the positions that stand: last token + accepted drafts
        state.pos[b] += accepted + 1
    state.valid = torch.cat([state.valid, kept], dim=1)
    state.crop_common_tail()


def eesd_round(model, state: BatchState, exit_layer: int, gamma: int, samplers, drafter, rounds) -> None:
    """γ drafts a sequence, one verification pass, each sequence's accepted prefix and the verifier's token
    committed (`rounds[row]` gets its accepted drafts)."""
    h_exits, drafts, qs = draft_round(model, state, exit_layer, gamma, samplers, drafter)
    logits = verify_round(model, state, h_exits, exit_layer)
    commit_round(state, drafts, qs, logits, samplers, rounds)


@torch.inference_mode()
def generate_eesd_batch(model, prompts: list[list[int]], max_new: list[int], samplers: list[Sampler],
                        exit_layer: int, gamma: int, eos: set[int] | None = None, drafter=None) -> BatchRecord:
    """Early-exit self-speculative decoding of a batch: γ drafts a sequence, then one verification pass."""
    state, t0, t1 = _start(model, prompts, samplers)
    done: dict[int, list[int]] = {}
    finish = [0.0] * len(prompts)
    rounds: list[list[int]] = [[] for _ in prompts]
    passes = slots = 0
    _leave(state, max_new, eos, done, finish, t1)
    while state.rows:
        # never draft past what the sequence furthest along can still commit
        g = min(gamma, max(max_new[r] - len(t) - 1 for r, t in zip(state.rows, state.tokens)))
        eesd_round(model, state, exit_layer, g, samplers, drafter, rounds)
        passes += 1
        slots = state.valid.shape[1]
        _leave(state, max_new, eos, done, finish, t1)
    t2 = time.perf_counter()
    return BatchRecord([done[r] for r in range(len(prompts))], t1 - t0, t2 - t1, rounds, finish, passes, slots)
