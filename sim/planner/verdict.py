"""The one recommendation (torch-free): which plan to run, against which baseline, and how sure.

`ppsd plan`, the planner (`sim.planner.heads.best_over_heads`, `recommend`) and the dashboard's
Overview and What-if pages all call `decide` (through `sim.planner.heads.decide_over_heads` for several
exit heads' sweeps), so they cannot disagree. A verdict

  * ranks plans against the fairest baseline the results carry: AR using the whole budget
    (`speedup_vs_ar_tp`, sim/model/budget.py) when every result has it, else AR on one thread / device
    (`speedup_vs_ar`); both figures are always reported;
  * never names a degenerate plan the best speculative plan (`degenerate_reason`): an exit whose
    drafts rarely match (an exit after layer 1 of a 30-layer model matches ~5% of positions) can
    still rank high because it costs almost nothing and does almost nothing; such a plan is no
    advice, and the verdict says which plans it passed over and why;
  * calls a plan a win only beyond the profile's noise band (`noise_band`), and a tie ("within
    noise of AR") inside it: a 2% predicted gain is not one a user could measure on this machine.
    In a tie the recommendation stays AR (one process, nothing to tune), and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from ppsd.errors import UserError
from ppsd.statistics import z_two_sided
from ppsd.modes import Mode
from sim.plan import Result, SimulatedDetails
from sim.planner.break_even import BreakEven, break_even, mean_decode_context

# --- the noise band: one named place --------------------------------------------------------
# A prediction is a ratio of two decode speeds on this machine. How far such a ratio can move
# without anything changing is read from the profile itself: its measured whole decode step
# (`latency.whole_step`, one full AR step timed repeatedly while the profile was made) spreads
# from p10 to p90, and the band is half that range relative to the median, ±(p90 − p10) / (2 ×
# median): the machine's own step-to-step noise, drift during the profiling window included.
# NOISE_FLOOR keeps the band honest where the profile has no whole step (synthetic and estimated
# profiles) or measured an unusually quiet window: repeated validations of one plan on a 2-core CPU
# move by 2-3% from run to run (docs/design-notes.md).
NOISE_FLOOR = 0.03

# --- degenerate plans ---------------------------------------------------------------------
# MIN_ALPHA: a draft must match the full model at least this often at its exit (α, the exit's
# match rate along the replayed stream) for the plan to be speculative advice; below it nearly
# every draft is paid for and thrown away, and a plan ranks well only because its drafts are
# cheap. MIN_DRAFT_SHARE: at least this share of the committed tokens must come from accepted
# drafts (1 − 1 / tokens per round), else the plan is AR with overhead, whatever its α.
MIN_ALPHA = 0.2
MIN_DRAFT_SHARE = 0.15


class Outcome(StrEnum):
    """How the best (non-degenerate) speculative plan compares with the baseline."""

    WIN = "win"        # faster than the baseline by more than the noise band: run it
    TIE = "tie"        # within the noise band of the baseline: stay with AR
    LOSS = "loss"      # slower than the baseline by more than the noise band: stay with AR
    NO_PLAN = "no_plan"  # no usable speculative plan was simulated (none, or all degenerate)


@dataclass(frozen=True)
class NoiseBand:
    """± `rel` around 1× within which a predicted speedup is a tie."""

    rel: float                      # the band's half-width, relative (0.03 = ±3%)
    measured: float | None = None   # the profile's whole step: (p90 − p10) / (2 × median); None without one
    floor: float = NOISE_FLOOR
    paired: bool = False            # `measured` is the paired timings' 90% doubt (see `noise_band`)

    @property
    def source(self) -> str:
        if self.measured is None:
            return f"the {self.floor:.0%} floor (the profile has no measured whole decode step)"
        if self.paired:
            what = (f"the profile's paired timings (the calibration's doubt and the thread speedup's standard "
                    f"error, ±{self.measured:.1%} at 90%)")
            return what if self.measured >= self.floor else f"the {self.floor:.0%} floor ({what})"
        if self.measured >= self.floor:
            return f"the profile's whole decode step (its p10–p90 range spans ±{self.measured:.1%} of the median)"
        return (f"the {self.floor:.0%} floor (the profile's whole decode step spans only ±{self.measured:.1%} "
                "p10–p90)")

    def describe(self) -> str:
        return f"±{self.rel:.1%}, from {self.source}"

    def classify(self, speedup: float) -> Outcome:
        if speedup > 1.0 + self.rel:
            return Outcome.WIN
        if speedup < 1.0 - self.rel:
            return Outcome.LOSS
        return Outcome.TIE

    def to_json_dict(self) -> dict:
        return {"rel": self.rel, "measured": self.measured, "floor": self.floor, "paired": self.paired,
                "source": self.source}


def noise_band(profile=None) -> NoiseBand:
    """The profile's noise band (see NOISE_FLOOR): half its whole decode step's p10–p90 range over
    the median, at least the floor; the floor alone without a profile or a measured whole step."""
    ws = (profile.latency.get("whole_step") or {}) if profile is not None else {}
    try:
        med, p10, p90 = (float(ws[k]) for k in ("median_ms", "p10_ms", "p90_ms"))
    except (KeyError, TypeError, ValueError):
        return NoiseBand(NOISE_FLOOR)
    if not med > 0 or p90 < p10:
        return NoiseBand(NOISE_FLOOR)
    if ws.get("method") == "paired":
        # A paired profile's whole steps are spread over the whole grid (minutes), so their range is
        # the machine's drift, which a ratio measured in one sitting does not see. What the profile cannot pin down about a
        # predicted ratio is the calibration's doubt and the round-by-round thread speedup's
        # standard error (the same-budget baseline): their 90% band.
        rounds = max(int(ws.get("repeats") or 1), 1)
        se = max([profile.thread_speedup_cv(u) for u in profile.parallel_units()] + [0.0]) / rounds ** 0.5
        doubt = z_two_sided(0.9) * (profile.calibration_doubt() ** 2 + se ** 2) ** 0.5
        return NoiseBand(max(NOISE_FLOOR, doubt), measured=doubt, paired=True)
    half = (p90 - p10) / (2 * med)
    return NoiseBand(max(NOISE_FLOOR, half), measured=half)


# --- one plan -----------------------------------------------------------------------------
def plan_alpha(r: Result) -> float | None:
    """The acceptance α the verdict quotes for a plan: its replayed stream's, else its acceptance rate."""
    d = r.details
    a = d.stream_alpha if isinstance(d, SimulatedDetails) else None
    return a if a is not None else r.acceptance_rate


_alpha = plan_alpha


def draft_share(r: Result) -> float:
    """Share of committed tokens that came from accepted drafts: 1 − rounds / tokens."""
    t = float(r.mean_accepted or 1.0)
    return max(0.0, 1.0 - 1.0 / t) if t > 0 else 0.0


def degenerate_reason(r: Result) -> str | None:
    """Why a speculative plan is no advice (see MIN_ALPHA, MIN_DRAFT_SHARE), or None."""
    if not r.plan.mode.speculative:
        return None
    a = _alpha(r)
    if a is not None and a < MIN_ALPHA:
        return f"its drafts match only {a:.0%} of positions at exit {r.plan.exit_layer} (floor {MIN_ALPHA:.0%})"
    share = draft_share(r)
    if share < MIN_DRAFT_SHARE:
        return (f"only {share:.0%} of its tokens come from accepted drafts (floor {MIN_DRAFT_SHARE:.0%}): "
                "AR with overhead")
    return None


@dataclass(frozen=True)
class Exclusion:
    """A plan that ranked above the best speculative plan but is degenerate."""

    result: Result
    why: str


# --- the verdict --------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    recommended: Result               # the plan to run: the best speculative plan on a WIN, else AR
    best_speculative: Result | None   # the best non-degenerate EESD / PPSD plan by the ranking metric
    best_by_mode: dict                # {Mode: its best non-degenerate plan}, AR included
    same_budget: bool                 # ranked by speedup_vs_ar_tp (AR on the whole budget)
    budget: str | None                # "2 cores", "4 GPUs" when same_budget
    band: NoiseBand
    excluded: tuple = ()              # Exclusions: degenerate plans ranked above best_speculative
    head: str | None = None           # the exit head the recommendation drafts with (decide_over_heads)
    break_even: BreakEven | None = None  # the best speculative plan's break-even acceptance (with a profile)
    # with confidence-stop plans in the sweep: (the best of them, the best plan of its scheme without one)
    stop_vs_fixed: tuple | None = None
    text: str = ""                    # the one-line verdict every surface shows
    notes: tuple = field(default=())  # one line per degenerate plan passed over, saying why

    @property
    def ar(self) -> Result | None:
        return self.best_by_mode.get(Mode.AR)

    @property
    def baseline(self) -> str:
        if self.same_budget:
            return f"AR on all {self.budget}"
        return "AR on one " + ("GPU" if self.budget and "GPU" in self.budget else "thread")

    def score(self, r: Result) -> float:
        """The ranking metric: the speedup against this verdict's baseline."""
        return float((r.speedup_vs_ar_tp if self.same_budget else r.speedup_vs_ar) or 0.0)

    @property
    def metric(self) -> str:
        """The Result field the verdict ranks by."""
        return "speedup_vs_ar_tp" if self.same_budget else "speedup_vs_ar"

    def tokens_per_s(self, r: Result) -> float | None:
        """A plan's tokens/s as it runs against this baseline: with the whole budget when that is the baseline."""
        if self.same_budget:
            return getattr(r.details, "budget_tokens_per_s", None)
        return r.tokens_per_s

    @property
    def baseline_tokens_per_s(self) -> float | None:
        """The baseline's own tokens/s (AR on the whole budget, or on one thread / device)."""
        return self.tokens_per_s(self.ar) if self.ar is not None else None

    @property
    def one_unit_level(self) -> float:
        """AR on one thread / device on this verdict's scale (1 without a same-budget baseline)."""
        if not self.same_budget or self.ar is None:
            return 1.0
        one, whole = self.ar.tokens_per_s, self.baseline_tokens_per_s
        return one / whole if one and whole else 1.0

    def to_json_dict(self) -> dict:
        def plan(r):
            if r is None:
                return None
            return {"label": r.plan.label(), "mode": r.plan.mode.value, "exit_head": r.plan.exit_head,
                    "speedup_vs_ar": r.speedup_vs_ar, "speedup_vs_ar_tp": r.speedup_vs_ar_tp,
                    "tokens_per_s": r.tokens_per_s}

        return {"outcome": self.outcome.value, "text": self.text, "baseline": self.baseline,
                "metric": "speedup_vs_ar_tp" if self.same_budget else "speedup_vs_ar", "budget": self.budget,
                "noise_band": self.band.rel, "noise": self.band.to_json_dict(),
                "recommended": plan(self.recommended), "best_speculative": plan(self.best_speculative),
                "best_by_mode": {m.value: plan(r) for m, r in self.best_by_mode.items()},
                "excluded": [{"label": e.result.plan.label(), "why": e.why} for e in self.excluded],
                "head": self.head, "notes": list(self.notes),
                "break_even_alpha": self.break_even_alpha, "break_even": self.break_even_words,
                **({} if self.stop_vs_fixed is None else {"confidence_stop": {
                    "best_stop": plan(self.stop_vs_fixed[0]), "best_fixed": plan(self.stop_vs_fixed[1]),
                    "gain": self.stop_gain, "beyond_noise": abs(self.stop_gain) > self.band.rel}})}

    @property
    def stop_gain(self) -> float | None:
        """How much faster the best confidence-stop plan is than the best plan of its scheme without a stop
        (relative to it; negative: slower); None without both."""
        if self.stop_vs_fixed is None:
            return None
        stop, fixed = (self.score(r) for r in self.stop_vs_fixed)
        return stop / fixed - 1.0 if fixed > 0 else None

    @property
    def break_even_alpha(self) -> float | None:
        """The best speculative plan's break-even acceptance against this verdict's baseline."""
        if self.break_even is None:
            return None
        return self.break_even.alpha_tp if self.same_budget else self.break_even.alpha

    @property
    def break_even_words(self) -> str:
        """"pays while acceptance ≥ 0.41; profiled 0.54" for the best speculative plan ("" without)."""
        return self.break_even.words(self.same_budget) if self.break_even is not None else ""


def decide(results: Sequence[Result], profile=None, band: NoiseBand | None = None) -> Verdict:
    """The verdict on a sweep's Results (any order; several heads' plans may be mixed): see the
    module docstring. `profile` gives the noise band (else the floor)."""
    if not results:
        raise UserError("no simulated plans to choose from", "run a sweep over a profile first")
    band = band or noise_band(profile)
    same_budget = all(r.speedup_vs_ar_tp is not None for r in results)
    budget = next((r.details.budget for r in results if getattr(r.details, "budget", None)), None)
    score = (lambda r: float(r.speedup_vs_ar_tp or 0.0)) if same_budget else (lambda r: float(r.speedup_vs_ar or 0.0))
    ranked = sorted(results, key=score, reverse=True)  # stable: ties keep the sweep's order
    ar = next((r for r in ranked if not r.plan.mode.speculative), None)
    spec = [r for r in ranked if r.plan.mode.speculative]
    usable = [r for r in spec if degenerate_reason(r) is None]
    best_spec = usable[0] if usable else None
    passed = spec[: spec.index(best_spec)] if best_spec is not None else spec
    excluded = tuple(Exclusion(r, degenerate_reason(r)) for r in passed)
    by_mode = {ar.plan.mode: ar} if ar is not None else {}
    for r in usable:
        by_mode.setdefault(r.plan.mode, r)
    outcome = Outcome.NO_PLAN if best_spec is None else band.classify(score(best_spec))
    recommended = best_spec if outcome is Outcome.WIN else (ar or ranked[0])
    be = None
    if best_spec is not None and profile is not None:
        be = break_even(profile, best_spec, mean_decode_context(profile))
    # the best confidence stop (EESD or PPSD) against the best plan of its scheme without one
    stops = [r for r in usable if r.plan.draft_stop is not None]
    fixed = [r for r in usable if stops and r.plan.mode is stops[0].plan.mode
             and r.plan.draft_stop is None]
    versus = (stops[0], fixed[0]) if stops and fixed else None
    v = Verdict(outcome, recommended, best_spec, by_mode, same_budget, budget, band, excluded, break_even=be,
                stop_vs_fixed=versus)
    return _with_text(v)


# --- words --------------------------------------------------------------------------------
def recommend(results: Sequence[Result], profile=None) -> tuple[Result, str]:
    """The plan to run and its one-line verdict (`decide`, the one recommendation every surface
    uses): ranked by the same-budget speedup when the results carry it (a plan must beat AR on every
    core it uses), degenerate plans never named, and a plan within the noise band of its baseline
    (the profile's, else the floor) a tie that keeps AR."""
    v = decide(results, profile)
    return v.recommended, v.text


def _one(r: Result, same_budget: bool, budget: str | None) -> str:
    """A plan's figures: against the verdict's baseline, and against AR on one thread beside it."""
    one = f"{r.speedup_vs_ar:.2f}× AR on one {'GPU' if budget and 'GPU' in budget else 'thread'}"
    if same_budget:
        return f"{r.speedup_vs_ar_tp:.2f}× AR on all {budget} ({one})"
    return one


def _alpha_txt(r: Result) -> str:
    a = _alpha(r)
    return "" if a is None else f", α={a:.2f}"


def _break_even_txt(v: Verdict) -> str:
    """"; it pays while acceptance ≥ 0.41; profiled 0.54" (against the verdict's baseline), "" without."""
    words = v.break_even_words
    return f"; it {words}" if words and not words.startswith("break-even") else (f"; {words}" if words else "")


def _with_text(v: Verdict) -> Verdict:
    sb, bud = v.same_budget, v.budget
    base, best = v.baseline, v.best_speculative
    band = f"±{v.band.rel:.1%}"
    ar_tps = None
    if v.ar is not None:
        d = v.ar.details
        ar_tps = getattr(d, "ar_tp_tokens_per_s", None) if sb else v.ar.tokens_per_s
    ar_txt = f" ({ar_tps:.1f} tokens/s)" if ar_tps else ""
    if v.outcome is Outcome.NO_PLAN:
        if v.excluded:
            e = v.excluded[0]
            text = (f"stay with {base}{ar_txt}: no speculative plan drafts usefully here (the best-ranked, "
                    f"{e.result.plan.label()}, is degenerate: {e.why})")
        else:
            text = "AR is the only plan simulated"
    elif v.outcome is Outcome.WIN:
        kind = "a same-budget win on this machine" if sb else f"faster than {base}"
        # tokens/s as the plan runs against this baseline: with the whole budget when that is the baseline
        tps = (getattr(best.details, "budget_tokens_per_s", None) if sb else None) or best.tokens_per_s
        where = f" on {bud}" if sb else ""
        text = (f"{best.plan.label()} is {kind}: {_one(best, sb, bud)}, {tps:.1f} tokens/s{where}"
                f"{_alpha_txt(best)}, {best.mean_accepted:.2f} tokens per round, beyond the {band} noise band"
                f"{_break_even_txt(v)}")
    elif v.outcome is Outcome.TIE:
        text = (f"stay with {base}{ar_txt}: the best speculative plan, {best.plan.label()}, is within noise "
                f"of it ({_one(best, sb, bud)}; noise band {band}): a tie, nothing a run here could tell apart"
                f"{_break_even_txt(v)}")
    else:
        text = (f"stay with {base}{ar_txt}: no speculative plan beats it; the best, {best.plan.label()}, "
                f"reaches {_one(best, sb, bud)}{_alpha_txt(best)}, below the {band} noise band{_break_even_txt(v)}")
    others = [(m, r) for m, r in v.best_by_mode.items() if m.speculative and r is not best]
    text += "".join(f"; best {m.name} is {r.plan.label()} at {_one(r, sb, bud)}" for m, r in others)
    if v.stop_vs_fixed is not None and v.stop_gain is not None:
        stop, fixed = v.stop_vs_fixed
        where = "beyond" if abs(v.stop_gain) > v.band.rel else "within"
        other = fixed.plan.scheme.without_stop_words()
        text += (f"; the best confidence stop, {stop.plan.label()} ({v.score(stop):.2f}×), is {v.stop_gain:+.1%} "
                 f"against {other}, {fixed.plan.label()} ({v.score(fixed):.2f}×), {where} the {band} "
                 "noise band")
    if v.excluded and v.outcome is not Outcome.NO_PLAN:
        e = v.excluded[0]
        more = f" (and {len(v.excluded) - 1} more)" if len(v.excluded) > 1 else ""
        text += f"; not named: {e.result.plan.label()}{more}, degenerate: {e.why}"
    lines = tuple(f"{e.result.plan.label()} ({_one(e.result, sb, bud)}): {e.why}" for e in v.excluded)
    return replace(v, text=text, notes=lines)
