"""The README's commands run as written: every command of its "Quick start" and "The command line" sections
that needs no model (ppsd plan, simulate, profile show, profile --analytic) runs against the committed
examples and exits 0. Placeholders become committed examples (DIR, PROFILE: a profile that holds what the
command prices), a fresh folder for --out, and the values named in SUBSTITUTES; `[...]` options are given
and `a|b` takes its first choice, so the longest form of each line is what runs."""

from __future__ import annotations

import re
import shlex

import pytest

from ppsd.cli import main
from ppsd.paths import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
EXAMPLES = PROJECT_ROOT / "examples"
SECTIONS = ("Quick start", "The command line")
NO_MODEL = {("plan",), ("simulate",), ("profile", "show"), ("profile", "--analytic")}

PROFILE = EXAMPLES / "smollm2-135m-cpu"
BATCH_PROFILE = EXAMPLES / "smollm2-135m-batch-amd-epyc" / "profile"          # has latency.batch
HF_PROFILE = EXAMPLES / "smollm2-135m-hf-assisted-amd-epyc" / "target-run" / "profile"  # has latency.hf
SUBSTITUTES = {  # a placeholder after its flag -> what runs
    ("--devices", "K"): "2", ("--exit-head", "NAME"): "shared",
    ("--alpha-curve", "FILE"): str(EXAMPLES / "random-llama-2-7b-h200" / "alpha-curve.csv"),
    ("--acceptance-from", "runs/my-traffic"): str(EXAMPLES / "smollm2-135m-machine-check-amd-epyc" / "measured-traces"),
}


def section_text(name: str) -> str:
    """The README's `## name` section, its `###` subsections included."""
    text = README.read_text()
    start = text.index(f"\n## {name}\n")
    end = text.find("\n## ", start + 1)
    return text[start: end if end > 0 else len(text)]


def readme_commands() -> list[str]:
    """Every `ppsd` line of the sections' bash blocks, comments dropped, continuations joined, a block's
    shell variables (`P=...`) filled in."""
    lines = []
    for name in SECTIONS:
        for block in re.findall(r"```bash\n(.*?)```", section_text(name), flags=re.S):
            variables = {}
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split("  #")[0].split(" # ")[0].strip()
                assignment = re.match(r"^([A-Z_]+)=(\S+)$", line)
                if assignment:
                    variables[assignment[1]] = assignment[2]
                    continue
                for var, value in variables.items():
                    line = line.replace(f"${var}", value)
                if re.match(r"^(\.venv/bin/)?ppsd ", line):
                    lines.append(line.removeprefix(".venv/bin/"))
    return lines


def needs_no_model(argv: list[str]) -> bool:
    return (argv[0],) in NO_MODEL or tuple(argv[:2]) in NO_MODEL or (argv[0] == "profile" and "--analytic" in argv)


def as_run(line: str, tmp) -> list[str]:
    """The README line as argv, with its options given and its placeholders filled."""
    line = re.sub(r"\[([^\]]*)\]", r"\1", line)  # optional groups: given
    argv = [tok.split("|")[0] if "|" in tok and not tok.startswith("'") else tok for tok in shlex.split(line)][1:]
    profile = BATCH_PROFILE if "--batch" in argv else HF_PROFILE if "hf" in argv else PROFILE
    out = []
    for i, tok in enumerate(argv):
        prev = argv[i - 1] if i else ""
        if (prev, tok) in SUBSTITUTES:
            tok = SUBSTITUTES[(prev, tok)]
        elif prev in ("--out", "--trace-out"):
            tok = str(tmp / tok)
        elif tok in ("DIR", "PROFILE", "runs/my-profile"):
            tok = str(profile)
        assert tok.upper() != tok or not tok.isalpha(), f"placeholder {tok} of `{line}` has no substitute"
        out.append(tok)
    return out


COMMANDS = [line for line in readme_commands() if needs_no_model(shlex.split(line)[1:])]


def test_the_sections_hold_the_commands_this_test_runs():
    assert len(COMMANDS) >= 12  # plan, simulate, profile show / --analytic lines of both sections
    assert any("--temperature 1.0" in c for c in COMMANDS) and any("--batch 4" in c for c in COMMANDS)


@pytest.mark.slow  # each runs the full sweep a user waits for (seconds each, up to half a minute on a busy CPU)
@pytest.mark.parametrize("line", COMMANDS, ids=[" ".join(c.split()[:3]) + f" #{i}" for i, c in enumerate(COMMANDS)])
def test_readme_command_runs_as_written(line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(PROJECT_ROOT)  # where the README's commands run; outputs go to tmp_path
    argv = as_run(line, tmp_path)
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, f"`{line}` as {argv}: {err.strip()}"
