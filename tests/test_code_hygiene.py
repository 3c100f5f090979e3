"""Code hygiene the developers' guide asks for, checked over the tracked files: short docstrings (the why;
a module's overview may run longer), no pointer in code or docs to a file that is not there, and what
differs between modes kept in the schemes (`sim/schemes/`), not in branches on `Mode` members elsewhere."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from ppsd.paths import PROJECT_ROOT

MAX_DOCSTRING_LINES = 15
MAX_MODE_BRANCHES = 5  # outside sim/schemes/ (and the enum's own module), dashboard/ included
# names of files that are not this project's, with where they are
NOT_OURS = {
    ("bench/paper_check.py", "self_speculation_generator.py"): "LayerSkip's repository",
    ("bench/paper_check.py", "benchmark.py"): "LayerSkip's repository",
    ("tests/test_machine_check.py", "examples/x/measured_prompts.jsonl"): "a path the test writes into a document",
}
TOP = {"ppsd", "sim", "runtime", "profiler", "validation", "dashboard", "bench", "tests", "docs", "examples"}
EXT = "py|md|json|csv|jsonl|sh|toml|png|gz|txt|log|tgz"
# a path inside the project (a top folder, then folders and maybe a file) or a bare *.py / *.md name
PATH = re.compile(r"(?<![\w./~$-])((?:[\w.-]+/)+(?:[\w.-]+\.(?:%s))?|[\w-]+(?:\.[\w-]+)*\.(?:py|md))(?![\w/<*{])" % EXT)
THIS = "tests/test_code_hygiene.py"  # names files that are not ours on purpose (NOT_OURS)
MODE_BRANCH = re.compile(r"(is|is not|==|!=) Mode\.|in \(Mode\.|\{Mode\.[A-Z]+: ")


def _tracked(*patterns: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns],
                         cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout
    return sorted(set(out.split()))


def test_docstrings_stay_short():
    long = []
    for f in _tracked("*.py"):
        tree = ast.parse((PROJECT_ROOT / f).read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc and len(doc.splitlines()) > MAX_DOCSTRING_LINES:
                    long.append(f"{f}:{node.lineno} {node.name} ({len(doc.splitlines())} lines)")
    assert not long, f"docstrings over {MAX_DOCSTRING_LINES} lines (say the why, point to docs/model.md): {long}"


def _missing_paths(files: list[str], tracked: set[str]) -> list[str]:
    dirs = {str(p) for t in tracked for p in Path(t).parents if str(p) != "."}
    names = {Path(t).name for t in tracked} | {Path(d).name for d in dirs}
    root = PROJECT_ROOT.resolve()
    bad = []
    for f in (f for f in files if f != THIS):
        text = (PROJECT_ROOT / f).read_text(errors="replace")
        for m in PATH.finditer(text):
            token = m.group(1)
            parts = token.rstrip("/").split("/")
            if ("/" in token and parts[0] not in TOP) or ("/" not in token and token in names):
                continue
            if (f, token) in NOT_OURS:
                continue
            found = False
            for base in (root, (PROJECT_ROOT / f).parent.resolve()):
                p = (base / token.rstrip("/")).resolve()
                if p.is_relative_to(root) and str(p.relative_to(root)) in tracked | dirs:
                    found = True
            if not found:
                bad.append(f"{f}:{text[:m.start()].count(chr(10)) + 1}: {token}")
    return bad


def test_every_file_named_in_code_and_docs_is_there():
    tracked = set(_tracked())
    bad = _missing_paths(_tracked("*.py", "*.md"), tracked)
    assert not bad, f"files named in code or docs that are not in the project: {bad}"


def test_the_path_check_can_fail(tmp_path):
    assert _missing_paths(["README.md"], {"README.md"})  # README.md names files absent from this set


def test_modes_differ_in_their_schemes_not_in_branches():
    branches = []
    for f in _tracked("*.py"):
        if f.startswith(("sim/schemes/", "tests/")) or f == "ppsd/modes.py":
            continue
        for i, line in enumerate((PROJECT_ROOT / f).read_text().splitlines(), 1):
            if MODE_BRANCH.search(line):
                branches.append(f"{f}:{i}")
    fix = "give the scheme a method (sim/schemes/base.py) instead"
    assert len(branches) <= MAX_MODE_BRANCHES, (
        f"{len(branches)} branches on Mode members outside sim/schemes (at most {MAX_MODE_BRANCHES}): {fix}: {branches}")
