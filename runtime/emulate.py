"""Emulated devices: the real runtime on a profile's times instead of a model's compute.

`ppsd run --emulate PROFILE` and `ppsd validate --emulate PROFILE` run the very same decoding code
as a real run: AR and EESD in this process, PPSD as one process per stage with the same
torch.distributed messages, epoch board, in-flight cap, abandoned passes and flushes. Only the
model is replaced by `EmulatedModel`, whose embedding, decoder layers, final norm + LM head and exit
heads each *wait* for the time the profile gives them (`Profile.embed_ms(n)`, `layer_ms(l, n,
context)`, `head_ms(n)`, `exit_head_ms(name, n)`) instead of computing. What a run then measures
beyond the profile's times is the control plane: messages between the stage processes, the stages'
Python loops, the launcher. A 4-GPU plan of a 7B model can be dry-run on a laptop this way.

Waits (`wait_until`, `wait_ms`) sleep (in slices of at most 1 ms) until `SPIN_S` (100 µs) before
their deadline and spin on perf_counter only for the rest, with the process's timer slack cut to
1 µs (Linux), so a stage that waits uses almost no CPU: eight emulated stages fit on two cores as far
as the waits go (their messages still cost CPU: see the report in python -m bench.bench_emulate). A pass
over several layers keeps one absolute deadline from the pass's start (one per layer when it may be
abandoned), so the time spent in Python between layers is absorbed instead of added; only the pass's
end spins.

The emulated model:
  hidden states  real float32 tensors [batch, n, H] with H the profile's hidden size (a synthetic
                 profile that records none: `DEFAULT_HIDDEN`, a 7B model's 4096). Not capped: the
                 hop between stages is the one real cost the emulation keeps, and it should carry
                 the bytes the real model's would (the CPU transport sends fp32: 16 KB a hop at 4096).
                 Channel 0 carries the token id; the layers pass it through.
  logits         [batch, n, EMULATED_VOCAB] one-hot at `next_token(id)`: a deterministic language
                 model over `EMULATED_VOCAB` (256) ids with no end-of-sequence token, so every
                 generation runs to its length, every exit agrees with the full model and greedy
                 outputs of AR, EESD and PPSD must be identical (a free check of the protocol).
  KV cache       `EmulatedCache`: per-layer lengths only, cropped like the real one; a pass whose
                 cache does not hold exactly `start_pos` tokens is an error (the contract of
                 `ModelAdapter.forward_layers`), so a protocol bug that would corrupt attention fails loudly.
  acceptance     forced: `--force-trace accept-all|reject-all|FILE`, or by default the profile's
                 recorded match trace of the plan's exit layer, one `ForcedTrace` per prompt.
  prompts        synthetic token ids: of the profile's generations' prompt lengths when it has
                 them, else of its smallest profiled context (what the simulator assumes then).
  context        a decode pass at `start_pos` is priced at context `start_pos`, as the simulator
                 prices token j at prompt length + j; a prefill (start_pos 0, n > 1) at the smallest
                 profiled context, as `Profile.prefill_ms` extrapolates it (a measured
                 `latency.prefill` is not used: the prefill is waited layer by layer).
The hop: a PPSD stage of an emulated run takes every message no earlier than its send time + the
plan's hop (`PipelineJob.hop_ms`; hidden states carry their send time in channel `STAMP_CHANNEL`,
drafts and verdicts in their last field), on top of the real messages over this machine's gloo.
Stamped at the send and held at the receipt, as a link delivers: the stages' own work around a
message (the loop, the send call) adds to the hop as on real devices. (Stamped at the end of the
layers and held inside the next stage's layers, it hid up to a hop of that work: on the CPU
profile at 6 stages the chain of a rejected token came out 0.55 ms shorter than priced.)
Not emulated: co-run
slowdowns (each emulated stage is a device of its own; analytic GPU profiles have none).
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from ppsd.profile.tables import interp_last

SPIN_S = 100e-6  # the last stretch of a wait is spun on perf_counter, the rest slept
SLEEP_SLICE_S = 1e-3  # the longest single sleep of a wait
DEFAULT_HIDDEN = 4096  # hidden size when the profile records none (synthetic profiles)
EMULATED_VOCAB = 256
EMULATE_PREFIX = "emulate:"

_slack_set = False
STAMP_CHANNEL = 1  # hidden-state channel that carries its send time under an emulated hop
_STAMP_WRAP = 1 << 24  # µs modulo this: exact in float32 (16.7 s window)


def _now_us() -> int:
    return int(time.perf_counter() * 1e6)


def _sent_at(hidden: torch.Tensor) -> float:
    """perf_counter seconds at which `hidden` was stamped (µs modulo _STAMP_WRAP in STAMP_CHANNEL)."""
    now = _now_us()
    stamp = int(float(hidden.reshape(-1, hidden.shape[-1])[-1, STAMP_CHANNEL]))
    return (now - ((now - stamp) % _STAMP_WRAP)) / 1e6


def stamp_sent(hidden: torch.Tensor) -> None:
    """Write the send time into `hidden` (every row's STAMP_CHANNEL), right before it is sent."""
    hidden[..., STAMP_CHANNEL] = float(_now_us() % _STAMP_WRAP)


def wait_due(hidden: torch.Tensor, hop_s: float) -> None:
    """Hold a received hidden state until its send time + the emulated hop (the link's latency),
    as a real link would deliver it: what the stages do around the send and the receive (Python,
    gloo) adds to the hop, as on real devices, instead of hiding inside it."""
    wait_until(_sent_at(hidden) + hop_s)


def _cut_timer_slack() -> None:
    """Linux: 1 µs timer slack for this thread (default 50 µs), so a sleep wakes within ~20-40 µs of
    its deadline and the 100 µs spin covers it. Inherited by forked stage processes."""
    global _slack_set
    _slack_set = True
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK, ns
    except (OSError, AttributeError):
        pass


def sleep_until(deadline: float) -> None:
    """Sleep (no spin) until about `deadline` (perf_counter seconds): a coarse wait."""
    if not _slack_set:
        _cut_timer_slack()
    rest = deadline - time.perf_counter()
    if rest > 0:
        time.sleep(rest)


def wait_until(deadline: float) -> None:
    """Return at `deadline` (perf_counter seconds), precisely: sleep until SPIN_S before it, spin the
    rest. Sleeps are cut into slices of at most SLEEP_SLICE_S: a long sleep wakes later (here ~90 µs
    after 4 ms, ~40 µs after 1 ms), which would eat the spin's margin."""
    if not _slack_set:
        _cut_timer_slack()
    while True:
        rest = deadline - time.perf_counter() - SPIN_S
        if rest <= 0:
            break
        time.sleep(rest if rest < SLEEP_SLICE_S else SLEEP_SLICE_S)
    while time.perf_counter() < deadline:
        pass


def wait_ms(ms: float) -> None:
    """A precise wait of `ms` milliseconds that uses the CPU only for its last 100 µs."""
    wait_until(time.perf_counter() + ms / 1e3)


def next_token(ids: torch.Tensor) -> torch.Tensor:
    """The emulated language model: the token after `ids` (any integer ids) in 0..EMULATED_VOCAB-1."""
    return (ids.long() * 31 + 17) % EMULATED_VOCAB


_NEXT_ONE_HOT = torch.nn.functional.one_hot(next_token(torch.arange(EMULATED_VOCAB)), EMULATED_VOCAB).float()


def synthetic_prompt(length: int, salt: int = 0) -> list[int]:
    return [(7 * i + 3 + salt) % EMULATED_VOCAB for i in range(max(int(length), 1))]


# --- the KV cache -------------------------------------------------------------------------------------

class EmulatedCache:
    """Lengths per layer: what a KV cache holds, without the keys and values."""

    def __init__(self):
        self.lengths: dict[int, int] = {}

    def length(self, layer_idx: int) -> int:
        return self.lengths.get(layer_idx, 0)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length(layer_idx)

    def crop(self, length: int) -> None:
        for i, n in self.lengths.items():
            if n > length:
                self.lengths[i] = length

    def advance(self, layer_idx: int, start_pos: int, n: int) -> None:
        have = self.lengths.get(layer_idx, 0)
        if have != start_pos:
            raise RuntimeError(f"emulated KV cache out of step: layer {layer_idx} holds {have} tokens but a pass "
                               f"starts at position {start_pos} (the cache must hold exactly start_pos tokens)")
        self.lengths[layer_idx] = start_pos + n


# --- interpolation: ppsd/profile/tables.py's, vectorised over layers ---------------------------------------

_lin = interp_last  # the profile's own interpolation, vectorised over layers


# --- the model ----------------------------------------------------------------------------------------

@dataclass
class EmulatedPrompt:
    prompt_id: str
    category: str
    tokens: list[int]
    recorded_new: int  # tokens the profile generated (its trace length); ppsd validate decodes that many


class EmulatedModel:
    """The `ModelAdapter` interface the runtime uses, each piece a wait of the profile's time."""

    emulated = True

    def __init__(self, profile, hidden_size: int | None = None):
        self.profile = profile
        meta = profile.meta["model"]
        self.num_layers = profile.num_layers
        self.profile_hidden_size = int(meta.get("hidden_size") or 0)
        self.hidden_size = int(hidden_size or self.profile_hidden_size or DEFAULT_HIDDEN)
        self.vocab_size = EMULATED_VOCAB
        self.max_context = int(meta.get("max_context") or 1 << 20)
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        self.model_id = EMULATE_PREFIX + str(Path(profile.path).resolve())
        self.source = f"emulated from {profile.path} ({profile.model_id} on {profile.device_name})"
        self.architecture = "emulated"
        self.load_s = 0.0
        self.layers: list = [None] * self.num_layers  # runtime.launch.keep_only_layers replaces entries
        self._table = np.asarray(profile.layers.median_ms, dtype=float)  # [N][n][c]
        self._n_grid = np.asarray(profile.n_values, dtype=float)
        self._c_grid = np.asarray(profile.context_values, dtype=float)
        self._layer_s: dict[tuple[int, float], list[float]] = {}
        self._piece_s: dict[tuple[str, int], float] = {}

    # --- prices (seconds), cached ------------------------------------------------------------------
    def layer_seconds(self, n: int, context: float) -> list[float]:
        """Every layer's time (s) for n new tokens at `context`: `Profile.layer_ms` for all layers at once."""
        key = (n, float(context))
        out = self._layer_s.get(key)
        if out is None:
            per_n = _lin(float(context), self._c_grid, self._table)  # [N][n grid]
            out = (_lin(float(n), self._n_grid, per_n) / 1e3).tolist()
            if len(self._layer_s) > 8192:
                self._layer_s.clear()
            self._layer_s[key] = out
        return out

    def piece_seconds(self, piece: str, n: int) -> float:
        """"embed", "head" or "exit:<name>" for n tokens (s)."""
        key = (piece, n)
        out = self._piece_s.get(key)
        if out is None:
            p = self.profile
            ms = p.embed_ms(n) if piece == "embed" else p.head_ms(n) if piece == "head" \
                else p.exit_head_ms(piece[len("exit:"):], n)
            out = self._piece_s[key] = float(ms) / 1e3
        return out

    def context_of(self, start_pos: int, n: int) -> float:
        return float(self._c_grid[0]) if start_pos == 0 and n > 1 else float(start_pos)

    # --- the adapter ---------------------------------------------------------------------------------
    def new_cache(self) -> EmulatedCache:
        return EmulatedCache()

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """[batch, n] ids -> [batch, n, H] (the id in channel 0), after the embedding's time."""
        t0 = time.perf_counter()
        ids = input_ids.reshape(input_ids.shape[0], -1)
        h = torch.zeros((ids.shape[0], ids.shape[1], self.hidden_size), dtype=self.dtype)
        h[..., 0] = ids % EMULATED_VOCAB
        wait_until(t0 + self.piece_seconds("embed", int(ids.shape[1])))
        return h

    def forward_layers(self, hidden: torch.Tensor, start: int, end: int, cache: EmulatedCache | None,
                       start_pos: int, attention_mask=None, should_stop=None) -> torch.Tensor | None:
        """Layers [start, end) as waits, one absolute deadline per layer from the call's start.
        `should_stop()` is asked before each layer, as the real model does: True abandons the pass
        (None) with the layers already run counted in the cache."""
        if end <= start:
            return hidden
        t0 = time.perf_counter()
        n = int(hidden.shape[1])
        secs = self.layer_seconds(n, self.context_of(start_pos, n))
        if should_stop is None:  # nothing to look at between layers: one wait
            if cache is not None:
                for layer in range(start, end):
                    cache.advance(layer, start_pos, n)
            wait_until(t0 + sum(secs[start:end]))
            return hidden
        deadline = t0
        for layer in range(start, end):
            if should_stop():
                return None
            if cache is not None:
                cache.advance(layer, start_pos, n)
            deadline += secs[layer]
            if layer < end - 1:
                sleep_until(deadline)  # only to look at should_stop near the layer boundary
            else:
                wait_until(deadline)
        return hidden

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[batch, n, EMULATED_VOCAB], one-hot at the next token of each position's id (no wait;
        one table lookup, so that it stays well under a GPU-scale head's wait)."""
        return _NEXT_ONE_HOT[hidden[..., 0].long()]

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head: the logits after `head_ms(n)`."""
        t0 = time.perf_counter()
        out = self.logits(hidden)
        wait_until(t0 + self.piece_seconds("head", int(hidden.shape[1])))
        return out

    def emulated_drafter(self, exit_layer: int, name: str = SHARED) -> EmulatedDrafter:
        """The exit head of `name` (runtime/heads/__init__.py's make_drafter hands this out for emulated models)."""
        self.profile.exit_head_ms(name, 1)  # UserError when the profile has no such head
        return EmulatedDrafter(self, exit_layer, name)

    def encode_prompt(self, text: str) -> list[int]:
        """No tokenizer: synthetic ids, about one per four bytes of text."""
        return synthetic_prompt(max(len(text.encode()) // 4, 1))

    def decode(self, ids) -> str:
        return " ".join(str(int(i)) for i in ids)

    @property
    def eos_token_ids(self) -> set[int]:
        return set()


class EmulatedDrafter:
    """Layer-E state -> (draft token, q): the emulated logits after `exit_head_ms(name, n)`."""

    def __init__(self, model: EmulatedModel, exit_layer: int, name: str = SHARED):
        self.model, self.exit_layer, self.name = model, exit_layer, name
        self.piece = "head" if name == SHARED else f"exit:{name}"

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        out = self.model.logits(h)
        wait_until(t0 + self.model.piece_seconds(self.piece, int(h.shape[1])))
        return out

    def choose(self, sampler, h: torch.Tensor):
        return sampler.choose(self.logits(h)[0, -1])

    def probs(self, sampler, h: torch.Tensor) -> torch.Tensor:
        return sampler.probs(self.logits(h)[0, -1])


# --- loading, prompts and traces ----------------------------------------------------------------------

def load_emulated(path: str, hidden_size: int | None = None) -> EmulatedModel:
    """The emulated model of a profile folder (UserError when it is not one)."""
    from ppsd.profile import load_profile

    t0 = time.perf_counter()
    model = EmulatedModel(load_profile(path), hidden_size)
    model.load_s = time.perf_counter() - t0
    return model


def emulated_prompts(profile, head: str = SHARED) -> list[EmulatedPrompt]:
    """One synthetic prompt per profiled generation: the recorded prompt length and generated
    length when the profile has generations; else one per prompt of the acceptance table, of the
    smallest profiled context's length (the simulator's assumption) and its trace's length."""
    gens = profile.generations()
    if gens:
        out = []
        for i, g in enumerate(gens):
            pt = g.get("prompt_tokens")
            length = len(pt) if isinstance(pt, (list, tuple)) else int(g.get("prompt_len") or pt or 1)
            out.append(EmulatedPrompt(str(g["prompt_id"]), str(g.get("category")), synthetic_prompt(length, i),
                                      len(g.get("token_ids") or []) or 1))
        return out
    length = int(profile.context_values[0])
    if not profile.has_acceptance:
        return [EmulatedPrompt("synthetic", "synthetic", synthetic_prompt(length), 64)]
    acc = profile.acceptance
    acc = acc[acc["head"] == head]
    sizes = acc.groupby(["prompt_id", "exit_layer"]).size().groupby(level=0).max()
    cats = acc.groupby("prompt_id")["category"].first()
    return [EmulatedPrompt(str(pid), str(cats[pid]), synthetic_prompt(length, i), int(sizes[pid]))
            for i, pid in enumerate(sizes.index)]


def profile_traces(profile, exit_layer: int, prompt_ids: list[str], head: str = SHARED) -> list:
    """The profile's recorded match trace of `exit_layer` for each prompt, as ForcedTraces."""
    from runtime.acceptance import ForcedTrace

    fix = "give --force-trace accept-all|reject-all|FILE, or a profile with traces (`ppsd profile --analytic " \
          "... --alpha-curve FILE`)"
    if not profile.has_acceptance:
        raise UserError(f"profile {profile.path} has no acceptance traces for the emulated drafts to follow", fix)
    acc = profile.acceptance
    acc = acc[(acc["head"] == head) & (acc["exit_layer"] == int(exit_layer))]
    if acc.empty:
        have = sorted(int(e) for e in profile.acceptance["exit_layer"].unique())
        raise UserError(f"profile {profile.path} has no {head} trace at exit layer {exit_layer}",
                        f"use an exit layer it has ({have[0]}..{have[-1]}) or {fix}")
    by_id = {str(pid): g.sort_values("position")["match"] for pid, g in acc.groupby("prompt_id")}
    out = []
    for pid in prompt_ids:
        m = by_id.get(str(pid))
        if m is None:
            raise UserError(f"profile {profile.path} has no trace of prompt {pid} at exit layer {exit_layer}", fix)
        out.append(ForcedTrace(tuple(int(v) for v in m) or (0,), f"profile {pid}"))
    return out


# --- what `ppsd run --emulate` and `ppsd validate --emulate` need beyond the model -------------------

def with_emulated_head(model: EmulatedModel, plan, heads_dir: str | None, name: str | None):
    """The plan drafting with `--exit-head NAME`, a head the profile prices (no --heads folder: the
    emulated heads are their profiled times)."""
    from dataclasses import replace

    if heads_dir:
        raise UserError("--heads does not apply with --emulate (an emulated exit head is its profiled time)",
                        "drop --heads; --exit-head NAME picks a head the profile has (latency.exit_heads)")
    name = name or SHARED
    if plan.mode.speculative:
        model.emulated_drafter(plan.exit_layer, name)  # UserError naming the profile's heads
        return replace(plan, exit_head=name)
    return plan


def run_inputs(model: EmulatedModel, plan, limit: int | None, max_new_tokens: int, force_trace: str | None):
    """(prompts, max_new, forced per prompt or None) of `ppsd run --emulate`: the first `limit`
    synthetic prompts of the profile, `max_new_tokens` each, acceptance forced by `--force-trace` or
    by the profile's trace of the plan's exit layer for each prompt."""
    from runtime.acceptance import load_forced_trace

    picked = emulated_prompts(model.profile, plan.exit_head)
    picked = picked[:limit] if limit else picked
    prompts = [p.tokens for p in picked]
    forced = None
    if force_trace:
        forced = [load_forced_trace(force_trace)] * len(picked)
    elif plan.mode.speculative:
        forced = profile_traces(model.profile, plan.exit_layer, [p.prompt_id for p in picked], plan.exit_head)
    return prompts, [int(max_new_tokens)] * len(prompts), forced
