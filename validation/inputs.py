"""Everything a validation measures and predicts from, loaded and checked before anything is
measured: the profiles, the model, the measured prompts and the plans. Bad input fails here, in
seconds, not after AR ran."""

from __future__ import annotations

from dataclasses import dataclass

from ppsd.errors import UserError
from ppsd.exit_heads import SHARED
from validation.config import ValidateConfig
from validation.plan_spec import check_plan_items, parse_plan_items
from validation.prompts import (Sides, pick_round_robin, prompt_generations, split_sides,
                                        unseen_exclusions)
from sim.plan import Plan


@dataclass
class Inputs:
    """A checked validation: `profile` is measured (its model and prompts), `predict` is priced
    (the same profile unless --predict-from)."""

    profile: object
    predict: object
    model: object
    head: str                    # the exit head the plans draft with unless a plan names its own
    sides: Sides
    plans: list[Plan]            # resolved against `predict`
    forced: list[float | None]   # each plan's forced acceptance α (`--plans ...:alpha=A`), or None
    temperature: float           # 0: greedy
    traced: object = None        # --measured-traces: a profile with the measured prompts' own traces

    @property
    def acceptance(self):
        """The measured profile's acceptance table (what --force-trace and emulated runs replay)."""
        return self.profile.acceptance if self.profile.has_acceptance else None


def load_inputs(config: ValidateConfig) -> Inputs:
    from ppsd.profile import load_profile

    profile = load_profile(config.measured_profile)  # the model, and the measured prompts
    predict = load_profile(config.predict_from) if config.predict_from else profile  # what the simulator prices
    if config.sampled:  # T must be one the predicting profile holds β at (UserError naming those it has)
        predict.match_temperature(config.temperature)
    temperature = float(config.temperature)
    _check_acceptance(config, profile, predict)
    if config.measured_traces:
        load_profile(config.measured_traces)  # a missing folder fails before the model loads
    head = _default_head(config, profile, predict)
    items = _checked_items(config, profile, predict, head, temperature)  # before the model loads
    if config.emulated:
        model, gens = _load_emulated(config, profile, head)
    else:
        model, gens = _load_real(config, profile, predict)
    sides = split_sides(predict, head, gens, config.split, config.limit, prompts_file=config.prompts,
                        emulated=config.emulated)
    for p in (profile, predict):
        if model.num_layers != p.num_layers:
            raise UserError(f"the profile {p.path} is for a {p.num_layers}-layer model but {model.model_id} has "
                            f"{model.num_layers}", "validate on the model that was profiled")
    plans, forced = _plans(config, model, predict, items)
    traced = _measured_traces(config, model, sides, plans) if config.measured_traces else None
    return Inputs(profile, predict, model, head, sides, plans, forced, temperature, traced)


def _measured_traces(config: ValidateConfig, model, sides: Sides, plans: list[Plan]):
    """--measured-traces DIR, checked: the same model, every measured prompt traced at every exit and
    head a plan drafts with (by prompt id; the prompt file is the one it was profiled on)."""
    from ppsd.profile import load_profile

    traced = load_profile(config.measured_traces)
    where = f"--measured-traces {config.measured_traces}"
    if not traced.has_acceptance:
        raise UserError(f"{where} has no acceptance traces", "profile the measured prompts with acceptance enabled: "
                        "`ppsd profile --prompts FILE --skip-latency --out DIR`")
    if traced.model_id != model.model_id or traced.num_layers != model.num_layers:
        raise UserError(f"{where} traced {traced.model_id}, not {model.model_id}",
                        "trace the measured prompts on the model being validated")
    traced_len = int((traced.meta.get("acceptance") or {}).get("max_new_tokens") or 0)
    measured_len = max(len(g.get("token_ids") or []) for g in sides.measured)
    if traced_len < measured_len:
        raise UserError(f"{where} traced {traced_len} new tokens a prompt; the measured prompts generate {measured_len}",
                        f"profile them with --max-new-tokens {measured_len}")
    acc = traced.acceptance
    measured = [str(g["prompt_id"]) for g in sides.measured]
    for p in plans:
        if p.exit_layer is None:
            continue
        have = acc[(acc["head"] == p.exit_head) & (acc["exit_layer"] == int(p.exit_layer))]
        missing = sorted(set(measured) - set(have["prompt_id"].astype(str)))
        if missing:
            raise UserError(f"{where} has no trace of prompt(s) {', '.join(missing[:5])} at exit {p.exit_layer} "
                            f"(head {p.exit_head})", "profile the --prompts file with the same --heads and "
                            "max-new-tokens: `ppsd profile --prompts FILE --skip-latency --heads H --out DIR`")
        if p.draft_stop is not None:
            traced.require_confidence(p.exit_head)
    return traced


def _check_acceptance(config: ValidateConfig, profile, predict) -> None:
    """The predicting profile (and, where its traces are replayed, the measured one) has traces."""
    replayed = config.emulated or config.force_trace
    for p in [predict, *([profile] if replayed and profile is not predict else [])]:
        if not p.has_acceptance:
            raise UserError(f"profile {p.path} has no acceptance traces",
                            "make it with --alpha-curve FILE or --acceptance-from DIR (`ppsd profile --analytic`)"
                            if config.emulated else "profile with acceptance enabled")


def _default_head(config: ValidateConfig, profile, predict) -> str:
    """The exit head the plans draft with unless a plan names its own, checked against both profiles."""
    from ppsd.exit_heads import resolve_head_name
    from sim.planner.heads import check_head

    if config.emulated:
        if config.heads:
            raise UserError("--heads does not apply with --emulate (an emulated exit head is its profiled time)",
                            "drop --heads; --exit-head NAME picks a head the profile has")
        return check_head(predict, check_head(profile, config.exit_head or SHARED))
    if config.heads:
        from runtime.heads.store import read_meta

        read_meta(config.heads)  # a missing or foreign folder fails before the model loads
    head = resolve_head_name(config.heads, config.exit_head)
    return check_head(predict, head if config.prompts or predict is not profile else check_head(profile, head))


def _load_emulated(config: ValidateConfig, profile, head: str):
    """Emulated devices: synthetic prompts of the profile's prompt and generated lengths
    (runtime/emulate.py); the measured ones are picked later (split_sides: --split, --limit)."""
    from runtime import emulate as em

    gens = pick_round_robin([{"prompt_id": p.prompt_id, "category": p.category, "prompt_tokens": p.tokens,
                              "token_ids": [0] * p.recorded_new} for p in em.emulated_prompts(profile, head)], 0)
    return em.load_emulated(config.emulate), gens


def _load_real(config: ValidateConfig, profile, predict):
    """The profiled model, and the measured prompts: --prompts FILE's, else the profile's generations."""
    from runtime.llm import load_model

    if not config.prompts and not profile.generations():
        raise UserError(f"profile {profile.path} lists no generations", "re-create it with ppsd profile")
    hardware = profile.meta["hardware"].get("device")
    model = load_model(profile.model_id, hardware if hardware in ("cpu", "cuda") else "cpu",
                       profile.meta["model"].get("dtype", "float32"))
    if config.prompts:
        exclude = unseen_exclusions(predict, config.heads) if config.unseen else ()
        gens = prompt_generations(model, config.prompts, config.limit, profile, exclude)
    else:
        gens = pick_round_robin(profile.generations(), 0)
    return model, gens


def _checked_items(config: ValidateConfig, profile, predict, head: str, temperature: float) -> list[tuple]:
    """The plans of --plans (or the default set) with the head each drafts with, every item checked
    against the profile's layer count, exit heads, temperature and traces before the model loads."""
    acc = predict.acceptance
    exits = sorted(int(e) for e in acc[acc["head"] == head]["exit_layer"].unique())
    items = parse_plan_items(config.plans, profile.num_layers, exits)
    check_plan_items(items, profile.num_layers)
    checked = []
    for item in items:
        where = f"--plans item {item.text!r}: " if item.text else ""
        if item.head not in (None, SHARED) and not config.heads and not config.emulated:
            raise UserError(f"{where}head={item.head} drafts with a trained head, and no --heads folder is given",
                            "add --heads DIR (the folder the profile was made with), or drop head=")
        try:
            h = _plan_head(config, profile, predict, head, item.head)
        except UserError as exc:
            if not where:
                raise
            from sim.planner.heads import available_heads

            raise UserError(f"{where}{exc.problem}", f"give head= one of the heads the profile has "
                            f"({', '.join(available_heads(predict))}; trained heads need --heads DIR)") from None
        traced = sorted(int(e) for e in acc[acc["head"] == h]["exit_layer"].unique())
        if item.forced_alpha is None and int(item.plan.exit_layer) not in traced:
            raise UserError(f"{where or 'plan ' + item.plan.label() + ': '}profile {predict.path} has no traces of exit "
                            f"head {h} at exit {item.plan.exit_layer}",
                            f"give an exit it traced for {h}: {', '.join(map(str, traced))}")
        if item.forced_alpha is not None and temperature > 0:
            raise UserError(f"--plans alpha={item.forced_alpha:g} forces greedy accept/reject decisions; sampled "
                            "validation measures real acceptance", "drop alpha= from --plans, or --temperature")
        if h != head and temperature > 0:
            raise UserError(f"sampled validation uses one exit head ({head}); --plans asks for {h}",
                            "validate one head at a time with --exit-head NAME")
        if item.plan.draft_stop is not None:  # priced from the predicting traces' confidences
            if config.emulated:
                raise UserError("a confidence stop (stop=) is validated on the real model (an emulated one "
                                "has no draft confidences)", "drop stop= from --plans, or --emulate")
            predict.require_confidence(h, temperature)
        checked.append((item, h))
    return checked


def _plans(config: ValidateConfig, model, predict, items: list[tuple]):
    """The checked plans, each drafting with its head, resolved and checked against the machine; and
    each one's forced acceptance."""
    from runtime.request import check_resources, with_exit_head
    from sim.api import resolve_plan

    plans, forced = [], []
    for item, h in items:
        if config.emulated:
            from runtime import emulate as em

            plans.append(em.with_emulated_head(model, item.plan, None, h))
        else:
            plans.append(with_exit_head(model, item.plan, config.heads, h))  # refuses a folder without that exit
        forced.append(item.forced_alpha)
    if config.runtime != "ppsd":  # another runtime decodes every plan (runtime/hf_assisted.py)
        from runtime.hf_assisted import runtime_plans

        plans, forced = runtime_plans(plans, forced, predict, config.runtime, config.schedule)
    plans = [resolve_plan(p.validate(model.num_layers), predict) for p in plans]
    for p in plans:
        check_resources(p, str(model.device.type), oversubscribe=config.emulated, command="validate")
    return plans, forced


def _plan_head(config: ValidateConfig, profile, predict, head: str, named: str | None) -> str:
    """The head a plan drafts with: `head=NAME` in --plans, else --exit-head's."""
    from ppsd.exit_heads import resolve_head_name
    from sim.planner.heads import check_head

    if named is None:
        return head
    h = named if config.emulated else resolve_head_name(config.heads, named)
    return check_head(predict, check_head(profile, h) if config.emulated else h)
