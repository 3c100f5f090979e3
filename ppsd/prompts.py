"""Prompt sets for profiling (torch-free).

Two sources:
  * a built-in set of 26 prompts written for this project, two per Spec-Bench category, so
    `ppsd profile` works offline with no data files;
  * any JSONL file in Spec-Bench format (one object a line: `question_id`, `category`, `turns`;
    the first turn is the prompt), or the word "spec-bench" for the copy beside the checkout.

Subsampling is deterministic: `per_category=K` keeps K prompts per category spread evenly over
the file order, `limit=K` then keeps the first K of a round-robin over categories (so a small
limit still touches many categories).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ppsd.errors import UserError

SPEC_BENCH_CATEGORIES = (
    "writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities",
    "translation", "summarization", "qa", "math_reasoning", "rag",
)


@dataclass(frozen=True)
class Prompt:
    prompt_id: str
    category: str
    text: str


# Written for ppsd: short single-turn requests in the spirit of each Spec-Bench category.
_BUILTIN: list[tuple[str, str]] = [
    ("writing", "Write a short blog post about spending a rainy weekend in a small mountain town."),
    ("writing", "Draft a friendly email to your team announcing that the office will move to a new "
                "building next month, and list three things they should prepare."),
    ("roleplay", "Pretend you are a ship's captain in the 1800s. Describe to a new sailor what a "
                 "normal day at sea looks like."),
    ("roleplay", "You are a patient librarian. A child asks you how to find a good book about "
                 "dinosaurs. Answer them."),
    ("reasoning", "Anna is taller than Ben, and Ben is taller than Carla. Is Carla taller than "
                  "Anna? Explain your reasoning step by step."),
    ("reasoning", "A farmer has a wolf, a goat and a cabbage and must cross a river in a boat that "
                  "holds only one of them at a time. How can he do it?"),
    ("math", "What is the sum of all integers from 1 to 100? Show how you get the answer."),
    ("math", "Solve for x: 3x + 7 = 22. Then check your answer."),
    ("coding", "Write a Python function that returns True if a string is a palindrome, ignoring "
               "spaces and case."),
    ("coding", "Explain what this Python code does and suggest an improvement:\n"
               "result = []\nfor i in range(10):\n    if i % 2 == 0:\n        result.append(i * i)"),
    ("extraction", "Extract the names of all cities from this text and list them: 'Last summer Maria "
                   "flew from Lisbon to Berlin, then took a train to Prague before ending her trip "
                   "in Vienna.'"),
    ("extraction", "From the sentence 'The meeting with Dr. Lee is on March 3rd at 2 pm in room "
                   "B12', extract the person, the date, the time and the place as JSON."),
    ("stem", "Explain why the sky is blue, in simple terms a high-school student would understand."),
    ("stem", "What is the difference between a virus and a bacterium?"),
    ("humanities", "Summarise the main causes of the French Revolution."),
    ("humanities", "What did the philosopher Socrates mean by 'the unexamined life is not worth "
                   "living'?"),
    ("translation", "Translate into French: 'The weather is nice today, so we are going to the "
                    "park for a picnic.'"),
    ("translation", "Translate into English: 'Ich habe gestern ein gutes Buch gelesen und möchte "
                    "es dir empfehlen.'"),
    ("summarization", "Summarise in two sentences: 'The city council met on Tuesday to discuss the "
                      "new bicycle lanes. Supporters said the lanes would make streets safer and "
                      "reduce traffic. Shop owners worried that losing parking spaces would hurt "
                      "their business. The council agreed to test the lanes on one street for six "
                      "months before deciding.'"),
    ("summarization", "Summarise this paragraph in one sentence: 'Honeybees communicate the location "
                      "of flowers through a waggle dance. The angle of the dance shows the direction "
                      "relative to the sun, and its length shows the distance. Other bees watch the "
                      "dance and then fly straight to the food.'"),
    ("qa", "Who wrote the novel 'Pride and Prejudice'?"),
    ("qa", "What is the capital of Australia, and why was it chosen?"),
    ("math_reasoning", "A shop sells pencils at 3 for 1 dollar. Tom buys 12 pencils and pays with a "
                       "10 dollar bill. How much change does he get?"),
    ("math_reasoning", "A train travels 60 kilometres per hour for 2 hours and then 80 kilometres "
                       "per hour for 1 hour. What is its average speed over the whole trip?"),
    ("rag", "Use the passage to answer the question.\nPassage: The Eiffel Tower was built for the "
            "1889 World's Fair in Paris. It is 330 metres tall and was the tallest man-made "
            "structure in the world until 1930.\nQuestion: Why was the Eiffel Tower built, and "
            "until when was it the tallest structure?"),
    ("rag", "Use the passage to answer the question.\nPassage: Photosynthesis takes place in the "
            "chloroplasts of plant cells. Using light energy, plants turn carbon dioxide and water "
            "into glucose and release oxygen.\nQuestion: What do plants produce during "
            "photosynthesis?"),
]


def builtin_prompts() -> list[Prompt]:
    """The built-in set: 26 prompts, two per Spec-Bench category, ids `builtin-<category>-<i>`."""
    seen: dict[str, int] = {}
    prompts = []
    for category, text in _BUILTIN:
        i = seen.get(category, 0)
        seen[category] = i + 1
        prompts.append(Prompt(f"builtin-{category}-{i}", category, text))
    return prompts


def _bad_file(path: Path, line_no: int, what: str) -> UserError:
    return UserError(f"prompt file {path} line {line_no}: {what}",
                     "give a Spec-Bench-format JSONL file (one object a line with question_id, "
                     "category and a non-empty turns list)")


def read_spec_bench(path: str | Path) -> list[Prompt]:
    """Every prompt in a Spec-Bench-format JSONL file, in file order (first turn only)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(f"prompt file {path} does not exist",
                        "give a Spec-Bench-format JSONL file, `spec-bench`, or omit --prompts for the built-in set")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read prompt file {path} ({exc.__class__.__name__})",
                        "give a UTF-8 JSONL file") from None
    prompts: list[Prompt] = []
    ids: set[str] = set()
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise _bad_file(path, line_no, "not valid JSON") from None
        if not isinstance(obj, dict):
            raise _bad_file(path, line_no, "not a JSON object")
        turns = obj.get("turns")
        category = obj.get("category")
        qid = obj.get("question_id")
        if qid is None or not isinstance(category, str) or not category.strip():
            raise _bad_file(path, line_no, "missing question_id or category")
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0].strip():
            raise _bad_file(path, line_no, "missing or empty turns")
        pid = str(qid)
        if pid in ids:
            raise _bad_file(path, line_no, f"duplicate question_id {pid}")
        ids.add(pid)
        prompts.append(Prompt(pid, category.strip(), turns[0]))
    if not prompts:
        raise UserError(f"prompt file {path} holds no prompts", "give a non-empty Spec-Bench-format JSONL file")
    return prompts


def _spread(items: list, k: int) -> list:
    """k items spread evenly over the list (all of it when k >= len), keeping order."""
    if k >= len(items):
        return list(items)
    step = len(items) / k
    return [items[int(i * step)] for i in range(k)]


def load_prompts(path: str | None = None, per_category: int | None = None,
                 limit: int | None = None, exclude: set[str] | None = None) -> list[Prompt]:
    """The prompt set to profile on; see the module docstring for the subsampling rules. `exclude`:
    prompt ids dropped first (e.g. exit heads' training prompts, `ppsd profile --heldout`)."""
    if per_category is not None and per_category < 1:
        raise UserError(f"--per-category must be at least 1 (got {per_category})", "give a positive number")
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1 (got {limit})", "give a positive number")
    if path is None:
        prompts = builtin_prompts()
    elif str(path) == "spec-bench":
        from ppsd.paths import SPEC_BENCH_PATH

        if not SPEC_BENCH_PATH.is_file():
            raise UserError(f"the Spec-Bench prompts are not at {SPEC_BENCH_PATH}",
                            "give the path of question.jsonl with --prompts FILE")
        prompts = read_spec_bench(SPEC_BENCH_PATH)
    else:
        prompts = read_spec_bench(path)

    if exclude:
        prompts = [p for p in prompts if str(p.prompt_id) not in exclude]
        if not prompts:
            raise UserError(f"every prompt of {path or 'the built-in set'} is excluded (the heads' training prompts)",
                            "give another --prompts file, or drop --heldout")
    by_cat: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(p)
    if per_category is not None:
        by_cat = {c: _spread(ps, per_category) for c, ps in by_cat.items()}
        prompts = [p for ps in by_cat.values() for p in ps]
    if limit is not None and limit < len(prompts):
        # Round-robin over categories (in order of first appearance) so few prompts still vary.
        queues = [list(ps) for ps in by_cat.values()]
        picked: list[Prompt] = []
        while len(picked) < limit:
            for q in queues:
                if q and len(picked) < limit:
                    picked.append(q.pop(0))
        prompts = picked
    return prompts
