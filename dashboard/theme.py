"""Colours, units and the words the dashboard explains (no Streamlit, no plotly import).

One place for these so every page uses the same colour for the same mode and the same unit
format for the same quantity.
"""

from __future__ import annotations

from ppsd.modes import Mode

# Okabe-Ito: distinguishable under the common colour-vision deficiencies.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
}

# One colour per mode, fixed across pages; PPSD stage counts get their own hues in order.
MODE_COLOURS = {Mode.AR: OKABE_ITO["black"], Mode.EESD: OKABE_ITO["orange"]}
PPSD_COLOURS = [OKABE_ITO["blue"], OKABE_ITO["green"], OKABE_ITO["purple"], OKABE_ITO["sky"],
                OKABE_ITO["vermillion"], OKABE_ITO["yellow"]]

# Timeline event kinds; anything else falls back to grey.
EVENT_COLOURS = {
    "draft": OKABE_ITO["orange"],
    "verify": OKABE_ITO["blue"],
    "forward": OKABE_ITO["sky"],
    "head": OKABE_ITO["purple"],
    "hop": OKABE_ITO["yellow"],
    "flush": OKABE_ITO["vermillion"],
    "prefill": OKABE_ITO["green"],
    "idle": "#BBBBBB",
}
OTHER_EVENT_COLOUR = "#888888"
# the simulator's and the runtime's event names, in the words a timeline's legend shows
EVENT_WORDS = {"stale pass": "wasted pass (overtaken by a rejection)", "draft hop": "draft sent to the last stage",
               "flush": "flush (work dropped after a rejection)", "round": "round (drafts and their check)"}


def event_words(name: str) -> str:
    return EVENT_WORDS.get(name, name)


def curve_colour(mode: Mode, k: int) -> str:
    """A speedup-by-exit curve's colour: the scheme's own, or per stage count for a scheme with a
    curve per k (PPSD)."""
    return MODE_COLOURS.get(mode) or ppsd_colour(k)


def ppsd_colour(k: int) -> str:
    return PPSD_COLOURS[(k - 2) % len(PPSD_COLOURS)]


def event_colour(name: str) -> str:
    return EVENT_COLOURS.get(name, OTHER_EVENT_COLOUR)


# Tooltips: every control and metric that uses one of these words links to the same sentence.
GLOSSARY = {
    "exit_layer": "Exit layer E: the draft token is read from the hidden state after the first E decoder "
                  "layers, through the exit head (final norm + LM head). Lower E = cheaper but less accurate drafts.",
    "draft_stop": "Confidence stop τ: an EESD round stops drafting after its first draft whose confidence (the "
                  "exit head's top-1 probability) is below τ, γ still the cap (fewer wasted drafts, shorter rounds); "
                  "PPSD's stage 1 waits for the verdict on such a draft instead of running it (no pass to abandon, "
                  "the verifier runs alone, but the pipeline drains). Priced from the confidences the profile traced "
                  "(`ppsd plan --draft-stops 0.3,0.5,0.7` sweeps it).",
    "draft_len": "Draft length γ (EESD only): how many tokens are drafted before one verification pass of the "
                 "remaining layers checks them all at once.",
    "stages": "Stages k (PPSD only): the layers are cut into k pipeline stages; stage 1 ends at the exit layer "
              "and drafts the next token while the later stages verify the current one.",
    "devices": "Devices: how many processors (cores, GPUs) the stages run on; defaults to a CPU profile's cores. "
               "More stages than devices means stages share a device and take turns (on a CPU profile, "
               "stages beyond its cores are priced as if each had a core of its own: optimistic).",
    "hop": "Hop latency: one-way time to pass a hidden state from one stage to the next (ms).",
    "alpha_scale": "Acceptance scale: multiplies the measured acceptance α at every exit layer (capped at 1), "
                   "e.g. to ask what a better-trained exit head would buy.",
    "temperature": "Temperature T: 0 = greedy decoding (a draft is accepted when it equals the full model's "
                   "token); T > 0 = sampling, where a draft is accepted with probability β.",
    "acceptance": "Acceptance α: the fraction of positions where the exit-layer draft equals the full model's "
                  "greedy token. β: with sampling, the probability that the draft is accepted.",
    "speedup": "Speedup: decoding tokens/s of the plan divided by plain autoregressive (AR) tokens/s (×), against "
               "AR on every core where the profile timed it (the same budget), else AR on one thread. Below 1× the "
               "plan is slower than not speculating at all.",
    "ar": "AR: plain autoregressive decoding, one full forward pass per token.",
    "eesd": "EESD: early-exit self-speculative decoding; draft γ tokens with the first E layers, then verify "
            "them with the rest of the model.",
    "ppsd": "PPSD: pipeline-parallel self-speculative decoding; stage 1 drafts while later stages verify, "
            "a rejection flushes the tokens in flight.",
    "closed_form": "Textbook formula: every draft accepted with the same chance α, balanced stages "
                   "(EESD: Leviathan et al. 2023; PPSD: 1 / (1 − α(1 − E/N))), drawn dashed for comparison.",
    "exit_head": "Exit head: what turns the exit layer's hidden state into a draft token. 'naive (shared)' = the "
                 "model's own final norm + LM head; 'trained' = a self-distilled adapter before them (higher α); "
                 "'vocab<V>' = the trained adapter with only the V most frequent tokens' LM-head rows (cheaper "
                 "drafts; a token outside them counts as a rejection, so output stays lossless).",
    "mape": "Error (MAPE): the mean absolute percentage error of predicted against measured speedup over all plans.",
}


def fmt_ms(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.3f} ms" if x < 1 else f"{x:.2f} ms"


def fmt_tps(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f} tokens/s"


def fmt_x(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def fmt_pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}%"
