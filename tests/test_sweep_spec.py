"""sim/planner/sweep_spec.py: one sweep spec whose defaults `ppsd plan`, `sim.run.sweep` and the dashboard share,
and whose plans come from the schemes."""

from __future__ import annotations

import inspect

import pytest

from ppsd.cli import build_parser
from ppsd.errors import UserError
from ppsd.modes import Mode
from sim.planner.sweep_spec import DEFAULT_TOKENS, MAX_DRAFT_LEN, SweepSpec


def test_the_command_line_and_the_dashboard_take_the_specs_defaults():
    from dashboard import sweep_cache

    args = build_parser().parse_args(["plan", "--profile", "x"])
    spec = SweepSpec()
    assert args.tokens == spec.tokens == DEFAULT_TOKENS
    assert tuple(range(1, args.max_draft_len + 1)) == spec.gammas and max(spec.gammas) == MAX_DRAFT_LEN
    assert sweep_cache.GAMMAS == spec.gammas and sweep_cache.TOKENS == spec.tokens


def test_sweep_takes_a_spec_and_its_fields_as_settings():
    from sim.run import sweep

    params = inspect.signature(sweep).parameters
    assert list(params)[:2] == ["profile", "spec"]  # every other default is the spec's


def test_plans_at_an_exit_come_from_every_speculative_scheme():
    spec = SweepSpec(devices=3, gammas=(1, 2), hop_ms=0.1, exit_head="vocab4096", temperature=0.7)
    plans = spec.plans_at(28, num_layers=30)
    assert [(p.mode, p.size) for p in plans] == [(Mode.EESD, 1), (Mode.EESD, 2), (Mode.PPSD, 2), (Mode.PPSD, 3)]
    assert all(p.exit_layer == 28 and p.hop_ms == 0.1 and p.exit_head == "vocab4096" and p.temperature == 0.7
               for p in plans)
    # PPSD's stage counts stop where no layer is left for another stage
    assert [p.size for p in spec.plans_at(29, num_layers=30) if p.mode is Mode.PPSD] == [2]


def test_confidence_stops_join_every_gamma():
    spec = SweepSpec(devices=2, gammas=(1, 2, 4), draft_stops=(0.6, 0.3))
    eesd = [p for p in spec.plans_at(20, num_layers=30) if p.mode is Mode.EESD]
    # (a stop at γ = 1 would be the fixed plan again: not swept)
    assert [(p.draft_len, p.draft_stop) for p in eesd] == [(1, None), (2, None), (4, None), (2, 0.3), (4, 0.3),
                                                          (2, 0.6), (4, 0.6)]
    # PPSD's stage 1 waits for the verdict on an unsure draft: every stop beside the plain pipeline
    ppsd = [p for p in spec.plans_at(20, num_layers=30) if p.mode is Mode.PPSD]
    assert [p.draft_stop for p in ppsd] == [None, 0.3, 0.6]


@pytest.mark.parametrize("bad", [dict(gammas=(0, 1)), dict(gammas=(65,)), dict(devices=0), dict(hop_ms=-1.0),
                                 dict(alpha_scale=-0.5), dict(draft_stops=(1.2,)),
                                 dict(draft_stops=(0.5,), alpha_by_exit={10: 0.5})])
def test_a_setting_out_of_range_is_a_user_error(bad):
    with pytest.raises(UserError):
        SweepSpec(**bad).check(30)
