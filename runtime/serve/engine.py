"""The continuous-batching engine of `ppsd serve`: the simulator's `Scheduler` over the batched runtime.

Every iteration asks the policy what the running batch decodes (`policy.decide(live, width, seen,
cost)`), then the scheduler what the iteration runs, prefill first (`sim/serve/scheduler.py`):

  prefill   each admitted prompt is prefilled alone, whole, one after another at batch 1; its logits give
            the request's first token, delivered at once; then its row joins the running batch
  decode    one pass over every running sequence: an AR step (one token each) or an EESD round (γ drafts
            each through layers [0, E) and the exit head, one verification of γ + 1 positions through
            layers [E, N); each sequence keeps its accepted prefix and the verifier's token)

A request leaves at EOS (unless it asks `ignore_eos`, as `vllm bench serve` does) or at its token budget;
an EESD round never drafts past what the sequence furthest from its budget can still commit, and a round
whose γ caps to 0 is an AR step. Greedy only: every request's output is AR's for its prompt alone.

The KV cache is one rectangle [B, heads, width, dim] with a validity mask (`runtime/batched.py`); its
width follows one rule, which the simulator models too (`sim/serve/engine.py`):

  * an empty batch has width 0: the rectangle resets when the last sequence leaves;
  * a request joins with its prompt's length P: the width becomes max(width, P) (the newcomer's row is
    left-padded with invalid slots, or every running row is, when its prompt is the longer); a request
    whose first token ends it (a budget of 1, or EOS) never joins;
  * an AR step adds 1 slot; an EESD round of γ adds γ + 1 and crops the trailing slots every sequence
    rejected: it adds 1 + the most drafts any sequence accepted;
  * a leaving sequence's row is dropped together with the leading columns no remaining row attends to (the
    columns older rows held), so the width is the span of the oldest live row, not the batch's history.

Under `ppsd:E` the decode is a tick of the batched two-stage pipeline instead (`runtime/serve/pipeline.py`:
stage 1 in a forked process, stage 2 on the engine's thread, each with its own rectangle; a newcomer's first
tick is stage 1's only, a rejected draft costs its sequence the next tick); the rule above is stage 2's for
joins and leaves, and a tick adds one slot (none when every sequence's new slot is a hole).

A sequence's `rounds` count every decode iteration that committed tokens to it (AR steps included), so
its mean accepted length is 1 under AR. The real loop runs every policy: `ar`, `eesd`, `ppsd`, `off-above`,
`table` and `goodput` (`ServePolicy.runs_real`).
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
import time
import traceback
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import torch

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from runtime.acceptance import Sampler
from runtime.batched import BatchState, ar_step, batch_prefill, eesd_round
from sim.serve.policies import AR_STEP, AcceptanceSeen, ServePolicy, Speculation
from sim.serve.requests import RequestTiming, ServeRequest
from sim.serve.scheduler import PrefillPolicy, Scheduler, SchedulerConfig

DEFAULT_PRIOR_ALPHA = 0.5  # the acceptance a load-adaptive policy starts from without a profile
IDLE_WAIT_S = 0.05


class FinishReason(StrEnum):
    STOP = "stop"  # EOS
    LENGTH = "length"  # the token budget
    ABORT = "abort"  # the client went away, or the server stops
    ERROR = "error"


@dataclass(frozen=True)
class TokenEvent:
    """Tokens an iteration delivers to one request; the last event of a request carries its finish
    reason and the engine's record of it (drafts judged and accepted, rounds)."""

    request_id: int
    tokens: tuple[int, ...]
    finish_reason: FinishReason | None = None
    error: str = ""
    timing: RequestTiming | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True)
class IterationRecord:
    """What an iteration ran, in the terms of the cache-width rule: the prompt lengths that joined (a
    prefill), or the drafts a sequence (0: an AR step) and the most any sequence accepted."""

    kind: str  # "prefill", "ar" or "eesd"
    width_before: int
    width_after: int
    joined: tuple[int, ...] = ()
    draft_len: int = 0
    most_accepted: int = 0
    live_after: int = 0
    cropped: int = 0  # leading columns dropped with the rows that left


def width_after(width: int, record: IterationRecord) -> int:
    """The cache-width rule (the module doc) for a prefill, an AR step or an EESD round: what the width becomes."""
    if record.kind not in ("prefill", "ar", "eesd"):
        raise ValueError(f"the width rule covers prefill, AR and EESD iterations, not {record.kind}")
    if record.live_after == 0:
        return 0
    if record.kind == "prefill":
        return max([width, *record.joined])
    return width + 1 + (record.most_accepted if record.kind == "eesd" else 0) - record.cropped


@dataclass
class EngineRequest:
    request: ServeRequest
    prompt: list[int]
    ignore_eos: bool
    on_event: Callable[[TokenEvent], None]
    timing: RequestTiming
    generated: list[int] = field(default_factory=list)


class _Greedy(dict):
    """Every row's sampler: greedy (`runtime/batched.py` indexes samplers by row)."""

    def __missing__(self, key):
        return GREEDY


GREEDY = Sampler.make(0.0, 0)
SAMPLERS = _Greedy()


def max_draft_len(policy: ServePolicy) -> int:
    """The most drafts an iteration of `policy` can ask a sequence for."""
    table = getattr(policy, "table", None)
    if table:
        return max(g for _, g in table)
    return int(getattr(policy, "max_gamma", None) or getattr(policy, "draft_len", None) or 0)


def check_policy(policy: ServePolicy, num_layers: int, config: SchedulerConfig, cost) -> None:
    """UserError unless the real loop runs `policy` on this model with `config` (and `cost` where it needs one)."""
    if not policy.runs_real:
        raise UserError(f"policy {policy.spec()!r} runs in the simulator only (the real loop runs ar, eesd, ppsd, "
                        "off-above, table and goodput)", "give e.g. --policy eesd:24:3")
    policy.check(num_layers)
    policy.decide(1, 64.0, AcceptanceSeen(DEFAULT_PRIOR_ALPHA), cost)  # goodput without cost tables: UserError
    if config.prefill is not PrefillPolicy.FIRST:
        raise UserError(f"the real loop prefills first (asked: {config.prefill.value})", "drop --prefill chunked")
    need = config.max_batch * (max_draft_len(policy) + 1)
    if config.max_tokens < need:
        raise UserError(f"--max-tokens {config.max_tokens} cannot hold one decode iteration of {config.max_batch} "
                        f"sequences under {policy.spec()} ({need} tokens)", f"give --max-tokens {need} or more")


def prior_alpha(profile, policy: ServePolicy, head: str = SHARED) -> float:
    """The profile's acceptance at the policy's exit layer (the nearest traced one), what a load-adaptive
    policy starts from; `DEFAULT_PRIOR_ALPHA` without a profile or an exit layer."""
    exit_layer = getattr(policy, "exit_layer", None)
    if profile is None or exit_layer is None:
        return DEFAULT_PRIOR_ALPHA
    alphas = profile.alpha_by_exit(head=head)
    if not alphas:
        return DEFAULT_PRIOR_ALPHA
    return float(alphas[min(alphas, key=lambda e: abs(e - exit_layer))])


class ServeEngine:
    """The waiting queue, the running batch and its KV-cache rectangle of one model. `submit` and `cancel`
    are thread-safe; `step` runs one iteration (tests drive it directly), `start` runs it on a thread."""

    def __init__(self, model, policy: ServePolicy, config: SchedulerConfig | None = None, *, cost=None,
                 alpha: float = DEFAULT_PRIOR_ALPHA, heads_dir: str | None = None, exit_head: str = SHARED,
                 eos: set[int] | None = None, stage_core: int | None = None):
        self.model, self.policy = model, policy
        self.config = config or SchedulerConfig()
        self.cost = cost
        check_policy(policy, model.num_layers, self.config, cost)
        self.scheduler = Scheduler(self.config)
        self.seen = AcceptanceSeen(alpha)
        self.eos = set(model.eos_token_ids if eos is None else eos)
        self.heads_dir, self.exit_head = heads_dir, exit_head
        self.state: BatchState | None = None
        self.origin = time.perf_counter()
        self.iterations = self.prefills = self.speculative_iterations = 0
        self.cpu_s = 0.0  # the engine thread's CPU time, while it runs on its thread
        self.last: IterationRecord | None = None
        self._cropped = 0  # leading columns the current iteration's leavers took
        self.core: int | None = None
        self._requests: dict[int, EngineRequest] = {}
        self._ids = itertools.count()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._drafters: dict[int, object] = {}
        self.pipe = None  # PPSD: stage 1's process and stage 2's view of the rows (runtime/serve/pipeline.py)
        if policy.pipelined:
            from runtime.serve.pipeline import PipelineBatch

            self.pipe = PipelineBatch(model, policy.exit_layer, self._drafter(policy.exit_layer), stage_core)

    # --- the caller's side (any thread) -------------------------------------------------------------

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def submit(self, prompt: list[int], max_tokens: int, on_event: Callable[[TokenEvent], None], *,
               ignore_eos: bool = False, prompt_id: str = "") -> int:
        """Queue a request (its prompt's token ids, its token budget); `on_event` is called on the engine's
        thread with each delivery. Returns its id. UserError for a request the model cannot serve."""
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise UserError("the prompt is empty", "send at least one token")
        if int(max_tokens) < 1:
            raise UserError(f"max_tokens {max_tokens} must be at least 1", "ask for 1 or more tokens")
        if len(prompt) + int(max_tokens) > self.model.max_context:
            raise UserError(f"the prompt's {len(prompt)} tokens and max_tokens {max_tokens} exceed the model's "
                            f"context of {self.model.max_context}", "send a shorter prompt or ask for fewer tokens")
        rid = next(self._ids)
        now = self.now()
        request = ServeRequest(rid, now, prompt_id or str(rid), "", len(prompt), int(max_tokens))
        self._inbox.put(("submit", EngineRequest(request, prompt, bool(ignore_eos), on_event,
                                                 RequestTiming(rid, now, len(prompt)))))
        self._wake.set()
        return rid

    def cancel(self, request_id: int) -> None:
        """Drop a request (its client went away); it gets an `abort` event if it is still there."""
        self._inbox.put(("cancel", int(request_id)))
        self._wake.set()

    def start(self, core: int | None = None) -> None:
        """Run the engine on its own thread, pinned to CPU `core` when given."""
        self.core = core
        self._thread = threading.Thread(target=self._run, name="ppsd-serve-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop (it aborts every request still there); returns at once."""
        self._stop.set()
        self._wake.set()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread and wait for it; every request still there gets an `abort` event."""
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout_s)
        else:
            self._drain()
            self._abort_all("the server stopped")
        if self.pipe is not None:
            self.pipe.close()

    @property
    def live(self) -> int:
        return len(self.state.rows) if self.state is not None else 0

    @property
    def width(self) -> int:
        return self.state.width if self.state is not None else 0

    @property
    def idle(self) -> bool:
        return self.scheduler.idle and self._inbox.empty()

    # --- the engine's side ---------------------------------------------------------------------------

    def _run(self) -> None:
        if self.core is not None:
            os.sched_setaffinity(0, {self.core})  # this thread only
        with torch.inference_mode():
            while not self._stop.is_set():
                if not self.step():
                    self._wake.wait(IDLE_WAIT_S)
                    self._wake.clear()
                self.cpu_s = time.thread_time()
            self._drain()
            self._abort_all("the server stopped")

    @torch.inference_mode()
    def step(self) -> bool:
        """One iteration (False when nothing waits and nothing runs). An iteration that fails fails the
        requests it held, and the engine goes on."""
        self._drain()
        if self.scheduler.idle:
            return False
        try:
            self._iterate()
        except Exception as exc:  # noqa: BLE001 - the requests hear of it; the server keeps serving
            traceback.print_exc(file=sys.stderr)
            self._abort_all(f"{exc.__class__.__name__}: {exc}", FinishReason.ERROR)
            self.scheduler = Scheduler(self.config)
            self.state = None
            if self.pipe is not None:
                self.pipe.reset()
        return True

    def run_until_idle(self, max_iterations: int = 1_000_000) -> None:
        """Step until nothing waits and nothing runs (tests)."""
        for _ in range(max_iterations):
            if not self.step():
                return
        raise RuntimeError("the engine did not go idle")

    def _drain(self) -> None:
        while True:
            try:
                kind, payload = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "submit":
                self._requests[payload.request.request_id] = payload
                self.scheduler.arrive(payload.request)
            else:
                self._abort(payload, "the client went away", FinishReason.ABORT)

    def _iterate(self) -> None:
        live = self.live
        spec = self.policy.decide(live, float(self.width), self.seen, self.cost) if live else AR_STEP
        it = self.scheduler.next_iteration(spec.decode_tokens)
        self.iterations += 1
        before, self._cropped = self.width, 0
        if it.prefill:
            joined = tuple(n for n in (self._prefill(rid, tokens) for rid, tokens in it.prefill) if n)
            self.last = IterationRecord("prefill", before, self.width, joined, live_after=self.live)
        elif it.decode:
            if len(it.decode) != live:  # check_policy sizes the token budget for every running sequence
                raise RuntimeError(f"the scheduler decodes {len(it.decode)} of {live} running sequences")
            gamma, most = self._tick() if spec.pipelined else self._decode(spec)
            kind = "ppsd" if spec.pipelined else "eesd" if gamma else "ar"
            self.last = IterationRecord(kind, before, self.width, draft_len=gamma, most_accepted=most,
                                        live_after=self.live, cropped=self._cropped)

    def _prefill(self, rid: int, tokens: int) -> int:
        """Prefill one prompt alone and join its row -> its length (0: its first token ended it)."""
        req = self._requests[rid]
        if self.pipe is not None:
            one, first = self.pipe.prefill(req.prompt)
        else:
            one, logits = batch_prefill(self.model, [req.prompt])
            first = GREEDY.choose(logits[0])[0]
            one.tokens[0].append(first)
        one.rows = [rid]
        self.prefills += 1
        self.scheduler.prefilled(rid, tokens)
        if self._deliver({rid: [first]}, first=True):
            if self.pipe is not None:
                self.pipe.join(None)
            return 0  # its first token ended it: it never joins
        if self.state is None:
            self.state = one
        else:
            self.state.join(one)
        if self.pipe is not None:
            self.pipe.join(one)
        return len(req.prompt)

    def _decode(self, spec: Speculation) -> tuple[int, int]:
        """One AR step or EESD round of the running batch -> (γ, the most drafts a sequence accepted)."""
        st = self.state
        before = [len(t) for t in st.tokens]
        gamma = 0
        if spec.speculative:
            gamma = min(spec.draft_len, max(self.scheduler.running[r].remaining - 1 for r in st.rows))
        judged = accepted = None
        if gamma > 0:
            rounds: dict[int, list[int]] = defaultdict(list)
            eesd_round(self.model, st, spec.exit_layer, gamma, SAMPLERS, self._drafter(spec.exit_layer), rounds)
            accepted = {r: rounds[r][-1] for r in st.rows}
            judged = {r: a + (a < gamma) for r, a in accepted.items()}  # drafts up to the first rejection
            self.seen.record(sum(judged.values()), sum(accepted.values()))
            self.speculative_iterations += 1
        else:
            ar_step(self.model, st, SAMPLERS)
        new = {r: st.tokens[i][before[i]:] for i, r in enumerate(st.rows)}
        self._deliver(new, judged=judged, accepted=accepted)
        return gamma, max(accepted.values()) if accepted else 0

    def _tick(self) -> tuple[int, int]:
        """One PPSD tick of the running batch (both stages at once) -> (1, whether any draft stood)."""
        st = self.state
        before = {r: len(t) for r, t in zip(st.rows, st.tokens)}
        verdicts = self.pipe.tick(st)
        new = {r: t[before[r]:] for r, t in zip(st.rows, st.tokens) if len(t) > before[r]}
        accepted = {r: int(v) for r, v in verdicts.items()}
        self.seen.record(len(accepted), sum(accepted.values()))
        self.speculative_iterations += 1
        self._deliver(new, judged={r: 1 for r in accepted}, accepted=accepted)
        return 1, max(accepted.values(), default=0)

    def _drafter(self, exit_layer: int):
        if exit_layer not in self._drafters:
            from runtime.heads import make_drafter

            self._drafters[exit_layer] = make_drafter(self.model, exit_layer, self.heads_dir, self.exit_head)
        return self._drafters[exit_layer]

    def _deliver(self, new: dict[int, list[int]], *, first: bool = False, judged=None, accepted=None) -> set[int]:
        """Each request keeps its new tokens up to EOS and its budget, hears of them, and leaves when done.
        Returns the requests that ended."""
        now, ended = self.now(), set()
        for rid, tokens in new.items():
            req = self._requests[rid]
            cut, hit_eos = _cut_at_eos(tokens, None if req.ignore_eos else self.eos)
            kept = cut[:1] if first else cut[: self.scheduler.commit(rid, len(cut))]
            reason = None
            if hit_eos and len(kept) == len(cut):
                reason = FinishReason.STOP
                self.scheduler.finish(rid)
            elif rid not in self.scheduler.running:
                reason = FinishReason.LENGTH
            timing = req.timing
            timing.deliver(now, len(kept))
            if not first:
                timing.rounds += 1
                if judged is not None:
                    timing.drafted += judged[rid]
                    timing.accepted += accepted[rid]
            req.generated += kept
            if reason is not None:
                timing.finish_s = now
                ended.add(rid)
                del self._requests[rid]
            _tell(req, TokenEvent(rid, tuple(kept), reason, timing=timing if reason else None))
        self._drop_rows(ended)
        return ended

    def _drop_rows(self, rids: set[int]) -> None:
        if self.state is None or not rids:
            return
        stay = [i for i, r in enumerate(self.state.rows) if r not in rids]
        if len(stay) == len(self.state.rows):
            return
        if not stay:
            self.state = None  # the rectangle resets
            if self.pipe is not None:
                self.pipe.reset()
        else:
            self.state.keep(stay)
            self._cropped += self.state.crop_common_head()
            if self.pipe is not None:
                self.pipe.keep(stay)

    def _abort(self, rid: int, why: str, reason: FinishReason) -> None:
        req = self._requests.pop(rid, None)
        if req is None:
            return
        self.scheduler.waiting = deque(r for r in self.scheduler.waiting if r.request_id != rid)
        self.scheduler.finish(rid)
        self._drop_rows({rid})
        req.timing.error = why
        _tell(req, TokenEvent(rid, (), reason, error=why, timing=req.timing))

    def _abort_all(self, why: str, reason: FinishReason = FinishReason.ABORT) -> None:
        for rid in list(self._requests):
            self._abort(rid, why, reason)

    def stats(self) -> dict:
        return {"policy": self.policy.spec(), "iterations": self.iterations, "prefills": self.prefills,
                "speculative_iterations": self.speculative_iterations, "live": self.live, "width": self.width,
                "waiting": len(self.scheduler.waiting), "acceptance_seen": self.seen.alpha,
                "engine_cpu_s": self.cpu_s, "engine_core": self.core,
                "stage_one_cpu_s": self.pipe.cpu_s() if self.pipe is not None else None}


def _cut_at_eos(tokens: list[int], eos: set[int] | None) -> tuple[list[int], bool]:
    if eos:
        for i, t in enumerate(tokens):
            if t in eos:
                return tokens[: i + 1], True
    return list(tokens), False


def _tell(req: EngineRequest, event: TokenEvent) -> None:
    try:
        req.on_event(event)
    except Exception:  # noqa: BLE001 - one listener's failure must not stop the engine
        traceback.print_exc(file=sys.stderr)
