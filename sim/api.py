"""The simulator's public API (torch-free): resolve a plan, simulate it, sweep every plan, recommend
one (`sim/verdict.py`), price it by the closed form.

Each scheme (AR, EESD, PPSD) keeps its whole timing model in one home under `sim/schemes/`, with
two engines and an oracle behind one interface (`sim/schemes/base.py`):
  "event"  the SimPy discrete-event model (reference; timelines come from it)
  "fast"   an exact replay of the same model without SimPy (sweeps); tested equal to "event"
  closed form: expected time per token for i.i.d. acceptance at one context (the oracle)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ppsd.exit_heads import SHARED
from sim.plan import Plan, Result
from sim.run import ENGINES  # re-exported

ACCEPTANCE_SOURCES = ("trace", "bernoulli")


def resolve_plan(plan: Plan, profile) -> Plan:
    """Fill what the plan leaves open: PPSD stage bounds balanced by profiled time (LM head counted
    in the last stage, exit head in stage 1) when None, and the hop latency from the profile when
    None. Validates the plan against the profile's layer count (UserError on bad input)."""
    from sim.resolve import resolve_plan as _resolve

    return _resolve(plan, profile)


def simulate(profile, plan: Plan, *, tokens: int | None = None, acceptance: str = "trace",
             alpha: float | None = None, category: str | None = None,
             prompt_ids: Sequence[str] | None = None, seed: int = 0, temperature: float = 0.0,
             engine: str = "event", timeline: bool = False, budget: int | None = None,
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
    (default: the most the profile has; sim/budget.py). Every generation's prefill is priced too
    (details.prefill_s, ttft_s, e2e_s, speedup_vs_ar_e2e): its recorded prompt length, or `prompt_len`."""
    from sim.run import simulate as _simulate

    return _simulate(profile, plan, tokens=tokens, acceptance=acceptance, alpha=alpha, category=category,
                     prompt_ids=prompt_ids, seed=seed, temperature=temperature, engine=engine, timeline=timeline,
                     budget=budget, prompt_len=prompt_len)


def sweep(profile, *, devices: int = 4, gammas: Iterable[int] = range(1, 9), hop_ms: float | None = None,
          alpha_scale: float = 1.0, temperature: float = 0.0, tokens: int = 2000, category: str | None = None,
          exit_head: str = SHARED, alpha_by_exit: dict[int, float] | None = None,
          budget: int | None = None, prompt_len: int | None = None) -> list[Result]:
    """AR, EESD at every exit layer × γ, and PPSD at every exit layer × k ∈ 2..devices (default
    balanced partition), each replaying `tokens` trace-driven tokens through the fast exact engine.
    Sorted by predicted speedup, best first. alpha_scale ≠ 1 rescales every position's acceptance
    (seeded). A profile without acceptance data is a UserError, unless alpha_by_exit is given:
    {exit layer: α per position} replaces the recorded traces by a seeded Bernoulli(α) stream at
    exactly those exits (then category, temperature and alpha_scale do not apply; convert a paper's
    acceptance rate or tokens per round with `sim.acceptance_forms.to_alpha`). With tables at more
    threads or GPUs every Result also carries `speedup_vs_ar_tp` within `budget` units (default: the
    most the profile has; on an estimated multi-GPU profile, `devices`): sim/budget.py."""
    from sim.run import sweep as _sweep

    return _sweep(profile, devices=devices, gammas=gammas, hop_ms=hop_ms, alpha_scale=alpha_scale,
                  temperature=temperature, tokens=tokens, category=category, exit_head=exit_head,
                  alpha_by_exit=alpha_by_exit, budget=budget, prompt_len=prompt_len)


def recommend(results: Sequence[Result], profile=None) -> tuple[Result, str]:
    """The plan to run and its one-line verdict (`sim.verdict.decide`, the one recommendation every
    surface uses): ranked by the same-budget speedup when the results carry it (a plan must beat AR
    on every core it uses), degenerate plans never named, and a plan within the noise band of its
    baseline (the profile's, else the floor) a tie that keeps AR."""
    from sim.verdict import decide

    v = decide(results, profile)
    return v.recommended, v.text


def closed_form(profile, plan: Plan, alpha: float, context: float | None = None) -> dict:
    """A resolved plan priced by its scheme's closed form (i.i.d. acceptance α, costs at one
    context, default the smallest profiled): {time_per_token_ms, ar_time_per_token_ms,
    speedup_vs_ar, tokens_per_s}. Milliseconds for a whole sweep: the planner's instant preview.
    PPSD needs one device per stage (ValueError otherwise: simulate shared placements)."""
    from sim.modes import Mode
    from sim.schemes import scheme

    c = float(profile.context_values[0]) if context is None else float(context)
    ar = scheme(Mode.AR).closed_form(profile, plan, 0.0, c)
    t = scheme(plan.mode).closed_form(profile, plan, alpha, c)
    return {"time_per_token_ms": t, "ar_time_per_token_ms": ar, "speedup_vs_ar": ar / t, "tokens_per_s": 1000.0 / t}
