"""The verdict's story in the dashboard's words (no Streamlit, no plotting): which figure the pages plot
and rank by, the Overview's first lines (what to run, how much faster, against what), the noise band in
plain words, the glossary, and the words the pages never show.

Every figure here is read off `sim.planner.verdict.Verdict` (the one recommendation `ppsd plan` prints);
nothing is decided again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from sim.planner.verdict import Outcome, plan_alpha


_BOUNDS = re.compile(r"\s*\[\d+(?:,\d+)*\]")


def short_label(label: str) -> str:
    """A plan label without its stage bounds ("PPSD E=15 k=2 [0,15,30] vocab4096" -> "PPSD E=15 k=2 vocab4096");
    other brackets ("[hf]") stay."""
    return _BOUNDS.sub("", str(label)).strip()


@dataclass(frozen=True)
class Basis:
    """The figure a page plots and ranks plans by: the verdict's (against AR on every core when the
    profile has thread tables, else against AR on one thread), with the other figure beside it."""

    same_budget: bool
    budget: str | None            # "2 cores", "4 GPUs" with a same-budget baseline
    unit: str = "thread"          # "thread" or "GPU": what AR runs on when it runs on one
    one_unit_level: float = 1.0   # AR on one thread / GPU on this scale (1 without a same-budget baseline)
    band: float | None = None     # the verdict's noise band (relative), None when no verdict judged the figures

    @property
    def column(self) -> str:
        """The plan-table column (dashboard/tables.py) of this figure."""
        return "speedup_tp" if self.same_budget else "speedup"

    @property
    def other_column(self) -> str | None:
        """The one-thread figure shown beside a same-budget one (None when the figure is the one-thread one)."""
        return "speedup" if self.same_budget else None

    @property
    def tokens_column(self) -> str:
        return "budget_tokens_per_s" if self.same_budget else "tokens_per_s"

    @property
    def interval_columns(self) -> tuple[str, str]:
        return ("speedup_tp_lo", "speedup_tp_hi") if self.same_budget else ("speedup_lo", "speedup_hi")

    @property
    def baseline(self) -> str:
        return f"AR on all {self.budget}" if self.same_budget else f"AR on one {self.unit}"

    @property
    def one_unit(self) -> str:
        return f"AR on one {self.unit}"

    @property
    def axis(self) -> str:
        return f"speedup over {self.baseline} (×)"

    @property
    def header(self) -> str:
        """The table header of this figure."""
        return f"× {self.baseline}"

    @property
    def other_header(self) -> str:
        return f"× {self.one_unit}"


def basis(verdict) -> Basis:
    """The figure `verdict` decides by."""
    unit = "GPU" if verdict.budget and "GPU" in verdict.budget else "thread"
    return Basis(verdict.same_budget, verdict.budget, unit, verdict.one_unit_level, verdict.band.rel)


def table_basis(table: pd.DataFrame) -> Basis:
    """The figure of a plan table no verdict has judged yet (a preview): same budget when every row has it."""
    if "speedup_tp" in table.columns and len(table) and table["speedup_tp"].notna().all():
        budget = next((b for b in table.get("budget", []) if b), None)
        return Basis(True, budget, "GPU" if budget and "GPU" in budget else "thread")
    return Basis(False, None)


def marker(verdict, head: str | None = None) -> dict:
    """The verdict's plan on an exit-layer chart, in the verdict's figure: the recommendation, or, when AR stays
    ahead, AR at 1× with the closest speculative plan the verdict names (`closest`). A plan drafting with another
    exit head than the chart's (`head`) is not on it. Each plan: {exit_layer, speedup, one_thread, tokens_per_s,
    alpha, label}."""
    def point(r) -> dict | None:
        if r is None or not r.plan.mode.speculative or (head is not None and r.plan.exit_head != head):
            return None
        return {"exit_layer": r.plan.exit_layer, "speedup": verdict.score(r), "one_thread": r.speedup_vs_ar,
                "tokens_per_s": verdict.tokens_per_s(r), "alpha": plan_alpha(r), "label": short_label(r.plan.label())}

    rec = point(verdict.recommended)
    if rec is not None:
        return rec
    return {"exit_layer": None, "speedup": 1.0, "one_thread": 1.0 / verdict.one_unit_level, "label": "AR",
            "tokens_per_s": verdict.baseline_tokens_per_s, "alpha": None, "closest": point(verdict.best_speculative),
            "note": f"recommended: plain {verdict.baseline}"}


# --- the Overview's first lines ---------------------------------------------------------------
def headline(verdict) -> str:
    """What to run, how much faster, against what, in two sentences (markdown): the verdict's plan and its
    figure against the verdict's baseline, tokens/s of both, and the one-thread figure beside it."""
    b = basis(verdict)
    base_tps = verdict.baseline_tokens_per_s
    base_txt = f" ({base_tps:.1f} tokens/s)" if base_tps else ""
    if verdict.outcome is Outcome.WIN:
        r = verdict.recommended
        tps = verdict.tokens_per_s(r)
        aside = f"; {r.speedup_vs_ar:.2f}× {b.one_unit}" if b.same_budget else ""
        return (f"**Run {short_label(r.plan.label())}**: **{verdict.score(r):.2f}×** the speed of {b.baseline}"
                + (f" ({tps:.1f} against {base_tps:.1f} tokens/s{aside})" if tps and base_tps else "") + ".")
    text = f"**Run plain {b.baseline}**{base_txt}: "
    spec = verdict.best_speculative
    if spec is None:
        return text + "no speculative plan drafts usefully on this profile."
    aside = f" ({spec.speedup_vs_ar:.2f}× {b.one_unit})" if b.same_budget else ""
    tie = ", within the noise band: a tie" if verdict.outcome is Outcome.TIE else ""
    return (text + f"no speculative plan beats it. The closest, {short_label(spec.plan.label())}, reaches "
            f"**{verdict.score(spec):.2f}×** its speed{aside}{tie}.")


def band_words(verdict) -> str:
    """The noise band in plain words: what it is, how wide, and where its width comes from."""
    band = verdict.band
    if band.measured is None:
        source = "the smallest band ppsd uses (this profile has no repeated whole decode step to read it from)"
    elif band.paired:
        source = ("how sure the profile's paired timings are" if band.measured >= band.floor else
                  f"the smallest band ppsd uses (the profile's paired timings alone give ±{band.measured:.1%})")
    elif band.measured >= band.floor:
        source = "how much the profile's repeated decode steps varied"
    else:
        source = f"the smallest band ppsd uses (the profile's repeated decode steps varied by only ±{band.measured:.1%})"
    return (f"Noise band ±{band.rel:.1%}: two runs of one plan on this machine can differ by this much, so a plan "
            f"within it of {verdict.baseline} is a tie and AR stays the advice. Its width is {source}.")


def passed_over(verdict, shown: int = 3) -> str:
    """One sentence naming the plans the verdict passed over because they hardly draft ("" when none)."""
    if not verdict.excluded:
        return ""
    names = [short_label(e.result.plan.label()) for e in verdict.excluded[:shown]]
    more = f" and {len(verdict.excluded) - shown} more" if len(verdict.excluded) > shown else ""
    return (f"Not named best although they rank higher: {', '.join(names)}{more}; their drafts are almost never "
            "accepted, so they are plain AR with extra work.")


# --- words ------------------------------------------------------------------------------------
GLOSSARY = {
    "same budget": "every plan gets the same hardware. A two-stage PPSD pipeline keeps two cores busy, so it is "
                   "compared with AR using both cores, not AR on one.",
    "noise band": "how much two runs of one plan differ on this machine. A plan closer than that to AR is a tie, "
                  "and AR stays the advice.",
    "acceptance α": "the share of drafted tokens that match what the full model writes. The more match, the fewer "
                    "drafts are thrown away.",
    "break-even": "the lowest acceptance at which a plan still beats AR. If your own prompts draft worse than "
                  "that, the plan stops paying.",
}


# the words the Under traffic page cannot do without (vLLM's names for the latencies)
TRAFFIC_GLOSSARY = {
    "TTFT": "time to first token: from a request's arrival to its first output token, waiting in the queue and "
            "reading the prompt included.",
    "TPOT": "time per output token: a request's decoding time after its first token, divided by the tokens after "
            "the first. What a reader of a streamed answer feels.",
    "end to end": "from a request's arrival to its last token.",
    "median, p99": "half of the requests are faster than the median; 99 in 100 are faster than the p99.",
    "max batch": "the most requests decoding at once; requests beyond it wait in the queue.",
    "SLO": "the latency each request must meet (e.g. TTFT ≤ 500 ms, TPOT ≤ 50 ms); goodput counts the requests "
           "a second that meet it.",
    "stops beating AR": "the load at which a policy's TPOT reaches plain decoding's: speculation's extra work "
                        "costs more than it saves once the batch is full.",
}


def glossary_markdown(glossary: dict[str, str] = GLOSSARY) -> str:
    return "  \n".join(f"**{term}**: {text}" for term, text in glossary.items())


# words a user never reads on a page: the simulator's inner names and raw column names
JARGON = ("closed form", "closed-form", "stale pass", "co-run", "corun", "calibration's doubt", "% floor",
          "speedup_vs_ar", "error_pct", "tokens_per_s", "stage_bounds", "mean_accepted", "outputs_match_ar",
          "acceptance_rate", "predicted_speedup", "measured_speedup", "exit_layer", "draft_len",
          # serving (sim/serve/, serve_validation.json)
          "ttft_p", "tpot_p", "e2e_p", "_ms_lo", "_ms_hi", "request_goodput", "request_throughput",
          "output_throughput", "runs_real", "predicted_acceptance", "measured_acceptance", "cpu_share")


def jargon_in(text: str) -> list[str]:
    """The jargon words found in `text` (case-insensitive)."""
    low = text.lower()
    return [w for w in JARGON if w in low]
