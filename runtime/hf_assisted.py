"""transformers' own early-exit assisted generation as a runtime ppsd can run, time and check.

`model.generate(ids, assistant_early_exit=E)` drafts with the model itself cut after E layers
(`EarlyExitCandidateGenerator`: the base model's `config.num_hidden_layers` set to E while drafting,
so the draft is the model's own final norm + LM head on the hidden state after layer E, the same
exit as ppsd's shared head) and verifies the drafts with the whole model. Its AR is plain greedy
`generate`. What this module adds is only measurement, never a change to what transformers does:

- the draft length: the drafter reads `num_assistant_tokens` / `num_assistant_tokens_schedule` /
  `assistant_confidence_threshold` from the *model's own* `generation_config` (the assistant is the
  model), not from `generate`'s arguments, so a run sets them there for its duration and restores
  them after. The confidence threshold (transformers' default 0.4, `hf_default_threshold`: stop drafting
  after a draft whose probability falls below it) is the plan's `draft_stop`, or 0 without one, so the
  draft length then follows the schedule alone. Early exit keeps it fixed (transformers adapts it only in
  `AssistedCandidateGenerator` itself, and only with scikit-learn installed). "heuristic" carries its draft length from one `generate` call to the next
  (transformers writes it back into the generation config); a run starts every pass over its prompts
  at γ0, as the simulator starts its stream.
- the clock: a streamer records when each commit lands (one `put` per AR step or per assisted
  round). The first commit ends the "prefill" (AR: the prompt pass; assisted: the first round, which
  drafts on the prompt and verifies with the prompt pass); decode speed is the tokens committed after
  it over the time after it, as `runtime/decoding.py` measures ppsd's own decoders.
- the rounds: `EarlyExitCandidateGenerator.get_candidates` is wrapped (class level, inside the run
  only) to record each round's draft count; a round's accepted drafts are its commit − 1; drafts
  judged (the acceptance rate's denominator) are the accepted ones plus the first mismatch, as ppsd's
  decoders count them (drafts after a mismatch are never compared).
- optionally (`log=`) every forward call of the model: layers run, new tokens, cached tokens before,
  start and end times, from which `profiler/hf_overhead.py` measures the host overhead per AR token,
  per draft and per round.
"""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass, field

from ppsd.errors import UserError
from runtime.decoding import SeqRecord
from runtime.warmup import warmup_view

SCHEDULES = ("constant", "heuristic")


@dataclass
class HFSeqRecord(SeqRecord):
    """A SeqRecord whose first commit may hold several tokens (an assisted first round)."""

    first_commit: int = 1
    first_drafts: int = 0  # drafts proposed in the first round (the prefill round)
    drafts: list[int] = field(default_factory=list)  # drafts proposed per round (decode rounds only)
    commit_times: list[float] = field(default_factory=list)  # perf_counter of each commit (first included)
    commit_sizes: list[int] = field(default_factory=list)

    @property
    def decode_tokens(self) -> int:
        return max(len(self.tokens) - self.first_commit, 0)


@dataclass
class ForwardCall:
    layers: int       # decoder layers the call ran (E while drafting, N otherwise)
    n: int            # new tokens
    cached: int       # tokens in the cache before the call
    start: float
    end: float


class _CommitClock:
    """A transformers streamer that records when each commit lands and how many tokens it holds."""

    def __init__(self):
        self.times: list[float] = []
        self.sizes: list[int] = []
        self._prompt_seen = False

    def put(self, value):
        now = time.perf_counter()
        if not self._prompt_seen:  # generate() puts the prompt first
            self._prompt_seen = True
            return
        self.times.append(now)
        self.sizes.append(int(value.numel()))

    def end(self):
        pass


def check_schedule(schedule: str) -> str:
    if schedule not in SCHEDULES:
        raise UserError(f"unknown draft-length schedule {schedule!r}", f"use one of: {', '.join(SCHEDULES)}")
    return schedule


def hf_model(model):
    """The transformers model behind a ppsd ModelAdapter (refuses emulated models)."""
    if getattr(model, "emulated", False) or not hasattr(model, "model") or not hasattr(model.model, "generate"):
        raise UserError("--runtime hf decodes with transformers' generate and needs a real model",
                        "drop --emulate (or --runtime hf)")
    return model.model


def hf_default_threshold() -> float:
    """transformers' own default `assistant_confidence_threshold`: what `generate` fills a GenerationConfig
    field left unset with (transformers 5: `_get_default_generation_params`; before it, the field's own
    default)."""
    from transformers import GenerationConfig

    value = GenerationConfig().assistant_confidence_threshold
    defaults = getattr(GenerationConfig, "_get_default_generation_params", None)
    if value is None and defaults is not None:
        value = defaults().get("assistant_confidence_threshold")
    return float(value or 0.0)


@contextlib.contextmanager
def assisted_config(hf, gamma: int, schedule: str, threshold: float | None = None):
    """The model's generation config set for assisted drafting for the duration (restored after):
    γ0, the schedule and the confidence threshold (`threshold`; None: 0, no confidence stop)."""
    gc = hf.generation_config
    keys = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
    saved = {k: getattr(gc, k, None) for k in keys}
    gc.num_assistant_tokens = int(gamma)
    gc.num_assistant_tokens_schedule = check_schedule(schedule)
    gc.assistant_confidence_threshold = float(threshold or 0.0)
    try:
        yield gc
    finally:
        for k, v in saved.items():
            setattr(gc, k, v)


@contextlib.contextmanager
def instrumented(hf, log: list[ForwardCall] | None, drafts: list[int]):
    """Record every forward call into `log` (when given) and every round's draft count into `drafts`."""
    from transformers.generation import candidate_generator as cg

    cls = cg.EarlyExitCandidateGenerator
    orig_get = cls.get_candidates

    def get_candidates(self, input_ids, **kwargs):
        ids, logits = orig_get(self, input_ids, **kwargs)
        drafts.append(int(ids.shape[1] - input_ids.shape[1]))
        return ids, logits

    cls.get_candidates = get_candidates
    orig_forward = hf.forward if log is not None else None
    if log is not None:
        # `wraps` keeps forward's signature visible: generate() asks it whether the model takes
        # `logits_to_keep` and, seeing a bare (*args, **kwargs), computes the LM head on every position
        # of every call, the drafter's 2-token re-feed included: each timed round would then carry an LM
        # head the un-timed runs never pay (docs/design-notes.md)
        @functools.wraps(orig_forward)
        def forward(*args, **kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            cached = cache.get_seq_length() if cache is not None else 0
            s = time.perf_counter()
            out = orig_forward(*args, **kwargs)
            log.append(ForwardCall(int(hf.config.num_hidden_layers), int(ids.shape[1]) if ids is not None else 0,
                                   int(cached), s, time.perf_counter()))
            return out

        hf.forward = forward
    try:
        yield
    finally:
        cls.get_candidates = orig_get
        if log is not None:
            del hf.forward  # the instance attribute goes; the class's forward is back


@contextlib.contextmanager
def _no_eos(hf, active: bool):
    """No EOS stops the generation (the model's generation config, which the drafter copies too)."""
    if not active:
        yield
        return
    gc = hf.generation_config
    saved = (gc.eos_token_id, gc.pad_token_id)
    gc.eos_token_id = None
    gc.pad_token_id = saved[1] if saved[1] is not None else 0
    try:
        yield
    finally:
        gc.eos_token_id, gc.pad_token_id = saved


def generate_hf(model, prompt: list[int], max_new: int, *, exit_layer: int | None = None,
                eos: set[int] | None = None, log: list[ForwardCall] | None = None) -> HFSeqRecord:
    """One greedy generation with transformers: plain `generate` when `exit_layer` is None, else
    assisted generation drafting at that exit (draft settings: `assisted_config`). Stops at `max_new`
    tokens or an EOS: the model's generation config's EOS ids when `eos` is None, none when it is
    empty (every generation `max_new` tokens long, as `ppsd validate` measures)."""
    import torch

    hf = hf_model(model)
    ids = torch.tensor([prompt], dtype=torch.long, device=model.device)
    clock = _CommitClock()
    drafts: list[int] = []
    kwargs = dict(max_new_tokens=int(max_new), do_sample=False, streamer=clock,
                  attention_mask=torch.ones_like(ids))
    if eos:
        kwargs["eos_token_id"] = sorted(eos)
        kwargs["pad_token_id"] = sorted(eos)[0]
    if exit_layer is not None:
        kwargs["assistant_early_exit"] = int(exit_layer)
    with instrumented(hf, log, drafts), _no_eos(hf, eos is not None and not eos), torch.inference_mode():
        t0 = time.perf_counter()
        out = hf.generate(ids, **kwargs)
    tokens = [int(t) for t in out[0, len(prompt):].tolist()]
    if not clock.times:
        raise RuntimeError("transformers' generate committed no token")
    first = clock.sizes[0]
    t_first, t_last = clock.times[0], clock.times[-1]
    sizes = clock.sizes
    # rounds after the first commit: accepted drafts = commit − 1 (assisted); AR has no rounds
    rounds = [s - 1 for s in sizes[1:]] if exit_layer is not None else []
    round_drafts = drafts[1:len(sizes)] if exit_layer is not None else []
    # drafts judged, as ppsd's decoders count them: the accepted ones and the first mismatch, if any
    judged = sum(a + (1 if a < g else 0) for a, g in zip(rounds, round_drafts))
    return HFSeqRecord(tokens=tokens, prefill_s=t_first - t0, decode_s=t_last - t_first, rounds=rounds,
                       verified=judged, busy_s=[t_last - t_first], first_commit=first,
                       first_drafts=drafts[0] if drafts and exit_layer is not None else 0,
                       drafts=round_drafts, commit_times=list(clock.times), commit_sizes=list(sizes))


def run_hf(model, plan, prompts: list[list[int]], max_new: list[int], *, warmup: int = 1, repeats: int = 3,
           eos: set[int] | None = None, threads: int = 1, log: list[ForwardCall] | None = None,
           warmup_tokens: int = 0) -> list[list[HFSeqRecord]]:
    """Every prompt `warmup` untimed times (each cut short with `warmup_tokens`, runtime/warmup.py),
    then `repeats` timed passes; per repetition, per prompt.
    `plan`: Mode.AR (plain generate) or Mode.EESD (assisted at plan.exit_layer, γ0 = plan.draft_len,
    plan.schedule). A heuristic schedule restarts at γ0 at every pass over the prompts."""
    import torch

    from sim.schemes import runtime_decodes

    hf = hf_model(model)
    assisted = plan.mode.speculative
    if not runtime_decodes("hf", plan.mode):
        raise UserError(f"--runtime hf runs AR and EESD plans, not {plan.mode}",
                        "use --mode ar or --mode eesd with --runtime hf")
    schedule = getattr(plan, "schedule", None) or "constant"
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    reps: list[list[HFSeqRecord]] = []
    cm = (assisted_config(hf, plan.draft_len, schedule, getattr(plan, "draft_stop", None)) if assisted
          else contextlib.nullcontext())
    try:
        with cm as gc:
            for rep in range(-warmup, repeats):
                if assisted:
                    gc.num_assistant_tokens = int(plan.draft_len)
                seqs = [(p, max_new[i]) if rep >= 0 else warmup_view(p, max_new[i], warmup_tokens)
                        for i, p in enumerate(prompts)]
                recs = [generate_hf(model, p, n, exit_layer=plan.exit_layer if assisted else None,
                                    eos=eos, log=log if rep >= 0 else None)
                        for p, n in seqs]
                if rep >= 0:
                    reps.append(recs)
    finally:
        torch.set_num_threads(before)
    return reps


def measure_hf(model, plan, prompts, max_new, *, warmup: int = 1, repeats: int = 3, eos=None, threads: int = 1,
               facts: dict | None = None, warmup_tokens: int = 0):
    """`runtime.measure.measure` for the hf runtime: a Measurement (result, outputs, records)."""
    from runtime.measure import summarize

    reps = run_hf(model, plan, prompts, max_new, warmup=warmup, repeats=repeats, eos=eos, threads=threads,
                  warmup_tokens=warmup_tokens)
    facts = {"warmup": warmup, "warmup_tokens": warmup_tokens or None, "temperature": 0.0, **(facts or {})}
    return summarize(plan, reps, load_s=getattr(model, "load_s", 0.0), facts=facts)


def measure_job(model, job):
    """`validation.measuring.MeasureFn` for the hf runtime: a `runtime.measure.Job` decoded with
    transformers' generate (AR plans: plain greedy generate; EESD plans: assisted generation at the
    plan's exit, γ0 and schedule). Greedy only; forced acceptance cannot apply (transformers drafts
    and verifies by itself)."""
    from dataclasses import replace


    if job.temperature:
        raise UserError("--runtime hf is measured greedy only", "drop --temperature")
    if job.forced and any(f is not None for f in job.forced):
        raise UserError("--runtime hf cannot force acceptance (transformers drafts and verifies by itself)",
                        "drop alpha= / --force-trace with --runtime hf")
    plan = job.plan
    if getattr(plan, "runtime", "ppsd") != "hf":
        plan = replace(plan, runtime="hf")
    if plan.mode.speculative and plan.exit_head != "shared":
        raise UserError(f"transformers' early exit drafts with the model's own head, not {plan.exit_head!r}",
                        "drop --exit-head / head= with --runtime hf")
    eos = model.eos_token_ids if job.stop_at_eos else set()
    return measure_hf(model, plan, job.prompts, job.max_new, warmup=job.warmup, repeats=job.repeats, eos=eos,
                      threads=job.threads, warmup_tokens=job.warmup_tokens)


def runtime_plans(plans, forced, predict, runtime: str, schedule: str):
    """`ppsd validate --runtime hf`: the plans as transformers decodes them (EESD under `schedule`, or
    under each with "both"); a predicting profile without `latency.hf` is refused before any run."""
    from dataclasses import replace

    from sim.schemes import runtime_decodes
    from sim.schemes.hf import hf_block

    import sys

    hf_block(predict)
    out, out_forced, skipped = [], [], []
    for plan, f in zip(plans, forced):
        if f is not None:
            raise UserError("--runtime hf cannot force acceptance", "drop alpha= from --plans")
        if not runtime_decodes(runtime, plan.mode):  # transformers has no pipeline: left out, said once
            skipped.append(plan.label())
            continue
        schedules = ("constant", "heuristic") if schedule == "both" and plan.mode.speculative else \
            (schedule if schedule != "both" else "constant",)
        for s in schedules:
            out.append(replace(plan, runtime=runtime, schedule=s if plan.mode.speculative else "constant"))
            out_forced.append(None)
    if skipped:
        print(f"--runtime hf: transformers' generate has no pipeline mode; left out {', '.join(skipped)}",
              file=sys.stderr)
    if not any(p.mode.speculative for p in out):
        raise UserError("--runtime hf has no EESD plan to measure",
                        "give --plans with eesd items, e.g. --plans 'eesd:20:2;eesd:24:4;eesd:27:6'")
    return out, out_forced


def run_command(args) -> int:
    """`ppsd run --runtime hf`: transformers' plain greedy generate and (--mode eesd) its assisted
    generation at --exit with γ0 = --draft-len and --schedule, on the same prompts; prints both and
    whether the outputs are identical."""
    import torch

    from ppsd.devices import normalize_device
    from ppsd.output import print_json
    from runtime.llm import load_model
    from ppsd.prompts import load_prompts
    from ppsd.modes import Mode
    from sim.schemes import runtime_decodes
    from sim.plan import Plan

    mode = Mode.parse(args.mode)
    if not runtime_decodes("hf", mode):
        raise UserError("transformers' generate has no pipeline (PPSD) mode", "use --mode ar or eesd with --runtime hf")
    for flag, given in (("--emulate", getattr(args, "emulate", None)), ("--temperature", args.temperature),
                        ("--force-trace", args.force_trace), ("--heads", getattr(args, "heads", None)),
                        ("--cores", (getattr(args, "cores", None) or 1) > 1)):
        if given:
            raise UserError(f"--runtime hf does not take {flag}", f"drop {flag}")
    if args.ignore_eos:
        raise UserError("--runtime hf stops where transformers' generate stops", "drop --ignore-eos")
    if mode.speculative and args.exit_layer is None:
        raise UserError("--mode eesd needs an exit layer", "give --exit E")
    if args.max_new_tokens < 1 or args.repeats < 1 or args.warmup < 0:
        raise UserError("--max-new-tokens and --repeats must be >= 1 and --warmup >= 0", "use e.g. --repeats 3")
    torch.set_num_threads(1)
    model = load_model(args.model, normalize_device(args.device), args.dtype)
    plan = Plan(mode, exit_layer=args.exit_layer if mode.speculative else None, draft_len=args.draft_len,
                runtime="hf", schedule=args.schedule if mode.speculative else "constant",
                draft_stop=getattr(args, "draft_stop_confidence", None)).validate(model.num_layers)
    prompts = [model.encode_prompt(p.text) for p in load_prompts(args.prompts, limit=args.limit)]
    max_new = [args.max_new_tokens] * len(prompts)
    eos = model.eos_token_ids
    facts = {"model": model.model_id, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens}
    ar = None
    if not mode.speculative or not args.no_ar:
        ar = measure_hf(model, Plan(Mode.AR, runtime="hf"), prompts, max_new, warmup=args.warmup,
                        repeats=args.repeats, eos=eos, facts=facts)
    m = ar if not mode.speculative else measure_hf(model, plan, prompts, max_new, warmup=args.warmup,
                                              repeats=args.repeats, eos=eos, facts=facts)
    res = m.result
    if ar is not None and mode.speculative:
        res.speedup_vs_ar = res.tokens_per_s / ar.result.tokens_per_s
        res.details.ar_tokens_per_s = ar.result.tokens_per_s
        res.details.outputs_match_ar = m.outputs == ar.outputs
    if args.json:
        print_json(res.to_json_dict())
        return 0
    print(f"{res.plan.label()}: {res.tokens_per_s:.2f} tokens/s (p10 {res.details.tokens_per_s_p10:.2f}, "
          f"p90 {res.details.tokens_per_s_p90:.2f}) over {len(prompts)} prompts × {args.repeats} repeats")
    if mode.speculative:
        print(f"  acceptance rate {res.acceptance_rate if res.acceptance_rate is not None else float('nan'):.3f}, "
              f"{res.mean_accepted:.2f} tokens per round; accepted drafts per round {res.accepted_hist}")
        if ar is not None:
            print(f"  transformers' greedy generate (AR): {ar.result.tokens_per_s:.2f} tokens/s; speedup "
                  f"{res.speedup_vs_ar:.3f}×; outputs identical to AR: {res.details.outputs_match_ar}")
    return 0
