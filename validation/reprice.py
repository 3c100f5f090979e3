"""Re-price a committed validation folder with today's code, without running the model.

A validation folder keeps what its predictions were made from: the predicting profile
(`predicted_from`), the plans (its rows), the measured prompts (`measured_prompt_ids`) and, beside
it, `expected.json`: the figure its note states, the note's words that state it, and the measured
prompts' lengths (what `ppsd validate` tokenised; `--write-lengths` in `python -m validation.reprice`
records them once). `reprice(expected)` predicts every row again the way `ppsd validate` did
(validation/predictor.py, the same Sides and Workload) and returns the rows' errors against the
measured speedups and their MAPE; `tests/test_reprice_examples.py` fails when it moves past the
stated figure. A `hooks` callable may edit the predicting profile first (docs/design-notes.md's
ablation of the PPSD correction terms does: `python -m validation.reprice --ablate`).
Torch-free: only the simulator prices.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ppsd import exit_heads
from ppsd.modes import Mode
from ppsd.paths import PROJECT_ROOT
from ppsd.statistics import mape, percent_error

EXPECTED_FILE = "expected.json"
BATCH_FILE = "batch_validation.json"
# the figure a note states: as run, priced from the profile alone (a `--retime` run), a batched run's
FIGURES = ("mape_speedup_pct", "mape_speedup_profile_pct", "mape_pct")


@dataclass(frozen=True)
class Expected:
    """One committed validation folder's stated figure and what re-pricing it needs."""

    path: Path                 # the expected.json
    folder: Path               # the validation folder (validation.json)
    figure: str                # one of FIGURES
    stated_pct: float          # the note's figure
    note: Path                 # the note that states it
    quote: str                 # the note's words stating it (a test checks they are there)
    measured: list[dict]       # [{prompt_id, category, prompt_len, new_tokens}], the measured prompts
    profile: str | None = None  # the predicting profile, where the document names one that is not committed

    @classmethod
    def load(cls, path: str | Path) -> Expected:
        path = Path(path)
        d = json.loads(path.read_text())
        return cls(path, path.parent, d["figure"], float(d["stated_pct"]), path.parent / d["note"], d["quote"],
                   list(d.get("measured") or []), d.get("profile"))

    @property
    def batched(self) -> bool:
        return (self.folder / BATCH_FILE).is_file()

    @property
    def doc(self) -> dict:
        return json.loads((self.folder / (BATCH_FILE if self.batched else "validation.json")).read_text())


@dataclass(frozen=True)
class RepricedRow:
    label: str
    recorded: float            # the predicted speedup the folder holds
    repriced: float            # today's
    measured: float

    @property
    def error_pct(self) -> float:
        return percent_error(self.repriced, self.measured)


@dataclass(frozen=True)
class Repriced:
    folder: Path
    stated_pct: float
    rows: list[RepricedRow]

    @property
    def mape_pct(self) -> float:
        return mape([r.error_pct for r in self.rows])

    @property
    def signed_mean_pct(self) -> float:
        return sum(r.error_pct for r in self.rows) / len(self.rows)


def committed(root: Path = PROJECT_ROOT / "examples") -> list[Path]:
    """Every expected.json under examples/, sorted."""
    return sorted(root.rglob(EXPECTED_FILE))


LABEL_HEAD = re.compile(r"^(trained|vocab\d+|shared)$")


def plan_of_row(row: dict):
    """The plan a validation row priced (mode, exit, γ or bounds, head, stop, runtime), and its forced α."""
    from sim.plan import Plan

    words = row["plan"].split()
    head = next((w for w in words if LABEL_HEAD.match(w)), exit_heads.SHARED)
    stop = row.get("draft_stop")
    if stop is None:
        stop = next((float(w[2:]) for w in words if w.startswith("τ=")), None)
    runtime, schedule = ("hf", "heuristic" if "heuristic]" in words else "constant") if "[hf" in row["plan"] \
        else ("ppsd", "constant")
    bounds = tuple(int(b) for b in row["stage_bounds"]) if row.get("stage_bounds") else None
    plan = Plan(row["mode"], row.get("exit_layer"), draft_len=int(row.get("draft_len") or 1), stage_bounds=bounds,
                exit_head=head, draft_stop=stop, runtime=runtime, schedule=schedule)
    return plan, row.get("forced_alpha")


def _path(value: str) -> Path:
    return PROJECT_ROOT / value


@lru_cache(maxsize=16)
def _load(value: str):
    """A committed profile, loaded once (several folders predict from one; `hooks` never edit it in place)."""
    from ppsd.profile import load_profile

    return load_profile(_path(value))


def _sides_and_work(exp: Expected, doc: dict, predict):
    """The validation's Sides and Workload, rebuilt from the folder (prompt ids) and expected.json (lengths)."""
    from validation.prompts import Sides, Workload

    ids = [str(i) for i in doc["measured_prompt_ids"]]
    in_sample = not doc.get("out_of_sample") and not exp.measured
    if in_sample:
        gens = {str(g["prompt_id"]): g for g in predict.generations()}
        measured = [gens[i] for i in ids]
    else:
        by_id = {str(m["prompt_id"]): m for m in exp.measured}
        measured = [{"prompt_id": i, "category": by_id[i]["category"], "prompt_len": int(by_id[i]["prompt_len"]),
                     "token_ids": [0] * int(by_id[i]["new_tokens"])} for i in ids]
    sides = Sides(list(map(str, doc["prediction_prompt_ids"])), measured, list(doc.get("overlapping_prompt_ids") or []),
                  in_sample, doc.get("measured_prompts") or "profile", doc.get("split"))
    return sides, Workload([g["prompt_id"] for g in measured], [[] for _ in measured],
                           [len(g["token_ids"]) for g in measured], _targets(measured))


def _targets(measured: list[dict]):
    from sim import intervals as iv

    return iv.Targets.from_generations(measured)


def reprice(exp: Expected, hooks: Callable | None = None, seeds: int | None = None) -> Repriced:
    """Every speculative row of the folder predicted again with today's code, against its measured
    speedup (priced from the profile: a `--retime` run's pieces timed before each plan are not kept).
    `hooks(profile) -> profile` edits the predicting profile first; `seeds`: simulations averaged per
    sampled figure (`ppsd validate`'s 16 unless given)."""
    doc = exp.doc
    predict = _load(exp.profile or doc.get("predicted_from") or doc["profile"])
    if hooks is not None:
        predict = hooks(predict)
    rows = _batched(doc, predict) if exp.batched else _greedy_or_sampled(exp, doc, predict, seeds)
    return Repriced(exp.folder, exp.stated_pct, rows)


def _greedy_or_sampled(exp: Expected, doc: dict, predict, seeds: int | None) -> list[RepricedRow]:
    from sim.planner.resolve import resolve_plan
    from validation.predictor import PREDICT_SEEDS, GreedyPredictor, SampledPredictor

    sides, work = _sides_and_work(exp, doc, predict)
    temperature = float(doc.get("temperature") or 0.0)
    traced = _load(doc["measured_traces"]) if doc.get("measured_traces") else None
    seed = int((doc.get("interval") or {}).get("seed") or 0)
    greedy = GreedyPredictor(predict, predict, sides, work, draws=0, seed=seed, traced=traced)
    out = []
    for row in doc["rows"]:
        plan, alpha = plan_of_row(row)
        if not plan.scheme.speculative:
            continue
        plan = resolve_plan(plan, predict)
        if temperature > 0:
            sampled = SampledPredictor(predict, sides, work, temperature, plan.exit_head)
            speedup = sampled.expected(plan, seeds or PREDICT_SEEDS).speedup
        else:
            speedup = greedy.result(plan, alpha, engine="fast").speedup_vs_ar
        recorded = row.get("predicted_speedup_profile") or row["predicted_speedup"]
        out.append(RepricedRow(row["plan"], float(recorded), float(speedup), float(row["measured_speedup"])))
    return out


BATCH_LABEL = re.compile(r"^(EESD|PPSD) E=(\d+)(?: γ=(\d+))?")


def _batched(doc: dict, predict) -> list[RepricedRow]:
    """A batched validation's (plan, batch) rows (validation/batch.py predicts them from the profile's traces)."""
    from sim.batch.sweep import predict as batch_predict

    out = []
    for row in doc["rows"]:
        m = BATCH_LABEL.match(row["plan"])
        point = batch_predict(predict, int(m.group(2)), int(m.group(3)) if m.group(3) else None, int(row["batch"]),
                              scheme=Mode.parse(row["scheme"]))
        out.append(RepricedRow(f"{row['plan']} B={row['batch']}", float(row["predicted"]), float(point.speedup_vs_ar),
                               float(row["measured"])))
    return out


def measured_lengths(doc: dict, prompts_file: str | None = None) -> list[dict]:
    """The measured prompts as `ppsd validate` encoded them (validation/prompts.py: `prompt_generations`:
    the prompt file's text through the model's chat template, each generating the measured profile's
    `max_new_tokens`): what expected.json's `measured` holds. Loads the model's tokenizer (torch)."""
    from ppsd.profile import load_profile
    from ppsd.prompts import load_prompts
    from runtime.llm import load_model

    profile = load_profile(_path(doc["profile"]))
    source = prompts_file or str(doc["measured_prompts"]).removeprefix("file ")
    prompts = {str(p.prompt_id): p for p in load_prompts(source)}
    model = load_model(profile.model_id, "cpu", profile.meta["model"].get("dtype", "float32"))
    new = int((profile.meta.get("acceptance") or {}).get("max_new_tokens") or 64)
    return [{"prompt_id": i, "category": prompts[i].category, "prompt_len": len(model.encode_prompt(prompts[i].text)),
             "new_tokens": new} for i in map(str, doc["measured_prompt_ids"])]


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Re-price committed validation folders with today's code.")
    ap.add_argument("folders", nargs="*", help="validation folders with an expected.json (default: every one)")
    ap.add_argument("--write-measured", metavar="PROMPTS", nargs="?", const="",
                    help="record the measured prompts' lengths into each folder's expected.json (tokenises; "
                         "PROMPTS: the prompt file when validation.json's is not at hand)")
    args = ap.parse_args(argv)
    paths = [Path(f) / EXPECTED_FILE for f in args.folders] or committed()
    for path in paths:
        exp = Expected.load(path)
        if args.write_measured is not None:
            raw = json.loads(path.read_text())
            raw["measured"] = measured_lengths(exp.doc, args.write_measured or None)
            path.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
            continue
        got = reprice(exp)
        print(f"{exp.folder}: stated {exp.stated_pct:g}%, re-priced {got.mape_pct:.2f}% "
              f"(signed {got.signed_mean_pct:+.2f}%)")
        for r in got.rows:
            print(f"  {r.label:<48} recorded {r.recorded:.4f}  now {r.repriced:.4f}  measured {r.measured:.4f}  "
                  f"{r.error_pct:+.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
