"""`ppsd run --batch B`: AR and the plan decoding B sequences at once, in turns, on the same prompts.

The prompts are decoded in batches of B (`--limit` rounded up to a multiple of B). Each repetition runs
AR's batches and the plan's batches back to back, the order alternating between repetitions, so both
see the same machine. A batch's speed is its decode tokens over all its sequences (after each one's
first token) over its decode time; the run reports the median over repetitions of the total, the
per-sequence time per output token, the speedup against AR at the same batch size, and, greedy, whether
every sequence's output equals AR's at the same batch size and at batch 1 (the positions that differ).
"""

from __future__ import annotations

import math
import os
import statistics
import sys
from dataclasses import asdict, dataclass, field

from ppsd.errors import UserError
from ppsd.modes import Mode

BATCH_MODES = (Mode.AR, Mode.EESD, Mode.PPSD)
AR_BOTH_CORES = "AR on both cores"  # the same-budget baseline a batched PPSD plan (two processes) is held against


@dataclass
class BatchResult:
    """What `ppsd run --batch B` measured (speeds in tokens/s over all sequences of a batch)."""

    plan: str
    batch_size: int
    sequences: int
    tokens_per_s: float
    ar_tokens_per_s: float
    speedup_vs_ar: float  # against AR at the same batch size, same prompts, same session
    ms_per_token: float  # per sequence: its decode time until it left the batch over its tokens (median)
    ar_ms_per_token: float
    repeats: int
    acceptance_rate: float | None = None
    mean_accepted: float | None = None
    ar_both_cores_tokens_per_s: float | None = None  # PPSD: AR at the same batch size on both cores
    speedup_vs_ar_tp: float | None = None  # PPSD: against the faster AR on the cores its two stages use
    outputs_match_ar: bool | None = None  # greedy: identical to AR at the same batch size
    outputs_match_ar_batch1: bool | None = None  # greedy: identical to AR one sequence at a time
    differ_from_ar_batch1: list[dict] = field(default_factory=list)  # {"sequence", "position"} where they part
    cache_slots: int = 0  # KV-cache slots a sequence held at the end of the first batch (holes included)

    def to_json_dict(self) -> dict:
        return asdict(self)


def check_batch_request(args) -> None:
    """Refuse, before a model loads, what the batched runtime does not run."""
    batch = int(args.batch)
    if batch < 1:
        raise UserError(f"--batch {batch} must be at least 1", "use e.g. --batch 4")
    from sim.schemes import scheme

    mode = Mode.parse(args.mode)
    if mode not in BATCH_MODES:
        raise UserError(f"--mode {mode.value} does not run batched (AR, EESD and PPSD do)",
                        "use --mode ar, eesd or ppsd with --batch")
    pipelined = scheme(mode).pipelined
    if pipelined and (int(getattr(args, "stages", 2) or 2) != 2 or float(args.temperature or 0) > 0):
        raise UserError("batched PPSD runs greedy with two stages", "use --stages 2 --temperature 0 with --batch, "
                        "or --batch 1 for other PPSD plans")
    if pipelined and str(getattr(args, "device", "cpu") or "cpu") != "cpu":
        raise UserError("batched PPSD runs on a CPU (two processes)", "use --device cpu with --batch")
    for flag, given in (("--emulate", getattr(args, "emulate", None)), ("--force-trace", args.force_trace),
                        ("--timeline", args.timeline), ("--runtime hf", getattr(args, "runtime", "ppsd") == "hf"),
                        ("--cores", getattr(args, "cores", None))):
        if given:
            raise UserError(f"{flag} does not apply with --batch", f"drop {flag.split()[0]}, or drop --batch")


def kv_bytes(model, batch: int, slots: int) -> int:
    """The KV cache of `batch` sequences of `slots` positions each, every layer (bytes)."""
    cfg = model.config
    heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or model.hidden_size // cfg.num_attention_heads)
    itemsize = 2 if "16" in str(model.dtype) else 4
    return 2 * model.num_layers * batch * heads * head_dim * slots * itemsize


def check_fits(model, batch: int, prompts: list[list[int]], max_new: int, gamma: int) -> None:
    """Refuse a batch whose KV cache (every slot a round may leave as a hole) would not fit in half the
    memory this machine has free. Batched PPSD: `gamma` 1 (a rejection leaves one hole a token)."""
    slots = max(len(p) for p in prompts) + max_new * (gamma + 1)
    need = kv_bytes(model, batch, slots)
    free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") if model.device.type == "cpu" else None
    if free is not None and need > free // 2:
        raise UserError(f"--batch {batch} needs up to {need / 2**30:.1f} GiB of KV cache; "
                        f"{free / 2**30:.1f} GiB of memory is free", "use a smaller --batch or --max-new-tokens")


def _batches(items: list, batch: int) -> list[list]:
    return [items[i:i + batch] for i in range(0, len(items), batch)]


def decode_batches(model, plan, prompts, max_new, batch, temperature, seed, eos, drafter, stage_one=None):
    """Every batch of the prompts once -> (records, decode tokens, decode seconds). PPSD needs `stage_one`
    (runtime/batched_pipeline.StageOneProcess for the plan's exit layer)."""
    from runtime.acceptance import Sampler
    from runtime.batched import generate_ar_batch, generate_eesd_batch
    from runtime.batched_pipeline import generate_ppsd_batch

    records = []
    for b, group in enumerate(_batches(prompts, batch)):
        samplers = [Sampler.make(temperature, seed * 1_000_003 + (b * batch + i) * 2 + 1, model.device)
                    for i in range(len(group))]
        budget = [max_new] * len(group)
        if not plan.scheme.speculative:
            records.append(generate_ar_batch(model, group, budget, samplers, eos))
        elif plan.scheme.pipelined:
            records.append(generate_ppsd_batch(model, stage_one, group, budget, plan.exit_layer, eos))
        else:
            records.append(generate_eesd_batch(model, group, budget, samplers, plan.exit_layer, plan.draft_len, eos,
                                               drafter))
    return records, sum(r.decode_tokens for r in records), sum(r.decode_s for r in records)


def _per_token_ms(records) -> float:
    values = [1000 * s / (len(t) - 1) for r in records for t, s in zip(r.tokens, r.finish_s) if len(t) > 1]
    return statistics.median(values) if values else math.nan


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where two token lists part (the shorter one's length if one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def ar_one_at_a_time(model, prompts, max_new, eos) -> list[list[int]]:
    from runtime.acceptance import Sampler
    from runtime.decoding import generate_ar

    return [generate_ar(model, p, max_new, Sampler.make(0.0, 0), eos).tokens for p in prompts]


def measure_in_turns(model, plans: dict, prompts: list[list[int]], max_new: int, batch: int, *, warmup: int = 1,
                     repeats: int = 3, temperature: float = 0.0, seed: int = 0, eos=None, drafters=None):
    """AR and every plan of `plans` ({name: plan}) over all the prompts, `batch` at a time, taking turns (the
    order reversed every repetition) -> ({"AR" or name: [tokens/s per timed repetition]}, {same: first timed
    records}). With a PPSD plan among them, AR on both cores (`AR_BOTH_CORES`) takes its turns too: the
    same-budget baseline of a plan whose two stages use both."""
    from contextlib import ExitStack

    import torch

    from ppsd.progress import PhaseBars
    from runtime.batched_pipeline import StageOneProcess
    from runtime.request import make_plan

    ar = make_plan(Mode.AR, model.num_layers)
    runs = {"AR": ar, **plans}
    if any(p.scheme.pipelined for p in plans.values()):
        runs[AR_BOTH_CORES] = ar
    names, drafters = list(runs), drafters or {}
    speeds, firsts = {n: [] for n in names}, {}
    with ExitStack() as stack:
        # stage processes fork before the progress bar's thread starts (a fork copies no other thread)
        stage_ones = {n: stack.enter_context(StageOneProcess(model, p.exit_layer, drafters.get(n)))
                      for n, p in plans.items() if p.scheme.pipelined}
        bar = stack.enter_context(PhaseBars())
        bar.phase(f"batch {batch} in turns", warmup + repeats)
        for rep in range(-warmup, repeats):
            for name in (names if rep % 2 == 0 else names[::-1]):
                torch.set_num_threads(2 if name == AR_BOTH_CORES else 1)
                records, tokens, seconds = decode_batches(model, runs[name], prompts, max_new, batch, temperature,
                                                          seed, eos, drafters.get(name), stage_ones.get(name))
                if rep >= 0:
                    speeds[name].append(tokens / seconds)
                    firsts.setdefault(name, records)
            bar.advance(f"batch {batch} in turns")
        torch.set_num_threads(1)
    return speeds, firsts


def acceptance_of(plan, records) -> tuple[float | None, float | None]:
    """(acceptance rate, mean tokens a round) of a plan's batches; PPSD: the share of drafts accepted, one
    draft a tick."""
    return plan.scheme.batch_acceptance([a for r in records for seq in r.rounds for a in seq], plan.draft_len)


def outputs(records) -> list[list[int]]:
    """Every sequence's tokens, batch after batch, in the order the prompts were given."""
    return [t for r in records for t in r.tokens]


def differences(mine: list[list[int]], single: list[list[int]]) -> list[dict]:
    """{"sequence", "position"} for each sequence whose tokens part from its batch-1 twin."""
    return [{"sequence": i, "position": d} for i, (a, b) in enumerate(zip(mine, single))
            if (d := first_difference(a, b)) is not None]


def measure_batched(model, plan, prompts: list[list[int]], max_new: int, batch: int, *, temperature: float = 0.0,
                    seed: int = 0, eos=None, drafter=None, warmup: int = 1, repeats: int = 3) -> BatchResult:
    """AR and `plan` at batch size `batch` in turns (see the module doc)."""
    speeds, firsts = measure_in_turns(model, {"plan": plan}, prompts, max_new, batch, warmup=warmup, repeats=repeats,
                                      temperature=temperature, seed=seed, eos=eos, drafters={"plan": drafter})
    mine, ar = statistics.median(speeds["plan"]), statistics.median(speeds["AR"])
    out = BatchResult(plan.label(), batch, len(prompts), mine, ar, mine / ar, _per_token_ms(firsts["plan"]),
                      _per_token_ms(firsts["AR"]), repeats, cache_slots=firsts["plan"][0].slots)
    out.acceptance_rate, out.mean_accepted = acceptance_of(plan, firsts["plan"])
    if AR_BOTH_CORES in speeds:
        out.ar_both_cores_tokens_per_s = statistics.median(speeds[AR_BOTH_CORES])
        out.speedup_vs_ar_tp = mine / max(ar, out.ar_both_cores_tokens_per_s)
    if temperature == 0:  # greedy: against AR at the same batch size and, sequence by sequence, at batch 1
        out.outputs_match_ar = outputs(firsts["plan"]) == outputs(firsts["AR"])
        out.differ_from_ar_batch1 = differences(outputs(firsts["plan"]), ar_one_at_a_time(model, prompts, max_new, eos))
        out.outputs_match_ar_batch1 = not out.differ_from_ar_batch1
    return out


def format_batch_result(res: BatchResult) -> str:
    lines = [f"{res.plan} at batch {res.batch_size} ({res.sequences} sequences): {res.tokens_per_s:.2f} tokens/s "
             f"over the batch (median of {res.repeats}); {res.ms_per_token:.1f} ms a token per sequence",
             f"  vs AR at batch {res.batch_size}: {res.ar_tokens_per_s:.2f} tokens/s, {res.ar_ms_per_token:.1f} ms a "
             f"token per sequence: speedup {res.speedup_vs_ar:.3f}×"]
    if res.speedup_vs_ar_tp is not None:
        lines.append(f"  vs AR at batch {res.batch_size} on both cores (the cores its two stages use): "
                     f"{res.ar_both_cores_tokens_per_s:.2f} tokens/s: same-budget speedup {res.speedup_vs_ar_tp:.3f}×")
    if res.acceptance_rate is not None:
        per = "tick" if res.plan.startswith("PPSD") else "round"
        lines.append(f"  acceptance {res.acceptance_rate:.3f}; mean tokens per {per} {res.mean_accepted:.2f}"
                     + (f"; {res.cache_slots} cache slots a sequence at the end (holes of rejected drafts included)"
                        if res.cache_slots else ""))
    if res.outputs_match_ar is not None and res.plan != "AR":
        lines.append(f"  outputs match AR at batch {res.batch_size}: {res.outputs_match_ar}")
    if res.outputs_match_ar_batch1 is not None:
        where = ", ".join(f"sequence {d['sequence']} from token {d['position']}" for d in res.differ_from_ar_batch1)
        lines.append(f"  outputs match AR at batch 1: {res.outputs_match_ar_batch1}"
                     + (f" (batched arithmetic parts a near-tie: {where})" if where else ""))
    return "\n".join(lines)


def run_batched(args) -> int:
    """`ppsd run --batch B` (see the module doc)."""
    import torch

    from ppsd.output import print_json
    from ppsd.prompts import load_prompts
    from runtime.heads import make_drafter
    from runtime.llm import load_model
    from runtime.request import make_plan, with_exit_head

    check_batch_request(args)
    batch = int(args.batch)
    count = batch * math.ceil(max(args.limit, 1) / batch)
    texts = load_prompts(args.prompts, limit=count)
    if len(texts) < count:
        raise UserError(f"--batch {batch} needs {count} prompts and the prompt file has {len(texts)}",
                        "use a smaller --batch or --limit, or a longer --prompts file")
    torch.set_num_threads(1)
    model = load_model(args.model, args.device, args.dtype)
    plan = make_plan(args.mode, model.num_layers, args.exit_layer, args.draft_len, args.stages, None, None)
    plan = with_exit_head(model, plan, getattr(args, "heads", None), getattr(args, "exit_head", None))
    prompts = [model.encode_prompt(t.text) for t in texts]
    check_fits(model, batch, prompts, args.max_new_tokens, plan.scheme.batch_holes(plan.draft_len))
    drafter = make_drafter(model, plan.exit_layer, getattr(args, "heads", None), plan.exit_head) \
        if plan.mode.speculative else None
    eos = None if args.ignore_eos else model.eos_token_ids
    res = measure_batched(model, plan, prompts, args.max_new_tokens, batch, temperature=args.temperature,
                          seed=args.seed, eos=eos, drafter=drafter, warmup=args.warmup, repeats=args.repeats)
    if args.json:
        print_json(res.to_json_dict())
    else:
        print(format_batch_result(res))
    if res.outputs_match_ar is False:
        print("ppsd run: warning: the plan's greedy outputs differ from AR's at the same batch size", file=sys.stderr)
    return 0
