"""`ppsd validate --plans`: the plans to measure, each with the exit head it drafts with and an
optional forced acceptance; without `--plans`, a default set over three exit layers."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ppsd.errors import UserError
from ppsd.modes import MODES, Mode
from sim.plan import Plan, check_draft_stop


@dataclass(frozen=True)
class PlanItem:
    """One plan of `--plans`: the plan, the exit head it drafts with (None: `--exit-head`'s) and a
    forced acceptance α (None: the drafts' real acceptance). A forced plan is a timing check only:
    seeded Bernoulli(α) bits decide every draft, the same bits in the measured run and in its
    prediction, so its output is not AR's and its acceptance says nothing about the head."""

    plan: Plan
    head: str | None = None
    forced_alpha: float | None = None
    text: str | None = None  # the item as typed in --plans (None: a default plan)


PLAN_SYNTAX = ("mode:exit[:γ or k][:head=NAME][:alpha=A][:stop=TAU], e.g. "
               "'eesd:10:3;ppsd:24:2:head=vocab4096;ppsd:15:2:alpha=0.9;eesd:24:6:stop=0.5'")


def parse_plan_items(spec: str | None, num_layers: int, exits: list[int]) -> list[PlanItem]:
    """`--plans` (see PLAN_SYNTAX; γ for EESD, k for PPSD) or the default set: 3 exit layers × EESD γ=3
    and PPSD k=2."""
    if spec:
        return parse_plan_spec(spec)
    cands = sorted(exits) or list(range(1, num_layers))
    picks = sorted({min(cands, key=lambda e: abs(e - round(num_layers * f))) for f in (1 / 3, 1 / 2, 2 / 3)})
    return [PlanItem(Plan(Mode.EESD, e, draft_len=3)) for e in picks] + \
        [PlanItem(Plan(Mode.PPSD, e, stages=2)) for e in picks]


def parse_plan_spec(spec: str) -> list[PlanItem]:
    """The items of a `--plans` string, their syntax checked (no model needed: exits are checked
    against the model later); a one-line UserError for a malformed item."""
    items = []
    if not any(s.strip() for s in spec.split(";")):
        raise UserError(f"--plans {spec!r} names no plan", f"write e.g. {PLAN_SYNTAX.split('e.g. ')[1]}, or leave "
                        "--plans out for the default set")
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        parts = [x.strip() for x in item.split(":")]
        options = [x for x in parts[2:] if "=" in x]
        positional = parts[:2] + [x for x in parts[2:] if "=" not in x]
        try:
            name, _ = positional[0], int(positional[1])
            mode = Mode(name) if name in MODES else None
            if len(positional) > 3:
                raise ValueError
            # γ for EESD, k for PPSD; its scheme's default when left out (`Plan.from_spec`)
            plan = Plan.from_spec(":".join(positional)) if mode is not None and mode.speculative else None
        except (IndexError, ValueError):
            raise UserError(f"--plans item {item!r} is not {PLAN_SYNTAX.split(', e.g.')[0]}",
                            f"write e.g. {PLAN_SYNTAX.split('e.g. ')[1]}") from None
        if plan is None:
            raise UserError(f"--plans mode {name!r} is not eesd or ppsd", "write e.g. 'eesd:10:3;ppsd:15:2'")
        head, alpha, stop = None, None, None
        for opt in options:
            key, _, value = opt.partition("=")
            if key == "head" and value:
                head = value
            elif key == "alpha":
                try:
                    alpha = float(value)
                except ValueError:
                    alpha = float("nan")
                if not 0.0 <= alpha <= 1.0:
                    raise UserError(f"--plans item {item!r}: alpha={value} is not a probability",
                                    "give a forced acceptance between 0 and 1, e.g. alpha=0.9")
            elif key == "stop":
                try:
                    stop = check_draft_stop(_hf_default() if value.strip().lower() == "default" else value)
                except UserError:
                    raise UserError(f"--plans item {item!r}: stop={value}: a confidence stop is outside (0, 1)",
                                    "give e.g. stop=0.5, or stop=default (transformers' own threshold)") from None
            else:
                raise UserError(f"--plans item {item!r}: unknown option {opt!r}",
                                "the options are head=NAME (the exit head that drafts), alpha=A "
                                "(forced acceptance, timing only) and stop=TAU (a confidence stop; "
                                "stop=default: transformers' own threshold)")
        if stop is not None:
            if alpha is not None:
                raise UserError(f"--plans item {item!r}: a confidence stop reads the drafts' own confidence",
                                "drop alpha= (forced acceptance) or stop=")
            try:
                plan = replace(plan, draft_stop=stop)  # UserError for a mode without a confidence stop
            except UserError as exc:
                raise UserError(f"--plans item {item!r}: {exc.problem}", "drop stop= from it") from None
        items.append(PlanItem(plan, head, alpha, item))
    return items


def check_plan_items(items: list[PlanItem], num_layers: int) -> None:
    """Each typed item's exit, γ and k against the model's layer count (read from the profile, before
    the model loads); the one-line refusal names the item as typed in --plans."""
    for item in items:
        if item.text is None:
            continue
        try:
            item.plan.validate(num_layers)
        except UserError as exc:
            mid = num_layers // 2
            raise UserError(f"--plans item {item.text!r}: {exc.problem}",
                            f"give each plan an exit E between 1 and {num_layers - 1}, γ (EESD) between 1 and 64 "
                            f"and k (PPSD) between 2 and {num_layers + 1} − E, e.g. 'eesd:{mid}:3;ppsd:{mid}:2'") from None


def _hf_default() -> float:
    """`stop=default`: transformers' own confidence threshold (`runtime.hf_assisted.hf_default_threshold`)."""
    from runtime.hf_assisted import hf_default_threshold

    return hf_default_threshold()


def parse_plans(spec: str | None, num_layers: int, exits: list[int]) -> list[Plan]:
    """The plans of `--plans` (their options dropped: see `parse_plan_items`)."""
    return [i.plan for i in parse_plan_items(spec, num_layers, exits)]
