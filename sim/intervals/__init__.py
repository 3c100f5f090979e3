"""90% intervals on predicted speedups (torch-free, seeded).

A prediction replays the profile's acceptance traces; what a user then sees on their own prompts
varies for two reasons the profile itself measures:

- **acceptance differs from prompt to prompt.** The profile's prompts are a sample; a run decodes
  n other prompts. Each bootstrap draw picks n of the predicting profile's prompts with replacement
  and lays their traces over the prompts the question is about (their prompt and generation
  lengths): the spread of what n new prompts show, not the spread of the profile's mean (which
  shrinks with the profile's size, not with n). Fewer prompts, wider interval. Where the targets'
  categories are known, each draws from the predicting prompts of its own category (`strata`).
- **latency drifts.** A run's relative costs sit off the tables by about one step's spread: the
  profile's whole-step p10/p90 (robust cv = (p90 − p10) / (2 · 1.2816 · median)), for PPSD at least
  the pipeline probe's pass spread (`pass_cv`). It is systematic within a run (a machine running
  hot, another process), so it does not average out over tokens: each draw multiplies its speedup by
  exp(cv · z), z ~ N(0, 1).

Two engines price the draws:
- `replay_interval`: each draw is a stream replayed exactly (the scheme's fast replay): simulate,
  validate (a handful of plans, ~0.1–0.5 s a plan at 200 draws).
- `attach_sweep_intervals`: for the planner's hundreds of plans, each draw's pooled α (Σ matches /
  Σ positions of its n prompts) goes through the scheme's closed form on a small α grid, and the
  replayed point is scaled by closed_form(α_draw) / closed_form(α_pool) (speedups rise with α, so
  the ranks carry over); milliseconds a plan.

The interval is the (5%, 95%) quantiles of the draws. AR's speedup is 1 by definition: [1, 1].

By part: `bands.py` (the Interval, its level, `apply`, `coverage`), `spread.py` (latency spreads),
`traces.py` (prompt-to-prompt acceptance: traces, targets, streams), `predict.py` (the two engines).
"""

from sim.intervals.bands import (DEFAULT_PROMPTS_N, LEVEL, REPLAY_DRAWS, SWEEP_DRAWS, Interval, apply, check_prompts_n,
                                 coverage)
from sim.intervals.predict import GRID, attach_sweep_intervals, replay_interval, simulate_interval
from sim.intervals.spread import budget_cv, latency_cv, measurement_cv, step_cv
from sim.intervals.traces import (MIN_STRATUM, PromptTraces, Targets, lengths_stream, overlay_stream, pooled_stream,
                                  prompt_traces, strata)

__all__ = ["DEFAULT_PROMPTS_N", "GRID", "LEVEL", "MIN_STRATUM", "REPLAY_DRAWS", "SWEEP_DRAWS", "Interval", "PromptTraces",
           "Targets", "apply", "attach_sweep_intervals", "budget_cv", "check_prompts_n", "coverage", "latency_cv",
           "lengths_stream", "measurement_cv", "overlay_stream", "pooled_stream", "prompt_traces", "replay_interval",
           "simulate_interval", "step_cv", "strata"]
