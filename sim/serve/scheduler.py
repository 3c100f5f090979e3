"""Iteration-level continuous batching (Orca, vLLM): which requests an iteration prefills and decodes.

Requests wait in arrival order and are admitted first come, first served while the running batch has
room (`max_batch`, vLLM's `--max-num-seqs`) and the iteration's token budget lasts (`max_tokens`,
`--max-num-batched-tokens`). A prompt's prefill yields the request's first token. A sequence leaves at
its token budget (or, in a real run, at EOS: `finish`). Two prefill policies:

  prefill-first  an iteration that admits requests prefills their whole prompts and decodes nothing
                 (the running sequences wait one iteration); otherwise every running sequence decodes
  chunked        every iteration decodes the running sequences first, then spends what is left of the
                 token budget on prompt chunks, a partly prefilled prompt before a new admission

A decoding sequence is charged the tokens its passes process this iteration (`decode_tokens`: 1 for an
AR step, γ + 1 for an EESD verification). The simulator and the real loop drive the same class.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from ppsd.errors import UserError
from sim.serve.requests import ServeRequest


class PrefillPolicy(StrEnum):
    FIRST = "prefill-first"
    CHUNKED = "chunked"

    @classmethod
    def parse(cls, text: str) -> "PrefillPolicy":
        try:
            return cls(str(text))
        except ValueError:
            raise UserError(f"--prefill {text!r} is not a prefill policy",
                            f"give one of {', '.join(p.value for p in cls)}") from None


@dataclass(frozen=True)
class SchedulerConfig:
    max_batch: int = 8
    max_tokens: int = 2048
    prefill: PrefillPolicy = PrefillPolicy.FIRST

    def __post_init__(self):
        if int(self.max_batch) < 1:
            raise UserError(f"--max-batch {self.max_batch} must be at least 1", "give e.g. --max-batch 8")
        if int(self.max_tokens) < 1:
            raise UserError(f"--max-tokens {self.max_tokens} must be at least 1", "give e.g. --max-tokens 2048")
        object.__setattr__(self, "prefill", PrefillPolicy.parse(self.prefill))


@dataclass
class Running:
    """A request in the running batch: how much of its prompt is in the cache, how many tokens it has."""

    request: ServeRequest
    prefilled: int = 0
    generated: int = 0

    @property
    def ready(self) -> bool:
        """Its prompt is in the cache (its first token is out): it decodes."""
        return self.prefilled >= self.request.prompt_tokens

    @property
    def remaining(self) -> int:
        return self.request.output_tokens - self.generated


@dataclass(frozen=True)
class Iteration:
    """What one iteration runs: prompt chunks (request id, tokens) and the sequences that decode."""

    prefill: tuple[tuple[int, int], ...] = ()
    decode: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode

    @property
    def prefill_tokens(self) -> int:
        return sum(n for _, n in self.prefill)


class Scheduler:
    """The waiting queue and the running batch of one engine."""

    def __init__(self, config: SchedulerConfig):
        self.config = config
        self.waiting: deque[ServeRequest] = deque()
        self.running: dict[int, Running] = {}  # admission order

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def arrive(self, request: ServeRequest) -> None:
        self.waiting.append(request)

    def _admit(self, budget: int, whole: bool) -> list[tuple[int, int]]:
        """FCFS admissions within the batch's room and `budget`; `whole`: only whole prompts fit (the first
        admission of an iteration always goes, so a prompt longer than the budget is not starved)."""
        chunks: list[tuple[int, int]] = []
        while self.waiting and len(self.running) < self.config.max_batch and budget > 0:
            request = self.waiting[0]
            n = request.prompt_tokens if whole else min(request.prompt_tokens, budget)
            if n > budget and (chunks or not whole):
                break
            self.waiting.popleft()
            self.running[request.request_id] = Running(request)
            chunks.append((request.request_id, n))
            budget -= n
        return chunks

    def _decoders(self, decode_tokens: int, budget: int) -> tuple[list[int], int]:
        ids = []
        for rid, seq in self.running.items():
            if seq.ready and (not ids or budget >= decode_tokens):
                ids.append(rid)
                budget -= decode_tokens
        return ids, budget

    def next_iteration(self, decode_tokens: int = 1) -> Iteration:
        """The next iteration's work (empty when nothing waits and nothing runs)."""
        budget = self.config.max_tokens
        if self.config.prefill is PrefillPolicy.FIRST:
            admitted = self._admit(budget, whole=True)
            if admitted:
                return Iteration(prefill=tuple(admitted))
            return Iteration(decode=tuple(self._decoders(decode_tokens, budget)[0]))
        decode, budget = self._decoders(decode_tokens, budget)
        chunks = []
        for rid, seq in self.running.items():  # partly prefilled prompts first, in admission order
            if not seq.ready and budget > 0:
                n = min(seq.request.prompt_tokens - seq.prefilled, budget)
                chunks.append((rid, n))
                budget -= n
        chunks += self._admit(budget, whole=False)
        return Iteration(prefill=tuple(chunks), decode=tuple(decode))

    def prefilled(self, request_id: int, tokens: int) -> bool:
        """`tokens` more of the request's prompt are in the cache; True when its prompt is complete, which
        yields its first token (and ends a one-token request)."""
        seq = self.running[request_id]
        seq.prefilled += int(tokens)
        if not seq.ready:
            return False
        self.commit(request_id, 1)
        return True

    def commit(self, request_id: int, tokens: int) -> int:
        """The request keeps `tokens` new tokens (never past its budget); it leaves at its budget. Returns
        the tokens it keeps."""
        seq = self.running[request_id]
        kept = max(0, min(int(tokens), seq.remaining))
        seq.generated += kept
        if seq.remaining <= 0:
            del self.running[request_id]
        return kept

    def finish(self, request_id: int) -> None:
        """The request leaves early (EOS in a real run)."""
        self.running.pop(request_id, None)
