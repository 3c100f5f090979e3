"""`ppsd plan` (one sequence, `sim.run`) and `ppsd plan --batch 1` (`sim.batch`) price two runtimes, and agree
where the runtimes do (docs/model.md, "Batch 1 two ways"): AR and EESD are the same work, priced alike to the
batched replay's rounding of the cache width; PPSD at batch 1 is the pipeline of runtime/pipeline.py, which drops a
stale pass at its next layer once a rejection is on the epoch board, while batched PPSD (runtime/batched_pipeline.py)
runs in lock step and finishes the stale tick: a rejected draft costs it a whole tick. So the lock-step figure is
never above the pipelined one, and at most 2 − α ticks a token below it (α the drafts' acceptance)."""

from __future__ import annotations

import pytest

from ppsd.modes import Mode
from ppsd.paths import EXAMPLES_DIR
from sim.api import resolve_plan, simulate
from sim.batch.sweep import predict
from sim.plan import Plan

SAME_WORK_REL = 5e-4   # AR and EESD: the batched replay prices a round at the cache width rounded to 8 slots
LOCKSTEP_SLACK = 0.03  # what the lower bound leaves for the lock step's own jitter and the decode clocks


@pytest.fixture(scope="module")
def profile():
    from ppsd.profile import load_profile

    return load_profile(EXAMPLES_DIR / "smollm2-135m-batch-amd-epyc" / "profile")


def _one(profile, plan: Plan):
    return simulate(profile, resolve_plan(plan, profile), acceptance="trace", engine="fast")


def test_ar_and_eesd_are_priced_alike_by_both(profile):
    for exit_layer, gamma in [(20, 1), (24, 3), (27, 2)]:
        one = _one(profile, Plan(Mode.EESD, exit_layer, draft_len=gamma))
        batched = predict(profile, exit_layer, gamma, 1, scheme=Mode.EESD)
        assert batched.ar_tokens_per_s == pytest.approx(one.details.ar_tokens_per_s, rel=SAME_WORK_REL)
        assert batched.speedup_vs_ar == pytest.approx(one.speedup_vs_ar, rel=SAME_WORK_REL)


def test_lockstep_ppsd_is_at_most_the_pipelined_and_at_least_a_tick_per_rejection_below(profile):
    for exit_layer in (15, 20, 24, 29):
        pipelined = _one(profile, Plan(Mode.PPSD, exit_layer, stages=2)).speedup_vs_ar
        lockstep = predict(profile, exit_layer, None, 1, scheme=Mode.PPSD)
        alpha = lockstep.acceptance_rate
        assert lockstep.speedup_vs_ar <= pipelined, exit_layer
        assert lockstep.speedup_vs_ar >= pipelined / (2.0 - alpha) * (1.0 - LOCKSTEP_SLACK), exit_layer
