"""The two sides of a validation: the prompts whose acceptance predicts and the prompts that are
measured (their prompt tokens and lengths). In sample they are the same prompts, each replaying its
own trace; out of sample (`--predict-from`, `--prompts FILE`, `--split F`) the predicting prompts'
traces are laid over the measured prompts' lengths."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ppsd.errors import UserError
from sim import intervals as iv


@dataclass
class Sides:
    """Which prompts predict (ids whose acceptance the predicting profile supplies) and which are
    measured (generations: prompt tokens and lengths), and how they relate."""

    prediction_ids: list[str]
    measured: list[dict]
    overlap: list[str]           # measured ids that are prediction prompts (by id, or the same text)
    in_sample: bool              # every measured prompt is one of the prediction prompts: replay its trace
    measured_prompts: str        # where the measured prompts came from
    split: float | None = None




@dataclass(frozen=True)
class Workload:
    """The measured prompts as the runs decode them: their ids, prompt tokens and the tokens each
    generates (`max_new`), and as the simulator's targets (context and length of each)."""

    ids: list
    prompts: list[list[int]]
    max_new: list[int]
    targets: iv.Targets

    @classmethod
    def from_generations(cls, gens: list[dict], max_new: list[int] | None = None) -> Workload:
        """Each generation's prompt tokens, generating its recorded length (or `max_new[i]`)."""
        lengths = [len(g["token_ids"]) for g in gens] if max_new is None else list(max_new)
        targets = iv.Targets.from_generations(gens)
        if max_new is not None:
            targets = iv.Targets(targets.start_context, tuple(lengths), targets.categories)
        return cls([g["prompt_id"] for g in gens], [list(map(int, g["prompt_tokens"])) for g in gens], lengths,
                   targets)


def prompt_generations(model, prompts_file: str, limit: int | None, profile,
                       exclude: Sequence[set[str]] = ()) -> list[dict]:
    """Measured prompts from a prompt file (Spec-Bench JSONL, spec-bench, or the built-in set),
    taken round-robin over categories, encoded as the profiler encodes them, each generating the
    profile's recorded number of new tokens. `exclude`: sets of prompt ids and texts to leave out
    (`--unseen`: the predicting profile's prompts, the exit heads' training prompts)."""
    from ppsd.prompts import load_prompts

    prompts = load_prompts(None if prompts_file == "builtin" else prompts_file)
    if exclude:
        drop = set().union(*exclude)
        prompts = [p for p in prompts if str(p.prompt_id) not in drop and p.text not in drop]
        if not prompts:
            raise UserError(f"--unseen leaves no prompt of {prompts_file} to measure",
                            "give a prompt file with prompts the profile and the heads never saw")
    rows = [{"prompt_id": p.prompt_id, "category": p.category, "prompt": p.text} for p in prompts]
    max_new = int((profile.meta.get("acceptance") or {}).get("max_new_tokens") or 64)
    return [{**g, "prompt_tokens": model.encode_prompt(g["prompt"]), "token_ids": [0] * max_new}
            for g in pick_round_robin(rows, limit)]


def split_prompts(gens: list[dict], fraction: float) -> tuple[list[dict], list[dict]]:
    """(prediction part, measured part) of one prompt set: in each category, in order, the first
    round(F · n) prompts predict (at least one, and at least one is left to measure); the prompts
    of categories with a single prompt are split the same way among themselves."""
    by_cat: dict[str, list[dict]] = {}
    for g in gens:
        by_cat.setdefault(str(g.get("category")), []).append(g)
    groups = [items for items in by_cat.values() if len(items) > 1]
    groups.append([items[0] for items in by_cat.values() if len(items) == 1])
    pred_ids = set()
    for items in groups:
        if len(items) < 2:
            pred_ids |= {str(g["prompt_id"]) for g in items}
            continue
        k = min(max(int(round(fraction * len(items))), 1), len(items) - 1)
        pred_ids |= {str(g["prompt_id"]) for g in items[:k]}
    return ([g for g in gens if str(g["prompt_id"]) in pred_ids],
            [g for g in gens if str(g["prompt_id"]) not in pred_ids])


def split_sides(predict, head: str, gens: list[dict], split: float | None, limit: int | None, *,
                prompts_file: str | None = None, emulated: bool = False) -> Sides:
    """The prediction prompt ids (those `predict` traced for `head`; with a split, only its
    prediction part) and the measured generations (`gens`, or the split's other part; `limit` of
    them round-robin over categories)."""
    acc = predict.acceptance
    traced = list(dict.fromkeys(acc[acc["head"] == head]["prompt_id"].astype(str)))
    source = f"file {prompts_file}" if prompts_file else ("emulated from the profile" if emulated else "profile")
    if split is not None:
        pred_part, meas_part = split_prompts(gens, float(split))
        keep = {str(g["prompt_id"]) for g in pred_part}
        traced = [p for p in traced if p in keep]
        gens = meas_part
        source = f"split {float(split):g}: the profile's other prompts"
        if not traced or not gens:
            raise UserError(f"--split {split} leaves {len(traced)} prediction and {len(gens)} measured prompts",
                            "profile more prompts per category, or choose another fraction")
    measured = pick_round_robin(gens, limit)
    if not measured:
        raise UserError("no prompts to measure", "give --prompts FILE or a profile with generations")
    texts = {str(g["prompt_id"]): g.get("prompt") for g in predict.generations()}
    pred = set(traced)
    pred_texts = {t for p, t in texts.items() if p in pred and t}
    overlap, same = [], []
    for g in measured:
        pid, text = str(g["prompt_id"]), g.get("prompt")
        by_id = pid in pred and (text is None or texts.get(pid) in (None, text))
        if by_id or (text and text in pred_texts):
            overlap.append(pid)
        same.append(by_id)
    return Sides(traced, measured, overlap, all(same) and split is None, source, split)


def pick_round_robin(gens: list[dict], limit: int | None) -> list[dict]:
    """The first `limit` generations taken one category at a time, so a few prompts still span the
    categories (their acceptance differs a lot); `limit` 0/None keeps all."""
    if not limit:
        return gens
    by_cat: dict[str, list[dict]] = {}
    for g in gens:
        by_cat.setdefault(str(g.get("category")), []).append(g)
    picked, i = [], 0
    while len(picked) < min(limit, len(gens)):
        for cat in by_cat.values():
            if i < len(cat) and len(picked) < limit:
                picked.append(cat[i])
        i += 1
    return picked



def unseen_exclusions(predict, heads_dir: str | None) -> list[set[str]]:
    """What `--unseen` leaves out of the measured prompts: the predicting profile's prompts (ids and
    texts) and, with --heads, the prompts those exit heads were trained on."""
    seen = {str(i) for i in predict.acceptance["prompt_id"].unique()} if predict.has_acceptance else set()
    seen |= {str(g["prompt_id"]) for g in predict.generations()} | \
        {g["prompt"] for g in predict.generations() if g.get("prompt")}
    out = [seen]
    if heads_dir:
        from runtime.heads.store import read_meta

        out.append({str(i) for i in (read_meta(heads_dir).training or {}).get("train_prompt_ids") or []})
    return out

