"""A held-out task of another kind than Spec-Bench: Python code completion from the standard library.

    .venv/bin/python -m bench.heldout_task --out runs/heldout [--profile-prompts 24] [--seed 0]

Each prompt asks the model to write the body of a public top-level function of a standard-library
module, given its signature and docstring. The functions are read from this Python's own standard
library (no download), shuffled with a seed, and written as two Spec-Bench-format JSONL files:
`profile.jsonl` (the first `--profile-prompts`, what a user would profile on) and `measure.jsonl` (the
rest, the traffic a validation measures: `bench.machine_check --prompts measure.jsonl --prompt-set N`
takes its N-th disjoint set). One category, `code-completion`, as a user's own task file would have.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sys
import sysconfig
from pathlib import Path

CATEGORY = "code-completion"
SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "tkinter", "turtledemo", "ensurepip", "site-packages",
             "__pycache__", "pydoc_data", "venv"}
MIN_DOC_CHARS = 60
MIN_BODY_STATEMENTS = 3
MAX_PROMPT_CHARS = 1500


def stdlib_files(root: Path) -> list[Path]:
    """The standard library's Python files, sorted, without tests and GUI demos."""
    return sorted(p for p in root.rglob("*.py") if not SKIP_DIRS.intersection(p.relative_to(root).parts))


def completion_prompts(path: Path, root: Path) -> list[dict]:
    """One prompt per public top-level function of `path` with a docstring and a body of its own."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc or len(doc) < MIN_DOC_CHARS or len(node.body) - 1 < MIN_BODY_STATEMENTS:
            continue
        signature = f"def {node.name}({ast.unparse(node.args)}):"
        body = "\n".join("    " + line if line else "" for line in doc.splitlines())
        text = (f"Write the body of this function from Python's `{module}` module. Reply with the complete "
                f"function in one code block.\n\n```python\n{signature}\n    \"\"\"\n{body}\n    \"\"\"\n```")
        if len(text) <= MAX_PROMPT_CHARS:
            out.append({"module": module, "function": node.name, "text": text})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for profile.jsonl and measure.jsonl")
    ap.add_argument("--profile-prompts", type=int, default=24, help="prompts in profile.jsonl (default 24)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the shuffle (default 0)")
    args = ap.parse_args(argv)
    root = Path(sysconfig.get_paths()["stdlib"])
    prompts = [p for f in stdlib_files(root) for p in completion_prompts(f, root)]
    random.Random(args.seed).shuffle(prompts)
    if len(prompts) <= args.profile_prompts:
        print(f"heldout_task: only {len(prompts)} functions qualify; give a smaller --profile-prompts",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("profile.jsonl", prompts[:args.profile_prompts]),
                       ("measure.jsonl", prompts[args.profile_prompts:])):
        lines = [json.dumps({"question_id": f"code-{p['module']}.{p['function']}", "category": CATEGORY,
                             "turns": [p["text"]]}) for p in rows]
        (out / name).write_text("\n".join(lines) + "\n")
    print(f"{len(prompts)} functions: {args.profile_prompts} in {out / 'profile.jsonl'}, "
          f"{len(prompts) - args.profile_prompts} in {out / 'measure.jsonl'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
