"""Prompt sets: the built-in set, Spec-Bench files, deterministic subsampling, bad files."""

import json

import pytest

from ppsd.errors import UserError
from ppsd.prompts import SPEC_BENCH_CATEGORIES, Prompt, builtin_prompts, load_prompts


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_builtin_covers_every_category():
    prompts = builtin_prompts()
    assert len(prompts) >= 24
    assert {p.category for p in prompts} == set(SPEC_BENCH_CATEGORIES)
    assert len({p.prompt_id for p in prompts}) == len(prompts)
    assert all(isinstance(p, Prompt) and p.text.strip() for p in prompts)
    assert load_prompts() == prompts


def test_spec_bench_file_and_subsampling(tmp_path):
    rows = [{"question_id": i, "category": "qa" if i % 3 else "math", "turns": [f"question {i}", "more"]}
            for i in range(30)]
    path = _write_jsonl(tmp_path / "q.jsonl", rows)
    all_prompts = load_prompts(path)
    assert len(all_prompts) == 30 and all_prompts[0] == Prompt("0", "math", "question 0")
    sub = load_prompts(path, per_category=4)
    assert sorted(p.category for p in sub) == ["math"] * 4 + ["qa"] * 4
    assert sub == load_prompts(path, per_category=4)  # deterministic
    # spread over the file, not just the head
    assert max(int(p.prompt_id) for p in sub if p.category == "qa") > 15
    lim = load_prompts(path, per_category=4, limit=3)
    assert len(lim) == 3 and {p.category for p in lim} == {"math", "qa"}


def test_real_spec_bench_per_category(spec_bench_path):
    prompts = load_prompts("spec-bench", per_category=4)
    assert len(prompts) == 4 * 13
    assert {p.category for p in prompts} == set(SPEC_BENCH_CATEGORIES)
    assert spec_bench_path.is_file()


@pytest.mark.parametrize("content", [
    "",                                   # empty
    "\n\n",                               # only blank lines
    "not json\n",                         # malformed
    '{"question_id": 1, "category": "qa"}\n',                     # no turns
    '{"question_id": 1, "category": "qa", "turns": []}\n',        # empty turns
    '{"category": "qa", "turns": ["x"]}\n',                       # no id
    '[1, 2]\n',                                                   # not an object
    '{"question_id": 1, "category": "qa", "turns": ["a"]}\n{"question_id": 1, "category": "qa", "turns": ["b"]}\n',
])
def test_bad_files(tmp_path, content):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(UserError) as err:
        load_prompts(str(path))
    assert "bad.jsonl" in str(err.value) and "\n" not in str(err.value)


def test_missing_file_and_bad_counts(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_prompts(str(tmp_path / "nope.jsonl"))
    with pytest.raises(UserError):
        load_prompts(per_category=0)
    with pytest.raises(UserError):
        load_prompts(limit=0)
