"""simulate and sweep (the recommendation is sim/planner/verdict.py): streams in, a scheme's engine runs, Results out.

Nothing here knows how any scheme decodes: each plan's scheme comes from the registry
(`sim.schemes.scheme(plan.mode)`), which prices its work and runs its event model or its replay.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import replace

import numpy as np

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from ppsd.progress import report
from sim.model.budget import Budget, default_budget, in_budget
from sim.model.cost_model import sampled_costs_missing
from ppsd.modes import Mode
from sim.plan import Plan, Result, SimulatedDetails
from sim.model.prefill import check_prompt_len, prompt_lengths, whole_prefill_ms
from sim.planner.resolve import resolve_plan
from sim.planner.sweep_spec import DEFAULT_TOKENS, SweepSpec
from sim.schemes import RunStats, scheme, scheme_for
from sim.schemes.ar import step_ms as ar_step_ms
from sim.model.streams import Stream, bernoulli_stream, check_alpha, check_tokens, trace_stream

ENGINES = ("event", "fast")
ACCEPTANCE_SOURCES = ("trace", "bernoulli")


def make_stream(profile, plan: Plan, *, tokens, acceptance, alpha, category, prompt_ids, seed, temperature,
                alpha_scale: float = 1.0) -> Stream:
    tokens = check_tokens(tokens)
    if acceptance not in ACCEPTANCE_SOURCES:
        raise UserError(f"unknown acceptance source {acceptance!r}", "use --acceptance trace or bernoulli")
    if temperature is not None and temperature < 0:
        raise UserError(f"temperature {temperature} is negative", "give a temperature >= 0")
    if acceptance == "bernoulli":
        return bernoulli_stream(profile, check_alpha(alpha), tokens or DEFAULT_TOKENS, seed)
    exit_layer = plan.exit_layer
    if exit_layer is None:  # a plan without an exit (AR) replays the first exit's contexts
        exits = sorted(_exit_layers(profile, plan.exit_head))
        exit_layer = exits[0] if exits else 1
    return trace_stream(profile, exit_layer, tokens=tokens, category=category, prompt_ids=prompt_ids,
                        temperature=temperature or 0.0, seed=seed, head=plan.exit_head, alpha_scale=alpha_scale)


def _exit_layers(profile, head):
    from sim.model.streams import _traces

    return _traces(profile, head).keys()


def run_plan(profile, plan: Plan, stream: Stream, engine: str, record: bool) -> tuple[RunStats, float]:
    """Run a resolved plan on a stream with its scheme's event model (engine "event", or whenever a
    timeline is recorded or the replay does not cover the plan) or its exact replay ("fast");
    returns (stats, AR time in ms on the same contexts)."""
    sch = scheme_for(plan)
    baseline = getattr(sch, "baseline_ms", None)  # another runtime's AR (sim/schemes/hf.py)
    ar_total = float(np.sum(baseline(profile, plan, stream.context) if baseline is not None
                            else ar_step_ms(profile, stream.context, plan.exit_head, plan.sampled)))
    costs = sch.unit_costs(profile, plan, stream.context)
    if engine == "event" or record or not sch.can_replay(costs):
        return sch.event_model(stream, costs, record), ar_total
    return sch.replay(stream, costs), ar_total


def to_result(plan: Plan, stream: Stream, stats: RunStats, ar_ms: float, engine: str, seed: int,
              budget: Budget | None = None, in_budget_ms: tuple[float, float] | None = None,
              prefill_ms: tuple[float, float] | None = None) -> Result:
    """A Result from an engine's stats; with a budget, `in_budget_ms` = (the plan's, AR's) time in ms
    on the same stream within it (sim/model/budget.py); `prefill_ms` = (the plan's, AR's) prefill of every
    generation (sim/model/prefill.py)."""
    time_s = stats.time_ms / 1e3
    rounds = len(stats.rounds_a)
    accepted = int(sum(stats.rounds_a))
    judged = accepted + int(sum(stats.rounds_rejected))
    busy = [b / stats.time_ms if stats.time_ms > 0 else 0.0 for b in stats.stage_busy_ms]
    devices = plan.devices()
    dev_busy = [stats.device_busy_ms.get(d, 0.0) / stats.time_ms if stats.time_ms > 0 else 0.0
                for d in sorted(set(devices))]
    speculative = plan.mode.speculative
    hist = dict(sorted(Counter(stats.rounds_a).items())) if speculative else {}
    return Result(
        plan=plan, source="simulated", tokens=stats.tokens, time_s=time_s,
        tokens_per_s=stats.tokens / time_s if time_s > 0 else float("inf"),
        speedup_vs_ar=ar_ms / stats.time_ms if stats.time_ms > 0 else None,
        mean_accepted=(stats.tokens / rounds) if (speculative and rounds) else 1.0,
        accepted_hist={int(k): int(v) for k, v in hist.items()},
        acceptance_rate=(accepted / judged if judged else None) if speculative else None,
        stage_busy=busy, device_busy=dev_busy, timeline=stats.events,
        details=SimulatedDetails(
            engine="event" if stats.events or engine == "event" else engine,
            acceptance_source=stream.source, stream_alpha=stream.alpha,
            ar_tokens_per_s=stats.tokens / (ar_ms / 1e3) if ar_ms > 0 else None,
            rounds=rounds, generations=int(stream.seg_start.sum()), seed=seed, label=plan.label(),
            **_prefill_fields(stats.time_ms, ar_ms, prefill_ms, int(stream.seg_start.sum())),
            **_budget_fields(stats.tokens, budget, in_budget_ms)),
        speedup_vs_ar_tp=(in_budget_ms[1] / in_budget_ms[0]) if in_budget_ms and in_budget_ms[0] > 0 else None,
    )


def _prefill_fields(decode_ms: float, ar_decode_ms: float, prefill_ms, generations: int) -> dict:
    if prefill_ms is None:
        return {}
    plan_pre, ar_pre = prefill_ms
    e2e = decode_ms + plan_pre
    return {"prefill_s": plan_pre / 1e3, "ttft_s": plan_pre / 1e3 / max(generations, 1), "e2e_s": e2e / 1e3,
            "speedup_vs_ar_e2e": (ar_decode_ms + ar_pre) / e2e if e2e > 0 else None}


def _budget_fields(tokens: int, budget: Budget | None, in_budget_ms) -> dict:
    if budget is None or in_budget_ms is None:
        return {}
    plan_ms, ar_ms = in_budget_ms
    return {"budget": budget.label, "budget_tokens_per_s": tokens / (plan_ms / 1e3) if plan_ms > 0 else None,
            "ar_tp_tokens_per_s": tokens / (ar_ms / 1e3) if ar_ms > 0 else None}


_WARNED_UNPRICED: set = set()


def warn_unpriced_draws(profile, plan: Plan) -> None:
    """Once per profile: a sampled plan on a profile that never timed a draw is priced without it."""
    key = str(profile.path)
    if not plan.sampled or key in _WARNED_UNPRICED or not sampled_costs_missing(profile):
        return
    _WARNED_UNPRICED.add(key)
    print(f"warning: profile {key} has no latency.sampling: sampled plans are priced without the cost of "
          f"drawing a token (run `ppsd profile add-sampling {key}` on the profiled machine)", file=sys.stderr)


def _run(profile, plan: Plan, stream: Stream, engine: str, record: bool, seed: int, budget: Budget | None,
         prompt_len: int | None = None) -> Result:
    """Run one resolved plan and, with a budget, the same plan and AR within it; price every
    generation's prefill (the prompt lengths of the stream, or `prompt_len`)."""
    warn_unpriced_draws(profile, plan)
    stats, ar_ms = run_plan(profile, plan, stream, engine, record)
    timed = in_budget(profile, plan, stream, budget, stats.time_ms, run_plan) \
        if budget and plan.runtime == "ppsd" else None
    whole = whole_prefill_ms(profile, prompt_lengths(stream, prompt_len))
    sch = scheme(plan.mode)
    prefill = (float(sum(sch.first_token_ms(plan, w) for w in whole.tolist())), float(whole.sum()))
    return to_result(plan, stream, stats, ar_ms, engine, seed, budget, timed, prefill)


def simulate(profile, plan: Plan, *, tokens=None, acceptance="trace", alpha=None, category=None, prompt_ids=None,
             seed=0, temperature=0.0, engine="event", timeline=False, budget: int | None = None,
             prompt_len: int | None = None) -> Result:
    """Simulate one plan on a profile and return a Result (source "simulated").

    acceptance "trace": the profile's recorded match traces for the plan's exit layer (all prompts,
    one category, or the given prompt ids); exact for greedy decoding. With temperature > 0 each
    position is accepted with probability β_p instead (seeded). With tokens=None each selected
    prompt's trace is replayed once at its own context length; with tokens=T the traces are tiled
    (each prompt a separate generation) and cut to T tokens.
    acceptance "bernoulli": a seeded Bernoulli(alpha) stream of `tokens` (default 2000) positions.
    speedup_vs_ar is against AR on the same profile at the same contexts. timeline=True records
    the event timeline (always from the event engine). With a profile that has tables at more threads
    or GPUs (`latency.parallel`), `speedup_vs_ar_tp` compares the plan with AR on `budget` of them
    (default: the most the profile has; sim/model/budget.py). Every generation's prefill is priced too
    (details.prefill_s, ttft_s, e2e_s, speedup_vs_ar_e2e): its recorded prompt length, or `prompt_len`."""
    if engine not in ENGINES:
        raise UserError(f"unknown engine {engine!r}", "use engine event or fast")
    plan = resolve_plan(plan.at_temperature(temperature), profile)
    stream = make_stream(profile, plan, tokens=tokens, acceptance=acceptance, alpha=alpha, category=category,
                         prompt_ids=prompt_ids, seed=seed, temperature=plan.temperature)
    return _run(profile, plan, stream, engine, timeline, seed, default_budget(profile, budget),
                check_prompt_len(prompt_len))


def simulate_stream(profile, plan: Plan, stream: Stream, *, engine: str = "event", timeline: bool = False,
                    budget: int | None = None, seed: int = 0) -> Result:
    """Simulate a plan on a stream made elsewhere (e.g. `sim.intervals.pooled_stream`: one profile's
    acceptance over other prompts' lengths); otherwise as `simulate`."""
    if engine not in ENGINES:
        raise UserError(f"unknown engine {engine!r}", "use engine event or fast")
    plan = resolve_plan(plan, profile)
    return _run(profile, plan, stream, engine, timeline, seed, default_budget(profile, budget))


def sweep(profile, spec: SweepSpec | None = None, **settings) -> list[Result]:
    """AR, then every scheme's sweep plans (`SweepSpec.plans_at`: EESD at every exit layer × γ, PPSD
    at every exit layer × k ∈ 2..devices, balanced partition), each replaying `spec.tokens`
    trace-driven tokens through the fast exact engine; `settings` override the spec's fields
    (`SweepSpec`: its defaults are `ppsd plan`'s and the dashboard's). Sorted by predicted speedup,
    best first. alpha_scale ≠ 1 rescales every position's acceptance (seeded). A profile without
    acceptance data is a UserError, unless alpha_by_exit is given: {exit layer: α per position}
    replaces the recorded traces by a seeded Bernoulli(α) stream at exactly those exits (then
    category, temperature and alpha_scale do not apply; convert a paper's acceptance rate or tokens
    per round with `sim.model.acceptance_forms.to_alpha`). With tables at more threads or GPUs every
    Result also carries `speedup_vs_ar_tp` within `budget` units (default: the most the profile has;
    on an estimated multi-GPU profile, `devices`): sim/model/budget.py."""
    spec = replace(spec or SweepSpec(), **settings)
    n = profile.num_layers
    spec = replace(spec, tokens=check_tokens(spec.tokens) or DEFAULT_TOKENS).check(n)
    exits = sorted(e for e in (_exit_layers(profile, spec.exit_head) if spec.alpha_by_exit is None
                               else spec.alpha_by_exit) if 1 <= e <= n - 1)
    if not exits:
        raise UserError(f"profile {profile.path} has no acceptance traces for exit layers 1..{n - 1}",
                        "re-run `ppsd profile` with acceptance measurement")
    if spec.draft_stops:
        profile.require_confidence(spec.exit_head, spec.temperature)

    def stream_at(e, scale=1.0):  # a given α per exit replaces the recorded traces: seeded Bernoulli(α)
        if spec.alpha_by_exit is not None:
            return bernoulli_stream(profile, spec.alpha_by_exit[e], spec.tokens, spec.seed)
        return trace_stream(profile, e, tokens=spec.tokens, category=spec.category, temperature=spec.temperature,
                            seed=spec.seed, head=spec.exit_head, alpha_scale=scale)

    budget = spec.budget
    if budget is None and profile.parallel_kind == "tensor_parallel":
        budget = int(spec.devices)  # on GPUs the devices a plan may use are the budget
    within = default_budget(profile, budget)
    prompt_len = check_prompt_len(spec.prompt_len)
    ar_plan = resolve_plan(Plan(Mode.AR, hop_ms=spec.hop_ms, temperature=spec.temperature), profile)
    results = [_run(profile, ar_plan, stream_at(exits[0]), "fast", False, spec.seed, within, prompt_len)]
    for done, e in enumerate(exits):
        report("sweep", done, len(exits))
        stream = stream_at(e, spec.alpha_scale)
        for plan in spec.plans_at(e, n):
            results.append(_run(profile, resolve_plan(plan, profile), stream, "fast", False, spec.seed, within,
                                prompt_len))
    report("sweep", len(exits), len(exits))
    results.sort(key=lambda r: -(r.speedup_vs_ar or 0.0))
    return results
