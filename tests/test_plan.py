"""sim/plan.py: what a plan means comes from its scheme (`plan.scheme`): label, plan spec, file slug, checks."""

from __future__ import annotations

import pytest

from ppsd.errors import UserError
from ppsd.modes import Mode
from sim.plan import Plan
from sim.schemes import SCHEMES


def test_every_mode_has_a_scheme_that_answers_for_its_plans():
    assert set(SCHEMES) == set(Mode)
    for mode, sch in SCHEMES.items():
        assert sch.mode is mode and Plan(mode, exit_layer=5).scheme is sch


@pytest.mark.parametrize("spec, label, slug", [
    ("ar", "AR", "ar"),
    ("eesd:12:3", "EESD E=12 γ=3", "eesd-e12-g3"),
    ("eesd:12", "EESD E=12 γ=3", "eesd-e12-g3"),  # the scheme's default second number
    ("ppsd:24:2", "PPSD E=24 k=2", "ppsd-e24-k2"),
    ("ppsd:24", "PPSD E=24 k=2", "ppsd-e24-k2"),
])
def test_a_plan_spec_reads_back_with_its_label_and_slug(spec, label, slug):
    plan = Plan.from_spec(spec)
    assert plan.label() == label and plan.slug() == slug
    assert Plan.from_spec(plan.spec()) == plan


def test_the_second_number_lives_in_its_schemes_field():
    eesd, ppsd = Plan.from_spec("eesd:10:4"), Plan.from_spec("ppsd:10:3", exit_head="vocab4096")
    assert (eesd.size, eesd.size_as("draft_len"), eesd.size_as("stages")) == (4, 4, None)
    assert (ppsd.size, ppsd.size_as("draft_len"), ppsd.size_as("stages")) == (3, None, 3)
    assert ppsd.label() == "PPSD E=10 k=3 vocab4096" and ppsd.slug() == "ppsd-e10-k3-vocab4096"
    assert Plan(Mode.AR).size is None and Plan(Mode.AR).num_stages == 1


@pytest.mark.parametrize("bad", ["ar:3", "eesd", "eesd:x", "ppsd:3:2:1"])
def test_a_malformed_spec_is_a_value_error(bad):
    with pytest.raises(ValueError):
        Plan.from_spec(bad)


def test_an_unknown_mode_is_a_user_error():
    with pytest.raises(UserError):
        Plan.from_spec("medusa:3")


def test_checks_come_from_the_scheme():
    Plan(Mode.AR).validate(4)
    with pytest.raises(UserError, match="draft length"):
        Plan(Mode.EESD, exit_layer=2, draft_len=0).validate(4)
    with pytest.raises(UserError, match="fewer than 2 stages"):
        Plan(Mode.PPSD, exit_layer=2, stage_bounds=(0, 4)).validate(4)
    with pytest.raises(UserError, match="do not fit"):
        Plan(Mode.PPSD, exit_layer=3, stages=3).validate(4)


@pytest.mark.parametrize("tau", [0.0, 1.0, -0.2, 1.5, float("nan"), "x"])
def test_a_confidence_stop_outside_zero_one_is_refused(tau):
    with pytest.raises(UserError, match=r"outside \(0, 1\)"):
        Plan("eesd", exit_layer=8, draft_len=4, draft_stop=tau)


def test_a_confidence_stop_is_eesds_or_ppsds_and_reads_back():
    plan = Plan("eesd", exit_layer=8, draft_len=4, draft_stop=0.4)
    assert plan.slug() == "eesd-e8-g4-stop0.4" and plan.label() == "EESD E=8 γ=4 τ=0.4"
    back = Plan.from_dict(plan.to_dict())
    assert back.draft_stop == 0.4 and back.label() == plan.label()
    assert "draft_stop" not in Plan("eesd", exit_layer=8).to_dict()  # plans without one read as before
    with pytest.raises(UserError, match="use --mode eesd or ppsd"):
        Plan("ar", draft_stop=0.4)
    pp = Plan("ppsd", exit_layer=8, draft_stop=0.4)
    assert Plan.from_dict(pp.to_dict()) == pp and pp.slug() == "ppsd-e8-k2-stop0.4"
    hf = Plan("eesd", exit_layer=8, draft_len=4, runtime="hf", draft_stop=0.4)  # transformers' own threshold
    assert hf.label() == "EESD E=8 γ=4 τ=0.4 [hf]" and hf.slug() == "eesd-e8-g4-stop0.4-hf"
