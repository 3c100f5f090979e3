"""validation/plan_spec.py: `ppsd validate --plans` items."""

import pytest


def test_plan_items_carry_a_head_and_a_forced_alpha():
    from validation.plan_spec import parse_plan_items
    from ppsd.modes import Mode

    items = parse_plan_items("eesd:10:3; ppsd:24:2:head=vocab4096 ;ppsd:15:3:alpha=0.9:head=trained;ppsd:8", 30, [])
    assert [(i.plan.mode, i.plan.exit_layer, i.head, i.forced_alpha) for i in items] == [
        (Mode.EESD, 10, None, None), (Mode.PPSD, 24, "vocab4096", None), (Mode.PPSD, 15, "trained", 0.9),
        (Mode.PPSD, 8, None, None)]
    assert items[0].plan.draft_len == 3 and items[2].plan.stages == 3 and items[3].plan.stages == 2
    from ppsd.errors import UserError

    for bad, words in (("ppsd:15:2:alpha=1.5", "not a probability"), ("ppsd:15:2:speed=3", "unknown option"),
                       ("ppsd:15:2:3", "is not mode:exit"), ("ppsd:x", "is not mode:exit")):
        with pytest.raises(UserError, match=words):
            parse_plan_items(bad, 30, [])


def test_plan_items_carry_a_confidence_stop():
    from ppsd.errors import UserError
    from validation.plan_spec import parse_plan_items

    items = parse_plan_items("eesd:24:6:stop=0.5;eesd:24:6:stop=0.8:head=trained;eesd:24:6;ppsd:15:2:stop=0.6",
                             30, [])
    assert [i.plan.draft_stop for i in items] == [0.5, 0.8, None, 0.6] and items[1].head == "trained"
    assert items[3].plan.slug() == "ppsd-e15-k2-stop0.6"
    assert items[0].plan.slug() == "eesd-e24-g6-stop0.5" and "τ=0.5" in items[0].plan.label()
    for bad, words in (("eesd:24:6:stop=1.5", r"outside \(0, 1\)"), ("eesd:24:6:stop=x", r"outside \(0, 1\)"),
                       ("eesd:24:6:stop=0.5:alpha=0.9", "drop alpha=")):
        with pytest.raises(UserError, match=words):
            parse_plan_items(bad, 30, [])
